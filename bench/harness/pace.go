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

// maxPacers caps the timerfds of a run: only the workers within preciseWindow of their send
// need one at a time (about rate × 2 ms of them), and each is a file descriptor that the
// connections need more. A worker that finds none free sleeps with time.Sleep.
const maxPacers = 64

// usePacer turns the precise sleep on; BenchmarkOpenLoopSendLag turns it off
// to measure what time.Sleep alone does.
var usePacer = true

// waitUntil blocks until the run clock reaches t (ns) or the run stops:
// time.Sleep in slices of at most maxSleepSlice while far away, then a
// precise sleep (a pacer borrowed from r.pacers) for the last preciseWindow. It reports
// whether t was still ahead when called (the worker was free in time), so
// that only such sends count towards the generator's send lag.
func (r *runState) waitUntil(t int64) (waited bool) {
	for !r.stopping.Load() {
		d := time.Duration(t - r.clock())
		switch {
		case d <= 0:
			return waited
		case d > preciseWindow:
			time.Sleep(min(d-preciseWindow, maxSleepSlice))
		default:
			if p := r.pacers.get(); p != nil {
				p.sleep(d)
				r.pacers.put(p)
			} else {
				time.Sleep(d)
			}
		}
		waited = true
	}
	return waited
}

// pacerPool lends pacers to workers; a nil *pacerPool lends none.
type pacerPool struct {
	free chan *pacer
	all  []*pacer
}

// newPacerPool creates up to n pacers (fewer when timerfds run out).
func newPacerPool(n int) *pacerPool {
	pp := &pacerPool{free: make(chan *pacer, n)}
	for range n {
		p := newPacer()
		if p == nil {
			break
		}
		pp.all = append(pp.all, p)
		pp.free <- p
	}
	return pp
}

// get returns a free pacer, or nil when none is free.
func (pp *pacerPool) get() *pacer {
	if pp == nil {
		return nil
	}
	select {
	case p := <-pp.free:
		return p
	default:
		return nil
	}
}

func (pp *pacerPool) put(p *pacer) { pp.free <- p }

// close releases the pacers' timerfds; call it after every worker has stopped.
func (pp *pacerPool) close() {
	for _, p := range pp.all {
		p.close()
	}
}
