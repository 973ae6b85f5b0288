package snapshot

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/lifecycle/mirror"
	"github.com/sluice-gw/sluice/core/lifecycle/rollout"
	"github.com/sluice-gw/sluice/core/lifecycle/scaling"
	"github.com/sluice-gw/sluice/core/metrics"
)

// lifecycle is the runtime of the services' lifecycle keys in one snapshot: their mirrors
// and their splits over revisions (with their rollouts).
type lifecycle struct {
	mirrors map[string]*mirrorEntry // by service name
	splits  map[string]*splitEntry  // by service name
	scalers map[string]*scalerEntry // by service name
}

// mirrorEntry is a service's mirror and the settings it was made from: a reload whose service
// mirrors the same way takes it over with the copies it queued and its senders, so that a
// reload that changes nothing about the mirror loses none of its copies (it sends them to the
// shadow service of the new configuration once that is in force).
type mirrorEntry struct {
	mirror *mirror.Mirror
	conf   config.Mirror
}

// scalerEntry is a scaled service's scaler, what its replicas were made from (key) and the
// policy this snapshot gives it: a reload whose service runs the same replicas takes the
// scaler over with its replicas running, and applies its own policy once in force.
type scalerEntry struct {
	scaler *scaling.Scaler
	key    string
	policy scaling.Policy
}

// scalerKey is what defines the replicas of a scaled service, all of its scaling keys but the
// policy (scaling.Policy), which a reload changes in place. A different executor, command,
// environment or Kubernetes target runs other replicas; max_replicas fixes the replica slots,
// their ports and so the service's servers; ready_path, ready_interval and startup_timeout
// are how a started replica was judged ready (and the readiness probes' client is made for
// the interval); stop_timeout is read by the stops of replicas already under way.
func scalerKey(g *config.Scaling) string {
	return fmt.Sprintf("%q|%d|%q|%d|%d|%+v|%+v", g.Executor, g.MaxReplicas, g.ReadyPath, g.ReadyInterval, g.StartupTimeout, g.Exec, g.Kube)
}

// scalerPolicy is the rest of a scaled service's scaling keys: those a reload applies to the
// running scaler (scaling.Scaler.SetPolicy).
func scalerPolicy(g *config.Scaling) scaling.Policy {
	return scaling.Policy{
		Min: g.MinReplicas, Concurrency: g.ContainerConcurrency, Utilization: g.TargetUtilization,
		Buffer: g.BufferEnabled, ScaleDownDelay: g.ScaleDownDelay, ScaleToZeroAfter: g.ScaleToZeroAfter,
		BufferSize: g.BufferSize, BufferTimeout: g.BufferTimeout, KeepAlive: g.KeepAlive,
	}
}

// splitEntry is a service's split and what it was made from: a reload whose service has the
// same revisions and rollout takes the split over, so that a rollout in progress goes on.
type splitEntry struct {
	split *rollout.Split
	key   string
}

// compileLifecycle attaches the lifecycle runtime to the compiled services: a mirror for each
// service with a [services.<name>.mirror] (prev's when it has the same settings). Nothing
// starts here: a mirror starts its senders with its first copy, so a snapshot that is compiled
// and discarded leaves nothing running. Nor does anything here touch what prev runs: a scaler
// taken over keeps serving prev's backends, and a mirror taken over sending to prev's shadow
// service, until this snapshot goes in force (startLifecycle), so that a configuration that
// Compile refuses changes nothing.
func (s *Snapshot) compileLifecycle(cfg *config.Config, prev *Snapshot) {
	for _, name := range s.ServiceNames {
		sc, svc := cfg.Services[name], s.Services[name]
		if len(sc.Revisions) > 0 {
			e := s.compileSplit(name, sc, prev)
			svc.Hooks = append(svc.Hooks, e.split)
		}
		if e := s.life.scalers[name]; e != nil {
			svc.Hooks = append(svc.Hooks, e.scaler)
		}
		if mc := sc.Mirror; mc != nil && s.Services[mc.Service] != nil && mc.Percentage > 0 {
			svc.Mirror = s.compileMirror(name, mc, prev).mirror
		}
	}
}

