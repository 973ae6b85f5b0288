package schema

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
)

// configDoc is the configuration reference: every key in a table of key, type, default and
// meaning.
const configDoc = root + "/docs/config.md"

// docTables are the key tables of docs/config.md in the order they appear, each as the schema
// path of the table whose keys it lists ("mw:TYPE": the options of a middleware type).
var docTables = []string{
	"entrypoints.*", "entrypoints.*.tls", "routers.*",
	"services.*.load_balancer", "services.*.load_balancer.tls", "services.*.load_balancer.servers[]",
	"services.*.load_balancer.health_check", "services.*.load_balancer.passive_health",
	"services.*.workers", "services.*.mirror", "services.*.revisions[]", "services.*.rollout",
	"services.*.scaling", "services.*.scaling.exec", "services.*.scaling.kube",
	"middlewares.*", "mw:api-key", "mw:jwt", "mw:rate-limit", "mw:circuit-breaker", "mw:headers",
	"mw:strip-prefix", "mw:cors", "mw:ip-allow", "mw:compress", "mw:retry", "mw:body-limit",
	"providers.file", "models.*", "consumers.*", "admin", "log",
}

// docSameAs are keys the reference documents by naming another key of the same shape.
var docSameAs = map[string]string{"services.*.revisions[].servers[]": "services.*.load_balancer.servers[]"}

// docRow is one row of a key table.
type docRow struct {
	line                   int
	typ, def, meaning, all string
}

// cells splits a table row into its cells; `\|` is a pipe inside a cell.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(strings.TrimSuffix(row, "|"), "|")
	var out []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteByte('|')
			i++
		case row[i] == '|':
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	return append(out, strings.TrimSpace(cur.String()))
}

// docRows reads the key tables of docs/config.md, by schema path ("mw:TYPE.key" for a
// middleware option).
func docRows(t *testing.T) map[string]docRow {
	data, err := os.ReadFile(configDoc)
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	rows := map[string]docRow{}
	n := 0
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "| key ") {
			continue
		}
		require.Less(t, n, len(docTables), "docs/config.md:%d: a key table that docTables does not name", i+1)
		table := docTables[n]
		n++
		for i += 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
			c := cells(lines[i])
			require.Len(t, c, 4, "docs/config.md:%d: a row of key, type, default and meaning", i+1)
			if strings.HasPrefix(c[0], "*") { // *other keys*: the options sections below
				continue
			}
			key := strings.ReplaceAll(strings.Trim(c[0], "`"), "<id>", "*")
			path := table + "." + key
			require.NotContains(t, rows, path, "docs/config.md:%d: %s listed twice", i+1, path)
			rows[path] = docRow{line: i + 1, typ: c[1], def: c[2], meaning: c[3], all: strings.Join(c[1:], " ")}
		}
		i--
	}
	require.Len(t, docTables, n, "docs/config.md has %d key tables, docTables names %d", n, len(docTables))
	return rows
}

// isDuration reports a schema node of a duration.
func isDuration(n map[string]any) bool {
	anyOf, _ := n["anyOf"].([]any)
	if len(anyOf) == 0 {
		return false
	}
	_, ok := anyOf[0].(map[string]any)["allOf"]
	return ok
}

// docType is how the reference names the TOML type of a schema node.
func docType(n map[string]any) string {
	if isDuration(n) {
		return "duration"
	}
	switch n["type"] {
	case "object":
		return "table"
	case "array":
		return "array"
	}
	return n["type"].(string)
}

// firstLiteral is the first `code` span of s.
var firstLiteral = regexp.MustCompile("`([^`]*)`")

// sameForm turns a TOML or JSON value into one that compares equal across the two: numbers
// as float64, durations as time.Duration.
func sameForm(v any, duration bool) any {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case string:
		if d, err := time.ParseDuration(x); err == nil && duration {
			return d
		}
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = sameForm(e, duration)
		}
		return out
	}
	return v
}

// docMentions reports whether text names the number f (as written in TOML, "_" apart).
func docMentions(text string, f float64) bool {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	text = strings.NewReplacer("_", "", "..", " .. ").Replace(text)
	return regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(s) + `($|[^0-9])`).MatchString(text)
}

