// Package gateway wires a configuration to running parts: the compiled snapshot, one ingress
// transport per entrypoint, the admin API, reload and drain. cmd/sluice only parses flags and
// signals and calls this package.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/ingress"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/snapshot"
	"github.com/sluice-gw/sluice/core/tlscert"
)

// ErrRestartRequired is returned by Reload when the new config changes the entrypoints
// (addresses, engines, TLS, limits or trusted_ips), which a reload cannot apply to bound
// listeners.
var ErrRestartRequired = errors.New("sluice: entrypoint changes need a restart")

// Gateway is a running sluice instance.
type Gateway struct {
	// ConfigPath is what Reload loads: a file or directory; "" means the embedded default.
	ConfigPath string
	Log        *slog.Logger

	live       snapshot.Live
	gen        atomic.Uint64
	reloadMu   sync.Mutex
	transports map[string]ingress.Transport
	epNames    []string
	admin      *adminServer
	draining   atomic.Bool // Drain began: the health endpoint says so

	// watch reloads on file changes while the configuration sets providers.file.watch.
	watchMu sync.Mutex
	watch   *watcher

	reloadsOK, reloadsFailed atomic.Uint64
}

// LoadConfig loads the configuration at path ("" for the embedded default).
func LoadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.LoadDefault()
	}
	return config.Load(path)
}

// New compiles cfg; it does not bind anything yet.
func New(cfg *config.Config, path string, log *slog.Logger) (*Gateway, error) {
	if log == nil {
		log = slog.Default()
	}
	g := &Gateway{ConfigPath: path, Log: log, transports: map[string]ingress.Transport{}}
	snap, err := snapshot.Compile(cfg, nil, g.gen.Add(1)) // generation 1
	if err != nil {
		return nil, err
	}
	g.live.Activate(snap)
	metrics.ConfigLoaded(time.Now())
	return g, nil
}

// Settings converts a config entrypoint into ingress settings.
func Settings(ep *config.Entrypoint) ingress.Settings {
	s := ingress.Settings{
		Name:    ep.Name,
		Address: ep.Address,
		Limits: http1.Limits{
			MaxHeaderBytes:    ep.MaxHeaderBytes,
			MaxBodyBytes:      ep.MaxBodyBytes,
			AllowEncodedSlash: ep.AllowEncodedSlash,
		},
		ReadHeaderTimeout:  ep.ReadHeaderTimeout,
		IdleTimeout:        ep.IdleTimeout,
		ClientStallTimeout: ep.ClientStallTimeout,
		MaxConnections:     ep.MaxConnections,
		Multicore:          ep.Multicore,
		EventLoops:         ep.EventLoops,
		TrustedIPs:         ep.TrustedNets,
	}
	if ep.TLS != nil {
		s.TLS = &ingress.TLSSettings{Certificates: tlscert.PairsOf(ep.TLS), MinVersion: tls.VersionTLS12, Watch: ep.TLS.Watch}
		if ep.TLS.MinVersion == config.TLSVersion13 {
			s.TLS.MinVersion = tls.VersionTLS13
		}
	}
	return s
}

// Start binds every entrypoint and the admin listener. On error, what was started is stopped.
func (g *Gateway) Start() error {
	cfg := g.live.Load().Config
	g.logWarnings(cfg)
	for name := range cfg.Entrypoints {
		g.epNames = append(g.epNames, name)
	}
	sort.Strings(g.epNames)
	for _, name := range g.epNames {
		ep := cfg.Entrypoints[name]
		var t ingress.Transport
		if ep.Engine == config.EngineFasthttp {
			t = ingress.NewFast(Settings(ep), &g.live, g.Log)
		} else {
			t = ingress.NewGnet(Settings(ep), &g.live, g.Log)
		}
		if err := t.Start(); err != nil {
			g.stopAll()
			// The transport's error names the entrypoint; the key says where to fix it.
			msg := strings.TrimPrefix(err.Error(), "sluice: entrypoint "+name+": ")
			key := []string{"entrypoints", name, "address"}
			if strings.HasPrefix(msg, "tls: ") {
				key[2], msg = "tls", strings.TrimPrefix(msg, "tls: ")
			}
			return cfg.Errorf(key, "%s: %s", strings.Join(key, "."), cfg.MaskEnv(msg, key...))
		}
		g.transports[name] = t
		g.Log.Info("entrypoint listening", "entrypoint", name, "address", t.Addr(), "engine", engineName(ep))
	}
	g.syncWatcher()
	if cfg.Admin.Address != "" {
		a, err := startAdmin(g, cfg.Admin)
		if err != nil {
			g.stopAll()
			return cfg.Errorf([]string{"admin", "address"}, "admin.address: %s", cfg.MaskEnv(strings.TrimPrefix(err.Error(), "sluice: admin listener: "), "admin", "address"))
		}
		g.admin = a
		g.Log.Info("admin listening", "address", a.addr)
	}
	return nil
}

