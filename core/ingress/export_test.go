package ingress

import "time"

// WithLinger returns set with the bounds of its lingering closes replaced, so that tests can
// watch a bound end one quickly; a zero bound keeps its default.
func WithLinger(set Settings, total, idle time.Duration, maxBytes int64) Settings {
	set.linger = lingerLimits{total: total, idle: idle, bytes: maxBytes}
	return set
}
