package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/sluice-gw/sluice/core/config"
)

// Node is one JSON Schema object, its keywords in the order they are written.
type Node struct {
	Schema               string           `json:"$schema,omitempty"`
	Title                string           `json:"title,omitempty"`
	Description          string           `json:"description,omitempty"`
	Type                 string           `json:"type,omitempty"`
	Default              any              `json:"default,omitempty"`
	Enum                 []string         `json:"enum,omitempty"`
	Pattern              string           `json:"pattern,omitempty"`
	Minimum              json.Number      `json:"minimum,omitempty"`
	Maximum              json.Number      `json:"maximum,omitempty"`
	MinItems             *int             `json:"minItems,omitempty"`
	Items                *Node            `json:"items,omitempty"`
	Required             []string         `json:"required,omitempty"`
	Properties           map[string]*Node `json:"properties,omitempty"`
	PatternProperties    map[string]*Node `json:"patternProperties,omitempty"`
	AdditionalProperties *bool            `json:"additionalProperties,omitempty"`
	AllOf                []*Node          `json:"allOf,omitempty"`
	AnyOf                []*Node          `json:"anyOf,omitempty"`
}

// Patterns of string values. They are written in the subset of regular expression syntax
// that Go, Rust and ECMAScript read alike.
const (
	// EnvRef matches a string that holds a ${NAME} reference: its value is known only when
	// the configuration is loaded, so the schema accepts any such string.
	EnvRef = `\$\{[A-Za-z_][A-Za-z0-9_]*\}`
	// NamePattern is the name of an entrypoint, router, service or middleware.
	NamePattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`
	// DurationPattern is a Go duration without a sign or with "+" ("500ms", "1h30m").
	DurationPattern = `^[+]?(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`
	// nonZero: some digit of a duration is not 0, so that it is positive.
	nonZero = `[1-9]`
	// AddressPattern is host:port as net.Listen takes it (the host may be empty).
	AddressPattern = `^(\[[0-9A-Fa-f:.]+(%[^\]]+)?\]|[^\[\]:]*):[0-9]{1,5}$`
	// URLPattern is an http or https URL with a host and an optional port, and no user
	// info, path, query or fragment.
	URLPattern = `^[Hh][Tt][Tt][Pp][Ss]?://[^/?#@]+/?$`
)

// constraint is what the schema says about a key beyond its TOML type. Numbers are JSON
// number literals.
type constraint struct {
	enum     []string
	pattern  string
	min, max string
	minItems int // 0: none
}

func itoa(n int) string { return strconv.Itoa(n) }

// constraints are keyed by schema path: "*" for a table name, "[]" after an array's key
// for its elements. The loader checks the same in core/config/validate.go; the tests check
// that the two agree.
var constraints = map[string]constraint{
	"entrypoints.*.address":                     {pattern: AddressPattern},
	"entrypoints.*.engine":                      {enum: []string{config.EngineGnet, config.EngineFasthttp}},
	"entrypoints.*.upstream_io":                 {enum: []string{config.UpstreamIOWorker, config.UpstreamIOLoop}},
	"entrypoints.*.upstream_connect":            {enum: []string{config.UpstreamConnectWorker, config.UpstreamConnectLoop}},
	"entrypoints.*.max_header_bytes":            {min: itoa(config.MinMaxHeaderBytes), max: itoa(config.MaxMaxHeaderBytes)},
	"entrypoints.*.max_body_bytes":              {min: "1"},
	"entrypoints.*.max_connections":             {min: "0"},
	"entrypoints.*.event_loops":                 {min: "0", max: "1024"},
	"entrypoints.*.send_buffer_bytes":           {min: "0", max: itoa(config.MaxSendBufferBytes)},
	"entrypoints.*.tls.min_version":             {enum: []string{config.TLSVersion12, config.TLSVersion13}},
	"routers.*.entrypoints":                     {minItems: 1},
	"routers.*.priority":                        {min: "0"},
	"services.*.load_balancer.strategy":         {enum: []string{config.StrategyRoundRobin, config.StrategyWeighted, config.StrategyLeastConnections, config.StrategyRandom}},
	"services.*.load_balancer.servers":          {minItems: 1},
	"services.*.load_balancer.servers[].url":    {pattern: URLPattern},
	"services.*.load_balancer.servers[].weight": {min: "1", max: itoa(config.MaxWeight)},
	"services.*.load_balancer.max_idle_conns":   {min: "0"},
	"middlewares.*.type":                        {enum: []string{config.MiddlewareJWT, config.MiddlewareRateLimit, config.MiddlewareCircuitBreaker, config.MiddlewareAPIKey, config.MiddlewareHeaders, config.MiddlewareStripPrefix, config.MiddlewareCORS, config.MiddlewareIPAllow, config.MiddlewareBodyLimit, config.MiddlewareCompress, config.MiddlewareRetry}},
	"admin.address":                             {pattern: `^$|` + AddressPattern},
	"admin.token_env":                           {pattern: `^([A-Za-z_][A-Za-z0-9_]*)?$`},
	"log.level":                                 {enum: []string{"debug", "info", "warn", "error"}},
	"log.format":                                {enum: []string{"text", "json"}},
	"log.access_log_sample":                     {min: "0", max: "1"},
}

