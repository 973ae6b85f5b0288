package config

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/sluice-gw/sluice/configs"
)

// MaxFileBytes bounds one configuration file, in bytes.
const MaxFileBytes = 16 << 20

// collections are the top-level tables whose entries are named ([routers.<name>],
// [models.<alias>]: the Config fields that are maps); a directory's files may each add
// entries to them.
var collections = func() map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() && f.Type.Kind() == reflect.Map {
			out[f.Tag.Get("toml")] = true
		}
	}
	return out
}()

// Load reads the configuration at path: a TOML file, or a directory whose
// *.toml files (not starting with ".") are merged in name order, then the *.toml files of
// providers.file.directory when it names one. It expands
// ${VAR} from the environment, applies defaults and validates the result.
// On failure it returns a nil *Config and an ErrorList holding every problem
// found, each at its file:line:col (a file that cannot be read is reported
// at line 0, i.e. "path: message").
func Load(path string) (*Config, error) {
	cfg, err := LoadPartial(path)
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// LoadPartial is Load for a report of every problem, as sluice validate makes: when the files
// parse, it returns with Load's ErrorList the configuration decoded in spite of it, so that
// the checks of the files it names (snapshot.CheckFiles) can still run on the parts that
// loaded. Such a configuration serves those checks alone: a key with a problem holds its zero
// value or its default, not what was written, and InError tells which parts have one. After a
// file that cannot be read or parsed the configuration is nil; with a file of a directory that
// does not parse, the errors still hold the problems the other files have of their own
// (unknown keys, types and durations of their values, unset ${VAR}), but none that needs
// every file (a reference to another part, a clash, a required part).
func LoadPartial(path string) (*Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, ErrorList{{Pos: Position{File: path}, Msg: ioMessage(err)}}
	}
	files := []string{path}
	if st.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, ErrorList{{Pos: Position{File: path}, Msg: ioMessage(err)}}
		}
		files = files[:0]
		for _, e := range ents {
			n := e.Name()
			if !e.IsDir() && strings.HasSuffix(n, ".toml") && !strings.HasPrefix(n, ".") {
				files = append(files, filepath.Join(path, n))
			}
		}
		sort.Strings(files)
		if len(files) == 0 {
			return nil, ErrorList{{Pos: Position{File: path}, Msg: "directory has no *.toml files"}}
		}
	}
	srcs := make([]source, 0, len(files))
	for _, f := range files {
		data, err := readFile(f)
		if err != nil {
			return nil, ErrorList{{Pos: Position{File: f}, Msg: ioMessage(err)}}
		}
		srcs = append(srcs, source{name: f, data: data})
	}
	srcs, dir, perr := withProviderDirectory(srcs, path, st.IsDir())
	if perr != nil {
		return nil, perr
	}
	cfg, err := loadPartial(srcs, os.LookupEnv)
	if cfg != nil {
		cfg.providerDir = dir
	}
	return cfg, err
}

// LoadBytes loads one TOML document; name is the file name used in
// positions and error messages. It behaves like Load on a file.
func LoadBytes(name string, data []byte) (*Config, error) {
	return load([]source{{name: name, data: data}}, os.LookupEnv)
}

// DefaultName is the name the embedded default configuration is reported under
// in positions and errors, and in Files: "embedded configs/default.toml", not a
// path, since no such file need exist where sluice runs.
const DefaultName = configs.DefaultName

// LoadDefault loads the embedded default configuration (configs/default.toml).
func LoadDefault() (*Config, error) {
	return LoadBytes(DefaultName, configs.Default)
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("file is larger than the %d-byte limit", MaxFileBytes)
	}
	return data, nil
}

func ioMessage(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return "cannot read: " + pe.Err.Error()
	}
	return err.Error()
}

type source struct {
	name string
	data []byte
}

// load parses, merges, decodes and validates srcs (in merge order).
var utf8BOM = []byte("\xef\xbb\xbf")

