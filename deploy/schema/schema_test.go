package schema

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/health"
)

// root is the module's directory (tests run in the package's).
const root = "../.."

func TestCommittedSchemaIsGenerated(t *testing.T) {
	want, err := Generate(root)
	require.NoError(t, err)
	require.Equal(t, string(want), string(JSON),
		"deploy/schema/sluice.schema.json differs from what core/config generates: run `go generate ./deploy/schema`")
}

func TestSchemaIsValidDraft07(t *testing.T) {
	_, err := Compile(JSON)
	require.NoError(t, err)
}

// Every configuration the repository ships must pass, as an editor would show it.
func TestShippedConfigsMatchSchema(t *testing.T) {
	var files []string
	for _, pat := range []string{"configs/*.toml", "configs/examples/*.toml", "configs/examples/split/*.toml"} {
		m, err := filepath.Glob(filepath.Join(root, pat))
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.GreaterOrEqual(t, len(files), 4, "the example configurations moved?")
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, ValidateTOML(data), f)
	}
}

// probe sets one key of the minimal configuration and says what the schema and the loader
// should make of it.
type probe struct {
	path   string // schema path
	value  any
	env    map[string]string
	schema bool // the schema accepts it
	loader bool // config.Load accepts it
}

func (p probe) String() string {
	return fmt.Sprintf("%s = %#v (env %v)", p.path, p.value, p.env)
}

// concrete turns a schema path into a key path of the minimal configuration.
func concrete(path string) []string {
	segs := strings.Split(path, ".")
	var out []string
	for i, s := range segs {
		switch {
		case s == "*" && segs[0] == "entrypoints" && i+1 < len(segs) && segs[i+1] == "tls":
			out = append(out, "tls") // the entrypoint with a [tls] table
		case s == "*" && segs[0] == "services" && i+1 < len(segs) && (strings.HasPrefix(segs[i+1], "revisions") || segs[i+1] == "rollout"):
			out = append(out, "revised") // the service with revisions
		case s == "*" && segs[0] == "services" && i+1 < len(segs) && segs[i+1] == "scaling":
			out = append(out, "scaled") // the scaled service
		case s == "*":
			out = append(out, names[segs[0]])
		case strings.HasSuffix(s, "[]"):
			out = append(out, strings.TrimSuffix(s, "[]"), "0")
		default:
			out = append(out, s)
		}
	}
	return out
}

// set sets the value at path in tree, making the tables on the way.
func set(tree map[string]any, path []string, v any) {
	var cur any = tree
	for i, k := range path {
		last := i == len(path)-1
		switch x := cur.(type) {
		case map[string]any:
			if last {
				x[k] = v
				return
			}
			if x[k] == nil {
				x[k] = map[string]any{}
			}
			cur = x[k]
		case []any:
			j, _ := strconv.Atoi(k)
			if last {
				x[j] = v
				return
			}
			cur = x[j]
		}
	}
}

func check(t *testing.T, p probe) {
	t.Helper()
	for k, v := range p.env {
		t.Setenv(k, v)
	}
	tree := minimal()
	set(tree, concrete(p.path), p.value)
	schemaErr := ValidateTree(tree)
	_, loadErr := load(tree)
	require.Equal(t, p.schema, schemaErr == nil, "schema on %s: %v", p, schemaErr)
	require.Equal(t, p.loader, loadErr == nil, "loader on %s: %v", p, loadErr)
}

// leaves walks the generated schema and returns its keys' nodes by schema path.
func leaves(t *testing.T) map[string]map[string]any {
	var doc map[string]any
	require.NoError(t, json.Unmarshal(JSON, &doc))
	out := map[string]map[string]any{}
	var walk func(n map[string]any, path string)
	walk = func(n map[string]any, path string) {
		if path != "" {
			out[path] = n
		}
		props, _ := n["properties"].(map[string]any)
		for k, c := range props {
			walk(c.(map[string]any), join(path, k))
		}
		pats, _ := n["patternProperties"].(map[string]any)
		for _, c := range pats {
			walk(c.(map[string]any), join(path, "*"))
		}
		if items, ok := n["items"].(map[string]any); ok && items["type"] == "object" {
			for k, c := range items["properties"].(map[string]any) {
				walk(c.(map[string]any), path+"[]."+k)
			}
		}
	}
	walk(doc, "")
	return out
}