// descriptions replace doc comments written for Go readers rather than for the file's.
var descriptions = map[string]string{
	"routers.*.rule": "`rule` is the match expression: Host, HostRegexp, Path, PathPrefix, PathRegexp, Method, " +
		"Header, HeaderRegexp, Query and QueryRegexp combined with &&, ||, ! and parentheses, arguments in " +
		"backquotes, e.g. \"PathPrefix(`/v1`) && Method(`POST`)\"; required.",
}

// computedDefaults are keys whose default the loader computes from other keys, so that no
// one value is their default.
var computedDefaults = map[string]bool{
	"routers.*.entrypoints":             true, // every entrypoint
	"entrypoints.*.upstream_io":         true, // "loop" on engine gnet, "worker" on fasthttp
	"models.*.targets.*.upstream_model": true, // the model's alias
}

// eitherKeys are keys the minimal configuration cannot do without, but another key can
// stand in for: a TLS entrypoint needs cert_file and key_file unless certificates lists
// one. A schema cannot say "one of these", so they are not marked required.
var eitherKeys = map[string]bool{
	"entrypoints.*.tls.cert_file": true,
	"entrypoints.*.tls.key_file":  true,
}

// names stand for "*" in the minimal configuration, per collection.
var names = map[string]string{"entrypoints": "web", "routers": "r", "services": "s", "middlewares": "m", "models": "mdl", "models.*.targets": "t", "consumers": "c"}

// minimal is the smallest configuration that loads and has every table: the source of the
// defaults (what the loader fills in) and of the required keys (those without which it
// does not load). The entrypoint "tls" holds the TLS keys; a TLS entrypoint computes its
// engine, so the defaults are read from "web".
func minimal() map[string]any {
	return map[string]any{
		"entrypoints": map[string]any{
			"web": map[string]any{"address": "127.0.0.1:8080"},
			"tls": map[string]any{
				"address": "127.0.0.1:8443",
				"tls":     map[string]any{"cert_file": "cert.pem", "key_file": "key.pem"},
			},
		},
		"routers": map[string]any{
			"r": map[string]any{"rule": "PathPrefix(`/`)", "service": "s"},
		},
		"services": map[string]any{
			"s": map[string]any{"load_balancer": map[string]any{
				"servers": []any{map[string]any{"url": "http://127.0.0.1:8000"}},
			}, "mirror": map[string]any{"service": "shadow"}},
			"shadow": map[string]any{"load_balancer": map[string]any{
				"servers": []any{map[string]any{"url": "http://127.0.0.1:8001"}},
			}},
			"revised": map[string]any{
				"revisions": []any{
					map[string]any{"name": "v1", "traffic_percent": int64(100), "servers": []any{map[string]any{"url": "http://127.0.0.1:8002"}}},
					map[string]any{"name": "v2", "servers": []any{map[string]any{"url": "http://127.0.0.1:8003"}}},
				},
				"rollout": map[string]any{"from": "v1", "to": "v2"},
			},
			"scaled": map[string]any{"scaling": map[string]any{
				"executor": "exec",
				"exec":     map[string]any{"command": []any{"llmsim", "--listen", "127.0.0.1:{port}"}},
				"kube":     map[string]any{"deployment": "llm", "service": "llm", "url": "http://llm.default.svc:8000"},
			}},
		},
		"middlewares": map[string]any{
			"m": map[string]any{"type": config.MiddlewareAPIKey}, // a type without required options
		},
		"models": map[string]any{
			"mdl": map[string]any{"targets": map[string]any{"t": map[string]any{"service": "s"}}},
		},
		"consumers": map[string]any{
			"c": map[string]any{"api_key_sha256": []any{strings.Repeat("0", 64)}},
		},
	}
}