// Every key the configuration takes is in a table of docs/config.md with its TOML type, its
// default (when the loader gives it one), the members of its enumeration and its bounds;
// and every key the tables list is one the configuration takes.
func TestConfigDocListsEveryKey(t *testing.T) {
	nodes := leaves(t)
	rows := docRows(t)
	tables := map[string]bool{}
	for _, tb := range docTables {
		tables[tb] = true
	}
	documented := func(path string) bool {
		if _, ok := rows[path]; ok || tables[path] || tables[path+"[]"] {
			return true
		}
		for p := range rows {
			if strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[].") {
				return true // a table whose keys are listed with its name: models.*.scheduling
			}
		}
		for from, to := range docSameAs {
			if rest, ok := strings.CutPrefix(path, from); ok {
				if _, ok := rows[to+rest]; ok {
					return true
				}
			}
		}
		// The keys of an array of tables, named in its row's type: array of `{ cert_file, key_file }`.
		if i := strings.LastIndex(path, "[]."); i > 0 {
			if r, ok := rows[path[:i]]; ok && regexp.MustCompile(`\b`+regexp.QuoteMeta(path[i+3:])+`\b`).MatchString(r.typ) {
				return true
			}
		}
		return false
	}
	for _, path := range sorted(nodes) {
		assert.True(t, documented(path), "docs/config.md lists no key %s", path)
	}

	for _, path := range sorted(rows) {
		r := rows[path]
		at := fmt.Sprintf("docs/config.md:%d: %s", r.line, path)
		if typ, key, ok := strings.Cut(strings.TrimPrefix(path, "mw:"), "."); ok && strings.HasPrefix(path, "mw:") {
			assert.Contains(t, config.MiddlewareOptionKeys(typ), key, "%s: no option of a %s middleware", at, typ)
			continue
		}
		n, ok := nodes[path]
		if !assert.True(t, ok, "%s: no such key in the configuration", at) {
			continue
		}
		assert.True(t, strings.HasPrefix(r.typ, docType(n)), "%s: type %q, but the key is a %s", at, r.typ, docType(n))
		if def, ok := n["default"]; ok {
			m := firstLiteral.FindStringSubmatch(r.def)
			if assert.NotNil(t, m, "%s: default %q, but the loader's default is %v", at, r.def, def) {
				var lit struct{ V any }
				if assert.NoError(t, toml.Unmarshal([]byte("V = "+m[1]), &lit), "%s: default %q is no TOML value", at, r.def) {
					assert.Equal(t, sameForm(def, isDuration(n)), sameForm(lit.V, isDuration(n)), "%s: default %q, but the loader's default is %v", at, r.def, def)
				}
			}
		}
		if anyOf, ok := n["anyOf"].([]any); ok {
			if enum, ok := anyOf[0].(map[string]any)["enum"].([]any); ok {
				for _, v := range enum {
					assert.Contains(t, r.all, strconv.Quote(v.(string)), "%s: does not name the value %q", at, v)
				}
			}
		}
		for _, bound := range []string{"minimum", "maximum"} {
			if b, ok := n[bound].(float64); ok {
				assert.True(t, docMentions(r.def+" "+r.meaning, b), "%s: does not say its %s, %v", at, bound, b)
			}
		}
	}
	for _, typ := range nodes["middlewares.*.type"]["anyOf"].([]any)[0].(map[string]any)["enum"].([]any) {
		assert.True(t, tables["mw:"+typ.(string)], "docTables names no section of middleware type %s", typ)
		for _, key := range config.MiddlewareOptionKeys(typ.(string)) {
			assert.Contains(t, rows, "mw:"+typ.(string)+"."+key, "docs/config.md lists no option %s of a %s middleware", key, typ)
		}
	}
}

// docRange matches a range a row's meaning states for its value: "1–100", "0..1024",
// "`0.01` to `86400`", "`\"100ms\"` to `\"1h\"`", ended by punctuation, so that
// "64–256 KiB" (advice, not a bound) is no range.
var docRange = regexp.MustCompile("(?:^|[\\s(])`?\"?(-?[0-9][0-9_a-zµ.]*?)\"?`?\\s*(?:–|\\.\\.|\\sto\\s)\\s*`?\"?([0-9][0-9_a-zµ.]*?)\"?`?(?:[,;:)]|\\.(?:[^0-9]|$)|$|\\s\\(|\\sand\\b)")

// docProbeMiddlewares are middlewares that load, one of each type, for probing their options.
var docProbeMiddlewares = map[string]map[string]any{
	config.MiddlewareAPIKey:         {},
	config.MiddlewareJWT:            {"value": strings.Repeat("s", config.MinJWTSecretBytes)},
	config.MiddlewareRateLimit:      {"rate": int64(60)},
	config.MiddlewareCircuitBreaker: {},
	config.MiddlewareHeaders:        {"request_set": map[string]any{"X-Probe": "1"}},
	config.MiddlewareStripPrefix:    {"prefixes": []any{"/probe"}},
	config.MiddlewareCORS:           {"allow_origins": []any{"https://probe.example"}},
	config.MiddlewareIPAllow:        {"source_range": []any{"10.0.0.0/8"}},
	config.MiddlewareCompress:       {},
	config.MiddlewareRetry:          {},
	config.MiddlewareBodyLimit:      {"max_bytes": int64(1)},
}

