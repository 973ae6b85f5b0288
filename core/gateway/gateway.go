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

	"github.com/sluice-gw/sluice/core/accesslog"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/ingress"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/snapshot"
	"github.com/sluice-gw/sluice/core/tlscert"
)

// ErrRestartRequired is returned by Reload when the new config changes [admin], whose
// listener and token a reload does not rebind.
var ErrRestartRequired = errors.New("sluice: admin changes need a restart")

// Gateway is a running sluice instance.
type Gateway struct {
	// ConfigPath is what Reload loads: a file or directory; "" means the embedded default.
	ConfigPath string
	Log        *slog.Logger
	// SetLog, when set (before Start), is called by a reload that changes log.level or
	// log.format, with the new [log], before the reload is logged: Log's handler is the
	// caller's, so applying them is too.
	SetLog func(config.Log)

	live     snapshot.Live
	gen      atomic.Uint64
	reloadMu sync.Mutex
	admin    *adminServer
	draining atomic.Bool // Drain began: the health endpoint says so

	// The listening entrypoints, by name, and their names sorted; a reload replaces them.
	epMu    sync.RWMutex
	eps     map[string]*entrypoint
	epNames []string
	// Transports a reload removed or replaced, draining in the background (listed in
	// drainingEps, under epMu, for the health answer); Drain waits for them and cancels
	// retireCtx when its own time is up.
	drainingEps  []*entrypoint
	retiring     sync.WaitGroup
	retireCtx    context.Context
	retireCancel context.CancelFunc

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

// New compiles cfg and puts it in force: its health checks, the workers' polls and the
// scalers (with their min_replicas) start. It binds nothing yet: Start does. Drain stops all
// of it, and so does a Start that fails.
func New(cfg *config.Config, path string, log *slog.Logger) (*Gateway, error) {
	if log == nil {
		log = slog.Default()
	}
	g := &Gateway{ConfigPath: path, Log: log, eps: map[string]*entrypoint{}}
	g.retireCtx, g.retireCancel = context.WithCancel(context.Background())
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
		SendBufferBytes:    ep.SendBufferBytes,
		Multicore:          ep.Multicore,
		EventLoops:         ep.EventLoops,
		UpstreamLoop:       ep.UpstreamIO == config.UpstreamIOLoop,
		ConnectOnLoop:      ep.UpstreamConnect == config.UpstreamConnectLoop,
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

// Start binds every entrypoint and the admin listener. On error the gateway stops as a Drain
// whose time is up stops it: what Start started, and what New set running for the
// configuration (its health checks, the workers' polls, the scalers and their replicas), so
// that a gateway that could not start leaves nothing running; it cannot be started again.
func (g *Gateway) Start() error {
	if g.draining.Load() {
		return errors.New("sluice: the gateway has stopped")
	}
	cfg := g.live.Load().Config
	g.logWarnings(cfg)
	plan, err := g.planEntrypoints(cfg, nil)
	if err != nil {
		g.stop()
		return err
	}
	for _, e := range plan.added {
		if err := e.t.Start(); err != nil {
			plan.abandon()
			g.stop()
			return listenError(cfg, e.name, err)
		}
		g.setEntrypoint(e)
		g.Log.Info("entrypoint listening", "entrypoint", e.name, "address", e.t.Addr(), "engine", engineName(e.cfg))
	}
	g.syncWatcher()
	if cfg.Admin.Address != "" {
		a, err := startAdmin(g, cfg.Admin)
		if err != nil {
			g.stop()
			return cfg.Errorf([]string{"admin", "address"}, "admin.address: %s%s", cfg.MaskEnv(strings.TrimPrefix(err.Error(), "sluice: admin listener: "), "admin", "address"), inUseHint(err))
		}
		g.admin = a
		g.Log.Info("admin listening", "address", a.addr)
	}
	return nil
}

// setEntrypoint puts e in the table of listening entrypoints. One of its name that e
// replaces joins the draining transports in the same step (retire drains it), so that the
// health answer never misses its connections between the two lists.
func (g *Gateway) setEntrypoint(e *entrypoint) {
	g.epMu.Lock()
	defer g.epMu.Unlock()
	switch old := g.eps[e.name]; {
	case old == nil:
		g.epNames = append(g.epNames, e.name)
		sort.Strings(g.epNames)
	case old != e:
		g.drainingEps = append(g.drainingEps, old)
	}
	g.eps[e.name] = e
}

// removeEntrypoint takes e out of the table, unless another entrypoint took its name, and
// puts it with the draining transports in the same step, as setEntrypoint does.
func (g *Gateway) removeEntrypoint(e *entrypoint) {
	g.epMu.Lock()
	defer g.epMu.Unlock()
	g.drainingEps = append(g.drainingEps, e)
	if g.eps[e.name] != e {
		return
	}
	delete(g.eps, e.name)
	for i, n := range g.epNames {
		if n == e.name {
			g.epNames = append(g.epNames[:i:i], g.epNames[i+1:]...)
			break
		}
	}
}

// entrypoints returns the listening entrypoints, sorted by name.
func (g *Gateway) entrypoints() []*entrypoint {
	g.epMu.RLock()
	defer g.epMu.RUnlock()
	out := make([]*entrypoint, len(g.epNames))
	for i, n := range g.epNames {
		out[i] = g.eps[n]
	}
	return out
}

// entrypointsAndDraining returns the listening entrypoints, in name order, and the
// transports a reload retired that still drain, oldest first.
func (g *Gateway) entrypointsAndDraining() (live, draining []*entrypoint) {
	g.epMu.RLock()
	defer g.epMu.RUnlock()
	live = make([]*entrypoint, len(g.epNames))
	for i, n := range g.epNames {
		live[i] = g.eps[n]
	}
	return live, append([]*entrypoint(nil), g.drainingEps...)
}

func engineName(ep *config.Entrypoint) string {
	if ep.Engine == "" {
		return config.EngineGnet
	}
	return ep.Engine
}

// stop stops everything at once: a Drain whose time is already up.
func (g *Gateway) stop() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = g.Drain(ctx)
}

// Addr returns the bound address of entrypoint name ("" if unknown).
func (g *Gateway) Addr(name string) string {
	g.epMu.RLock()
	defer g.epMu.RUnlock()
	if e := g.eps[name]; e != nil {
		return e.t.Addr()
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

// Reload loads ConfigPath again and swaps the new snapshot in. Entrypoints follow the new
// configuration: an added one listens, a removed one drains in the background (its listener
// closes at once, what is in flight on it finishes), and one whose keys changed is replaced
// (a new transport, which takes over the socket when the address stays, and the old one
// drains). On any error the running config stays in force and the error (a config.ErrorList
// with positions: a port already taken is reported at the entrypoint's address; or a
// *RestartError for [admin]) is returned, and logged as "reload refused" with its problems
// joined by "; ", so that a refusal reads the same in the log whatever asked for the reload
// (SIGHUP, the admin API, a file change). Either way the reload is counted in the metrics.
func (g *Gateway) Reload() error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	err := g.reload()
	metrics.ConfigReloaded(err == nil, time.Now())
	if err == nil {
		g.reloadsOK.Add(1)
	} else {
		g.reloadsFailed.Add(1)
		g.Log.Error("reload refused; the running config stays in force", "error", oneLine(err))
	}
	return err
}

// oneLine renders err on one line: a config.ErrorList's problems, one a line in its text,
// joined by "; ", since a log value with embedded newlines is hard to read in the text format.
func oneLine(err error) string {
	return strings.Join(strings.Split(err.Error(), "\n"), "; ")
}

// Reloads returns the reloads tried since New: put in force (ok) and refused (failed),
// whatever asked for them (SIGHUP, the admin API, a file change).
func (g *Gateway) Reloads() (ok, failed uint64) { return g.reloadsOK.Load(), g.reloadsFailed.Load() }

func (g *Gateway) reload() error {
	if g.draining.Load() {
		return errors.New("sluice: the gateway is draining")
	}
	cfg, err := LoadConfig(g.ConfigPath)
	if err != nil {
		return err
	}
	old := g.live.Load()
	if err := needsRestart(old.Config, cfg); err != nil {
		return err
	}
	g.epMu.RLock()
	cur := make(map[string]*entrypoint, len(g.eps))
	for k, v := range g.eps {
		cur[k] = v
	}
	g.epMu.RUnlock()
	// The new listeners are bound before anything changes: a port that is taken refuses the
	// whole reload.
	plan, err := g.planEntrypoints(cfg, cur)
	if err != nil {
		return err
	}
	snap, err := snapshot.Compile(cfg, old, g.gen.Load()+1)
	if err != nil {
		plan.abandon()
		return err
	}
	// A removed entrypoint's connections drain on the configuration that had it.
	for _, e := range plan.retired {
		if cfg.Entrypoints[e.name] == nil {
			e.res.pinned.Store(old)
		}
	}
	g.gen.Add(1) // generations count configs put in force
	g.live.Activate(snap)
	started := map[string]bool{}
	for _, e := range plan.added {
		if err := e.t.Start(); err != nil {
			// Only an engine that cannot run gets here (the listener is bound): a replaced
			// entrypoint keeps its running transport, which the next reload tries again to
			// replace; an added one is not served.
			g.Log.Error("entrypoint did not start; the reloaded configuration is in force without it", "entrypoint", e.name, "error", err.Error())
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = e.t.Drain(ctx)
			continue
		}
		started[e.name] = true
		g.setEntrypoint(e)
		g.Log.Info("entrypoint listening", "entrypoint", e.name, "address", e.t.Addr(), "engine", engineName(e.cfg))
	}
	for _, e := range plan.retired {
		switch {
		case cfg.Entrypoints[e.name] == nil:
			g.removeEntrypoint(e)
			g.retire(e, "removed")
		case started[e.name]:
			g.retire(e, "replaced")
		}
	}
	// Renewed certificates go in force with the reload, watched or not (the compile above
	// loaded every file, so this fails only if one changed since); new transports loaded
	// theirs when they bound.
	for _, e := range plan.kept {
		if r, ok := e.t.(interface{ ReloadCertificates() error }); ok {
			_ = r.ReloadCertificates()
		}
	}
	if g.SetLog != nil && (old.Config.Log.Level != cfg.Log.Level || old.Config.Log.Format != cfg.Log.Format) {
		g.SetLog(cfg.Log)
	}
	g.Log.Info("configuration reloaded", append([]any{"generation", snap.Gen}, configChanges(old.Config, cfg)...)...)
	g.logWarnings(cfg)
	// Not under reloadMu's caller-facing error path: the watcher follows the new files.
	go g.syncWatcher()
	return nil
}

// configChanges says what a reload changed, as log attributes: "added", "removed" and
// "changed", each a list of named entries ("routers.api, services.llm") and other tables
// ("log", "providers.file"), or "changes" "none". Every top-level table counts, in the order
// of config.Config's fields. Entries compare by their loaded values, so a change of spelling
// only (90s for 1m30s) is not a change.
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
	// table reports the table a (b in cur) at key as changed, or, when it is a table of
	// tables ([providers]), each of its tables that changed.
	var table func(key string, a, b reflect.Value)
	table = func(key string, a, b reflect.Value) {
		if reflect.DeepEqual(a.Interface(), b.Interface()) {
			return
		}
		t := a.Type()
		for i := range t.NumField() {
			if t.Field(i).Type.Kind() != reflect.Struct {
				changed = append(changed, key)
				return
			}
		}
		for i := range t.NumField() {
			table(key+"."+t.Field(i).Tag.Get("toml"), a.Field(i), b.Field(i))
		}
	}
	a, b := reflect.ValueOf(old).Elem(), reflect.ValueOf(cur).Elem()
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		key := f.Tag.Get("toml")
		switch f.Type.Kind() {
		case reflect.Map:
			diff(key, entries(a.Field(i)), entries(b.Field(i)))
		case reflect.Struct:
			table(key, a.Field(i), b.Field(i))
		}
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

// entries turns a table of named entries (a map of names to pointers to structs) into
// comparable values (the pointed-to structs).
func entries(m reflect.Value) map[string]any {
	out := make(map[string]any, m.Len())
	for it := m.MapRange(); it.Next(); {
		out[it.Key().String()] = it.Value().Elem().Interface()
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
	Pos config.Position // where the key is in the new configuration
	Key string          // the key path, e.g. "admin.address"
	How string          // "changed", or why
}

// Error returns "file:line:col: admin.address changed: restart …".
func (e *RestartError) Error() string {
	table, _, _ := strings.Cut(e.Key, ".")
	return fmt.Sprintf("%s: %s %s: restart sluice to change [%s] (a reload does not rebind the admin listener)", e.Pos, e.Key, e.How, table)
}

// Unwrap makes errors.Is(err, ErrRestartRequired) true.
func (e *RestartError) Unwrap() error { return ErrRestartRequired }

// needsRestart returns a *RestartError naming the first key of [admin] that cur changes from
// old, or nil. Entrypoints follow a reload (planEntrypoints).
func needsRestart(old, cur *config.Config) error {
	at := func(how string, path ...string) error {
		return &RestartError{Pos: cur.Pos(path...), Key: strings.Join(path, "."), How: how}
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
// ctx ends or, on each entrypoint, its own drain_timeout passes, then stops everything. Entrypoints a reload removed or replaced and that are still
// draining are waited for too, and cut when ctx ends. A reload after Drain began is refused.
func (g *Gateway) Drain(ctx context.Context) error {
	g.reloadMu.Lock() // a reload in progress finishes first; later ones are refused
	g.draining.Store(true)
	g.reloadMu.Unlock()
	g.watchMu.Lock()
	if g.watch != nil {
		g.watch.close()
		g.watch = nil
	}
	g.watchMu.Unlock()
	eps := g.entrypoints()
	var wg sync.WaitGroup
	errs := make([]error, len(eps)+1)
	for i, e := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ectx, cancel := context.WithTimeout(ctx, e.drainTimeout())
			defer cancel()
			if err := e.t.Drain(ectx); err != nil {
				errs[i] = fmt.Errorf("entrypoint %s: %w", e.name, err)
				// Said when it happens: another entrypoint may drain for longer.
				g.Log.Warn("entrypoint drain cut connections", "entrypoint", e.name, "error", err.Error())
			}
		}()
	}
	retired := make(chan struct{})
	go func() {
		g.retiring.Wait()
		close(retired)
	}()
	select {
	case <-retired:
	case <-ctx.Done():
		g.retireCancel()
		<-retired
	}
	g.retireCancel()
	wg.Wait()
	if g.admin != nil {
		g.admin.close()
	}
	g.live.Load().Retire(nil)
	g.live.Release() // the series of its routers, backends...: several gateways of a process do not pile them up
	// The access log's lines are written by a goroutine: the last ones go out before the
	// process exits, even after a drain that ran out of time.
	fctx, cancel := context.WithTimeout(context.Background(), accessLogFlushTimeout)
	defer cancel()
	_ = accesslog.Flush(fctx)
	return errors.Join(errs...)
}

// accessLogFlushTimeout bounds how long Drain waits for the access log's last lines to reach
// their destination (a disk or a pipe that takes nothing would hold the exit).
const accessLogFlushTimeout = 5 * time.Second

// DrainTimeout is the longest drain_timeout of the entrypoints.
func (g *Gateway) DrainTimeout() (d int64) {
	for _, ep := range g.live.Load().Config.Entrypoints {
		if int64(ep.DrainTimeout) > d {
			d = int64(ep.DrainTimeout)
		}
	}
	return d
}
