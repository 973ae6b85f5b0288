package accesslog

import (
	"bytes"
	"context"
	"io"
	"sync"

	"github.com/sluice-gw/sluice/core/metrics"
)

// pendingMaxBytes bounds the lines of one destination waiting for its writer: about 4,000
// lines of a plain route. A destination that takes less than this for longer than the
// writer's backlog lasts (a full disk, a log pipe nobody reads) loses lines, counted in
// sluice_access_log_dropped_total, instead of holding up requests.
const pendingMaxBytes = 1 << 20

// sink is an access log destination written by a goroutine of its own, so that completing a
// request never waits on a disk or a pipe (and may run on an event loop): Write appends a
// line to a buffer of at most pendingMaxBytes, or drops it when the buffer is full, and
// returns at once; the writer writes the buffer out in one call, while the next lines
// gather in a second buffer. Lines keep their order. The slog handler calls Write once per
// line, so a line is kept or dropped whole.
type sink struct {
	w    io.Writer
	wake chan struct{} // a token when lines wait

	mu      sync.Mutex
	buf     []byte // lines waiting for the writer
	spare   []byte // the buffer the writer wrote last, reused
	writing bool
	waiters []chan struct{} // Flush calls, closed when nothing waits and nothing is being written
}

func newSink(w io.Writer) *sink {
	s := &sink{w: w, wake: make(chan struct{}, 1)}
	go s.run()
	return s
}

// Write implements io.Writer: p is one line. It never blocks on the destination and never
// fails; a line that does not fit is dropped and counted.
func (s *sink) Write(p []byte) (int, error) { return s.write(p, metrics.AccessLogDropped) }

// write is Write, counting a dropped line with dropped.
func (s *sink) write(p []byte, dropped func()) (int, error) {
	s.mu.Lock()
	if len(s.buf)+len(p) > pendingMaxBytes {
		s.mu.Unlock()
		dropped()
		return len(p), nil
	}
	s.buf = append(s.buf, p...)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default: // the writer has a token already
	}
	return len(p), nil
}

// run writes the lines as they come, for the life of the process (a destination is shared
// by every configuration that names it).
func (s *sink) run() {
	var out []byte
	for range s.wake {
		for {
			s.mu.Lock()
			if out != nil {
				s.spare, out = out[:0], nil
			}
			if len(s.buf) == 0 {
				s.writing = false
				for _, ch := range s.waiters {
					close(ch)
				}
				s.waiters = s.waiters[:0]
				s.mu.Unlock()
				break
			}
			out, s.buf, s.spare = s.buf, s.spare, nil
			s.writing = true
			s.mu.Unlock()
			writeLines(s.w, out)
		}
	}
}

// atomicWriteBytes is the most bytes one write to a pipe puts in whole, never interleaved
// with another writer's (PIPE_BUF on Linux, POSIX's least is 512): the gateway's own log may
// share a pipe with the access log ("stderr"), so batches go out in pieces of whole lines no
// larger than this, and each line stays whole as when it was written alone.
const atomicWriteBytes = 4096

// writeLines writes p, whole lines, to w in writes of at most atomicWriteBytes that end at
// line ends (a longer line goes alone). A failed write loses its lines, as a synchronous log
// would: there is no one to tell but the log itself.
func writeLines(w io.Writer, p []byte) {
	for len(p) > 0 {
		n := len(p)
		if n > atomicWriteBytes {
			n = bytes.LastIndexByte(p[:atomicWriteBytes], '\n') + 1
			if n == 0 { // one line longer than a piece
				if n = bytes.IndexByte(p, '\n') + 1; n == 0 {
					n = len(p)
				}
			}
		}
		_, _ = w.Write(p[:n])
		p = p[n:]
	}
}

// flush waits until every line written so far is handed to the destination, or ctx ends.
func (s *sink) flush(ctx context.Context) error {
	s.mu.Lock()
	if len(s.buf) == 0 && !s.writing {
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Flush waits until the lines of every access log destination written so far are handed to
// their destinations (a file's page cache, a pipe), or ctx ends (then ctx's error). A
// process calls it before it exits, once its requests completed.
func Flush(ctx context.Context) error {
	sinksMu.Lock()
	all := make([]*sink, 0, len(sinks))
	for _, s := range sinks {
		all = append(all, s)
	}
	sinksMu.Unlock()
	for _, s := range all {
		if err := s.flush(ctx); err != nil {
			return err
		}
	}
	return nil
}