func sorted[T any](m map[string]T) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// typesWithRequiredOptions are the middleware types that do not load from their type alone.
var typesWithRequiredOptions = map[string]bool{
	config.MiddlewareJWT: true, config.MiddlewareRateLimit: true,
	config.MiddlewareHeaders: true, config.MiddlewareStripPrefix: true, config.MiddlewareCORS: true,
	config.MiddlewareIPAllow: true, config.MiddlewareBodyLimit: true,
}

// The schema's enumerations and ranges are written by hand (constraints); the loader
// checks them in its own code. Each is probed at its edges in both.
func TestSchemaConstraintsAgreeWithLoader(t *testing.T) {
	nodes := leaves(t)
	probed := 0
	for _, path := range sorted(nodes) {
		n := nodes[path]
		var probes []probe
		if anyOf, ok := n["anyOf"].([]any); ok {
			if enum, ok := anyOf[0].(map[string]any)["enum"].([]any); ok {
				loading := ""
				for _, v := range enum {
					// Middleware options are free-form in the schema: a type with required
					// options loads only with them, which the schema does not know.
					loads := !(path == "middlewares.*.type" && typesWithRequiredOptions[v.(string)])
					probes = append(probes, probe{path: path, value: v, schema: true, loader: loads})
					if loads && loading == "" {
						loading = v.(string)
					}
				}
				probes = append(probes,
					probe{path: path, value: "not-a-member", schema: false, loader: false},
					probe{path: path, value: "${SCHEMA_PROBE}", env: map[string]string{"SCHEMA_PROBE": loading}, schema: true, loader: true})
			}
		}
		step := 1.0
		if n["type"] == "number" {
			step = 0.5
		}
		val := func(f float64) any {
			if n["type"] == "integer" {
				return int64(f)
			}
			return f
		}
		if m, ok := n["minimum"].(float64); ok {
			probes = append(probes,
				probe{path: path, value: val(m), schema: true, loader: true},
				probe{path: path, value: val(m - step), schema: false, loader: false})
		}
		if m, ok := n["maximum"].(float64); ok {
			probes = append(probes,
				probe{path: path, value: val(m), schema: true, loader: true},
				probe{path: path, value: val(m + step), schema: false, loader: false})
		}
		if _, ok := n["minItems"]; ok {
			probes = append(probes, probe{path: path, value: []any{}, schema: false, loader: false})
		}
		for _, p := range probes {
			probed++
			check(t, p)
		}
	}
	require.GreaterOrEqual(t, probed, 40)
}

