package config

import (
	"strings"
	"time"

	"github.com/sluice-gw/sluice/core/health"
)

// HealthCheck is [services.<name>.load_balancer.health_check]: active checks of each server
// (docs/config.md#health-checks). A server that fails UnhealthyThreshold probes in a row gets
// no requests until it passes HealthyThreshold in a row.
type HealthCheck struct {
	// Kind is what is checked: "http" (Path, ExpectedStatus), or an engine's own readiness:
	// "vllm", "sglang", "llama.cpp" (GET /health; 503 while the model loads), "ollama"
	// (GET /api/version). Default "http".
	Kind string `toml:"kind"`
	// Path is the probe's path, with an optional query. Default: the kind's readiness path
	// ("/health" for "http", vLLM, SGLang and llama.cpp; "/api/version" for Ollama).
	Path string `toml:"path"`
	// Interval is the time between two probes of a server. Default 10s, range 100ms..1h.
	Interval time.Duration `toml:"interval"`
	// Timeout bounds one probe, connect included; less than Interval. Default 2s (or Interval
	// when that is shorter).
	Timeout time.Duration `toml:"timeout"`
	// HealthyThreshold consecutive passed probes make a server healthy. Default 2, 1..100.
	HealthyThreshold int `toml:"healthy_threshold"`
	// UnhealthyThreshold consecutive failed probes make it unhealthy. Default 3, 1..100.
	UnhealthyThreshold int `toml:"unhealthy_threshold"`
	// ExpectedStatus is the status of a passed probe; 0 (the default) accepts any 2xx.
	ExpectedStatus int `toml:"expected_status"`
	// Host, when set, is the probe's Host header. Default: the server's host:port.
	Host string `toml:"host"`
}

// PassiveHealth is [services.<name>.load_balancer.passive_health]: how the outcomes of real
// requests eject a server. Always on; these keys tune it.
type PassiveHealth struct {
	// ConsecutiveFailures failed requests in a row (5xx, timeouts, resets, streams cut after
	// their head) eject a server. Default 5, 1..1000.
	ConsecutiveFailures int `toml:"consecutive_failures"`
	// ConsecutiveSuccesses successful requests in a row after an ejection readmit the server
	// for good. Default 2, 1..1000.
	ConsecutiveSuccesses int `toml:"consecutive_successes"`
	// ErrorRate ejects a server whose share of failed requests in ErrorWindow exceeds it,
	// 0..1; 0 turns the error-rate check off. Default 0.5.
	ErrorRate float64 `toml:"error_rate"`
	// ErrorWindow is the window of the error rate. Default 60s, range 1s..1h.
	ErrorWindow time.Duration `toml:"error_window"`
	// MinRequests is the fewest requests in the window before the error rate judges. Default
	// 20, 1..1000000.
	MinRequests int `toml:"min_requests"`
	// Ejection is how long a first ejection lasts, doubled for each further one before a
	// readmission. Default 10s, range 100ms..1h.
	Ejection time.Duration `toml:"ejection"`
	// MaxEjection bounds an ejection. Default 5m, at least Ejection, up to 24h.
	MaxEjection time.Duration `toml:"max_ejection"`
}

// Bounds of health checks.
const (
	MinHealthInterval = 100 * time.Millisecond
	MaxHealthInterval = time.Hour
	MaxHealthRun      = 100
	MaxPassiveRun     = 1000
)

func (h *HealthCheck) setDefaults() {
	h.Kind = health.KindHTTP
	h.Interval = health.DefaultInterval
	h.Timeout = health.DefaultTimeout
	h.HealthyThreshold = health.DefaultHealthyThreshold
	h.UnhealthyThreshold = health.DefaultUnhealthyThreshold
}

func (p *PassiveHealth) setDefaults() {
	d := health.DefaultPassive()
	*p = PassiveHealth{
		ConsecutiveFailures: d.ConsecutiveFailures, ConsecutiveSuccesses: d.ConsecutiveSuccesses,
		ErrorRate: d.ErrorRate, ErrorWindow: d.ErrorWindow, MinRequests: d.MinRequests,
		Ejection: d.Ejection, MaxEjection: d.MaxEjection,
	}
}

// Spec returns the active check as the health package runs it.
func (h *HealthCheck) Spec() health.Spec {
	return health.Spec{Path: h.Path, Interval: h.Interval, Timeout: h.Timeout, HealthyThreshold: h.HealthyThreshold,
		UnhealthyThreshold: h.UnhealthyThreshold, ExpectedStatus: h.ExpectedStatus, Host: h.Host}
}

