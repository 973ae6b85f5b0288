package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateReportsFileLineColAndExits1(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte(`[entrypoints.web]
address = "127.0.0.1:8080"

[routers.api]
rule = "PathPrefix(`+"`/v1`"+`) &&"
service = "up"

[services.up.load_balancer]
servers = [{ url = "http://127.0.0.1:9" }]
`), 0o644))
	var out, errb bytes.Buffer
	code := run([]string{"validate", bad}, &out, &errb)
	require.Equal(t, 1, code)
	line := strings.TrimSpace(errb.String())
	require.True(t, strings.HasPrefix(line, bad+":5:"), "got %q", line)
	require.Contains(t, line, "rule")
}

func TestValidateUnknownKey(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte("[entrypoints.web]\naddress = \"127.0.0.1:8080\"\nadress = \"x\"\n"), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"validate", bad}, &out, &errb))
	require.Contains(t, errb.String(), bad+":3:1:")
}

func TestValidateAcceptsShippedConfigs(t *testing.T) {
	t.Setenv("JWT_SECRET", "an-example-secret-of-at-least-32-bytes") // examples/ollama.toml
	t.Setenv("ASTER_POWER_DISTRIBUTED_API_KEY", "a-workers-key")     // seed-000-pd.toml
	files, err := filepath.Glob("../../configs/*.toml")
	require.NoError(t, err)
	ex, err := filepath.Glob("../../configs/examples/*.toml")
	require.NoError(t, err)
	files = append(files, ex...)
	files = append(files, "../../configs/examples/split") // a directory of *.toml, merged
	require.NotEmpty(t, files)
	// An example may name the certificate files of a real deployment (/etc/certs/…): they
	// are the test's own, whatever the machine has at those paths (deploymentFiles).
	deployment := newDeploymentFiles(t)
	for _, f := range files {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run([]string{"validate", deployment.copy(f)}, &out, &errb), "%s:\n%s", f, errb.String())
	}
}

// The version is printed by the command and by the flags peers answer it on (nginx -v,
// haproxy -v).
func TestVersionAndUsage(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}, {"-v"}, {"-V"}} {
		out.Reset()
		require.Equal(t, 0, run(args, &out, &errb), "%v: %s", args, errb.String())
		require.True(t, strings.HasPrefix(out.String(), "sluice "), "%v: %q", args, out.String())
	}
	require.Equal(t, 2, run([]string{"frobnicate"}, &out, &errb))
	require.Contains(t, errb.String(), "usage:")
}

func TestValidatePointsAtTheRuleSyntaxError(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.toml")
	// The error is at the stray second ")": line 5, column 19.
	require.NoError(t, os.WriteFile(bad, []byte("[entrypoints.web]\naddress = \"127.0.0.1:8080\"\n\n[routers.api]\nrule = \"Path(`/a`))\"\nservice = \"up\"\n\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n"), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"validate", bad}, &out, &errb))
	require.True(t, strings.HasPrefix(errb.String(), bad+":5:19:"), "got %q", errb.String())
}

func TestServeRefusesAPositionalConfig(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 2, run([]string{"serve", "my.toml"}, &out, &errb))
	require.Contains(t, errb.String(), `unexpected argument "my.toml"`)
}

func TestValidateChecksTLSFiles(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "tls.toml")
	require.NoError(t, os.WriteFile(bad, []byte("[entrypoints.websecure]\naddress = \"127.0.0.1:8443\"\ntls = { cert_file = \"/nonexistent/cert.pem\", key_file = \"/nonexistent/key.pem\" }\n\n[routers.api]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n"), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"validate", bad}, &out, &errb))
	require.True(t, strings.HasPrefix(errb.String(), bad+":3:"), "got %q", errb.String())
	require.Contains(t, errb.String(), "/nonexistent/cert.pem")
}

// An access log that cannot be opened is reported at its value, as the value is written: a
// path read from the environment is shown as its ${NAME}.
func TestValidateAccessLogThatDoesNotOpen(t *testing.T) {
	t.Setenv("SLUICE_TEST_ACCESS_LOG", "/nonexistent/h1-private/access.log")
	bad := filepath.Join(t.TempDir(), "log.toml")
	require.NoError(t, os.WriteFile(bad, []byte("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[routers.api]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n[log]\naccess_log = \"${SLUICE_TEST_ACCESS_LOG}\"\n"), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"validate", bad}, &out, &errb))
	require.Equal(t, bad+":9:14: log.access_log: open ${SLUICE_TEST_ACCESS_LOG}: no such file or directory\n", errb.String())
}

