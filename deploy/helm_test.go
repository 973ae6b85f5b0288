package deploy

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/deploy/schema"
)

const chartPath = "deploy/helm/sluice"

// podIP stands for the address the chart's configuration reads from $POD_IP.
const podIP = "POD_IP=10.0.0.7"

type chartValues struct {
	Config           string            `yaml:"config"`
	ExtraConfigFiles map[string]string `yaml:"extraConfigFiles"`
	Ports            struct {
		HTTP  int `yaml:"http"`
		Admin int `yaml:"admin"`
	} `yaml:"ports"`
	TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
	PreStopSleepSeconds           int `yaml:"preStopSleepSeconds"`
}

// The chart's default configuration is what its values say it is: it loads, listens where
// the pod's ports and probes expect, accepts the Host that Prometheus sends, and drains
// within the grace period. This needs no helm.
func TestHelmDefaultConfig(t *testing.T) {
	data, err := os.ReadFile(rootPath(t, chartPath, "values.yaml"))
	require.NoError(t, err)
	var v chartValues
	require.NoError(t, yaml.Unmarshal(data, &v))
	require.NotEmpty(t, v.Config)
	require.NoError(t, schema.ValidateTOML([]byte(v.Config)))

	t.Setenv("POD_IP", strings.TrimPrefix(podIP, "POD_IP="))
	cfg, err := config.LoadBytes("values.yaml:config", []byte(v.Config))
	require.NoError(t, err)
	var drain time.Duration
	ports := map[string]bool{}
	for _, ep := range cfg.Entrypoints {
		_, port, err := net.SplitHostPort(ep.Address)
		require.NoError(t, err)
		ports[port] = true
		drain = max(drain, ep.DrainTimeout)
	}
	require.Equal(t, map[string]bool{strconv.Itoa(v.Ports.HTTP): true}, ports, "ports.http is the entrypoint's port")
	require.Equal(t, "0.0.0.0:"+strconv.Itoa(v.Ports.Admin), cfg.Admin.Address, "the admin API on ports.admin, reachable from outside the pod")
	written, ok := cfg.Written("admin", "allowed_hosts", "0")
	require.True(t, ok)
	require.Equal(t, "${POD_IP}", written, "Prometheus sends the pod's IP as Host")
	grace := time.Duration(v.TerminationGracePeriodSeconds) * time.Second
	require.Greater(t, grace, drain+time.Duration(v.PreStopSleepSeconds)*time.Second, "the pods get time to drain")

	// The image's EXPOSE matches (TestDockerfile checks 8080 and 9090).
	require.Equal(t, 8080, v.Ports.HTTP)
	require.Equal(t, 9090, v.Ports.Admin)

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sluice.toml"), []byte(v.Config), 0o644))
	validate(t, buildSluice(t), dir+"/", podIP)
}

// helmTemplate renders the chart and returns its objects by kind.
func helmTemplate(t *testing.T, helm string, args ...string) map[string]map[string]any {
	t.Helper()
	stdout, stderr, code := run(t, nil, helm, append([]string{"template", "rel", chartPath}, args...)...)
	require.Equal(t, 0, code, "helm template: %s", stderr)
	objs := map[string]map[string]any{}
	dec := yaml.NewDecoder(strings.NewReader(stdout))
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if obj == nil {
			continue
		}
		kind := obj["kind"].(string)
		require.NotContains(t, objs, kind, "one %s", kind)
		objs[kind] = obj
	}
	return objs
}

// dig returns the value at a path of maps and list indexes.
func dig(t *testing.T, v any, path ...string) any {
	t.Helper()
	for _, k := range path {
		switch x := v.(type) {
		case map[string]any:
			require.Contains(t, x, k, "%v", path)
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			require.NoError(t, err)
			require.Less(t, i, len(x), "%v", path)
			v = x[i]
		default:
			t.Fatalf("%v: %T at %q", path, v, k)
		}
	}
	return v
}

