package config

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Providers is [providers]: where configuration comes from besides the path sluice was
// started with (docs/config.md#providers).
type Providers struct {
	// File is [providers.file].
	File FileProvider `toml:"file"`
}

// FileProvider is [providers.file]: configuration files watched for changes.
type FileProvider struct {
	// Watch reloads the configuration when a file of it changes on disk (the configuration
	// file or directory, and Directory), as SIGHUP does. Default false.
	Watch bool `toml:"watch"`
	// Directory, when set (not ""), is a directory whose *.toml files (not starting with ".") are
	// merged after the configuration, in name order, like the files of a configuration
	// directory. Relative to the directory of the file that sets it.
	Directory string `toml:"directory"`
	// Debounce is how long the files must be quiet after a change before the reload, so
	// that an editor's or a deployment's several writes make one reload. Default 200ms,
	// range 10ms..1m.
	Debounce time.Duration `toml:"debounce"`
}

// Bounds and default of providers.file.debounce.
const (
	DefaultDebounce = 200 * time.Millisecond
	MinDebounce     = 10 * time.Millisecond
	MaxDebounce     = time.Minute
)

func (f *FileProvider) setDefaults() { f.Debounce = DefaultDebounce }

// providerFiles returns the *.toml files of providers.file.directory, sorted, or an error
// for a directory that cannot be read. dir is made absolute against base (the directory of
// the first configuration file).
func providerFiles(dir, base string) (string, []string, error) {
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(base, dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return dir, nil, err
	}
	var files []string
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() && strings.HasSuffix(n, ".toml") && !strings.HasPrefix(n, ".") {
			files = append(files, filepath.Join(dir, n))
		}
	}
	sort.Strings(files)
	return dir, files, nil
}

// WatchPaths returns what a file watcher watches for c: the configuration files and
// directories it was loaded from, and providers.file.directory.
func (c *Config) WatchPaths() []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, f := range c.files {
		add(f)
	}
	add(c.providerDir)
	return out
}

func (c *Config) validateProviders(e *errs) {
	f := &c.Providers.File
	if f.Debounce < MinDebounce || f.Debounce > MaxDebounce {
		e.add(c.ValuePos("providers", "file", "debounce"), "providers.file.debounce %v: want %v..%v", f.Debounce, MinDebounce, MaxDebounce)
	}
}

// withProviderDirectory appends to srcs the files of the providers.file.directory the
// configuration names (the last file that sets it wins), read before the configuration is
// decoded so that those files may define what the others reference. It returns the
// directory as loaded ("" when none).
func withProviderDirectory(srcs []source, path string, isDir bool) ([]source, string, error) {
	var dir string
	var at Position
	for _, s := range srcs {
		doc, ix, err := parseFile(s.name, s.data)
		if err != nil {
			return srcs, "", nil // load reports it
		}
		p, _ := doc["providers"].(map[string]any)
		f, _ := p["file"].(map[string]any)
		if d, ok := f["directory"].(string); ok {
			dir = os.Expand(d, func(k string) string { v, _ := os.LookupEnv(k); return v })
			at = ix.places[joinPath([]string{"providers", "file", "directory"})].val
		}
	}
	if dir == "" {
		return srcs, "", nil
	}
	base := filepath.Dir(path)
	if isDir {
		base = path
	}
	abs, files, err := providerFiles(dir, base)
	if err != nil {
		return nil, "", ErrorList{{Pos: at, Msg: "providers.file.directory: " + ioMessage(err)}}
	}
	have := map[string]bool{}
	for _, s := range srcs {
		if a, err := filepath.Abs(s.name); err == nil {
			have[a] = true
		}
	}
	for _, f := range files {
		if a, err := filepath.Abs(f); err == nil && have[a] {
			continue // the configuration directory itself
		}
		data, err := readFile(f)
		if err != nil {
			return nil, "", ErrorList{{Pos: Position{File: f}, Msg: ioMessage(err)}}
		}
		srcs = append(srcs, source{name: f, data: data})
	}
	return srcs, abs, nil
}
