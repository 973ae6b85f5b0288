package metrics

import vm "github.com/VictoriaMetrics/metrics"

// Health holds the health metrics of one server of a service: active check results and
// ejections. They outlive config snapshots. A nil *Health records nothing.
type Health struct {
	checkOK, checkFail *vm.Counter
	ejectedActive      *vm.Counter
	ejectedPassive     *vm.Counter
	refused            *vm.Counter
	emptied            *vm.Counter
}

// ForHealth returns the health metrics of backend (a server URL as configured) of service.
func ForHealth(service, backend string) *Health {
	l := labels("service", service, "backend", backend)
	return &Health{
		checkOK:        vm.GetOrCreateCounter(`sluice_health_checks_total{` + l + `,result="ok"}`),
		checkFail:      vm.GetOrCreateCounter(`sluice_health_checks_total{` + l + `,result="fail"}`),
		ejectedActive:  vm.GetOrCreateCounter(`sluice_backend_ejections_total{` + l + `,reason="active"}`),
		ejectedPassive: vm.GetOrCreateCounter(`sluice_backend_ejections_total{` + l + `,reason="passive"}`),
		refused:        vm.GetOrCreateCounter(`sluice_backend_ejections_refused_total{` + l + `}`),
		emptied:        vm.GetOrCreateCounter(`sluice_service_no_healthy_backend_total{` + labels("service", service) + `}`),
	}
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
