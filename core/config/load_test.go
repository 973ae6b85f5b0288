package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustLoad(t *testing.T, data []byte) *Config {
	t.Helper()
	c, err := LoadBytes("t.toml", data)
	if err != nil {
		t.Fatalf("LoadBytes: %v", err)
	}
	return c
}

// upstream_io defaults by engine: the gnet engine exchanges on its event loops, fasthttp (a
// TLS entrypoint's engine too) on its own goroutines; a value written stays.
func TestUpstreamIODefaultFollowsTheEngine(t *testing.T) {
	c := mustLoad(t, withMinimal(`[entrypoints.a]`, `address = ":9"`, `[entrypoints.b]`, `address = ":10"`, `engine = "fasthttp"`,
		`[entrypoints.c]`, `address = ":11"`, `upstream_io = "worker"`))
	for name, want := range map[string]string{"web": UpstreamIOLoop, "a": UpstreamIOLoop, "b": UpstreamIOWorker, "c": UpstreamIOWorker} {
		if got := c.Entrypoints[name].UpstreamIO; got != want {
			t.Errorf("entrypoints.%s.upstream_io = %q, want %q", name, got, want)
		}
	}
}

func TestDefaultsApplied(t *testing.T) {
	c := mustLoad(t, withMinimal(`[entrypoints.api]`, `address = ":8081"`))
	ep := c.Entrypoints["api"]
	want := &Entrypoint{
		Name: "api", Address: ":8081", Engine: EngineGnet,
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second, ClientStallTimeout: 60 * time.Second,
		MaxHeaderBytes: 16384, MaxBodyBytes: 16 << 20, MaxConnections: 0, Multicore: true, UpstreamIO: UpstreamIOLoop, UpstreamConnect: UpstreamConnectWorker, DrainTimeout: 30 * time.Second,
	}
	if !reflect.DeepEqual(ep, want) {
		t.Errorf("entrypoint defaults:\n got %+v\nwant %+v", ep, want)
	}
	r := c.Routers["r"]
	if !reflect.DeepEqual(r.Entrypoints, []string{"api", "web"}) || r.Priority != 0 || r.ForwardCredentials || len(r.Middlewares) != 0 {
		t.Errorf("router defaults: %+v", r)
	}
	lb := c.Services["s"].LoadBalancer
	wantLB := &LoadBalancer{
		Strategy: StrategyRoundRobin, Servers: []Server{{URL: "http://127.0.0.1:8000", Weight: 1}},
		DialTimeout: 5 * time.Second, ResponseHeaderTimeout: 5 * time.Minute, StreamIdleTimeout: 5 * time.Minute,
		IdleConnTimeout: 90 * time.Second, MaxIdleConns: 1024, WebSocketIdleTimeout: 5 * time.Minute,
		PassiveHealth: PassiveHealth{ConsecutiveFailures: 5, ConsecutiveSuccesses: 2, ErrorRate: 0.5,
			ErrorWindow: time.Minute, MinRequests: 20, Ejection: 10 * time.Second, MaxEjection: 5 * time.Minute},
	}
	if !reflect.DeepEqual(lb, wantLB) {
		t.Errorf("load balancer defaults:\n got %+v\nwant %+v", lb, wantLB)
	}
	if !reflect.DeepEqual(c.Admin, Admin{Address: "127.0.0.1:9090"}) || c.Log != (Log{Level: "info", Format: "text", AccessLogSample: 1}) {
		t.Errorf("admin/log defaults: %+v %+v", c.Admin, c.Log)
	}
}