// Generate returns the JSON Schema of the configuration, made from the sources of
// core/config under root (the module's directory) and the loader compiled in.
func Generate(root string) ([]byte, error) {
	docs, err := fieldDocs(filepath.Join(root, "core", "config"))
	if err != nil {
		return nil, err
	}
	base := minimal()
	cfg, err := load(base)
	if err != nil {
		return nil, fmt.Errorf("the minimal configuration no longer loads (update minimal in deploy/schema): %w", err)
	}
	req := map[string]bool{}
	if err := requiredKeys(base, base, "", nil, req); err != nil {
		return nil, err
	}
	for k := range eitherKeys {
		delete(req, k)
	}
	g := &generator{docs: docs, cfg: cfg, doc: cfg.Document(), required: req, used: map[string]bool{}, durations: map[string]bool{}}
	top, err := g.structNode(reflect.TypeOf(config.Config{}), "", nil)
	if err != nil {
		return nil, err
	}
	for p := range constraints {
		if !g.used[p] {
			return nil, fmt.Errorf("constraint for %s: no such key in core/config", p)
		}
	}
	for p := range descriptions {
		if !g.used["description "+p] {
			return nil, fmt.Errorf("description for %s: no such key in core/config", p)
		}
	}
	top.Schema = "http://json-schema.org/draft-07/schema#"
	top.Title = "sluice configuration"
	top.Description = "sluice's TOML configuration (docs/config.md). A directory of *.toml files is merged " +
		"in name order, so no key is required at the top of one file. Any string may hold ${NAME}, " +
		"replaced by the environment variable NAME when the configuration is loaded."
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(top); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type generator struct {
	docs      map[string]map[string]string // struct type -> field -> doc comment
	cfg       *config.Config               // the minimal configuration, loaded
	doc       map[string]any               // its Document: the defaults filled in
	required  map[string]bool              // schema paths
	used      map[string]bool              // constraints and descriptions applied
	durations map[string]bool              // schema paths of durations
}

var durationType = reflect.TypeOf(time.Duration(0))

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func ptr[T any](v T) *T { return &v }

func (g *generator) structNode(t reflect.Type, path string, concrete []string) (*Node, error) {
	n := &Node{Type: "object", Properties: map[string]*Node{}, AdditionalProperties: ptr(false)}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("toml")
		switch {
		case !f.IsExported() || tag == "-" || tag == "":
			continue
		case tag == ",remain":
			n.AdditionalProperties = ptr(true) // options of the middleware type, not checked here
			continue
		}
		kp := join(path, tag)
		kc := append(append([]string(nil), concrete...), tag)
		fn, err := g.valueNode(f.Type, kp, kc)
		if err != nil {
			return nil, err
		}
		desc, err := g.describe(t, f, tag, kp)
		if err != nil {
			return nil, err
		}
		fn.Description = desc
		if v, ok := g.defaultOf(kp, kc); ok {
			fn.Default = v
		}
		if alt, ok := requiredUnless[kp]; ok {
			// Required unless another key stands in for it (one of a comma-separated list):
			// one of them must be there.
			any := &Node{AnyOf: []*Node{{Required: []string{tag}}}}
			for _, a := range strings.Split(alt, ",") {
				any.AnyOf = append(any.AnyOf, &Node{Required: []string{a}})
			}
			n.AllOf = append(n.AllOf, any)
		} else if g.required[kp] && !optionalKeys[kp] {
			n.Required = append(n.Required, tag)
		}
		n.Properties[tag] = fn
	}
	sort.Strings(n.Required)
	return n, nil
}