// A kubeconfig that cannot be read is reported with its path as written: a path read from the
// environment is shown as its ${NAME}.
func TestValidateKubeconfigThatDoesNotOpen(t *testing.T) {
	t.Setenv("SLUICE_TEST_KUBECONFIG", "/nonexistent/h1-private/kubeconfig")
	bad := filepath.Join(t.TempDir(), "kube.toml")
	require.NoError(t, os.WriteFile(bad, []byte(`[entrypoints.web]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm.scaling]
executor = "kube"
[services.llm.scaling.kube]
deployment = "llm"
service = "llm"
url = "http://llm.default.svc:8000"
kubeconfig = "${SLUICE_TEST_KUBECONFIG}"
`), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"validate", bad}, &out, &errb))
	require.Contains(t, errb.String(), "services.llm.scaling.kube: scaling: kube: kubeconfig: open ${SLUICE_TEST_KUBECONFIG}: no such file or directory")
	require.NotContains(t, errb.String(), "h1-private")
}

// Every command, and the bare command, answers -h and --help with its usage on stdout and
// exit 0; the usage spells flags the long way, as the README does.
func TestHelpOnEveryCommand(t *testing.T) {
	for _, cmd := range [][]string{nil, {"serve"}, {"validate"}, {"version"}} {
		for _, h := range []string{"--help", "-h"} {
			var out, errb bytes.Buffer
			args := append(append([]string(nil), cmd...), h)
			require.Equal(t, 0, run(args, &out, &errb), "%v", args)
			require.Empty(t, errb.String(), "%v", args)
			require.True(t, strings.HasPrefix(out.String(), "usage: sluice"), "%v: %q", args, out.String())
			if len(cmd) == 1 && cmd[0] != "version" {
				require.Contains(t, out.String(), "--config PATH", "%v", args)
				require.NotContains(t, out.String(), "  -config", "%v: Go's one-dash spelling", args)
			}
		}
	}
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"validate", "some.toml", "--help"}, &out, &errb), "help after the argument")
	require.Contains(t, out.String(), "usage: sluice validate")
	out.Reset()
	require.Equal(t, 0, run([]string{"help", "serve"}, &out, &errb))
	require.Contains(t, out.String(), "usage: sluice serve [--config PATH]")
}

// A flag or command sluice does not know exits 2 with the usage on stderr, and nothing on
// stdout.
func TestUnknownFlagOrCommandExits2WithUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"frobnicate"}, `sluice: unknown command "frobnicate"`},
		{[]string{"--frob"}, `sluice: unknown flag "--frob"`},
		{[]string{"serve", "--frob"}, "sluice serve: unknown flag --frob"},
		{[]string{"serve", "--config"}, "sluice serve: flag --config needs a value"},
		{[]string{"validate", "x.toml", "--frob=1"}, "sluice validate: unknown flag --frob"},
		{[]string{"version", "--frob"}, "sluice version: unknown flag --frob"},
		{[]string{"version", "extra"}, `sluice version: unexpected argument "extra"`},
		{[]string{"validate"}, "sluice validate: which config? give its PATH"},
		{[]string{"validate", "a.toml", "b.toml"}, `sluice validate: unexpected argument "b.toml"`},
		{[]string{"validate", "--config", "a.toml", "b.toml"}, "sluice validate: two configs, --config a.toml and b.toml: give one"},
		{[]string{"help", "frob"}, `sluice help: unknown command "frob"`},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 2, run(c.args, &out, &errb), "%v", c.args)
		require.Empty(t, out.String(), "%v", c.args)
		require.True(t, strings.HasPrefix(errb.String(), c.msg), "%v: %q", c.args, errb.String())
		require.Contains(t, errb.String(), "usage: sluice", "%v", c.args)
	}
}

