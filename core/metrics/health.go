package metrics

import vm "github.com/VictoriaMetrics/metrics"

// Health holds the health metrics of one server of a service: active check results and
// ejections. They outlive config snapshots, and are exposed from Publish on. A nil *Health
// records nothing.
type Health struct {
	backend, service   *series
	checkOK, checkFail *vm.Counter
	ejectedActive      *vm.Counter
	ejectedPassive     *vm.Counter
	refused            *vm.Counter
	emptied            *vm.Counter
}

// ForHealth returns the health metrics of backend (a server URL as configured) of service.
func ForHealth(service, backend string) *Health {
	l := labels("service", service, "backend", backend)
	sl := labels("service", service)
	x, sx := seriesOf("backend{"+l+"}"), seriesOf("service{"+sl+"}")
	return &Health{
		backend:        x,
		service:        sx,
		checkOK:        x.s.GetOrCreateCounter(`sluice_health_checks_total{` + l + `,result="ok"}`),
		checkFail:      x.s.GetOrCreateCounter(`sluice_health_checks_total{` + l + `,result="fail"}`),
		ejectedActive:  x.s.GetOrCreateCounter(`sluice_backend_ejections_total{` + l + `,reason="active"}`),
		ejectedPassive: x.s.GetOrCreateCounter(`sluice_backend_ejections_total{` + l + `,reason="passive"}`),
		refused:        x.s.GetOrCreateCounter(`sluice_backend_ejections_refused_total{` + l + `}`),
		emptied:        sx.s.GetOrCreateCounter(`sluice_service_no_healthy_backend_total{` + sl + `}`),
	}
}

// Publish exposes the health series once a configuration naming the backend is in force.
// Idempotent.
func (h *Health) Publish() {
	if h != nil {
		h.backend.publish()
		h.service.publish()
	}
}

func (h *Health) groups() []*series {
	if h == nil {
		return nil
	}
	return []*series{h.backend, h.service}
}

// Check counts one active health check of the backend.
func (h *Health) Check(ok bool) {
	if h == nil {
		return
	}
	if ok {
		h.checkOK.Inc()
	} else {
		h.checkFail.Inc()
	}
}

// Ejected counts the backend taken out of rotation, by an active check (active) or by passive
// health (request outcomes).
func (h *Health) Ejected(active bool) {
	if h == nil {
		return
	}
	if active {
		h.ejectedActive.Inc()
	} else {
		h.ejectedPassive.Inc()
	}
}

// EjectionRefused counts a passive ejection not made because the backend was the last one of
// its service in rotation (it keeps serving: a failing backend beats none).
func (h *Health) EjectionRefused() {
	if h != nil {
		h.refused.Inc()
	}
}

// Emptied counts an active check that took the last healthy backend of the service out: the
// service has none left.
func (h *Health) Emptied() {
	if h != nil {
		h.emptied.Inc()
	}
}