// helm lint and helm template pass, and what the chart renders works with sluice: the
// ConfigMap's files pass `sluice validate` as a directory, as the pods load them.
func TestHelmChart(t *testing.T) {
	helm, err := exec.LookPath("helm")
	if err != nil {
		t.Skip("helm is not on PATH (go install helm.sh/helm/v3/cmd/helm@v3.22.0)")
	}
	stdout, stderr, code := run(t, nil, helm, "lint", "--strict", chartPath)
	require.Equal(t, 0, code, "helm lint:\n%s%s", stdout, stderr)

	objs := helmTemplate(t, helm, "--set-string", "extraConfigFiles.20-chat\\.toml=[routers.chat]\nrule = \"Path(`/v1/chat/completions`)\"\nservice = \"llm\"\n")
	require.ElementsMatch(t, []string{"ConfigMap", "Deployment", "Service"}, keys(objs))

	cm := objs["ConfigMap"]
	files := dig(t, cm, "data").(map[string]any)
	require.ElementsMatch(t, []string{"sluice.toml", "20-chat.toml"}, keys(files))
	dir := t.TempDir()
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body.(string)), 0o644))
		require.NoError(t, schema.ValidateTOML([]byte(body.(string))), name)
	}
	validate(t, buildSluice(t), dir+"/", podIP)

	dep := objs["Deployment"]
	pod := dig(t, dep, "spec", "template")
	c := dig(t, pod, "spec", "containers", "0")
	require.Equal(t, []any{"serve", "--config", "/etc/sluice/"}, dig(t, c, "args"))
	require.Equal(t, "/etc/sluice", dig(t, c, "volumeMounts", "0", "mountPath"))
	require.Nil(t, dig(t, c, "volumeMounts", "0").(map[string]any)["subPath"], "a directory mount, which the kubelet updates")
	require.Equal(t, dig(t, cm, "metadata", "name"), dig(t, pod, "spec", "volumes", "0", "configMap", "name"))
	require.Equal(t, "POD_IP", dig(t, c, "env", "0", "name"))
	require.Equal(t, "status.podIP", dig(t, c, "env", "0", "valueFrom", "fieldRef", "fieldPath"))
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		require.Equal(t, "/api/gateway/health", dig(t, c, probe, "httpGet", "path"))
		require.Equal(t, "admin", dig(t, c, probe, "httpGet", "port"))
		require.Equal(t, map[string]any{"name": "Host", "value": "localhost"}, dig(t, c, probe, "httpGet", "httpHeaders", "0"),
			"the kubelet would send the pod's IP as Host; the admin API always accepts localhost")
	}
	require.Equal(t, "admin", dig(t, c, "ports", "1", "name"))
	require.Equal(t, 9090, dig(t, c, "ports", "1", "containerPort"))
	ann := dig(t, pod, "metadata", "annotations").(map[string]any)
	require.Equal(t, "true", ann["prometheus.io/scrape"])
	require.Equal(t, "9090", ann["prometheus.io/port"])
	require.Equal(t, "/metrics", ann["prometheus.io/path"])
	require.Regexp(t, `^[0-9a-f]{64}$`, ann["checksum/config"])
	require.Equal(t, true, dig(t, pod, "spec", "securityContext", "runAsNonRoot"))
	require.Equal(t, true, dig(t, c, "securityContext", "readOnlyRootFilesystem"))
	require.Equal(t, false, dig(t, c, "securityContext", "allowPrivilegeEscalation"))
	require.Equal(t, []any{"ALL"}, dig(t, c, "securityContext", "capabilities", "drop"))
	require.NotNil(t, dig(t, c, "resources", "requests"))
	require.Equal(t, "http", dig(t, objs["Service"], "spec", "ports", "0", "targetPort"))

	// A change to the configuration changes the checksum, so helm upgrade rolls the pods;
	// without rollOnConfigChange it does not, for a reload in place.
	changed := helmTemplate(t, helm, "--set-string", "extraConfigFiles.20-chat\\.toml=[routers.chat]\nrule = \"Path(`/v1/completions`)\"\nservice = \"llm\"\n")
	require.NotEqual(t, ann["checksum/config"], dig(t, changed["Deployment"], "spec", "template", "metadata", "annotations", "checksum/config"))
	inPlace := helmTemplate(t, helm, "--set", "rollOnConfigChange=false")
	require.NotContains(t, dig(t, inPlace["Deployment"], "spec", "template", "metadata", "annotations"), "checksum/config")

	// Options that add objects or fields render too.
	more := helmTemplate(t, helm, "--set", "podDisruptionBudget.enabled=true", "--set", "preStopSleepSeconds=5")
	require.Contains(t, more, "PodDisruptionBudget")
	require.Equal(t, 5, dig(t, more["Deployment"], "spec", "template", "spec", "containers", "0", "lifecycle", "preStop", "sleep", "seconds"))

	// A file sluice would not load is refused at render time rather than ignored in the pod.
	_, stderr, code = run(t, nil, helm, "template", "rel", chartPath, "--set-string", "extraConfigFiles.routes=x")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "want a name ending in .toml")
}

// validate runs `sluice validate path` with the environment env.
func validate(t *testing.T, bin, path string, env ...string) {
	t.Helper()
	stdout, stderr, code := run(t, env, bin, "validate", path)
	require.Equal(t, 0, code, "sluice validate %s:\n%s%s", path, stdout, stderr)
}

func keys[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