func engineName(ep *config.Entrypoint) string {
	if ep.Engine == "" {
		return config.EngineGnet
	}
	return ep.Engine
}

func (g *Gateway) stopAll() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, t := range g.transports {
		_ = t.Drain(ctx)
	}
	if g.admin != nil {
		g.admin.close()
	}
}

// Addr returns the bound address of entrypoint name ("" if unknown).
func (g *Gateway) Addr(name string) string {
	if t := g.transports[name]; t != nil {
		return t.Addr()
	}
	return ""
}

// AdminAddr returns the bound admin address ("" when disabled).
func (g *Gateway) AdminAddr() string {
	if g.admin == nil {
		return ""
	}
	return g.admin.addr
}

// Snapshot returns the configuration snapshot in force.
func (g *Gateway) Snapshot() *snapshot.Snapshot { return g.live.Load() }

// Reload loads ConfigPath again and swaps the new snapshot in. On any error the running
// config stays in force and the error (a config.ErrorList with positions, or
// ErrRestartRequired) is returned. Either way the reload is counted in the metrics.
func (g *Gateway) Reload() error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	err := g.reload()
	metrics.ConfigReloaded(err == nil, time.Now())
	if err == nil {
		g.reloadsOK.Add(1)
	} else {
		g.reloadsFailed.Add(1)
	}
	return err
}

// Reloads returns the reloads tried since New: put in force (ok) and refused (failed),
// whatever asked for them (SIGHUP, the admin API, a file change).
func (g *Gateway) Reloads() (ok, failed uint64) { return g.reloadsOK.Load(), g.reloadsFailed.Load() }

func (g *Gateway) reload() error {
	cfg, err := LoadConfig(g.ConfigPath)
	if err != nil {
		return err
	}
	old := g.live.Load()
	if err := needsRestart(old.Config, cfg); err != nil {
		return err
	}
	snap, err := snapshot.Compile(cfg, old, g.gen.Load()+1)
	if err != nil {
		return err
	}
	g.gen.Add(1) // generations count configs put in force
	g.live.Activate(snap)
	// Renewed certificates go in force with the reload, watched or not (the compile above
	// loaded every file, so this fails only if one changed since).
	for _, name := range g.epNames {
		if r, ok := g.transports[name].(interface{ ReloadCertificates() error }); ok {
			_ = r.ReloadCertificates()
		}
	}
	g.Log.Info("configuration reloaded", append([]any{"generation", snap.Gen}, configChanges(old.Config, cfg)...)...)
	g.logWarnings(cfg)
	// Not under reloadMu's caller-facing error path: the watcher follows the new files.
	go g.syncWatcher()
	return nil
}

// configChanges says what a reload changed, as log attributes: "added", "removed" and
// "changed", each a list of named entries ("routers.api, services.llm"), or "changes" "none".
// Entries compare by their loaded values, so a change of spelling only (90s for 1m30s) is
// not a change.
func configChanges(old, cur *config.Config) []any {
	var added, removed, changed []string
	diff := func(kind string, a, b map[string]any) {
		for _, name := range sortedNames(b) {
			if x, ok := a[name]; !ok {
				added = append(added, kind+"."+name)
			} else if !reflect.DeepEqual(x, b[name]) {
				changed = append(changed, kind+"."+name)
			}
		}
		for _, name := range sortedNames(a) {
			if _, ok := b[name]; !ok {
				removed = append(removed, kind+"."+name)
			}
		}
	}
	diff("routers", entries(old.Routers), entries(cur.Routers))
	diff("services", entries(old.Services), entries(cur.Services))
	diff("middlewares", entries(old.Middlewares), entries(cur.Middlewares))
	diff("models", entries(old.Models), entries(cur.Models))
	diff("consumers", entries(old.Consumers), entries(cur.Consumers))
	if !reflect.DeepEqual(old.Log, cur.Log) {
		changed = append(changed, "log")
	}
	var out []any
	for _, kv := range []struct {
		key  string
		list []string
	}{{"added", added}, {"removed", removed}, {"changed", changed}} {
		if len(kv.list) > 0 {
			out = append(out, kv.key, strings.Join(kv.list, ", "))
		}
	}
	if len(out) == 0 {
		out = []any{"changes", "none"}
	}
	return out
}