// An unknown flag that is a near miss of one the command has gets a suggestion, spelt with the
// dashes the user typed; one that is not keeps the plain message.
func TestUnknownFlagOrCommandSuggestsTheNearestOne(t *testing.T) {
	for _, c := range []struct {
		args []string
		line string // the first line on stderr
	}{
		{[]string{"serve", "--confg", "x.toml"}, "sluice serve: unknown flag --confg (did you mean --config?)"},
		{[]string{"serve", "--Config=x.toml"}, "sluice serve: unknown flag --Config (did you mean --config?)"},
		{[]string{"validate", "-confg=x.toml"}, "sluice validate: unknown flag -confg (did you mean -config?)"},
		{[]string{"validate", "x.toml", "--hepl"}, "sluice validate: unknown flag --hepl (did you mean --help?)"},
		{[]string{"version", "--hlp"}, "sluice version: unknown flag --hlp (did you mean --help?)"},
		{[]string{"serve", "--frob"}, "sluice serve: unknown flag --frob"},
		{[]string{"serve", "--c"}, "sluice serve: unknown flag --c"},
		{[]string{"version", "--config"}, "sluice version: unknown flag --config"},
		{[]string{"serv"}, `sluice: unknown command "serv" (did you mean serve?)`},
		{[]string{"valdate", "x.toml"}, `sluice: unknown command "valdate" (did you mean validate?)`},
		{[]string{"frobnicate"}, `sluice: unknown command "frobnicate"`},
		{[]string{"help", "vresion"}, `sluice help: unknown command "vresion" (did you mean version?)`},
		{[]string{"--verison"}, `sluice: unknown flag "--verison" (did you mean --version?)`},
		{[]string{"-hlep"}, `sluice: unknown flag "-hlep" (did you mean -help?)`},
		{[]string{"--frob"}, `sluice: unknown flag "--frob"`},
		{[]string{"--config", "x.toml"}, `sluice: unknown flag "--config" (a flag of serve and validate: sluice serve --config PATH)`},
		{[]string{"-config=x.toml"}, `sluice: unknown flag "-config=x.toml" (a flag of serve and validate: sluice serve -config PATH)`},
		{[]string{"--confg", "x.toml"}, `sluice: unknown flag "--confg" (did you mean sluice serve --config?)`},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 2, run(c.args, &out, &errb), "%v", c.args)
		line, _, _ := strings.Cut(errb.String(), "\n")
		require.Equal(t, c.line, line, "%v", c.args)
		require.Contains(t, errb.String(), "usage: sluice", "%v", c.args)
	}
}

// A flag that takes one value, given twice with different values, is refused rather than
// the last one silently winning; the same value again is harmless and passes.
func TestSingleValuedFlagGivenTwiceExits2(t *testing.T) {
	for _, c := range []struct {
		args []string
		line string // the first line on stderr
	}{
		{[]string{"serve", "--config", "a.toml", "--config", "b.toml"}, `sluice serve: flag --config given twice ("a.toml" and "b.toml"); give it once`},
		{[]string{"serve", "-config=a.toml", "--config=b.toml"}, `sluice serve: flag -config given twice ("a.toml" and "b.toml"); give it once`},
		{[]string{"validate", "--config", "a.toml", "--config", "b.toml"}, `sluice validate: flag --config given twice ("a.toml" and "b.toml"); give it once`},
		{[]string{"validate", "--config", "a.toml", "x.toml", "--config", "b.toml"}, `sluice validate: flag --config given twice ("a.toml" and "b.toml"); give it once`},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 2, run(c.args, &out, &errb), "%v", c.args)
		require.Empty(t, out.String(), "%v", c.args)
		line, _, _ := strings.Cut(errb.String(), "\n")
		require.Equal(t, c.line, line, "%v", c.args)
		require.Contains(t, errb.String(), "usage: sluice "+c.args[0], "%v", c.args)
	}
	good := filepath.Join(t.TempDir(), "good.toml")
	require.NoError(t, os.WriteFile(good, []byte(goodConfig), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"validate", "--config", good, "--config=" + good}, &out, &errb), errb.String())
	require.Equal(t, good+": ok\n", out.String())
}

const goodConfig = "[entrypoints.web]\naddress = \"127.0.0.1:8080\"\n\n[routers.api]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n"

// validate takes the config as --config PATH as well as PATH, as serve does.
func TestValidateAcceptsConfigFlag(t *testing.T) {
	good := filepath.Join(t.TempDir(), "good.toml")
	require.NoError(t, os.WriteFile(good, []byte(goodConfig), 0o644))
	for _, args := range [][]string{{"validate", good}, {"validate", "--config", good}, {"validate", "--config=" + good}, {"validate", "-config", good}, {"validate", "--config", good, good}} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(args, &out, &errb), "%v: %s", args, errb.String())
		require.Equal(t, good+": ok\n", out.String())
		require.Empty(t, errb.String())
	}
}