func TestExplicitValuesKept(t *testing.T) {
	c := mustLoad(t, withMinimal(
		`[entrypoints.api]`,
		`address = ":8081"`,
		`multicore = false`,
		`max_connections = 0`,
		`read_header_timeout = "500ms"`,
		`max_body_bytes = 1_048_576`,
		`[entrypoints.secure]`,
		`address = ":8443"`,
		`tls = { cert_file = "/c.pem", key_file = "/k.pem" }`,
		`[services.t.load_balancer]`,
		`strategy = "least-connections"`,
		`servers = [{ url = "https://h.example" , weight = 3 }]`,
		`pass_host_header = true`,
		`max_idle_conns = 0`,
		`[routers.t]`,
		`rule = "Host(`+"`h`"+`)"`,
		`service = "t"`,
		`entrypoints = ["secure"]`,
		`priority = 7`,
		`forward_credentials = true`,
		`[admin]`,
		`address = ""`,
		`[log]`,
		`level = "debug"`,
		`format = "json"`,
	))
	api := c.Entrypoints["api"]
	if api.Multicore || api.ReadHeaderTimeout != 500*time.Millisecond || api.MaxBodyBytes != 1<<20 {
		t.Errorf("api = %+v", api)
	}
	sec := c.Entrypoints["secure"]
	if sec.Engine != EngineFasthttp || sec.TLS == nil || !reflect.DeepEqual(*sec.TLS, TLS{CertFile: "/c.pem", KeyFile: "/k.pem", MinVersion: "1.2", Watch: true}) {
		t.Errorf("secure = %+v (tls without engine must pick fasthttp)", sec)
	}
	lb := c.Services["t"].LoadBalancer
	if lb.Strategy != StrategyLeastConnections || !lb.PassHostHeader || lb.MaxIdleConns != 0 || lb.Servers[0].Weight != 3 {
		t.Errorf("lb = %+v", lb)
	}
	r := c.Routers["t"]
	if !reflect.DeepEqual(r.Entrypoints, []string{"secure"}) || r.Priority != 7 || !r.ForwardCredentials || r.Name != "t" {
		t.Errorf("router = %+v", r)
	}
	if c.Admin.Address != "" || c.Log.Level != "debug" || c.Log.Format != "json" {
		t.Errorf("admin/log = %+v %+v", c.Admin, c.Log)
	}
}

func TestEnvInterpolation(t *testing.T) {
	t.Setenv("SLUICE_T_HOST", "10.0.0.7")
	t.Setenv("SLUICE_T_EMPTY", "")
	t.Setenv("SLUICE_T_SECRET", "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t")
	t.Setenv("SLUICE_T_TOKEN", "tok")
	c := mustLoad(t, doc(
		`[entrypoints.web]`,
		`address = "${SLUICE_T_HOST}:8080"`,
		`[routers.r]`,
		`rule = "Header(`+"`X-A`, `$${SLUICE_T_HOST}`"+`)"`,
		`service = "s${SLUICE_T_EMPTY}"`,
		`[services.s.load_balancer]`,
		`servers = [{ url = "http://${SLUICE_T_HOST}:8000" }]`,
		`[middlewares.m]`,
		`type = "jwt"`,
		`value = "${SLUICE_T_SECRET}"`,
		`audience = ["a-${SLUICE_T_SECRET}", "$5 $ {x} $$"]`,
		`issuer = "${SLUICE_T_SECRET}"`,
		`[admin]`,
		`token_env = "SLUICE_T_TOKEN"`,
	))
	if got := c.Entrypoints["web"].Address; got != "10.0.0.7:8080" {
		t.Errorf("address = %q", got)
	}
	if got := c.Routers["r"].Rule; got != "Header(`X-A`, `${SLUICE_T_HOST}`)" {
		t.Errorf("rule = %q ($${ must stay a literal ${)", got)
	}
	if got := c.Routers["r"].Service; got != "s" {
		t.Errorf("service = %q", got)
	}
	if got := c.Services["s"].LoadBalancer.Servers[0].URL; got != "http://10.0.0.7:8000" {
		t.Errorf("url = %q", got)
	}
	m := c.Middlewares["m"]
	const secret = "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t"
	want := map[string]any{
		"value":    secret,
		"audience": []any{"a-" + secret, "$5 $ {x} $$"},
		"issuer":   secret,
	}
	if m.Type != "jwt" || !reflect.DeepEqual(m.Options, want) {
		t.Errorf("middleware = %+v", m)
	}
	if j := m.JWT; j == nil || j.Secret != secret || j.Issuer != secret || !reflect.DeepEqual(j.Audience, []string{"a-" + secret, "$5 $ {x} $$"}) {
		t.Errorf("jwt options = %+v", m.JWT)
	}
	if c.Admin.Token != "tok" {
		t.Errorf("admin token = %q", c.Admin.Token)
	}
}

