package config

import "time"

// This file holds the service keys of the model lifecycle: traffic mirroring
// ([services.<name>.mirror]). Their runtime is in core/lifecycle.

// Defaults and bounds of [services.<name>.mirror].
const (
	DefaultMirrorQueueSize     = 64
	DefaultMirrorMaxConcurrent = 8
	DefaultMirrorTimeout       = 2 * time.Minute
	MaxMirrorQueueSize         = 1 << 16
	MaxMirrorMaxConcurrent     = 1024
)

// Mirror is [services.<name>.mirror]: a copy of a share of the service's requests, body
// included, goes to another service (a shadow) fire-and-forget. The shadow's answers are read
// and discarded; the caller only ever gets the primary's.
type Mirror struct {
	// Service names the shadow, a [services.<name>] table other than this one; required.
	Service string `toml:"service"`
	// Percentage is the share of requests copied, 0..100 (fractions allowed), exact over
	// every window of 100/gcd requests: 10 copies one request in ten, evenly spaced.
	// Default 0 (none).
	Percentage float64 `toml:"percentage"`
	// Model, when set, replaces the "model" of an OpenAI request body sent to the shadow (a
	// candidate model sees the real traffic of the model it would replace). Default: the
	// body goes as the primary got it.
	Model string `toml:"model"`
	// QueueSize bounds the copies waiting for a sender; a copy arriving when it is full is
	// dropped (counted). Default 64, range 1..65536.
	QueueSize int `toml:"queue_size"`
	// MaxConcurrent bounds the copies in flight to the shadow at once. Default 8, range
	// 1..1024.
	MaxConcurrent int `toml:"max_concurrent"`
	// Timeout bounds one copy's exchange with the shadow, head and body. Default 2m.
	Timeout time.Duration `toml:"timeout"`
	// LogSummary logs one line per shadow answer: the shadow, backend, status, latency to
	// the head, total latency and body length, never content. Default false.
	LogSummary bool `toml:"log_summary"`
}

func (m *Mirror) setDefaults() {
	m.QueueSize = DefaultMirrorQueueSize
	m.MaxConcurrent = DefaultMirrorMaxConcurrent
	m.Timeout = DefaultMirrorTimeout
}

// validateLifecycle checks the lifecycle keys of service name.
func (c *Config) validateLifecycle(e *errs, name string, s *Service) {
	if m := s.Mirror; m != nil {
		mp := []string{"services", name, "mirror"}
		at := func(key string) Position { return c.ValuePos(append(append([]string(nil), mp...), key)...) }
		switch _, ok := c.Services[m.Service]; {
		case m.Service == "" && c.missing(append(mp, "service")...):
			e.add(c.Pos(mp...), "services.%s.mirror.service is required (the name of the shadow's [services.<name>] table)", name)
		case m.Service == name:
			e.add(at("service"), "services.%s.mirror.service: a service cannot mirror to itself", name)
		case !ok && m.Service != "":
			e.add(at("service"), "services.%s.mirror.service: no service named %q%s", name, c.shown(m.Service, append(mp, "service")...), didYouMean(m.Service, sortedNames(c.Services)))
		}
		if !(m.Percentage >= 0 && m.Percentage <= 100) {
			e.add(at("percentage"), "services.%s.mirror.percentage %v: want 0..100", name, m.Percentage)
		}
		if m.QueueSize < 1 || m.QueueSize > MaxMirrorQueueSize {
			e.add(at("queue_size"), "services.%s.mirror.queue_size %d: want 1..%d", name, m.QueueSize, MaxMirrorQueueSize)
		}
		if m.MaxConcurrent < 1 || m.MaxConcurrent > MaxMirrorMaxConcurrent {
			e.add(at("max_concurrent"), "services.%s.mirror.max_concurrent %d: want 1..%d", name, m.MaxConcurrent, MaxMirrorMaxConcurrent)
		}
	}
}