func load(srcs []source, lookup func(string) (string, bool)) (*Config, error) {
	cfg, err := loadPartial(srcs, lookup)
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// loadPartial is load, returning the configuration decoded with the errors found in it
// (LoadPartial); nil after a syntax error, with the errors the other files' decoding found.
func loadPartial(srcs []source, lookup func(string) (string, bool)) (*Config, error) {
	e := &errs{}
	cfg := &Config{index: map[string]keyPlace{}, expanded: map[string]expansion{}}
	merged := map[string]any{}
	owner := map[string]Position{} // merged entry path -> where it was defined
	syntax := false
	for _, s := range srcs {
		cfg.files = append(cfg.files, s.name)
		// Editors on Windows start UTF-8 files with a byte order mark; it is not TOML, and
		// nothing after it moves (positions count from the first byte after it).
		doc, ix, perr := parseFile(s.name, bytes.TrimPrefix(s.data, utf8BOM))
		if perr != nil {
			e.list = append(e.list, perr)
			syntax = true
			continue
		}
		for id, p := range ix.places {
			if _, ok := cfg.index[id]; !ok {
				cfg.index[id] = p
			}
		}
		mergeDoc(merged, doc, ix, owner, e)
	}
	d := &decoder{cfg: cfg, lookup: lookup, errs: e}
	cfg.setDefaults()
	d.decodeStruct(nil, merged, reflect.ValueOf(cfg).Elem())
	if syntax {
		// The files that parse are decoded, so that their own problems (unknown keys, types,
		// durations, unset ${VAR}) are reported with the syntax error. Validation is not run:
		// what a file that does not parse defines is unknown, so a reference into it (a
		// router's service), a required part it may hold (an entrypoint) or a clash with it
		// would be a guess. A duplicate entry is not such a guess: the first definition is
		// kept, so that one run reports every problem.
		return nil, e.err()
	}
	cfg.validate(e, lookup)
	cfg.errorAt = e.at
	return cfg, e.err()
}

// mergeDoc adds one file's document to merged. Entries of the collections
// ([routers.x] ...) may come from different files; the same entry, or any
// other top-level key, defined in two files is an error naming both places.
func mergeDoc(merged, doc map[string]any, ix *indexer, owner map[string]Position, e *errs) {
	for _, k := range sortedKeys(doc) {
		v := doc[k]
		sub, isTable := v.(map[string]any)
		if collections[k] && isTable {
			dst, ok := merged[k].(map[string]any)
			if !ok {
				if _, exists := merged[k]; exists {
					continue // a non-table: its type error is reported by the decoder
				}
				dst = map[string]any{}
				merged[k] = dst
			}
			for _, name := range sortedKeys(sub) {
				id := k + pathSep + name
				here := ix.places[id].key
				if first, dup := owner[id]; dup {
					e.add(here, "%s is already defined at %s (an entry may be defined in only one file)", dotted([]string{k, name}), first)
					continue
				}
				owner[id] = here
				dst[name] = sub[name]
			}
			continue
		}
		here := ix.places[k].key
		if first, dup := owner[k]; dup {
			e.add(here, "%s is already defined at %s (a top-level table may be defined in only one file)", dotted([]string{k}), first)
			continue
		}
		owner[k] = here
		merged[k] = v
	}
}

// InError reports whether loading found a problem in the part of the configuration at keyPath:
// at its key or value, or at a key within it (of its table, or of an element of its array),
// such as an unset ${VAR} in one of its strings. Its values may then be zeros or defaults,
// not what was written (LoadPartial). Always false for a configuration that loaded.
func (c *Config) InError(keyPath ...string) bool {
	if len(c.errorAt) == 0 {
		return false
	}
	id := joinPath(keyPath)
	for k, p := range c.index {
		if (k == id || strings.HasPrefix(k, id+pathSep)) && (c.errorAt[p.key] || c.errorAt[p.val]) {
			return true
		}
	}
	return false
}

// Files returns the files the configuration was loaded from, in merge order.
func (c *Config) Files() []string { return append([]string(nil), c.files...) }

// Lookup returns where the key at keyPath was defined, and whether it was.
// Array elements are addressed by their decimal index:
// Lookup("services", "llm", "load_balancer", "servers", "0", "url").
func (c *Config) Lookup(keyPath ...string) (Position, bool) {
	p, ok := c.index[joinPath(keyPath)]
	return p.key, ok
}

// Pos returns the position of the key at keyPath, e.g.
// Pos("routers", "llm-api", "rule"). For a key that was not written (a
// default), it returns the position of the nearest enclosing key that was,
// and at worst the first file with line 0; so it is always usable in an
// Error.
func (c *Config) Pos(keyPath ...string) Position {
	for n := len(keyPath); n > 0; n-- {
		if p, ok := c.index[joinPath(keyPath[:n])]; ok {
			return p.key
		}
	}
	if len(c.files) > 0 {
		return Position{File: c.files[0]}
	}
	return Position{}
}

// ValuePos is like Pos but returns the position of the key's value, its first
// byte whatever its type: for a string, its opening quote, so that byte i of a
// single-line basic string without escapes is at column ValuePos(...).Col+1+i;
// for an array its '[', for an inline table its '{'. For a table written as
// [header] it is the position of the key.
func (c *Config) ValuePos(keyPath ...string) Position {
	if p, ok := c.index[joinPath(keyPath)]; ok {
		return p.val
	}
	return c.Pos(keyPath...)
}

// OffsetPos returns the position of byte offset of the string value at
// keyPath, e.g. where a rule's syntax error is: exact when the string is
// written on one line with no escape sequences and no ${VAR}, so that its
// bytes appear verbatim in the file; otherwise (and for an offset outside the
// string) the position of the value's opening quote.
func (c *Config) OffsetPos(offset int, keyPath ...string) Position {
	p, ok := c.index[joinPath(keyPath)]
	if !ok {
		return c.Pos(keyPath...)
	}
	if !p.mapped || offset < 0 || offset > 1<<20 {
		return p.val
	}
	v := p.val
	v.Col += 1 + offset
	return v
}

// Errorf returns an *Error at the position of keyPath (see Pos), for the
// runtime to report problems it finds while compiling the configuration
// (a rule it cannot parse, a certificate it cannot load).
func (c *Config) Errorf(keyPath []string, format string, args ...any) *Error {
	return &Error{Pos: c.Pos(keyPath...), Msg: fmt.Sprintf(format, args...)}
}
