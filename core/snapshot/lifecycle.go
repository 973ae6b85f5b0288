package snapshot

import (
	"log/slog"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/lifecycle/mirror"
)

// lifecycle is the runtime of the services' lifecycle keys in one snapshot: their mirrors.
type lifecycle struct {
	mirrors []*mirror.Mirror
}

// compileLifecycle attaches the lifecycle runtime to the compiled services: a mirror for each
// service with a [services.<name>.mirror]. Nothing starts here: a mirror starts its senders
// with its first copy, so a snapshot that is compiled and discarded leaves nothing running.
func (s *Snapshot) compileLifecycle(cfg *config.Config) {
	for _, name := range s.ServiceNames {
		sc, svc := cfg.Services[name], s.Services[name]
		if mc := sc.Mirror; mc != nil && s.Services[mc.Service] != nil && mc.Percentage > 0 {
			o := mirror.Options{
				Service: name, Shadow: mc.Service, Percentage: mc.Percentage, Model: mc.Model,
				QueueSize: mc.QueueSize, MaxConcurrent: mc.MaxConcurrent, Timeout: mc.Timeout,
			}
			if mc.LogSummary {
				o.Summary = slog.Default()
			}
			m := mirror.New(o, s.Services[mc.Service])
			svc.Mirror = m
			s.life.mirrors = append(s.life.mirrors, m)
		}
	}
}

// retireLifecycle stops the lifecycle runtime of a snapshot that was replaced.
func (s *Snapshot) retireLifecycle() {
	for _, m := range s.life.mirrors {
		m.Close()
	}
}
