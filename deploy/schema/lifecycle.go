package schema

import "github.com/sluice-gw/sluice/core/config"

// optionalKeys are keys the minimal configuration cannot go without but that are optional
// in general: a revision's traffic_percent (0 by default; only the sum of the shares must
// be 100), and load_balancer.servers, which a service with revisions or scaling leaves out
// (the schema cannot look at the service's other keys from there: the loader checks).
var optionalKeys = map[string]bool{
	"services.*.revisions[].traffic_percent": true,
	"services.*.load_balancer.servers":       true,
}

// The lifecycle keys' constraints, as core/config/lifecycle.go checks them, and the keys
// that stand in for each other: a service's servers are in its load_balancer or in its
// revisions.
func init() {
	requiredUnless["services.*.load_balancer"] = "revisions,scaling"
	requiredUnless["services.*.revisions"] = "load_balancer,scaling"
	requiredUnless["services.*.scaling"] = "load_balancer,revisions"

	for k, c := range map[string]constraint{
		"services.*.mirror.percentage":             {min: "0", max: "100"},
		"services.*.mirror.queue_size":             {min: "1", max: itoa(config.MaxMirrorQueueSize)},
		"services.*.mirror.max_concurrent":         {min: "1", max: itoa(config.MaxMirrorMaxConcurrent)},
		"services.*.revisions[].name":              {pattern: NamePattern},
		"services.*.revisions[].servers":           {minItems: 1},
		"services.*.revisions[].servers[].url":     {pattern: URLPattern},
		"services.*.revisions[].servers[].weight":  {min: "1", max: itoa(config.MaxWeight)},
		"services.*.rollout.step_interval_secs":    {min: "0.01", max: "86400"},
		"services.*.rollout.error_rate_threshold":  {min: "0", max: "1"},
		"services.*.rollout.latency_threshold_ms":  {min: "0", max: itoa(config.MaxRolloutLatencyThresholdMs)},
		"services.*.rollout.ttft_p99_threshold_ms": {min: "0", max: itoa(config.MaxRolloutLatencyThresholdMs)},
		"services.*.rollout.itl_p99_threshold_ms":  {min: "0", max: itoa(config.MaxRolloutLatencyThresholdMs)},
		"services.*.scaling.min_replicas":          {min: "0"}, // at most max_replicas: the loader checks
		"services.*.scaling.max_replicas":          {min: "1", max: itoa(config.MaxScalingReplicas)},
		"services.*.scaling.container_concurrency": {min: "1"},
		"services.*.scaling.buffer_size":           {min: "1", max: itoa(config.MaxScalingBufferSize)},
		"services.*.scaling.executor":              {enum: []string{config.ExecutorExec, config.ExecutorKube}},
		"services.*.rollout.min_samples":           {min: "1", max: itoa(config.MaxRolloutMinSamples)},
	} {
		constraints[k] = c
	}
}
