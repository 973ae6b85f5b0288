package deploy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case
	args string
	line int
}

// stage is a FROM and the instructions after it.
type stage struct {
	from  string // the image, build arguments substituted
	name  string // AS name
	instr []instruction
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.instr {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

func parseDockerfile(t *testing.T, data string) (stages []stage, global map[string]string) {
	t.Helper()
	var instrs []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(data, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || trimmed == "" && cur.Len() == 0 {
			continue // comments go, also inside continued instructions, as Docker does
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if cont, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		instrs = append(instrs, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start})
		cur.Reset()
	}
	require.Zero(t, cur.Len(), "the Dockerfile ends inside a continued instruction")

	global = map[string]string{}
	subst := regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
	for _, in := range instrs {
		if in.cmd == "FROM" {
			fields := strings.Fields(in.args)
			var image string
			for _, f := range fields {
				if !strings.HasPrefix(f, "--") {
					image = f
					break
				}
			}
			image = subst.ReplaceAllStringFunc(image, func(m string) string {
				return global[subst.FindStringSubmatch(m)[1]]
			})
			st := stage{from: image}
			if n := len(fields); n >= 2 && strings.EqualFold(fields[n-2], "AS") {
				st.name = fields[n-1]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			require.Equal(t, "ARG", in.cmd, "line %d: only ARG may come before the first FROM", in.line)
			k, v, _ := strings.Cut(in.args, "=")
			global[k] = v
			continue
		}
		stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, in)
	}
	return stages, global
}

// execForm parses the JSON array of an exec-form instruction.
func execForm(t *testing.T, in instruction, args string) []string {
	t.Helper()
	var argv []string
	require.NoError(t, json.Unmarshal([]byte(args), &argv), "line %d: %s must be in exec form (a JSON array): a distroless image has no shell", in.line, in.cmd)
	return argv
}

func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile(rootPath(t, "deploy", "docker", "Dockerfile"))
	require.NoError(t, err)
	stages, global := parseDockerfile(t, string(data))
	require.GreaterOrEqual(t, len(stages), 2, "a build stage and a final stage")

	// The build stage: Go as go.mod asks, static binaries.
	build := stages[0]
	require.Equal(t, "build", build.name)
	gomod, err := os.ReadFile(rootPath(t, "go.mod"))
	require.NoError(t, err)
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(gomod))
	require.NotNil(t, goVersion)
	require.Equal(t, "golang:"+goVersion[1], build.from, "the builder's Go is go.mod's (ARG GO_VERSION=%s)", global["GO_VERSION"])
	var goBuild string
	for _, in := range build.all("RUN") {
		if strings.Contains(in.args, "go build") {
			goBuild = in.args
		}
	}
	require.NotEmpty(t, goBuild, "a RUN with go build")
	require.Contains(t, goBuild, "CGO_ENABLED=0", "static binaries: the final image has no C library")
	require.Contains(t, goBuild, "-trimpath")
	built := map[string]bool{}
	for _, f := range strings.Fields(goBuild) {
		if strings.HasPrefix(f, "./") {
			_, err := os.Stat(rootPath(t, f))
			require.NoError(t, err, "go build %s: no such package", f)
			built[path.Base(f)] = true
		}
	}
	require.True(t, built["sluice"], "go build ./cmd/sluice")

	// The final stage: distroless static or scratch, binaries from the build, a non-root user.
	final := stages[len(stages)-1]
	require.Regexp(t, `^(gcr\.io/distroless/static[a-z0-9-]*:nonroot|scratch)$`, final.from)
	require.Empty(t, final.all("RUN"), "the final image has no shell to RUN with")
	copied := map[string]bool{}
	for _, in := range final.all("COPY") {
		fields := strings.Fields(in.args)
		require.Contains(t, fields[0], "--from=build", "line %d: the final stage takes only the built binaries", in.line)
		dest := fields[len(fields)-1]
		for _, src := range fields[1 : len(fields)-1] {
			require.True(t, built[path.Base(src)], "line %d: %s is not built", in.line, src)
			copied[path.Join(dest, path.Base(src))] = true
		}
	}
	users := final.all("USER")
	require.Len(t, users, 1)
	uid, _, _ := strings.Cut(users[0].args, ":")
	n, err := strconv.Atoi(uid)
	require.NoError(t, err, "USER %s: numeric, so that Kubernetes' runAsNonRoot can check it", users[0].args)
	require.NotZero(t, n, "USER must not be root")

	expose := final.all("EXPOSE")
	require.Len(t, expose, 1)
	require.ElementsMatch(t, []string{"8080", "9090"}, strings.Fields(expose[0].args))

	entry := final.all("ENTRYPOINT")
	require.Len(t, entry, 1)
	argv := execForm(t, entry[0], entry[0].args)
	require.True(t, copied[argv[0]], "ENTRYPOINT %s is not copied into the image", argv[0])
	require.Equal(t, "/usr/local/bin/sluice", argv[0])
	cmds := final.all("CMD")
	require.Len(t, cmds, 1)
	require.Equal(t, []string{"serve"}, execForm(t, cmds[0], cmds[0].args), "the embedded default configuration: no file needed")

	hc := final.all("HEALTHCHECK")
	require.Len(t, hc, 1)
	_, probe, ok := strings.Cut(hc[0].args, "CMD ")
	require.True(t, ok, "HEALTHCHECK ... CMD [...]")
	argv = execForm(t, hc[0], probe)
	require.True(t, copied[argv[0]], "HEALTHCHECK runs %s, which is not copied into the image", argv[0])

	// Everywhere: nothing fetched by URL, which would bypass the checksums of go.sum.
	for _, st := range stages {
		for _, in := range st.all("ADD") {
			require.NotContains(t, in.args, "://", "line %d: ADD of a URL", in.line)
		}
		for _, in := range st.all("RUN") {
			require.NotRegexp(t, `\b(curl|wget)\b`, in.args, "line %d: downloads outside the Go module proxy", in.line)
		}
	}
}

