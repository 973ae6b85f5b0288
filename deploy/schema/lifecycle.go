package schema

import "github.com/sluice-gw/sluice/core/config"

// The lifecycle keys' constraints, as core/config/lifecycle.go checks them.
func init() {
	for k, c := range map[string]constraint{
		"services.*.mirror.percentage":     {min: "0", max: "100"},
		"services.*.mirror.queue_size":     {min: "1", max: itoa(config.MaxMirrorQueueSize)},
		"services.*.mirror.max_concurrent": {min: "1", max: itoa(config.MaxMirrorMaxConcurrent)},
	} {
		constraints[k] = c
	}
}