// docProbeAlongside are the keys a range of the reference holds with: another key set so
// that only the probed one is at its bound (the relation is in the probed key's row).
var docProbeAlongside = map[string]func(v any) map[string]any{
	// More than observe_interval.
	"services.*.workers.observe_interval": func(any) map[string]any {
		return map[string]any{"services.*.workers.observation_ttl": "2h"}
	},
	// max_ejection: from ejection up to 24h.
	"services.*.load_balancer.passive_health.ejection": func(any) map[string]any {
		return map[string]any{"services.*.load_balancer.passive_health.max_ejection": "24h"}
	},
	// The shares of a service add up to 100.
	"services.*.revisions[].traffic_percent": func(v any) map[string]any {
		return map[string]any{"services.revised.revisions.1.traffic_percent": 100 - v.(float64)}
	},
	// At most max_replicas.
	"services.*.scaling.min_replicas": func(any) map[string]any {
		return map[string]any{"services.*.scaling.max_replicas": int64(config.MaxScalingReplicas)}
	},
	// Needs max_concurrent_requests.
	"models.*.scheduling.max_queued_requests": func(any) map[string]any {
		return map[string]any{"models.*.scheduling.max_concurrent_requests": int64(1)}
	},
	// max_backoff: at least initial_backoff.
	"mw:retry.initial_backoff": func(any) map[string]any { return map[string]any{"mw:retry.max_backoff": "1m"} },
}

// docProbeEnv is the workers' key of the phase "decode" model the probes load.
const docProbeEnv = "SLUICE_DOCS_PROBE_KEY"

// docProbeSet sets the key at path (a schema path, or "mw:TYPE.key", or a concrete path
// with no "*") in tree to v, with the tables a key there needs to load.
func docProbeSet(tree map[string]any, path string, v any) {
	if rest, ok := strings.CutPrefix(path, "mw:"); ok {
		typ, key, _ := strings.Cut(rest, ".")
		mws := tree["middlewares"].(map[string]any)
		m, _ := mws["probe"].(map[string]any)
		if m == nil {
			m = map[string]any{"type": typ}
			for k, o := range docProbeMiddlewares[typ] {
				m[k] = o
			}
			mws["probe"] = m
		}
		m[key] = v
		return
	}
	if strings.HasPrefix(path, "models.*.scheduling.distributed_serving.") {
		set(tree, concrete("models.*.scheduling.phase"), config.PhaseDecode)
		set(tree, concrete("models.*.scheduling.distributed_serving.api_key_env"), docProbeEnv)
	}
	if rest, ok := strings.CutPrefix(path, "models.*.targets.*."); ok {
		set(tree, append([]string{"models", names["models"], "targets", names["models.*.targets"]}, strings.Split(rest, ".")...), v)
		return
	}
	if !strings.Contains(path, "*") && !strings.Contains(path, "[]") {
		set(tree, strings.Split(path, "."), v)
		return
	}
	set(tree, concrete(path), v)
}

// docProbeValue is the bound b written in a row, moved by step units of its last digit's
// place (durations: of a millisecond), as a value of the key's type.
func docProbeValue(t *testing.T, typ, b string, step int) (any, bool) {
	b = strings.ReplaceAll(b, "_", "")
	switch typ {
	case "duration":
		d, err := time.ParseDuration(b)
		require.NoError(t, err, "bound %q", b)
		d += time.Duration(step) * time.Millisecond
		if d < 0 {
			return nil, false // below 0s: a negative duration says nothing of the bound
		}
		return d.String(), true
	case "integer":
		n, err := strconv.ParseInt(b, 10, 64)
		require.NoError(t, err, "bound %q", b)
		return n + int64(step), true
	default:
		f, err := strconv.ParseFloat(b, 64)
		require.NoError(t, err, "bound %q", b)
		decimals := 0
		if _, frac, ok := strings.Cut(b, "."); ok {
			decimals = len(frac)
		}
		return f + float64(step)*math.Pow(10, -float64(decimals+1)), true
	}
}

// The ranges docs/config.md states for the values of keys and middleware options are what the
// loader takes: each bound loads, and a value just past it is refused.
func TestConfigDocRangesAgreeWithLoader(t *testing.T) {
	t.Setenv(docProbeEnv, "probe-key")
	rows := docRows(t)
	probed := 0
	for _, path := range sorted(rows) {
		r := rows[path]
		typ := strings.Fields(r.typ + " -")[0]
		if typ != "integer" && typ != "number" && typ != "duration" {
			continue
		}
		for _, m := range docRange.FindAllStringSubmatch(r.meaning, -1) {
			for i, c := range []struct {
				bound string
				step  int
				loads bool
			}{{m[1], 0, true}, {m[1], -1, false}, {m[2], 0, true}, {m[2], 1, false}} {
				v, ok := docProbeValue(t, typ, c.bound, c.step)
				if !ok {
					continue
				}
				tree := minimal()
				docProbeSet(tree, path, v)
				if along, ok := docProbeAlongside[path]; ok {
					for k, w := range along(v) {
						docProbeSet(tree, k, w)
					}
				}
				_, err := load(tree)
				assert.Equal(t, c.loads, err == nil, "docs/config.md:%d: %s %s..%s: %s = %v (probe %d) loads: %v", r.line, path, m[1], m[2], path, v, i, err)
				probed++
			}
		}
	}
	require.GreaterOrEqual(t, probed, 120, "ranges probed")
}