// requiredUnless are keys the loader requires unless another key of the same table is set: a
// router names a service, or is a model router (models = true).
var requiredUnless = map[string]string{"routers.*.service": "models"}

func (g *generator) valueNode(t reflect.Type, path string, concrete []string) (*Node, error) {
	var n *Node
	switch {
	case t == durationType:
		g.durations[path] = true
		n = &Node{Type: "string", AnyOf: []*Node{
			{AllOf: []*Node{{Pattern: DurationPattern}, {Pattern: nonZero}}},
			{Pattern: EnvRef},
		}}
	case t.Kind() == reflect.String:
		n = &Node{Type: "string"}
	case t.Kind() == reflect.Bool:
		n = &Node{Type: "boolean"}
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		n = &Node{Type: "integer"}
	case t.Kind() == reflect.Float64:
		n = &Node{Type: "number"}
	case t.Kind() == reflect.Slice:
		var items *Node
		var err error
		ip, ic := path+"[]", append(append([]string(nil), concrete...), "0")
		if t.Elem().Kind() == reflect.Struct {
			items, err = g.structNode(t.Elem(), ip, ic)
		} else {
			items, err = g.valueNode(t.Elem(), ip, ic)
		}
		if err != nil {
			return nil, err
		}
		n = &Node{Type: "array", Items: items}
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		return g.structNode(t.Elem(), path, concrete)
	case t.Kind() == reflect.Struct:
		return g.structNode(t, path, concrete)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		elem := t.Elem()
		if elem.Kind() == reflect.Pointer {
			elem = elem.Elem()
		}
		name, ok := names[path]
		if !ok {
			return nil, fmt.Errorf("%s: a table of named entries that deploy/schema does not know (add it to names and minimal)", path)
		}
		entry, err := g.structNode(elem, join(path, "*"), append(append([]string(nil), concrete...), name))
		if err != nil {
			return nil, err
		}
		n = &Node{Type: "object", PatternProperties: map[string]*Node{NamePattern: entry}, AdditionalProperties: ptr(false)}
	default:
		return nil, fmt.Errorf("%s: Go type %s has no JSON Schema counterpart here", path, t)
	}
	if c, ok := constraints[path]; ok {
		g.used[path] = true
		if err := apply(n, c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return n, nil
}

// apply adds c to n. A string constraint accepts a ${NAME} reference as well.
func apply(n *Node, c constraint) error {
	switch n.Type {
	case "string":
		if n.AnyOf != nil || (c.enum == nil) == (c.pattern == "") || c.min != "" || c.max != "" || c.minItems != 0 {
			return fmt.Errorf("a string takes an enum or a pattern")
		}
		n.AnyOf = []*Node{{Enum: c.enum, Pattern: c.pattern}, {Pattern: EnvRef}}
	case "integer", "number":
		if c.enum != nil || c.pattern != "" || c.minItems != 0 || c.min == "" && c.max == "" {
			return fmt.Errorf("a number takes a minimum and/or a maximum")
		}
		n.Minimum, n.Maximum = json.Number(c.min), json.Number(c.max)
	case "array":
		if c.enum != nil || c.pattern != "" || c.min != "" || c.max != "" || c.minItems == 0 {
			return fmt.Errorf("an array takes minItems")
		}
		n.MinItems = ptr(c.minItems)
	default:
		return fmt.Errorf("no constraint applies to %s", n.Type)
	}
	return nil
}

// describe returns the field's doc comment as one paragraph, its Go name replaced by the
// TOML key.
func (g *generator) describe(t reflect.Type, f reflect.StructField, tag, path string) (string, error) {
	if d, ok := descriptions[path]; ok {
		g.used["description "+path] = true
		return d, nil
	}
	text := strings.Join(strings.Fields(g.docs[t.Name()][f.Name]), " ")
	if text == "" {
		return "", fmt.Errorf("%s: field %s.%s has no doc comment", path, t.Name(), f.Name)
	}
	// The Go names of this struct's fields, as the file's reader knows them: their keys.
	// All-capital names (TLS, URL) are words of the text too, and are left alone.
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		key := sf.Tag.Get("toml")
		if key == "" || key == "-" || key == ",remain" || strings.ToUpper(sf.Name) == sf.Name {
			continue
		}
		re := regexp.MustCompile(`\b` + sf.Name + `\b`)
		text = re.ReplaceAllLiteralString(text, "`"+key+"`")
	}
	if rest, ok := strings.CutPrefix(text, f.Name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, ",")) {
		text = "`" + tag + "`" + rest
	}
	return text, nil
}