// dockerignored reports whether a path of the build context (slash-separated, relative) is
// left out by one of the patterns, as Docker reads them: "*" within a path element, "**"
// across elements, and a pattern that matches a directory leaves out what it holds.
func dockerignored(patterns []string, rel string) bool {
	ignored := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/")
		re := "^" + strings.NewReplacer(`\*\*`, ".*", `\*`, "[^/]*", `\?`, "[^/]").Replace(regexp.QuoteMeta(p)) + "(/.*)?$"
		if regexp.MustCompile(re).MatchString(rel) {
			ignored = !neg
		}
	}
	return ignored
}

func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	data, err := os.ReadFile(rootPath(t, ".dockerignore"))
	require.NoError(t, err)
	var patterns []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	require.True(t, dockerignored(patterns, ".git/HEAD"), "the repository's history stays out of the context")
	require.True(t, dockerignored(patterns, "bench/node/node_modules/x/index.js"))

	// Every file the image's go build reads: go.mod, go.sum, and the Go and embedded files
	// of the packages in the repository (the main module's, and those of a module that a
	// replace directive takes from a directory of the repository, with its go.mod).
	stdout, stderr, code := run(t, nil, "go", "list", "-deps",
		"-f", `{{if .Module}}{{if or .Module.Main .Module.Replace}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{end}}{{end}}`,
		"./cmd/sluice", "./deploy/docker/sluice-healthcheck")
	require.Equal(t, 0, code, stderr)
	inputs := []string{"go.mod", "go.sum", "internal/gnet/go.mod"}
	rootDir := rootPath(t)
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		fields := strings.Fields(line)
		if !strings.HasPrefix(fields[0], rootDir+"/") && fields[0] != rootDir {
			continue // a replacement from the module cache
		}
		dir := strings.TrimPrefix(strings.TrimPrefix(fields[0], rootDir), "/")
		for _, f := range fields[1:] {
			inputs = append(inputs, path.Join(dir, f))
		}
	}
	require.Greater(t, len(inputs), 20)
	for _, in := range inputs {
		require.False(t, dockerignored(patterns, in), ".dockerignore leaves out %s, which the image's build needs", in)
	}
}

