package gateway

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/ingress"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// entrypoint is a listening entrypoint: its transport, the settings it runs with (which a
// reload compares with the new configuration's) and the resolver its requests route by.
type entrypoint struct {
	name string
	cfg  *config.Entrypoint
	from *config.Config // the configuration that made it: how its values were written
	t    ingress.Transport
	res  *epResolver
}

// epResolver routes the requests of one transport: by the configuration in force or, once a
// reload removed the entrypoint, by the last configuration that had it, so that a request
// arriving on one of its connections while they drain is routed as before rather than
// answered 404.
type epResolver struct {
	live   *snapshot.Live
	pinned atomic.Pointer[snapshot.Snapshot]
}

// Resolve implements pipeline.Resolver.
func (r *epResolver) Resolve(ep string, req *http1.Request) (*pipeline.Route, *pipeline.Chain) {
	if s := r.pinned.Load(); s != nil {
		return s.Resolve(ep, req)
	}
	return r.live.Resolve(ep, req)
}

// BodyBound implements pipeline.BodyBoundResolver.
func (r *epResolver) BodyBound(ep string, req *http1.Request) (int64, bool) {
	if s := r.pinned.Load(); s != nil {
		return s.BodyBound(ep, req)
	}
	return r.live.BodyBound(ep, req)
}

// Hooks implements pipeline.Resolver.
func (r *epResolver) Hooks() *pipeline.Chain {
	if s := r.pinned.Load(); s != nil {
		return s.Hooks()
	}
	return r.live.Hooks()
}

// epPlan is what a configuration changes in the entrypoints: transports bound and ready to
// start (added, or replacing one whose keys changed), those kept as they run, and those to
// drain (removed, or replaced).
type epPlan struct {
	added   []*entrypoint
	kept    []*entrypoint
	retired []*entrypoint
}

// abandon closes the listeners of the plan's new transports, which never served: a listener
// taken over from a running transport (ListenerFile) is a duplicate, so the running one
// keeps accepting.
func (p *epPlan) abandon() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, e := range p.added {
		_ = e.t.Drain(ctx)
	}
}

// newTransport returns the engine of ep, not yet listening.
func (g *Gateway) newTransport(ep *config.Entrypoint, set ingress.Settings, res pipeline.Resolver) ingress.Transport {
	if ep.Engine == config.EngineFasthttp {
		return ingress.NewFast(set, res, g.Log)
	}
	return ingress.NewGnet(set, res, g.Log)
}

// planEntrypoints compares the entrypoints of cfg with those running (cur, by name) and binds
// the listener of each that is new or whose keys changed. A replaced entrypoint whose address
// stays takes over the running transport's socket (both accept from it until the old one
// drains), and so does a new one at the address of one removed in the same reload (port 0
// excepted, which means "any port", not "that port"); others bind their address. If a
// listener cannot be bound (the port is taken) or a certificate does not load, nothing is
// left open and the error gives the key's position in cfg.
func (g *Gateway) planEntrypoints(cfg *config.Config, cur map[string]*entrypoint) (*epPlan, error) {
	p := &epPlan{}
	var fresh []string
	for _, name := range sortedNames(cfg.Entrypoints) {
		if e := cur[name]; e != nil && reflect.DeepEqual(*e.cfg, *cfg.Entrypoints[name]) {
			p.kept = append(p.kept, e)
			continue
		}
		fresh = append(fresh, name)
	}
	for _, name := range sortedNames(cur) {
		if ep := cfg.Entrypoints[name]; ep == nil || !reflect.DeepEqual(*cur[name].cfg, *ep) {
			p.retired = append(p.retired, cur[name])
		}
	}
	donated := map[*entrypoint]bool{}
	donor := func(name string, ep *config.Entrypoint) *entrypoint {
		for _, pass := range []bool{true, false} { // the same name first
			for _, r := range p.retired {
				if donated[r] || r.cfg.Address != ep.Address || (r.name == name) != pass {
					continue
				}
				if _, port, _ := net.SplitHostPort(ep.Address); !pass && (port == "0" || port == "") {
					continue
				}
				donated[r] = true
				return r
			}
		}
		return nil
	}
	for _, name := range fresh {
		ep := cfg.Entrypoints[name]
		set := Settings(ep)
		if d := donor(name, ep); d != nil {
			if f, err := d.t.ListenerFile(); err == nil {
				ln, err := net.FileListener(f)
				_ = f.Close()
				if err == nil {
					set.Listener = ln
				}
			}
		}
		res := &epResolver{live: &g.live}
		e := &entrypoint{name: name, cfg: ep, from: cfg, res: res, t: g.newTransport(ep, set, res)}
		if err := e.t.Listen(); err != nil {
			p.abandon()
			return nil, listenError(cfg, name, err)
		}
		p.added = append(p.added, e)
	}
	return p, nil
}

