package scaling

import "math"

// Desired is the number of replicas a service's load asks for (Knative's rule, as the
// seed document "弹性扩缩容：数字背后的原理" works it through):
//
//	desired = ⌈(inFlight + queued) / (concurrency × utilization)⌉, clamped to [min, max]
//
// inFlight counts the requests the replicas are serving, queued those waiting for one;
// concurrency is how many requests a replica serves at once and utilization (0 < u <= 1) the
// share of it aimed at, which leaves the rest for a burst while a new replica starts. With no
// load the answer is min (0 lets the service scale to zero).
func Desired(inFlight, queued, concurrency int, utilization float64, min, max int) int {
	capacity := float64(concurrency) * utilization
	if capacity <= 0 {
		return max
	}
	load := float64(inFlight + queued)
	// The quotient is rounded to 9 decimals first, so that 5.6 × 2 / 5.6 is 2, not 2.0000001.
	d := int(math.Ceil(math.Round(load/capacity*1e9) / 1e9))
	if d < min {
		d = min
	}
	if d > max {
		d = max
	}
	return d
}