// Durations, addresses and URLs are matched by patterns, which the loader does not use:
// these cases pin where the two agree, and where the schema is knowingly looser.
func TestSchemaPatternsAgreeWithLoader(t *testing.T) {
	nodes := leaves(t)
	var durations []string
	for _, path := range sorted(nodes) {
		if anyOf, ok := nodes[path]["anyOf"].([]any); ok {
			if _, ok := anyOf[0].(map[string]any)["allOf"]; ok {
				durations = append(durations, path)
			}
		}
	}
	require.Len(t, durations, 27, "durations in the schema")
	// The loader also bounds the workers' poll interval and wants the observation TTL above
	// it (the other key keeps its default here), which a pattern cannot say: for these two
	// keys the schema is knowingly looser.
	loaderAccepts := map[string]func(time.Duration) bool{
		"services.*.workers.observe_interval": func(d time.Duration) bool {
			return d >= config.MinObserveInterval && d <= config.MaxObserveInterval && d < config.DefaultObservationTTL
		},
		"services.*.workers.observation_ttl": func(d time.Duration) bool { return d > config.DefaultObserveInterval },
		// Health checks bound their durations and relate them (the other key at its default).
		"services.*.load_balancer.health_check.interval": func(d time.Duration) bool {
			return d >= config.MinHealthInterval && d <= config.MaxHealthInterval
		},
		"services.*.load_balancer.health_check.timeout":        func(d time.Duration) bool { return d > 0 && d < health.DefaultInterval },
		"services.*.load_balancer.passive_health.ejection":     func(d time.Duration) bool { return d >= 100*time.Millisecond && d <= health.DefaultMaxEjection },
		"services.*.load_balancer.passive_health.error_window": func(d time.Duration) bool { return d >= time.Second && d <= time.Hour },
		"providers.file.debounce":                              func(d time.Duration) bool { return d >= config.MinDebounce && d <= config.MaxDebounce },
		"services.*.load_balancer.passive_health.max_ejection": func(d time.Duration) bool {
			return d >= health.DefaultEjection && d <= 24*time.Hour
		},
	}
	env := map[string]string{"SCHEMA_PROBE": "5s"}
	for _, path := range durations {
		for _, p := range []probe{
			{value: "500ms", schema: true, loader: true},
			{value: "1h30m", schema: true, loader: true},
			{value: "1.5s", schema: true, loader: true},
			{value: ".5s", schema: true, loader: true},
			{value: "+5s", schema: true, loader: true},
			{value: "2µs", schema: true, loader: true},
			{value: "${SCHEMA_PROBE}", env: env, schema: true, loader: true},
			{value: "10", schema: false, loader: false},
			{value: "0s", schema: false, loader: false},
			{value: "0.0s", schema: false, loader: false},
			{value: "-5s", schema: false, loader: false},
			{value: "5 s", schema: false, loader: false},
			{value: "5sec", schema: false, loader: false},
			{value: int64(5), schema: false, loader: false},
		} {
			p.path = path
			if accepts, ok := loaderAccepts[path]; ok && p.loader {
				v := p.value.(string)
				if p.env != nil {
					v = p.env["SCHEMA_PROBE"]
				}
				d, err := time.ParseDuration(v)
				require.NoError(t, err)
				p.loader = accepts(d)
			}
			check(t, p)
		}
	}

	addr := map[string]string{"SCHEMA_PROBE": "127.0.0.1:8082"}
	for _, p := range []probe{
		{path: "entrypoints.*.address", value: "127.0.0.1:8081", schema: true, loader: true},
		{path: "entrypoints.*.address", value: ":8081", schema: true, loader: true},
		{path: "entrypoints.*.address", value: "[::1]:8081", schema: true, loader: true},
		{path: "entrypoints.*.address", value: "gateway.internal:8081", schema: true, loader: true},
		{path: "entrypoints.*.address", value: "0.0.0.0:0", schema: true, loader: true},
		{path: "entrypoints.*.address", value: "${SCHEMA_PROBE}", env: addr, schema: true, loader: true},
		{path: "entrypoints.*.address", value: "${SCHEMA_PROBE}:8081", env: map[string]string{"SCHEMA_PROBE": "127.0.0.1"}, schema: true, loader: true},
		{path: "entrypoints.*.address", value: "8081", schema: false, loader: false},
		{path: "entrypoints.*.address", value: "127.0.0.1", schema: false, loader: false},
		{path: "entrypoints.*.address", value: "127.0.0.1:http", schema: false, loader: false},
		{path: "entrypoints.*.address", value: "::1:8081", schema: false, loader: false},
		{path: "entrypoints.*.address", value: "127.0.0.1:99999", schema: true, loader: false}, // looser
		{path: "admin.address", value: "", schema: true, loader: true},
		{path: "admin.address", value: "127.0.0.1:9091", schema: true, loader: true},
		{path: "admin.address", value: "9091", schema: false, loader: false},

		{path: "services.*.load_balancer.servers[].url", value: "http://127.0.0.1:8000", schema: true, loader: true},
		{path: "services.*.load_balancer.servers[].url", value: "https://llm.internal", schema: true, loader: true},
		{path: "services.*.load_balancer.servers[].url", value: "http://[::1]:8000/", schema: true, loader: true},
		{path: "services.*.load_balancer.servers[].url", value: "HTTP://llm.internal", schema: true, loader: true},
		{path: "services.*.load_balancer.servers[].url", value: "http://${SCHEMA_PROBE}:8000", env: map[string]string{"SCHEMA_PROBE": "llm"}, schema: true, loader: true},
		{path: "services.*.load_balancer.servers[].url", value: "ftp://llm.internal", schema: false, loader: false},
		{path: "services.*.load_balancer.servers[].url", value: "http://llm.internal/v1", schema: false, loader: false},
		{path: "services.*.load_balancer.servers[].url", value: "http://user:pw@llm.internal", schema: false, loader: false},
		{path: "services.*.load_balancer.servers[].url", value: "http://llm.internal?x=1", schema: false, loader: false},
		{path: "services.*.load_balancer.servers[].url", value: "llm.internal:8000", schema: false, loader: false},
		{path: "services.*.load_balancer.servers[].url", value: "http://llm.internal:99999", schema: true, loader: false}, // looser

		{path: "admin.token_env", value: "", schema: true, loader: true},
		{path: "admin.token_env", value: "SCHEMA_TOKEN", env: map[string]string{"SCHEMA_TOKEN": "t"}, schema: true, loader: true},
		{path: "admin.token_env", value: "SCHEMA_TOKEN_UNSET", schema: true, loader: false}, // the environment is not the schema's
		{path: "admin.token_env", value: "1TOKEN", schema: false, loader: false},
		{path: "admin.token_env", value: "$TOKEN", schema: false, loader: false},
	} {
		check(t, p)
	}
}

