package harness

import "time"

// preciseWindow is how close to an open-loop request's intended send time a
// worker switches from time.Sleep to a precise sleep. Go's timers can fire up
// to a millisecond late in a process that is otherwise idle, because the
// runtime's netpoller waits in whole milliseconds (runtime/netpoll_epoll.go
// rounds sub-millisecond waits up to 1 ms); a load generator that sleeps
// with time.Sleep alone sends ~0.5 ms late on average at moderate rates and
// charges that lag to every target's latency.
const preciseWindow = 2 * time.Millisecond

// usePacer turns the precise sleep on; BenchmarkOpenLoopSendLag turns it off
// to measure what time.Sleep alone does.
var usePacer = true

// waitUntil blocks until the run clock reaches t (ns) or the run stops:
// time.Sleep in slices of at most maxSleepSlice while far away, then a
// precise sleep (pacer, when p is not nil) for the last preciseWindow. It reports
// whether t was still ahead when called (the worker was free in time), so
// that only such sends count towards the generator's send lag.
func (r *runState) waitUntil(t int64, p *pacer) (waited bool) {
	for !r.stopping.Load() {
		d := time.Duration(t - r.clock())
		switch {
		case d <= 0:
			return waited
		case p == nil:
			time.Sleep(min(d, maxSleepSlice))
		case d > preciseWindow:
			time.Sleep(min(d-preciseWindow, maxSleepSlice))
		default:
			p.sleep(d)
		}
		waited = true
	}
	return waited
}
