package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// docBlock is one ```toml block of the documentation.
type docBlock struct {
	file string
	line int // of its first line
	text string
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// docTOMLBlocks returns the TOML blocks of README.md and docs/*.md.
func docTOMLBlocks(t *testing.T) []docBlock {
	files, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	files = append([]string{"../../README.md"}, files...)
	var out []docBlock
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		lines := strings.Split(string(data), "\n")
		for i := 0; i < len(lines); i++ {
			if strings.TrimSpace(strings.TrimPrefix(lines[i], "```")) != "toml" || !strings.HasPrefix(lines[i], "```") {
				continue
			}
			start := i + 1
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			}
			out = append(out, docBlock{file: strings.TrimPrefix(f, "../../"), line: start + 1, text: strings.Join(lines[start:i], "\n") + "\n"})
		}
	}
	return out
}

// docNotSluice are TOML blocks that are not sluice configurations, by their first line.
var docNotSluice = map[string]string{
	"[[rule]]": "taplo's own configuration (docs/deploy.md)",
}

// docEnv are the environment variables the examples reference, with values of their kind.
var docEnv = map[string]string{
	"JWT_SECRET":                      "an-example-secret-of-at-least-32-bytes",
	"LLM_HOST":                        "10.0.0.11",
	"POD_IP":                          "10.0.0.5",
	"SLUICE_ADMIN_TOKEN":              "an-admin-token",
	"POWER_API_KEY":                   "a-workers-key",
	"ASTER_POWER_DISTRIBUTED_API_KEY": "a-workers-key",
}

// docOutside are the errors of an example that name what only its deployment has: the
// credentials of a pod in a Kubernetes cluster. The files it names (certificates, keys, a
// directory of configuration files under /etc) are the test's own: deploymentFiles.
var docOutside = regexp.MustCompile(`not in a cluster \(KUBERNETES_SERVICE_HOST is not set\)$`)

// table returns the table at path in m, or nil.
func table(m map[string]any, path ...string) map[string]any {
	for _, k := range path {
		next, _ := m[k].(map[string]any)
		if next == nil {
			return nil
		}
		m = next
	}
	return m
}