// listenError turns a transport's Listen or Start error into a configuration error at the
// key to fix: the entrypoint's address, or its tls table.
func listenError(cfg *config.Config, name string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "sluice: entrypoint "+name+": ")
	key := []string{"entrypoints", name, "address"}
	if strings.HasPrefix(msg, "tls: ") {
		key[2], msg = "tls", strings.TrimPrefix(msg, "tls: ")
	}
	return cfg.Errorf(key, "%s: %s%s", strings.Join(key, "."), cfg.MaskEnv(msg, key...), inUseHint(err))
}

// inUseHint is what a listen error adds when another socket holds the address: the two ways
// out, since the error alone does not say that the address, not the gateway, is the problem.
func inUseHint(err error) string {
	if errors.Is(err, syscall.EADDRINUSE) {
		return " (another process listens there: stop it, or set another address)"
	}
	return ""
}

// drainTimeout is how long e's requests in flight get to finish when it drains: its
// drain_timeout, or the default.
func (e *entrypoint) drainTimeout() time.Duration {
	if d := e.cfg.DrainTimeout; d > 0 {
		return d
	}
	return config.DefaultDrainTimeout
}

// retire drains e's transport in the background, for up to its drain_timeout (or until the
// gateway's own drain gives up), once setEntrypoint or removeEntrypoint put it with the
// draining transports: its listener closes at once (new connections are refused,
// unless a new transport took the socket over), requests, streams and WebSockets in flight
// finish.
func (g *Gateway) retire(e *entrypoint, why string) {
	g.Log.Info("entrypoint draining", "entrypoint", e.name, "address", e.t.Addr(), "reason", why)
	d := e.drainTimeout()
	g.retiring.Add(1)
	go func() {
		defer g.retiring.Done()
		defer g.drained(e)
		ctx, cancel := context.WithTimeout(g.retireCtx, d)
		defer cancel()
		start := time.Now()
		if err := e.t.Drain(ctx); err != nil {
			g.Log.Warn("entrypoint drain cut connections", "entrypoint", e.name, "error", err.Error())
			return
		}
		g.Log.Info("entrypoint drained", "entrypoint", e.name, "took", time.Since(start).Round(time.Millisecond).String())
	}()
	// The reload returns once the old listener refuses (or a new transport took its socket
	// over): a client that connects after it does not reach the removed entrypoint.
	select {
	case <-e.t.Refusing():
	case <-time.After(refuseWait):
		g.Log.Warn("entrypoint listener not closed yet", "entrypoint", e.name)
	}
}

// drained takes e, whose drain ended, off the list of draining transports.
func (g *Gateway) drained(e *entrypoint) {
	g.epMu.Lock()
	defer g.epMu.Unlock()
	for i, d := range g.drainingEps {
		if d == e {
			g.drainingEps = append(g.drainingEps[:i:i], g.drainingEps[i+1:]...)
			return
		}
	}
}

// refuseWait bounds how long a reload waits for a retired entrypoint's listener to close
// (at once, unless the engine is stuck).
const refuseWait = 5 * time.Second