func TestEnvNeverInjectsTOML(t *testing.T) {
	// The value is substituted after parsing, so TOML syntax in it is data.
	t.Setenv("SLUICE_T_EVIL", "x\"\n[admin]\naddress = \"0.0.0.0:1")
	c := mustLoad(t, withMinimal(`[middlewares.m]`, `type = "jwt"`, `value = "${SLUICE_T_EVIL}${SLUICE_T_EVIL}"`, `issuer = "${SLUICE_T_EVIL}"`))
	if c.Admin.Address != DefaultAdminAddress || c.Middlewares["m"].Options["issuer"] != "x\"\n[admin]\naddress = \"0.0.0.0:1" {
		t.Errorf("admin = %+v, options = %+v", c.Admin, c.Middlewares["m"].Options)
	}
}

func TestPositions(t *testing.T) {
	c := mustLoad(t, withMinimal())
	cases := []struct {
		path []string
		pos  string
		val  string
	}{
		{[]string{"routers", "r", "rule"}, "t.toml:5:1", "t.toml:5:8"},
		{[]string{"routers", "r"}, "t.toml:4:10", "t.toml:4:10"},
		{[]string{"services", "s", "load_balancer", "servers", "0", "url"}, "t.toml:1:39", "t.toml:1:45"},
		{[]string{"services", "s", "load_balancer", "servers", "0"}, "t.toml:1:37", "t.toml:1:37"},
		{[]string{"entrypoints", "web", "address"}, "t.toml:3:1", "t.toml:3:11"},
		// Not written: the nearest written ancestor.
		{[]string{"routers", "r", "priority"}, "t.toml:4:10", "t.toml:4:10"},
		{[]string{"admin", "address"}, "t.toml", "t.toml"},
	}
	for _, tc := range cases {
		if got := c.Pos(tc.path...).String(); got != tc.pos {
			t.Errorf("Pos(%v) = %s, want %s", tc.path, got, tc.pos)
		}
		if got := c.ValuePos(tc.path...).String(); got != tc.val {
			t.Errorf("ValuePos(%v) = %s, want %s", tc.path, got, tc.val)
		}
	}
	if _, ok := c.Lookup("routers", "r", "priority"); ok {
		t.Errorf("Lookup of an absent key reported it present")
	}
	if p, ok := c.Lookup("routers", "r", "service"); !ok || p.String() != "t.toml:6:1" {
		t.Errorf("Lookup(routers.r.service) = %v %v", p, ok)
	}
	if e := c.Errorf([]string{"routers", "r", "rule"}, "bad rule %q", "x"); e.Error() != `t.toml:5:1: bad rule "x"` {
		t.Errorf("Errorf = %q", e.Error())
	}
	if got := c.Files(); !reflect.DeepEqual(got, []string{"t.toml"}) {
		t.Errorf("Files = %v", got)
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestDirectoryMerge(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"10-routes.toml":   "[routers.r]\nrule = \"PathPrefix(`/`)\"\nservice = \"s\"\n[routers.q]\nrule = \"Path(`/q`)\"\nservice = \"s\"\n",
		"00-entry.toml":    "[entrypoints.web]\naddress = \":8080\"\n[admin]\naddress = \":9091\"\n",
		"20-services.toml": "[services.s.load_balancer]\nservers = [{ url = \"http://127.0.0.1:8000\" }]\n",
		".hidden.toml":     "this is not toml",
		"notes.txt":        "neither is this",
	})
	c, err := Load(dir)
	if err != nil {
		t.Fatalf("Load(dir): %v", err)
	}
	if len(c.Routers) != 2 || c.Services["s"] == nil || c.Admin.Address != ":9091" {
		t.Fatalf("merged config = %+v", c)
	}
	if got := c.Pos("services", "s", "load_balancer", "servers", "0", "url").String(); got != filepath.Join(dir, "20-services.toml")+":2:14" {
		t.Errorf("Pos in merged file = %s", got)
	}
	want := []string{filepath.Join(dir, "00-entry.toml"), filepath.Join(dir, "10-routes.toml"), filepath.Join(dir, "20-services.toml")}
	if got := c.Files(); !reflect.DeepEqual(got, want) {
		t.Errorf("Files = %v, want %v", got, want)
	}
}