// TestDockerBuild builds the image and runs it. It needs a Docker engine, and the network to
// pull the base images, so it runs only when asked: SLUICE_TEST_DOCKER=1.
func TestDockerBuild(t *testing.T) {
	if os.Getenv("SLUICE_TEST_DOCKER") != "1" {
		t.Skip("set SLUICE_TEST_DOCKER=1 to build the image (needs a Docker engine and its registries)")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker is not on PATH")
	}
	if _, stderr, code := run(t, nil, "docker", "info"); code != 0 {
		t.Skipf("no Docker engine: %s", stderr)
	}
	tag := "sluice-test:" + strconv.Itoa(os.Getpid())
	_, stderr, code := run(t, nil, "docker", "build", "-f", "deploy/docker/Dockerfile", "-t", tag, "--build-arg", "VERSION=test", ".")
	require.Equal(t, 0, code, stderr)
	t.Cleanup(func() { run(t, nil, "docker", "rmi", "-f", tag) })

	stdout, stderr, code := run(t, nil, "docker", "run", "--rm", tag, "version")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "sluice test\n", stdout)
	stdout, stderr, code = run(t, nil, "docker", "image", "inspect", "-f", "{{.Config.User}} {{.Config.Healthcheck.Test}}", tag)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "65532:65532 [CMD /usr/local/bin/sluice-healthcheck]\n", stdout)
}

// TestDockerBuildOCI builds the image from the Dockerfile, unchanged, with buildah and runs it:
// deploy/docker/verify-oci.sh, which needs no Docker engine and no container registry (it
// replaces the two base images by local stand-ins, under their names, and pulls nothing). It
// takes minutes and root, so it runs only when asked: SLUICE_TEST_BUILDAH=1.
func TestDockerBuildOCI(t *testing.T) {
	if os.Getenv("SLUICE_TEST_BUILDAH") != "1" {
		t.Skip("set SLUICE_TEST_BUILDAH=1 to build and run the image with buildah (slow, needs root)")
	}
	if _, err := exec.LookPath("buildah"); err != nil {
		t.Skip("buildah is not on PATH")
	}
	// The script's own deadline is the test's, less time for it to remove its work directory.
	deadline := time.Now().Add(20 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Add(-time.Minute).Before(deadline) {
		deadline = d.Add(-time.Minute)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", rootPath(t, "deploy", "docker", "verify-oci.sh"))
	cmd.Dir = rootPath(t)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "verify-oci.sh:\n%s", out)
	// Each check prints its line when it passes; the script stops at the first that fails.
	for _, check := range []string{
		"ok: buildah build -f deploy/docker/Dockerfile, with nothing pulled",
		"ok: image configuration: user 65532:65532, entry point sluice serve, ports 8080 9090",
		"ok: binaries: /usr/local/bin/sluice and sluice-healthcheck, CGO_ENABLED=0 -trimpath; no shell, no C library",
		"sluice version in the image (a static binary on a base with no C library): sluice verify-oci",
		"ok: the gateway listens on 127.0.0.1:8080 and the admin API on 127.0.0.1:9090",
		"ok: the gateway runs as uid 65532, gid 65532",
		"ok: the health check (/usr/local/bin/sluice-healthcheck) exits 0",
		"ok: SIGTERM stops the gateway with status 0",
		"verify-oci: PASS",
	} {
		require.Contains(t, string(out), check, "verify-oci.sh:\n%s", out)
	}
}
