package config

import (
	"errors"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/require"
)

// rangeProbeBase is a configuration with every table whose integer keys the loader bounds, so
// that setting one key runs its check.
func rangeProbeBase() map[string]any {
	server := func(port string) []any { return []any{map[string]any{"url": "http://127.0.0.1:" + port}} }
	return map[string]any{
		"entrypoints": map[string]any{"web": map[string]any{"address": "127.0.0.1:8080"}},
		"routers":     map[string]any{"r": map[string]any{"rule": "PathPrefix(`/`)", "service": "s"}},
		"services": map[string]any{
			"s": map[string]any{
				"load_balancer": map[string]any{
					"servers":        server("8000"),
					"health_check":   map[string]any{"path": "/health"},
					"passive_health": map[string]any{},
				},
				"mirror": map[string]any{"service": "shadow"},
			},
			"shadow": map[string]any{"load_balancer": map[string]any{"servers": server("8001")}},
			"revised": map[string]any{
				"revisions": []any{
					map[string]any{"name": "v1", "traffic_percent": int64(100), "servers": server("8002")},
					map[string]any{"name": "v2", "servers": server("8003")},
				},
				"rollout": map[string]any{"from": "v1", "to": "v2"},
			},
			"scaled": map[string]any{"scaling": map[string]any{
				"executor": "exec",
				"exec":     map[string]any{"command": []any{"llmsim", "--listen", "127.0.0.1:{port}"}},
			}},
		},
		"models": map[string]any{"m": map[string]any{
			"targets":    map[string]any{"t": map[string]any{"service": "s"}},
			"scheduling": map[string]any{"phase": "decode", "distributed_serving": map[string]any{"api_key_env": "SLUICE_TEST_RANGE_KEY"}},
		}},
		"consumers": map[string]any{"c": map[string]any{"api_key_sha256": []any{strings.Repeat("0", 64)}}},
	}
}

// probePath turns a schema key into the key path of the same key in rangeProbeBase.
func probePath(key string) []string {
	var out []string
	segs := strings.Split(key, ".")
	for i, s := range segs {
		elem := strings.HasSuffix(s, "[]")
		s = strings.TrimSuffix(s, "[]")
		if s == "*" {
			next := ""
			if i+1 < len(segs) {
				next = strings.TrimSuffix(segs[i+1], "[]")
			}
			switch {
			case segs[i-1] == "services" && (next == "revisions" || next == "rollout"):
				s = "revised"
			case segs[i-1] == "services" && next == "scaling":
				s = "scaled"
			default:
				s = map[string]string{"entrypoints": "web", "routers": "r", "services": "s", "models": "m", "targets": "t", "consumers": "c"}[segs[i-1]]
			}
		}
		out = append(out, s)
		if elem {
			out = append(out, "0")
		}
	}
	return out
}

// setIn sets the value at path in tree, making the tables on the way.
func setIn(tree map[string]any, path []string, v any) {
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

// refused reports whether loading rangeProbeBase with the integer key set to n refuses the
// value: an error "<key> <n>: want ...", as the range checks write them (a problem of the
// key with another, such as max_queued_requests without max_concurrent_requests, is not).
func refused(t *testing.T, key string, n int64) bool {
	t.Helper()
	tree := rangeProbeBase()
	path := probePath(key)
	setIn(tree, path, n)
	data, err := toml.Marshal(tree)
	require.NoError(t, err)
	_, err = LoadBytes("probe.toml", data)
	var list ErrorList
	if err != nil {
		require.True(t, errors.As(err, &list), "%v", err)
	}
	for _, e := range list {
		if strings.HasPrefix(e.Msg, dotted(path)+" "+strconv.FormatInt(n, 10)+": ") {
			return true
		}
	}
	return false
}

// intKeys returns the schema key of every integer key of t.
func intKeys(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		if t != durationType {
			out = append(out, prefix)
		}
	case reflect.Map:
		out = append(out, intKeys(t.Elem(), prefix+".*")...)
	case reflect.Slice:
		out = append(out, intKeys(t.Elem(), prefix+"[]")...)
	case reflect.Struct:
		fs, _, names := fields(t)
		for _, k := range names {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out = append(out, intKeys(fs[k].typ, p)...)
		}
	}
	return out
}

// intRanges says what the loader accepts: each range is probed at both ends and just past
// them, and every integer key it does not list takes the extremes of its type.
func TestIntRangesAgreeWithLoader(t *testing.T) {
	t.Setenv("SLUICE_TEST_RANGE_KEY", "k")
	keys := intKeys(reflect.TypeOf(Config{}), "")
	require.GreaterOrEqual(t, len(keys), len(intRanges))
	for _, key := range keys {
		r, bounded := intRanges[key]
		require.Equal(t, key, schemaKey(probePath(key)))
		if !bounded {
			for _, n := range []int64{math.MinInt64, -1, 0, math.MaxInt64} {
				require.False(t, refused(t, key, n), "%s = %d is refused: add its range to intRanges", key, n)
			}
			continue
		}
		probes := map[int64]bool{r.min: true, r.max: true}
		if r.min > math.MinInt64 {
			probes[r.min-1] = false
		}
		if r.max < math.MaxInt64 {
			probes[r.max+1] = false
		}
		if r.orZero {
			probes[0], probes[1] = true, false
		}
		ns := make([]int64, 0, len(probes))
		for n := range probes {
			ns = append(ns, n)
		}
		sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
		for _, n := range ns {
			require.Equal(t, !probes[n], refused(t, key, n), "%s = %d (intRanges says %s)", key, n, r.want())
			require.Equal(t, probes[n], r.contains(n), "%s = %d", key, n)
		}
	}
	for key := range intRanges {
		require.Contains(t, keys, key, "intRanges lists a key that is not an integer key")
	}
}