// compileMirror makes the mirror of service name, or takes over prev's when its settings are
// the same. Its shadow service being rebuilt with every snapshot is no reason for a new
// mirror: the one taken over sends to this snapshot's from startLifecycle on.
func (s *Snapshot) compileMirror(name string, mc *config.Mirror, prev *Snapshot) *mirrorEntry {
	if s.life.mirrors == nil {
		s.life.mirrors = map[string]*mirrorEntry{}
	}
	if prev != nil {
		if e := prev.life.mirrors[name]; e != nil && e.conf == *mc {
			s.life.mirrors[name] = e
			return e
		}
	}
	o := mirror.Options{
		Service: name, Shadow: mc.Service, Percentage: mc.Percentage, Model: mc.Model,
		QueueSize: mc.QueueSize, MaxConcurrent: mc.MaxConcurrent, MaxBytes: mc.MaxBytes, Timeout: mc.Timeout,
	}
	if mc.LogSummary {
		o.Summary = slog.Default()
	}
	e := &mirrorEntry{mirror: mirror.New(o, s.Services[mc.Service]), conf: *mc}
	s.life.mirrors[name] = e
	return e
}

// compileSplit makes the split of service name over its revisions, or takes over prev's when
// its revisions and rollout are the same.
func (s *Snapshot) compileSplit(name string, sc *config.Service, prev *Snapshot) *splitEntry {
	key := fmt.Sprintf("%+v|%+v", sc.Revisions, sc.Rollout)
	if prev != nil {
		if e := prev.life.splits[name]; e != nil && e.key == key {
			s.setSplit(name, e)
			return e
		}
	}
	revs := make([]rollout.Revision, len(sc.Revisions))
	id := 0
	index := map[string]int{}
	for i, r := range sc.Revisions {
		revs[i] = rollout.Revision{Name: r.Name, Percent: r.TrafficPercent}
		for range r.Servers {
			revs[i].Backends = append(revs[i].Backends, id) // backends are the revisions' servers in order
			id++
		}
		index[r.Name] = i
	}
	var rc *rollout.Config
	if ro := sc.Rollout; ro != nil {
		rc = &rollout.Config{
			From: index[ro.From], To: index[ro.To], StepPercent: ro.StepPercent, StepInterval: ro.StepInterval(),
			MaxErrorRate:  ro.ErrorRateThreshold,
			MaxLatencyP99: time.Duration(ro.LatencyThresholdMs) * time.Millisecond,
			MaxTTFTP99:    time.Duration(ro.TTFTP99ThresholdMs) * time.Millisecond,
			MaxITLP99:     time.Duration(ro.ITLP99ThresholdMs) * time.Millisecond,
			MinSamples:    ro.MinSamples,
		}
	}
	e := &splitEntry{split: rollout.New(name, revs, rc), key: key}
	s.setSplit(name, e)
	return e
}

func (s *Snapshot) setSplit(name string, e *splitEntry) {
	if s.life.splits == nil {
		s.life.splits = map[string]*splitEntry{}
	}
	s.life.splits[name] = e
}

// Split returns the split over revisions of service name (nil when it has none), for the
// admin API.
func (s *Snapshot) Split(name string) *rollout.Split {
	if e := s.life.splits[name]; e != nil {
		return e.split
	}
	return nil
}