// defaultOf returns the value the loader gives the key when it is not written.
func (g *generator) defaultOf(path string, concrete []string) (any, bool) {
	if computedDefaults[path] {
		return nil, false
	}
	if _, written := g.cfg.Lookup(concrete...); written {
		return nil, false
	}
	var v any = g.doc
	for _, k := range concrete {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	switch x := v.(type) {
	case nil, map[string]any:
		return nil, false // absent, or a table
	case string:
		if d, err := time.ParseDuration(x); err == nil && g.durations[path] {
			return shortDuration(d), true
		}
	}
	return v, true
}

// shortDuration is d as people write it: "1m" rather than time.Duration's "1m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// fieldDocs returns the doc comment of every struct field declared in the Go package in dir.
func fieldDocs(dir string) (map[string]map[string]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	docs := map[string]map[string]string{}
	fset := token.NewFileSet()
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(node ast.Node) bool {
			ts, ok := node.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			m := map[string]string{}
			for _, fld := range st.Fields.List {
				text := fld.Doc.Text()
				if text == "" {
					text = fld.Comment.Text()
				}
				for _, name := range fld.Names {
					m[name.Name] = text
				}
			}
			docs[ts.Name.Name] = m
			return true
		})
	}
	return docs, nil
}

// load loads a configuration given as a tree of TOML values.
func load(tree map[string]any) (*config.Config, error) {
	data, err := toml.Marshal(tree)
	if err != nil {
		return nil, err
	}
	return config.LoadBytes("minimal.toml", data)
}

// requiredKeys marks in req the schema path of every key of tree (below the table names)
// without which base does not load.
func requiredKeys(base map[string]any, tree any, path string, concrete []string, req map[string]bool) error {
	switch x := tree.(type) {
	case map[string]any:
		_, collection := names[path]
		for _, k := range sortedKeys(x) {
			kc := append(append([]string(nil), concrete...), k)
			kp := join(path, k)
			if collection {
				kp = join(path, "*")
			} else if path != "" {
				without := clone(base).(map[string]any)
				remove(without, kc)
				if _, err := load(without); err != nil {
					req[kp] = true
				}
			}
			if err := requiredKeys(base, x[k], kp, kc, req); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := requiredKeys(base, e, path+"[]", append(append([]string(nil), concrete...), strconv.Itoa(i)), req); err != nil {
				return err
			}
		}
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = clone(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = clone(e)
		}
		return out
	default:
		return v
	}
}

// remove deletes the key at path (array elements by index) from tree.
func remove(tree map[string]any, path []string) {
	var v any = tree
	for i, k := range path {
		last := i == len(path)-1
		switch x := v.(type) {
		case map[string]any:
			if last {
				delete(x, k)
				return
			}
			v = x[k]
		case []any:
			j, err := strconv.Atoi(k)
			if err != nil || j >= len(x) || last {
				return
			}
			v = x[j]
		default:
			return
		}
	}
}