func strs(v any) []string {
	var out []string
	switch x := v.(type) {
	case string:
		out = append(out, x)
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// docStubs returns the TOML that completes an example: what it names but leaves to the rest
// of a configuration (an entrypoint, the services, middlewares and model targets it refers
// to, and servers for the services it only tunes). Each stub is a table of its own, after the
// example's, so that the example's lines keep their numbers.
func docStubs(tree map[string]any) string {
	var b strings.Builder
	entrypoints, routers, services := table(tree, "entrypoints"), table(tree, "routers"), table(tree, "services")
	needEP, needSvc, needMW := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, r := range routers {
		r, _ := r.(map[string]any)
		for _, ep := range strs(r["entrypoints"]) {
			needEP[ep] = true
		}
		for _, s := range strs(r["service"]) {
			needSvc[s] = true
		}
		for _, m := range strs(r["middlewares"]) {
			needMW[m] = true
		}
	}
	for name := range services {
		for _, s := range strs(table(services, name, "mirror")["service"]) {
			needSvc[s] = true
		}
	}
	for alias, m := range table(tree, "models") {
		targets := table(m.(map[string]any), "targets")
		if len(targets) == 0 {
			fmt.Fprintf(&b, "[models.%s.targets.docs-stub]\nservice = \"docs-stub\"\n", alias)
			needSvc["docs-stub"] = true
		}
		for _, t := range targets {
			for _, s := range strs(t.(map[string]any)["service"]) {
				needSvc[s] = true
			}
		}
	}
	if len(entrypoints) == 0 && len(needEP) == 0 {
		needEP["docs-web"] = true
	}
	for _, ep := range sortedKeys(needEP) {
		if entrypoints[ep] == nil {
			fmt.Fprintf(&b, "[entrypoints.%s]\naddress = \"127.0.0.1:0\"\n", ep)
		}
	}
	for name := range services {
		needSvc[name] = true
	}
	for _, name := range sortedKeys(needSvc) {
		svc, _ := services[name].(map[string]any)
		if svc["revisions"] != nil || svc["scaling"] != nil || table(svc, "load_balancer")["servers"] != nil {
			continue
		}
		fmt.Fprintf(&b, "[[services.%s.load_balancer.servers]]\nurl = \"http://127.0.0.1:8000\"\n", name)
	}
	for _, name := range sortedKeys(needMW) {
		if table(tree, "middlewares", name) == nil {
			fmt.Fprintf(&b, "[middlewares.%s]\ntype = \"circuit-breaker\"\n", name)
		}
	}
	return b.String()
}

// The TOML examples of README.md and docs/*.md pass `sluice validate`, each completed with
// what a fragment leaves to the rest of a configuration, and the files it names at absolute
// paths (/etc/certs/…) made in a directory of the test's own that the paths are mapped into
// (deploymentFiles): what the machine has at those paths decides nothing, and the files are
// checked as serve checks them. Errors about the credentials of the Kubernetes pod an example
// is for are set aside. llmsim's fleet file loads as `llmsim --config` reads it.
func TestDocsTOMLExamplesValidate(t *testing.T) {
	for k, v := range docEnv {
		t.Setenv(k, v)
	}
	// The kube examples are checked as outside a cluster wherever the test runs: in a CI job's
	// pod, the pod's service account (or its absence) would decide instead.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	// The JWK Set of the identity provider an example names, served on loopback.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	set, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	require.NoError(t, err)
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(set) }))
	defer idp.Close()
	urls := strings.NewReplacer("https://idp.example.com/.well-known/jwks.json", idp.URL+"/jwks.json")

	envRef := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	dir := t.TempDir()
	files := newDeploymentFiles(t)
	blocks := docTOMLBlocks(t)
	require.GreaterOrEqual(t, len(blocks), 30, "the TOML examples moved?")
	for i, b := range blocks {
		first, _, _ := strings.Cut(strings.TrimSpace(b.text), "\n")
		if _, skip := docNotSluice[first]; skip {
			continue
		}
		for _, m := range envRef.FindAllStringSubmatch(b.text, -1) {
			require.Contains(t, docEnv, m[1], "%s: ${%s}: add a value of its kind to docEnv", b, m[1])
		}
		path := filepath.Join(dir, fmt.Sprintf("example-%02d.toml", i))
		if b.file == "docs/llmsim.md" {
			require.NoError(t, os.WriteFile(path, []byte(b.text), 0o644))
			_, err := llmsim.LoadFile(path)
			require.NoError(t, err, "%s: the fleet file does not load", b)
			continue
		}
		var tree map[string]any
		require.NoError(t, toml.Unmarshal([]byte(b.text), &tree), "%s: not TOML", b)
		text := files.mapText(urls.Replace(b.text)) + "\n# completed by the test\n" + docStubs(tree)
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
		var out, errb bytes.Buffer
		if run([]string{"validate", path}, &out, &errb) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		lines = slices.DeleteFunc(lines, func(l string) bool { return docOutside.MatchString(l) })
		// Positions in the example are the documentation's; those past it are the test's.
		n := strings.Count(b.text, "\n")
		at := regexp.MustCompile(`^` + regexp.QuoteMeta(path) + `:(\d+):`)
		for j, l := range lines {
			lines[j] = at.ReplaceAllStringFunc(l, func(s string) string {
				ln, _ := strconv.Atoi(at.FindStringSubmatch(s)[1])
				if ln > n {
					return fmt.Sprintf("(the test's completion, line %d):", ln-n)
				}
				return fmt.Sprintf("%s:%d:", b.file, b.line+ln-1)
			})
		}
		assert.Empty(t, lines, "%s does not validate; completed as:\n%s", b, text)
	}
}
