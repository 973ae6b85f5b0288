package config

import (
	"math"
	"reflect"
	"strconv"
	"strings"
)

// intRange is what the loader accepts for an integer key: min to max, both included, and 0
// as well when orZero is set (0 then turns the key off, apart from the range).
type intRange struct {
	min, max int64
	orZero   bool
}

// anyInt is the range of a key the loader does not bound beyond its Go type.
var anyInt = intRange{min: math.MinInt64, max: math.MaxInt64}

// atLeast is the range of a key bounded below only.
func atLeast(n int64) intRange { return intRange{min: n, max: math.MaxInt64} }

// intRanges are the bounds the loader checks on integer keys, by schema key (see schemaKey).
// The checks themselves are in the validate functions, whose messages say what the ends
// mean; these let an error about a value of the wrong type name the range, and suggest only
// an integer inside it. TestIntRangesAgreeWithLoader probes both ends of each, and every
// integer key missing here for being unbounded.
var intRanges = map[string]intRange{
	"entrypoints.*.max_header_bytes":                                {min: MinMaxHeaderBytes, max: MaxMaxHeaderBytes},
	"entrypoints.*.max_body_bytes":                                  atLeast(1),
	"entrypoints.*.max_connections":                                 atLeast(0),
	"entrypoints.*.send_buffer_bytes":                               {min: 0, max: MaxSendBufferBytes},
	"entrypoints.*.event_loops":                                     {min: 0, max: 1024},
	"routers.*.priority":                                            atLeast(0),
	"services.*.load_balancer.servers[].weight":                     {min: 1, max: MaxWeight},
	"services.*.load_balancer.max_idle_conns":                       atLeast(0),
	"services.*.load_balancer.health_check.healthy_threshold":       {min: 1, max: MaxHealthRun},
	"services.*.load_balancer.health_check.unhealthy_threshold":     {min: 1, max: MaxHealthRun},
	"services.*.load_balancer.health_check.expected_status":         {min: 100, max: 599, orZero: true},
	"services.*.load_balancer.passive_health.consecutive_failures":  {min: 1, max: MaxPassiveRun},
	"services.*.load_balancer.passive_health.consecutive_successes": {min: 1, max: MaxPassiveRun},
	"services.*.load_balancer.passive_health.min_requests":          {min: 1, max: 1_000_000},
	"services.*.mirror.queue_size":                                  {min: 1, max: MaxMirrorQueueSize},
	"services.*.mirror.max_concurrent":                              {min: 1, max: MaxMirrorMaxConcurrent},
	"services.*.mirror.max_bytes":                                   {min: MinMirrorMaxBytes, max: MaxMirrorMaxBytes},
	"services.*.revisions[].servers[].weight":                       {min: 1, max: MaxWeight},
	"services.*.rollout.latency_threshold_ms":                       {min: 0, max: MaxRolloutLatencyThresholdMs},
	"services.*.rollout.ttft_p99_threshold_ms":                      {min: 0, max: MaxRolloutLatencyThresholdMs},
	"services.*.rollout.itl_p99_threshold_ms":                       {min: 0, max: MaxRolloutLatencyThresholdMs},
	"services.*.rollout.min_samples":                                {min: 1, max: MaxRolloutMinSamples},
	"services.*.scaling.min_replicas":                               {min: 0, max: MaxScalingReplicas},
	"services.*.scaling.max_replicas":                               {min: 1, max: MaxScalingReplicas},
	"services.*.scaling.container_concurrency":                      atLeast(1),
	"services.*.scaling.buffer_size":                                {min: 1, max: MaxScalingBufferSize},
	"models.*.targets.*.priority":                                   atLeast(0),
	"models.*.targets.*.weight":                                     {min: 1, max: MaxWeight},
	"models.*.targets.*.deployment_generation":                      atLeast(0),
	"models.*.scheduling.max_concurrent_requests":                   {min: 0, max: MaxMaxConcurrent},
	"models.*.scheduling.max_queued_requests":                       {min: 0, max: MaxMaxConcurrent},
	"models.*.scheduling.queue_timeout_ms":                          {min: 1, max: MaxQueueTimeoutMs},
	"models.*.scheduling.prefix_prefill_us_per_token":               {min: 1, max: MaxPrefixPrefillUsPerToken},
	"models.*.scheduling.distributed_serving.execution_timeout_ms":  {min: 1, max: MaxExecutionTimeoutMs},
	"models.*.scheduling.distributed_serving.prepare_batch_size":    {min: 1, max: MaxPrepareBatchSize},
	"consumers.*.generation":                                        atLeast(0),
}

// contains reports whether the loader accepts n.
func (r intRange) contains(n int64) bool {
	return n >= r.min && n <= r.max || r.orZero && n == 0
}

// want says what the range accepts: "an integer from 1 to 1000", "an integer of 0 or more".
func (r intRange) want() string {
	s := "an integer"
	switch {
	case r.min == math.MinInt64 && r.max == math.MaxInt64:
	case r.max == math.MaxInt64:
		s += " of " + strconv.FormatInt(r.min, 10) + " or more"
	case r.min == math.MinInt64:
		s += " of " + strconv.FormatInt(r.max, 10) + " or less"
	default:
		s += " from " + strconv.FormatInt(r.min, 10) + " to " + strconv.FormatInt(r.max, 10)
	}
	if r.orZero {
		s += ", or 0"
	}
	return s
}

// example returns intExample(v), or for a key that counts bytes (size) sizeExample(v), when
// the range holds it, else "": a suggestion is never a value the loader would refuse in turn.
func (r intRange) example(v any, size bool) string {
	ex := intExample(v)
	if ex == "" && size {
		ex = sizeExample(v)
	}
	if n, err := strconv.ParseInt(ex, 10, 64); err != nil || !r.contains(n) {
		return ""
	}
	return ex
}

// rangeOf returns the range of the integer key at path.
func rangeOf(path []string) intRange {
	if r, ok := intRanges[schemaKey(path)]; ok {
		return r
	}
	return anyInt
}

// schemaKey names the key at path as the schema does, with a table name as "*" and an
// array's elements as "[]" after its key: "services.*.load_balancer.servers[].weight". It
// follows Config's types, so that a table named "0" is not taken for an array element; it is
// "" for a path outside them.
func schemaKey(path []string) string {
	t := reflect.TypeOf(Config{})
	var b strings.Builder
	for _, seg := range path {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Map:
			b.WriteString(".*")
		case reflect.Slice:
			b.WriteString("[]")
		case reflect.Struct:
			fs, _, _ := fields(t)
			f, ok := fs[seg]
			if !ok {
				return ""
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(seg)
			t = f.typ
			continue
		default:
			return ""
		}
		t = t.Elem()
	}
	return b.String()
}