// prepareScalers makes the scaler of every scaled service (or takes over prev's when the
// service scales the same way), before the services are compiled: its replicas' ports are
// the service's servers. It returns the errors of the scalers it could not make, and the
// services they scale (failed): those have no servers, which is not a problem of their own.
func (s *Snapshot) prepareScalers(cfg *config.Config, prev *Snapshot) (errs config.ErrorList, failed map[string]bool) {
	failed = map[string]bool{}
	for _, name := range sortedKeys(cfg.Services) {
		sc := cfg.Services[name]
		if sc.Scaling == nil || sc.Scaling.Exec == nil && sc.Scaling.Kube == nil {
			continue
		}
		g := sc.Scaling
		key := scalerKey(g)
		policy := scalerPolicy(g)
		if s.life.scalers == nil {
			s.life.scalers = map[string]*scalerEntry{}
		}
		if prev != nil {
			if e := prev.life.scalers[name]; e != nil && e.key == key {
				// The policy is applied when this snapshot goes in force (startLifecycle): a
				// configuration that is refused leaves the scaler as it runs.
				s.life.scalers[name] = &scalerEntry{scaler: e.scaler, key: key, policy: policy}
				continue
			}
		}
		o := scaling.Options{
			Service: name, Min: g.MinReplicas, Max: g.MaxReplicas, Concurrency: g.ContainerConcurrency,
			Utilization: g.TargetUtilization, Buffer: g.BufferEnabled,
			ScaleDownDelay: g.ScaleDownDelay, ScaleToZeroAfter: g.ScaleToZeroAfter,
			BufferSize: g.BufferSize, BufferTimeout: g.BufferTimeout, KeepAlive: g.KeepAlive,
			ReadyPath: g.ReadyPath, ReadyInterval: g.ReadyInterval, StartupTimeout: g.StartupTimeout,
			// Its logged errors quote the command run or the URL requested, as expanded.
			Mask: func(s string) string { return cfg.MaskEnv(s, "services", name, "scaling") },
		}
		if x := g.Exec; x != nil && g.Executor == config.ExecutorExec {
			o.StopTimeout, o.Executor = x.StopTimeout, &scaling.Exec{Command: x.Command, Env: x.Env}
		} else if k := g.Kube; k != nil {
			o.Kube = &scaling.Kube{Namespace: k.Namespace, Deployment: k.Deployment, Service: k.Service, URL: k.URL}
			src := scaling.KubeSource{APIServer: k.APIServer, Kubeconfig: k.Kubeconfig, TokenFile: k.TokenFile, CAFile: k.CAFile}
			if err := o.Kube.Connect(src); err != nil {
				// Its files and URLs may come from the environment: shown as written.
				errs = append(errs, cfg.Errorf([]string{"services", name, "scaling", "kube"}, "services.%s.scaling.kube: %s", name, cfg.MaskEnv(err.Error(), "services", name, "scaling")))
				failed[name] = true
				continue
			}
		} else {
			continue
		}
		sl, err := scaling.New(o)
		if err != nil {
			errs = append(errs, cfg.Errorf([]string{"services", name, "scaling"}, "services.%s.scaling: %s", name, cfg.MaskEnv(err.Error(), "services", name, "scaling")))
			failed[name] = true
			continue
		}
		s.life.scalers[name] = &scalerEntry{scaler: sl, key: key, policy: policy}
	}
	return errs, failed
}

// startLifecycle starts what runs once the snapshot is in force: the scalers' replicas, the
// mirrors' series and their sending to this snapshot's shadow services (a mirror taken over
// sends the copies it queued before the reload there too, before the snapshot it was taken
// from retires and closes the pools this one does not keep), and the splits' gauges, which
// replace those of the splits they replace. Each scaler is bound to this snapshot's backends,
// which then follow its replicas' readiness (one taken over keeps the replaced snapshot's in
// step for the requests that snapshot still holds), and gets this snapshot's policy
// (scaling.Scaler.SetPolicy). A scaler whose service's servers are observed polls a
// replica's observation through the snapshot's group when the replica becomes ready (a scaler taken over from the snapshot
// before is pointed at this snapshot's group: the old one stops polling when retired).
func (s *Snapshot) startLifecycle() {
	for _, e := range s.life.splits {
		e.split.InForce()
	}
	for _, e := range s.life.mirrors {
		e.mirror.InForce(s.Services[e.conf.Service])
	}
	for name, e := range s.life.scalers {
		e.scaler.Bind(s.Services[name].Backends)
		e.scaler.SetPolicy(e.policy)
		if g := s.Workers[name]; g != nil {
			e.scaler.SetReadyHook(g.Refresh)
		} else {
			e.scaler.SetReadyHook(nil)
		}
		e.scaler.Start()
	}
}