// validate warns, with exit 0, about the parts of a config that can route nothing.
func TestValidateWarnsAboutConfigsThatRouteNothing(t *testing.T) {
	for _, c := range []struct {
		name, toml string
		want       []string // warning lines, as ":line:col: warning: message" after the file name
	}{
		{"no routers", "[entrypoints.web]\naddress = \"127.0.0.1:8080\"\n", []string{
			`:1:1: warning: no routers: every request gets 404; add a [routers.<name>] with a rule and a service`,
		}},
		{"an entrypoint no router serves", "[entrypoints.web]\naddress = \"127.0.0.1:8080\"\n[entrypoints.internal]\naddress = \"127.0.0.1:8081\"\n\n" +
			"[routers.api]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\nentrypoints = [\"web\"]\n\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n", []string{
			`:3:14: warning: entrypoints.internal is served by no router: every request to it gets 404 (list it in a router's entrypoints, or leave a router's entrypoints out to serve on all)`,
		}},
		{"a router no request reaches", "[entrypoints.web]\naddress = \"127.0.0.1:8080\"\n\n" +
			"[routers.all]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\npriority = 100\n\n" +
			"[routers.api]\nrule = \"PathPrefix(`/v1`)\"\nservice = \"up\"\n\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n", []string{
			`:10:8: warning: routers.api serves on no entrypoint: on web, routers.all (priority 100) is tried first and matches every request it would (routers.api has priority 17, the length of its rule: give it a priority above 100, or narrow the other rule)`,
		}},
		{"a model router with no models", "[entrypoints.web]\naddress = \"127.0.0.1:8080\"\n\n[routers.openai]\nrule = \"PathPrefix(`/v1`)\"\nmodels = true\n", []string{
			`:6:1: warning: routers.openai is a model router but no [models.<alias>] is defined: every request it matches gets 404 model_not_found`,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "w.toml")
			require.NoError(t, os.WriteFile(f, []byte(c.toml), 0o644))
			var out, errb bytes.Buffer
			require.Equal(t, 0, run([]string{"validate", f}, &out, &errb), errb.String())
			require.Equal(t, f+": ok\n", out.String())
			var want []string
			for _, w := range c.want {
				want = append(want, f+w)
			}
			require.Equal(t, strings.Join(want, "\n")+"\n", errb.String())
		})
	}
	// A config that routes everything gets no warning.
	f := filepath.Join(t.TempDir(), "good.toml")
	require.NoError(t, os.WriteFile(f, []byte(goodConfig), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"validate", f}, &out, &errb))
	require.Empty(t, errb.String())
}

// A type error says what to write instead.
func TestValidateTypeErrorSaysWhatToWrite(t *testing.T) {
	f := filepath.Join(t.TempDir(), "t.toml")
	require.NoError(t, os.WriteFile(f, []byte("[entrypoints.web]\naddress = \"127.0.0.1:8080\"\ndrain_timeout = 30\n"), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"validate", f}, &out, &errb))
	require.Equal(t, f+`:3:17: entrypoints.web.drain_timeout must be a duration string such as "30s", not an integer`+"\n", errb.String())
}

// A file saved in another encoding than UTF-8 is refused as such, at its first byte that is
// not UTF-8, rather than with whatever the parser makes of the byte.
func TestValidateRefusesAFileThatIsNotUTF8(t *testing.T) {
	f := filepath.Join(t.TempDir(), "t.toml")
	require.NoError(t, os.WriteFile(f, []byte("[entrypoints.web]\naddress = \"127.0.0.1:8080\"\n\xff = 1\n"), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"validate", f}, &out, &errb))
	require.Equal(t, f+`:3:1: the file is not valid UTF-8: byte 0xFF (TOML 1.0.0: a TOML file must be a valid UTF-8 encoded Unicode document; save it as UTF-8)`+"\n", errb.String())
}

// Validating a config that starts a rollout logs nothing: validate's output is its verdict.
// The example's scaled service runs llmsim by name, from PATH as its comment says.
func TestValidateLogsNothing(t *testing.T) {
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "llmsim"), []byte("#!/bin/sh\n"), 0o755))
	t.Setenv("PATH", bin)
	var logs bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"validate", "../../configs/examples/lifecycle.toml"}, &out, &errb), errb.String())
	require.Empty(t, logs.String(), "log lines while validating")
	require.Empty(t, errb.String())
	require.Contains(t, out.String(), ": ok")
}
