package fuzz

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-gw/sluice/configs"
	"github.com/sluice-gw/sluice/core/config"
)

// configSeeds are TOML documents around the shapes: valid
// configs, and the errors config's tests pin (syntax, duplicates, unknown
// keys, types, env interpolation, cross references).
var configSeeds = []string{
	"",
	"[entrypoints.web]\naddress = \"127.0.0.1:8080\"\n",
	"[entrypoints.web]\naddress = \"127.0.0.1:8080\"\naddress = \":1\"\n",
	"[entrypoints.web]\naddress = \":1\"\n[entrypoints.web]\n",
	"[entrypoints]\nweb.address = \":1\"\n[entrypoints.web]\nengine = \"gnet\"\n",
	"[entrypoints.web]\naddress = \"127.0.0.1:8080\n",
	"[entrypoints.s]\naddress = \":8443\"\nengine = \"gnet\"\ntls = { cert_file = \"c\", key_file = \"k\" }\n",
	"[entrypoints.web]\naddress = \"${HOST}:${PORT\"\nidle_timeout = \"5x\"\nmax_header_bytes = \"1\"\n",
	"[routers.r]\nrule = \"PathPrefix(`/`)\"\nservice = \"s\"\nmiddlewares = [\"m\", \"m\"]\nentrypoints = []\n[middlewares.m]\ntype = \"jwt\"\nvalue = \"$${x}\"\n",
	"services.s.load_balancer.servers = [{ url = \"ftp://x\" }, \"x\", { weight = 0 }]\n",
	"[[services.s.load_balancer.servers]]\nurl = \"http://h:1\"\n[[services.s.load_balancer.servers]]\nurl = \"http://h:1/x\"\n",
	"[[a]]\n[a.b]\n[[a.b.c]]\n[[a]]\nx = 1\n",
	"a = [[1, 2], [\"x\"], {}]\nb = { c = { d = 1979-05-27T07:32:00Z } }\n",
	"[services.s.mirror]\npercentage = 3\n[models.m]\n[consumers.c]\n[providers.file]\n",
	"[\"entrypoints\".\"we b\"]\naddress = '0.0.0.0:80'\n[admin]\naddress = \"0.0.0.0:80\"\ntoken_env = \"UNSET_SLUICE_FUZZ\"\n",
	"entrypoints = 5\nrouters = [1]\n[log]\nlevel = 3\n",
	"# caf\xe9\n[entrypoints.web]\naddress = \"127.0.0.1:80\xc3\"\n\xff = 1\n",
	"a = [ [ true, 1979-05-27 ], # c\n [], { b = [false] } ]\nc = { d = [ [ [ 1 ] ] ] }\n",
	"[entrypoints.web]\naddress = \":1\"\n[routers.r]\nrule = \"PathPrefix(`/`)\"\nservice = \"s\"\nmiddlewares = [\"rl\", \"cb\", \"j\"]\n[services.s.load_balancer]\nservers = [{ url = \"http://h:1\" }]\n[middlewares.rl]\ntype = \"rate-limit\"\nrate = 0.5\nburst = 10\nkey = \"api_key\"\n[middlewares.cb]\ntype = \"circuit-breaker\"\ncooldown_secs = 2.5\n[middlewares.j]\ntype = \"jwt\"\npublic_key_file = \"k.pem\"\naudience = [\"a\", 1, { x = 1 }]\nleeway = \"-1s\"\n",
}

// configCost bounds the work of loading a config, beyond the TOML parser's own (go-toml's,
// not counted). It is larger than the others: an unknown key is compared with every known one
// by edit distance, which costs the product of their lengths.
var configCost = linearCost{PerByte: 256, Fixed: 4096}

// FuzzConfigLoad checks that config.LoadBytes never panics or hangs, that its work grows
// linearly with the document, that
// every error it returns is a non-empty ErrorList whose entries carry a
// position inside the document (line >= 1, col >= 1, the given file name),
// that a loaded config satisfies the cross-reference rules, and that its warnings carry a
// position.
func FuzzConfigLoad(f *testing.F) {
	for _, s := range configSeeds {
		f.Add([]byte(s))
	}
	f.Add(configs.Default)
	if files, err := filepath.Glob(filepath.Join("..", "configs", "examples", "*.toml")); err == nil {
		for _, name := range files {
			if b, err := os.ReadFile(name); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkCost(t, configCost, data, func(data []byte) { _, _ = config.LoadBytes("f.toml", data) })
		c, err := config.LoadBytes("f.toml", data)
		if err != nil {
			if c != nil {
				t.Fatalf("config and error both returned")
			}
			var list config.ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is not a non-empty ErrorList: %T %v", err, err)
			}
			lines := bytes.Count(data, []byte("\n")) + 1
			for _, e := range list {
				if e.Pos.File != "f.toml" || e.Pos.Line < 1 || e.Pos.Col < 1 || e.Pos.Line > lines {
					t.Fatalf("error position %+v outside the document (%d lines): %v", e.Pos, lines, e)
				}
				if e.Msg == "" {
					t.Fatalf("empty error message at %v", e.Pos)
				}
			}
			return
		}
		if c == nil || len(c.Entrypoints) == 0 {
			t.Fatalf("loaded config without entrypoints")
		}
		for name, m := range c.Models {
			for id, tg := range m.Targets {
				if c.Services[tg.Service] == nil {
					t.Fatalf("model %q target %q references missing service %q", name, id, tg.Service)
				}
			}
		}
		for name, r := range c.Routers {
			if r.Models != (r.Service == "") {
				t.Fatalf("router %q: models = %v with service %q", name, r.Models, r.Service)
			}
			if !r.Models && c.Services[r.Service] == nil {
				t.Fatalf("router %q references missing service %q", name, r.Service)
			}
			if len(r.Entrypoints) == 0 {
				t.Fatalf("router %q has no entrypoints", name)
			}
			for _, ep := range r.Entrypoints {
				if c.Entrypoints[ep] == nil {
					t.Fatalf("router %q references missing entrypoint %q", name, ep)
				}
			}
			if p := c.Pos("routers", name, "rule"); !p.IsValid() {
				t.Fatalf("no position for routers.%s.rule", name)
			}
		}
		for _, w := range c.Warnings() {
			if w.Pos.File != "f.toml" || w.Pos.Line < 1 || w.Msg == "" {
				t.Fatalf("warning without a position or a message: %+v", w)
			}
		}
	})
}