// observeServingReplicas makes the workers group of each scaled service poll only the
// replicas that serve, before its first round: a slot with no replica would be logged as a
// worker that fails.
func (s *Snapshot) observeServingReplicas() {
	for name, e := range s.life.scalers {
		if g := s.Workers[name]; g != nil {
			g.SetServing(e.scaler.Serving)
		}
	}
}

// namedSeries returns the metrics whose series s names: its routers', backends' and health
// checks', and those of its mirrors, splits and scalers, made by s or taken over.
func (s *Snapshot) namedSeries() []metrics.Named {
	named := slices.Clone(s.series)
	for _, e := range s.life.mirrors {
		named = append(named, e.mirror.Metrics())
	}
	for _, e := range s.life.splits {
		named = append(named, e.split.Metrics())
	}
	for _, e := range s.life.scalers {
		named = append(named, e.scaler.Metrics())
	}
	return named
}

// Scaler returns the scaler of service name (nil when it does not scale), for the admin API.
func (s *Snapshot) Scaler(name string) *scaling.Scaler { return s.scalerOf(name) }

// scalerOf is Scaler, nil on a nil snapshot.
func (s *Snapshot) scalerOf(name string) *scaling.Scaler {
	if s == nil {
		return nil
	}
	if e := s.life.scalers[name]; e != nil {
		return e.scaler
	}
	return nil
}

// retireLifecycle stops the lifecycle runtime of a snapshot that next replaced: the mirrors,
// rollouts and scalers next did not take over (a mirror drops the copies it still queues, a
// scaler stops its replicas). With no next (the gateway stops) a mirror's copies being sent
// are cut too: nothing of the gateway outlives its drain.
func (s *Snapshot) retireLifecycle(next *Snapshot) {
	for name, e := range s.life.mirrors {
		switch {
		case next == nil:
			e.mirror.Stop()
		case next.life.mirrors[name] != e:
			e.mirror.Close()
		}
	}
	for name, e := range s.life.scalers {
		if n := next.scalerOf(name); n != e.scaler {
			e.scaler.Close()
		}
	}
	for name, e := range s.life.splits {
		if next == nil || next.life.splits[name] != e {
			e.split.Close()
		}
	}
}

// serverRef is one server of a service and the key path of its url.
type serverRef struct {
	srv  config.Server
	path []string
}

// serviceServers returns the load balancer settings of service name and its servers in
// backend order: the load_balancer's, those of its revisions one after the other, or the
// ports of its scaler's replicas (a service with revisions or scaling may write no
// load_balancer: the defaults apply). The load balancer
// is nil for a service that has neither.
func (s *Snapshot) serviceServers(name string, sc *config.Service) (*config.LoadBalancer, []serverRef) {
	lb := sc.LoadBalancer
	if e := s.life.scalers[name]; e != nil {
		if lb == nil {
			lb = config.DefaultLoadBalancer()
		}
		var out []serverRef
		for _, u := range e.scaler.URLs() {
			out = append(out, serverRef{config.Server{URL: u, Weight: config.DefaultWeight}, []string{"services", name, "scaling"}})
		}
		return lb, out
	}
	if len(sc.Revisions) == 0 {
		if lb == nil {
			return nil, nil
		}
		out := make([]serverRef, len(lb.Servers))
		for i, srv := range lb.Servers {
			out[i] = serverRef{srv, []string{"services", name, "load_balancer", "servers", strconv.Itoa(i), "url"}}
		}
		return lb, out
	}
	if lb == nil {
		lb = config.DefaultLoadBalancer()
	}
	var out []serverRef
	for i, r := range sc.Revisions {
		for j, srv := range r.Servers {
			out = append(out, serverRef{srv, []string{"services", name, "revisions", strconv.Itoa(i), "servers", strconv.Itoa(j), "url"}})
		}
	}
	return lb, out
}

// dottedPath writes a key path as in messages: services.s.revisions[0].servers[1].url.
func dottedPath(path []string) string {
	var b strings.Builder
	for i, p := range path {
		if _, err := strconv.Atoi(p); err == nil && i > 1 {
			b.WriteString("[" + p + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}