func TestDirectoryMergeConflicts(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.toml": "[entrypoints.web]\naddress = \":8080\"\n[log]\nlevel = \"info\"\n[routers.r]\nrule = \"Path(`/`)\"\nservice = \"s\"\n",
		"b.toml": "\n[routers.r]\nrule = \"Path(`/b`)\"\nservice = \"s\"\n[log]\nformat = \"json\"\n[services.s.load_balancer]\nservers = [{ url = \"http://h:1\" }]\n",
	})
	_, err := Load(dir)
	a, b := filepath.Join(dir, "a.toml"), filepath.Join(dir, "b.toml")
	want := strings.Join([]string{
		b + ":2:10: routers.r is already defined at " + a + ":5:10 (an entry may be defined in only one file)",
		b + ":5:2: log is already defined at " + a + ":3:2 (a top-level table may be defined in only one file)",
	}, "\n")
	if err == nil || err.Error() != want {
		t.Fatalf("Load(dir) error:\n got: %v\nwant: %s", err, want)
	}
}

func TestDirectoryErrorsFromEveryFile(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.toml": "[entrypoints.web]\naddress = \":8080\"\nbogus = 1\n",
		"b.toml": "[entrypoints.api]\naddress = \":8081\"\nbogus = 2\n",
		"c.toml": "[log\n",
	})
	_, err := Load(dir)
	unknown := filepath.Join(dir, "a.toml") + `:3:1: unknown key "bogus" in [entrypoints.web] (known keys: address, allow_encoded_slash, client_stall_timeout, drain_timeout, engine, event_loops, idle_timeout, max_body_bytes, max_connections, max_header_bytes, multicore, read_header_timeout, send_buffer_bytes, tls, trusted_ips, upstream_connect, upstream_io)` + "\n" +
		filepath.Join(dir, "b.toml") + `:3:1: unknown key "bogus" in [entrypoints.api] (known keys: address, allow_encoded_slash, client_stall_timeout, drain_timeout, engine, event_loops, idle_timeout, max_body_bytes, max_connections, max_header_bytes, multicore, read_header_timeout, send_buffer_bytes, tls, trusted_ips, upstream_connect, upstream_io)`
	want := unknown + "\n" + filepath.Join(dir, "c.toml") + ":1:5: expected character ]"
	if err == nil || err.Error() != want {
		t.Fatalf("with a syntax error, errors:\n got: %v\nwant: %s", err, want)
	}
	os.Remove(filepath.Join(dir, "c.toml"))
	_, err = Load(dir)
	if err == nil || err.Error() != unknown {
		t.Fatalf("errors:\n got: %v\nwant: %s", err, unknown)
	}
}

func TestLoadIOErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.toml"), filepath.Join(dir, "missing.toml") + ": cannot read: no such file or directory"},
		{dir, dir + ": directory has no *.toml files"},
	} {
		c, err := Load(tc.path)
		if c != nil || err == nil || err.Error() != tc.want {
			t.Errorf("Load(%s) = %v, %v; want error %q", tc.path, c, err, tc.want)
		}
	}
}

func TestUnreferencedMiddlewaresAreKept(t *testing.T) {
	c := mustLoad(t, withMinimal(`[middlewares.limit]`, `type = "rate-limit"`, `rate = 60`, `burst = 10`))
	m := c.Middlewares["limit"]
	if m.Name != "limit" || m.Type != MiddlewareRateLimit || m.Options["rate"] != int64(60) || m.Options["burst"] != int64(10) {
		t.Fatalf("middleware = %+v", m)
	}
}

// TestShippedConfigsLoad loads every configuration in configs/: each file
// directly in configs/ and configs/examples/, and each directory under
// configs/examples/ as one merged configuration.
func TestShippedConfigsLoad(t *testing.T) {
	t.Setenv("JWT_SECRET", "an-example-secret-of-at-least-32-bytes") // examples/ollama.toml
	t.Setenv("ASTER_POWER_DISTRIBUTED_API_KEY", "a-workers-key")     // seed-000-pd.toml
	root := filepath.Join("..", "..", "configs")
	var paths []string
	for _, dir := range []string{root, filepath.Join(root, "examples")} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if e.IsDir() && dir != root || strings.HasSuffix(e.Name(), ".toml") {
				paths = append(paths, p)
			}
		}
	}
	if len(paths) < 4 {
		t.Fatalf("found only %v", paths)
	}
	for _, p := range paths {
		if _, err := Load(p); err != nil {
			t.Errorf("Load(%s): %v", p, err)
		}
	}
	data, err := os.ReadFile(filepath.Join(root, "default.toml"))
	if err != nil {
		t.Fatal(err)
	}
	def, _ := LoadDefault()
	fromDisk, err := LoadBytes(DefaultName, data)
	if err != nil || !reflect.DeepEqual(def, fromDisk) {
		t.Errorf("embedded default differs from configs/default.toml: %v", err)
	}
}