// Spec returns passive health as the health package runs it.
func (p *PassiveHealth) Spec() health.PassiveSpec {
	return health.PassiveSpec{ConsecutiveFailures: p.ConsecutiveFailures, ConsecutiveSuccesses: p.ConsecutiveSuccesses,
		ErrorRate: p.ErrorRate, ErrorWindow: p.ErrorWindow, MinRequests: p.MinRequests, Ejection: p.Ejection, MaxEjection: p.MaxEjection}
}

// validateHealth checks the active and passive health of service name.
func (c *Config) validateHealth(e *errs, name string, lb *LoadBalancer) {
	if h := lb.HealthCheck; h != nil {
		hp := []string{"services", name, "load_balancer", "health_check"}
		at := func(k string) Position { return c.ValuePos(append(append([]string(nil), hp...), k)...) }
		where := "services." + name + ".load_balancer.health_check"
		if !oneOf(h.Kind, health.Kinds) {
			e.add(at("kind"), "%s.kind %q: %s", where, h.Kind, wantOneOf(h.Kind, health.Kinds))
		}
		if h.Path == "" && c.missing(append(hp, "path")...) {
			h.Path = health.DefaultPath(h.Kind)
		} else if !strings.HasPrefix(h.Path, "/") || strings.ContainsAny(h.Path, " #\r\n") {
			e.add(at("path"), "%s.path %q: want an absolute path such as \"/health\"", where, h.Path)
		}
		if h.Interval < MinHealthInterval || h.Interval > MaxHealthInterval {
			e.add(at("interval"), "%s.interval %v: want %v..%v", where, h.Interval, MinHealthInterval, MaxHealthInterval)
		}
		if c.missing(append(hp, "timeout")...) && h.Timeout >= h.Interval {
			h.Timeout = h.Interval * 9 / 10
		}
		if h.Timeout <= 0 || h.Timeout >= h.Interval {
			e.add(at("timeout"), "%s.timeout %v: want more than 0 and less than interval (%v)", where, h.Timeout, h.Interval)
		}
		if h.HealthyThreshold < 1 || h.HealthyThreshold > MaxHealthRun {
			e.add(at("healthy_threshold"), "%s.healthy_threshold %d: want 1..%d", where, h.HealthyThreshold, MaxHealthRun)
		}
		if h.UnhealthyThreshold < 1 || h.UnhealthyThreshold > MaxHealthRun {
			e.add(at("unhealthy_threshold"), "%s.unhealthy_threshold %d: want 1..%d", where, h.UnhealthyThreshold, MaxHealthRun)
		}
		if s := h.ExpectedStatus; s != 0 && (s < 100 || s > 599) {
			e.add(at("expected_status"), "%s.expected_status %d: want a status 100..599, or 0 for any 2xx", where, s)
		}
		if h.Host != "" && strings.ContainsAny(h.Host, " /\r\n") {
			e.add(at("host"), "%s.host %q: want a host[:port]", where, h.Host)
		}
	}
	p := &lb.PassiveHealth
	pp := []string{"services", name, "load_balancer", "passive_health"}
	at := func(k string) Position { return c.ValuePos(append(append([]string(nil), pp...), k)...) }
	where := "services." + name + ".load_balancer.passive_health"
	if p.ConsecutiveFailures < 1 || p.ConsecutiveFailures > MaxPassiveRun {
		e.add(at("consecutive_failures"), "%s.consecutive_failures %d: want 1..%d", where, p.ConsecutiveFailures, MaxPassiveRun)
	}
	if p.ConsecutiveSuccesses < 1 || p.ConsecutiveSuccesses > MaxPassiveRun {
		e.add(at("consecutive_successes"), "%s.consecutive_successes %d: want 1..%d", where, p.ConsecutiveSuccesses, MaxPassiveRun)
	}
	if !(p.ErrorRate >= 0 && p.ErrorRate <= 1) {
		e.add(at("error_rate"), "%s.error_rate %v: want 0 (off) to 1", where, p.ErrorRate)
	}
	if p.ErrorWindow < time.Second || p.ErrorWindow > time.Hour {
		e.add(at("error_window"), "%s.error_window %v: want 1s..1h", where, p.ErrorWindow)
	}
	if p.MinRequests < 1 || p.MinRequests > 1_000_000 {
		e.add(at("min_requests"), "%s.min_requests %d: want 1..1000000", where, p.MinRequests)
	}
	if p.Ejection < 100*time.Millisecond || p.Ejection > time.Hour {
		e.add(at("ejection"), "%s.ejection %v: want 100ms..1h", where, p.Ejection)
	}
	if p.MaxEjection < p.Ejection || p.MaxEjection > 24*time.Hour {
		e.add(at("max_ejection"), "%s.max_ejection %v: want ejection (%v) to 24h", where, p.MaxEjection, p.Ejection)
	}
}
