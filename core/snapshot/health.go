package snapshot

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net/http"
	"strings"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/health"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// healthLB is a backend whose up state follows an active check's target.
type healthLB struct {
	t  *health.Target
	lb *balancer.Backend
}

// compileHealth gives service name its passive health, judging on from the servers' states
// (one per backend, shared with prev for the servers it had), and, with a health_check, the
// active checker of its servers, whose judged states it takes over from prev by server.
// Probes of https servers verify them as requests do: with the service's CA file (roots, nil
// for the system's; rootsKey changes with its content) and server name.
func (s *Snapshot) compileHealth(cfg *config.Config, name string, svc *pipeline.Service, states []*serverState, prev *Snapshot, roots *x509.CertPool, rootsKey string) {
	lb, servers := s.serviceServers(name, cfg.Services[name])
	members := make([]health.Member, len(svc.Backends))
	hm := make([]*metrics.Health, len(svc.Backends))
	for i, b := range svc.Backends {
		hm[i] = metrics.ForHealth(name, b.URL)
		s.series = append(s.series, hm[i])
		members[i] = health.Member{LB: b.LB, Metrics: hm[i], State: states[i].passive}
	}
	svc.Health = health.NewPassive(lb.PassiveHealth.Spec(), name, members, slog.Default())
	hc := lb.HealthCheck
	if hc == nil || s.life.scalers[name] != nil {
		return // a scaled service's replicas are judged ready by its scaler
	}
	if s.healthTargets == nil {
		s.healthTargets = map[string]*health.Target{}
	}
	targets := make([]*health.Target, len(svc.Backends))
	for i, b := range svc.Backends {
		// The same server as passive health's (its service, scheme and address, wherever it
		// is listed and however its URL is written; a listing of its own when it is listed
		// twice), and a changed check path starts over.
		key := states[i].key + "\x00" + hc.Path
		var t *health.Target
		if prev != nil {
			t = prev.healthTargets[key]
		}
		switch {
		case t == nil:
			// A server starts in rotation: the first probe runs at once, and a gateway that
			// refused every request until then would turn a reload into an outage.
			t = health.NewTarget(b.URL, servers[i].srv.URL, true)
		case t.URL != servers[i].srv.URL || t.Name != b.URL:
			// Its URL is written another way: probe that one, judged as the server was.
			t = health.NewTarget(b.URL, servers[i].srv.URL, t.Healthy())
		}
		s.healthTargets[key] = t
		targets[i] = t
		b.LB.SetDown(!t.Healthy())
		s.healthLBs = append(s.healthLBs, healthLB{t, b.LB})
	}
	byTarget := map[*health.Target]int{}
	for i, t := range targets {
		byTarget[t] = i
	}
	log := slog.Default()
	probed := make([]string, len(states))
	for i, st := range states {
		probed[i] = st.key
	}
	s.checkers = append(s.checkers, health.New(hc.Spec(), s.healthClient(name, probed, lb, prev, roots, rootsKey), targets, func(r health.Result) {
		i := byTarget[r.Target]
		b := svc.Backends[i]
		hm[i].Check(r.Err == nil)
		if !r.Changed {
			return
		}
		healthy := r.Target.Healthy()
		b.LB.SetDown(!healthy)
		if healthy {
			log.Info("backend healthy again", "service", name, "backend", b.URL)
			return
		}
		hm[i].Ejected(true)
		// The probe's error quotes the URL probed, as expanded: it is shown, as b.URL is, with
		// the ${NAME}s the configuration writes, so no value from the environment is logged.
		log.Warn("backend unhealthy: out of rotation", "service", name, "backend", b.URL, "error", cfg.MaskEnv(r.Err.Error(), "services", name))
		for _, o := range svc.Backends {
			if !o.LB.Down() {
				return
			}
		}
		hm[i].Emptied()
		log.Error("service has no healthy backend: its requests get 503 until one passes its checks", "service", name)
	}))
}

// healthClient returns the client of service name's checker, which probes the servers probed
// (their identities, serverState.key): prev's when it probes the same servers with the same
// TLS settings, else a new one. A client is not taken over by a checker of other servers: the
// connections it keeps to the servers no longer probed close with the replaced checker
// (stopHealth) instead of after the client's idle timeout.
func (s *Snapshot) healthClient(name string, probed []string, lb *config.LoadBalancer, prev *Snapshot, roots *x509.CertPool, rootsKey string) *http.Client {
	serverName := ""
	if lb.TLS != nil {
		serverName = lb.TLS.ServerName
	}
	key := name + "\x00" + rootsKey + "\x00" + serverName + "\x00" + strings.Join(probed, "\x00")
	c := prev.healthClientOf(key)
	if c == nil {
		c = health.NewClient(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: serverName})
	}
	if s.healthClients == nil {
		s.healthClients = map[string]*http.Client{}
	}
	s.healthClients[key] = c
	return c
}

// healthClientOf returns the checker client of s under key (nil for a nil s).
func (s *Snapshot) healthClientOf(key string) *http.Client {
	if s == nil {
		return nil
	}
	return s.healthClients[key]
}

// StartHealth begins the active checks of s (Live.Activate calls it), after setting each
// backend's state from its check's latest judgement. It is idempotent.
func (s *Snapshot) StartHealth() {
	s.startHealth.Do(func() {
		for _, h := range s.healthLBs {
			h.lb.SetDown(!h.t.Healthy()) // the previous checker may have judged since Compile
		}
		for _, c := range s.checkers {
			c.Start()
		}
	})
}

// stopHealth ends the active checks of s: no probe goes out after it returns, so servers a
// reload removed get none. The clients next does not take over close their connections at
// once rather than after their idle timeout, which reloads in a row would outpace.
func (s *Snapshot) stopHealth(next *Snapshot) {
	for _, c := range s.checkers {
		c.Stop()
	}
	for k, c := range s.healthClients {
		if next.healthClientOf(k) != c {
			c.CloseIdleConnections()
		}
	}
}