// entries turns a table of named entries into comparable values (the pointed-to structs).
func entries[T any](m map[string]*T) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = *v
	}
	return out
}

// logWarnings logs each part of cfg that can route nothing (config.Config.Warnings).
func (g *Gateway) logWarnings(cfg *config.Config) {
	for _, w := range cfg.Warnings() {
		g.Log.Warn("configuration warning", "at", w.Pos.String(), "warning", w.Msg)
	}
}

// RestartError is ErrRestartRequired for one key: a reload that changes it is refused.
type RestartError struct {
	Pos config.Position // where the key is in the new configuration (line 0 when it was removed)
	Key string          // the key path, e.g. "entrypoints.web.drain_timeout"
	How string          // "changed", "added" or "removed"
}

// Error returns "file:line:col: entrypoints.web.drain_timeout changed: restart …".
func (e *RestartError) Error() string {
	table, _, _ := strings.Cut(e.Key, ".")
	return fmt.Sprintf("%s: %s %s: restart sluice to change [%s] (a reload cannot change a bound listener)", e.Pos, e.Key, e.How, table)
}

// Unwrap makes errors.Is(err, ErrRestartRequired) true.
func (e *RestartError) Unwrap() error { return ErrRestartRequired }

// needsRestart returns a *RestartError naming the first key of [entrypoints] or [admin] that
// cur changes from old, or nil.
func needsRestart(old, cur *config.Config) error {
	at := func(how string, path ...string) error {
		p := cur.Pos(path...)
		if how == "removed" {
			p = config.Position{File: p.File}
		}
		return &RestartError{Pos: p, Key: strings.Join(path, "."), How: how}
	}
	for _, name := range sortedNames(cur.Entrypoints) {
		o := old.Entrypoints[name]
		if o == nil {
			return at("added", "entrypoints", name)
		}
		if key := changedKey(reflect.ValueOf(*o), reflect.ValueOf(*cur.Entrypoints[name])); key != nil {
			return at("changed", append([]string{"entrypoints", name}, key...)...)
		}
	}
	for _, name := range sortedNames(old.Entrypoints) {
		if cur.Entrypoints[name] == nil {
			return at("removed", "entrypoints", name)
		}
	}
	if key := changedKey(reflect.ValueOf(old.Admin), reflect.ValueOf(cur.Admin)); key != nil {
		if key[0] == "token_env" && old.Admin.TokenEnv == cur.Admin.TokenEnv {
			return at("changed (its variable holds another token)", "admin", "token_env")
		}
		return at("changed", append([]string{"admin"}, key...)...)
	}
	return nil
}

// changedKey returns the TOML key path of the first field in which the structs a and b differ,
// within tables too, or nil when they do not. Fields that are not TOML keys are derived from
// those that are, or read from the environment (the admin token): a difference there alone is
// reported at the table's key that holds it, if any, else not at all.
func changedKey(a, b reflect.Value) []string {
	t := a.Type()
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("toml")
		fa, fb := a.Field(i), b.Field(i)
		if reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			continue
		}
		switch {
		case tag == "" || tag == "-":
			if t.Field(i).Name == "Token" {
				return []string{"token_env"} // the variable it names holds another token now
			}
		case fa.Kind() == reflect.Pointer && !fa.IsNil() && !fb.IsNil() && fa.Elem().Kind() == reflect.Struct:
			if sub := changedKey(fa.Elem(), fb.Elem()); sub != nil {
				return append([]string{tag}, sub...)
			}
			return []string{tag}
		default:
			return []string{tag}
		}
	}
	return nil
}

// Drain stops accepting connections on every entrypoint, lets in-flight requests finish until
// ctx ends, then stops everything.
func (g *Gateway) Drain(ctx context.Context) error {
	g.draining.Store(true)
	g.watchMu.Lock()
	if g.watch != nil {
		g.watch.close()
		g.watch = nil
	}
	g.watchMu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(g.epNames))
	for i, name := range g.epNames {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.transports[name].Drain(ctx)
		}()
	}
	wg.Wait()
	if g.admin != nil {
		g.admin.close()
	}
	g.live.Load().Retire(nil)
	return errors.Join(errs...)
}

// DrainTimeout is the longest drain_timeout of the entrypoints.
func (g *Gateway) DrainTimeout() (d int64) {
	for _, ep := range g.live.Load().Config.Entrypoints {
		if int64(ep.DrainTimeout) > d {
			d = int64(ep.DrainTimeout)
		}
	}
	return d
}