func TestOffsetPos(t *testing.T) {
	t.Setenv("SLUICE_T_P", "/v1")
	c := mustLoad(t, withMinimal(
		`[routers.a]`,
		`rule   =   "PathPrefix(`+"`/`"+`)"`,
		`service = "s"`,
		`[routers.b]`,
		`rule = 'Path(`+"`/x`"+`)'`,
		`service = "s"`,
		`[routers.c]`,
		`rule = "Path(\u0060/x`+"`"+`)"`,
		`service = "s"`,
		`[routers.d]`,
		`rule = "PathPrefix(`+"`${SLUICE_T_P}`"+`)"`,
		`service = "s"`,
	))
	for _, tc := range []struct {
		router string
		offset int
		want   string
	}{
		{"a", 0, "t.toml:8:13"},  // P
		{"a", 11, "t.toml:8:24"}, // the backquote
		{"b", 5, "t.toml:11:14"}, // literal string, verbatim too
		{"c", 5, "t.toml:14:8"},  // an escape: the opening quote
		{"d", 3, "t.toml:17:8"},  // ${VAR}: the opening quote
	} {
		if got := c.OffsetPos(tc.offset, "routers", tc.router, "rule").String(); got != tc.want {
			t.Errorf("OffsetPos(%d, routers.%s.rule) = %s, want %s", tc.offset, tc.router, got, tc.want)
		}
	}
}

// TestRuleSyntaxReportedWithOtherErrors: a bad rule and a bad service reference in one file
// are reported in one run, not the rule error only once everything else was fixed.
func TestRuleSyntaxReportedWithOtherErrors(t *testing.T) {
	_, err := LoadBytes("v.toml", []byte("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n"+
		"[routers.a]\nrule = \"Nope(`x`)\"\nservice = \"up\"\n"+
		"[routers.b]\nrule = \"PathPrefix(`/`)\"\nservice = \"ghost\"\n"+
		"[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:1\" }]\n"))
	list, _ := err.(ErrorList)
	if len(list) != 2 {
		t.Fatalf("want the rule and the service errors, got: %v", err)
	}
	if got := list[0].Error(); !strings.HasPrefix(got, "v.toml:4:9: routers.a.rule: unknown matcher \"Nope\"") {
		t.Errorf("rule error %q", got)
	}
	if got := list[1].Error(); !strings.HasPrefix(got, "v.toml:8:11: routers.b.service: no service named \"ghost\"") {
		t.Errorf("service error %q", got)
	}
}

// TestDuplicateEntryDoesNotHideOtherErrors: a router defined in two files is reported together
// with the rest (a duplicate must not hide the other errors).
func TestDuplicateEntryDoesNotHideOtherErrors(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.toml": "[entrypoints.web]\naddress = \"127.0.0.1:0\"\nmax_connections = 1.5\n[routers.r1]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n",
		"b.toml": "[routers.r1]\nrule = \"PathPrefix(`/b`)\"\nservice = \"up\"\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:1\" }]\nstrategy = \"rr\"\n",
	})
	_, err := Load(dir)
	msg := fmt.Sprint(err)
	for _, want := range []string{"routers.r1 is already defined", "max_connections", "strategy"} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors do not mention %q:\n%s", want, msg)
		}
	}
}

// A file that starts with a UTF-8 byte order mark (Windows editors write one) loads as
// without it, and its errors point where the editor shows them.
func TestByteOrderMarkIsSkipped(t *testing.T) {
	if _, err := LoadBytes("bom.toml", append([]byte("\xef\xbb\xbf"), withMinimal()...)); err != nil {
		t.Fatalf("a file with a BOM: %v", err)
	}
	_, err := LoadBytes("bom.toml", []byte("\xef\xbb\xbf[services.s.load_balancer]\nservers = 3\n"))
	if err == nil || !strings.Contains(err.Error(), "bom.toml:2:") {
		t.Fatalf("error of a file with a BOM: %v", err)
	}
}