// Keys, names and TOML types.
func TestSchemaShapeAgreesWithLoader(t *testing.T) {
	for _, p := range []probe{
		{path: "entrypoints.*.adress", value: "127.0.0.1:8081", schema: false, loader: false},
		{path: "providers", value: map[string]any{}, schema: true, loader: true},
		{path: "models.*.scheduling.phase", value: "sideways", schema: true, loader: false},
		{path: "services.*.scaling", value: map[string]any{"min_replicas": int64(0)}, schema: false, loader: false},
		{path: "services.*.load_balancer.health_check", value: map[string]any{"path": "/"}, schema: true, loader: true},
		{path: "middlewares.*.header", value: "${SCHEMA_PROBE}", env: map[string]string{"SCHEMA_PROBE": "X-Key"}, schema: true, loader: true},
		{path: "middlewares.*.rate", value: int64(60), schema: true, loader: false}, // looser: options are checked by type, not by the schema
		{path: "entrypoints.*.max_connections", value: 1.5, schema: false, loader: false},
		{path: "entrypoints.*.max_connections", value: "10", schema: false, loader: false},
		{path: "entrypoints.*.multicore", value: "true", schema: false, loader: false},
		{path: "log.access_log_sample", value: int64(1), schema: true, loader: true},
		{path: "log.access_log_sample", value: "1", schema: false, loader: false},
		{path: "routers.*.entrypoints", value: []any{"web", "tls"}, schema: true, loader: true},
		{path: "routers.*.entrypoints", value: "web", schema: false, loader: false},
		{path: "services.*.load_balancer.servers", value: []any{"http://127.0.0.1:8000"}, schema: false, loader: false},
		{path: "admin.allowed_hosts", value: []any{"sluice.internal", "${SCHEMA_PROBE}"}, env: map[string]string{"SCHEMA_PROBE": "10.0.0.5"}, schema: true, loader: true},
		{path: "entrypoints.a_b-c1", value: map[string]any{"address": "127.0.0.1:8081"}, schema: true, loader: true},
		{path: "entrypoints.-bad", value: map[string]any{"address": "127.0.0.1:8081"}, schema: false, loader: false},
		{path: "entrypoints.*.tls", value: map[string]any{"cert_file": "c.pem"}, schema: true, loader: false}, // looser: key_file, or certificates instead, is more than a schema can say
		{path: "entrypoints.*.tls", value: map[string]any{"certificates": []any{map[string]any{"cert_file": "c.pem", "key_file": "k.pem"}}}, schema: true, loader: true},
		{path: "entrypoints.*.tls", value: map[string]any{"cert_file": "c.pem", "key_file": "k.pem", "min_version": "1.3"}, schema: true, loader: true},
		{path: "entrypoints.*.tls", value: map[string]any{"cert_file": "c.pem", "key_file": "k.pem", "min_version": "1.1"}, schema: false, loader: false},
	} {
		check(t, p)
	}
}
