package harness

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"
)

// idleDialers is how many goroutines open idle connections in parallel;
// idleRequestTimeout bounds each connection's one request (a proxy at its
// connection limit leaves the rest waiting in its accept queue).
const (
	idleDialers        = 32
	idleRequestTimeout = 10 * time.Second
)

// IdleSet is a set of client connections to one target that have each
// carried one complete request and now sit idle in keep-alive: what the
// memory bar "N idle keep-alive connections" measures on the proxy side. It
// holds only the sockets (no buffers), so 10,000 of them cost the harness
// little memory.
type IdleSet struct {
	// Opened is the number of connections open and idle.
	Opened int
	// Errors counts connections that failed to open or to complete their
	// request, by kind (ErrorKind names).
	Errors map[string]int64

	mu    sync.Mutex
	conns []net.Conn
}

// OpenIdle opens n connections to target (http://host:port), sends one small
// non-streaming chat completion (the json workload's request) on each, reads
// the response, and leaves the connection open. It returns an error for a
// bad target or when ctx ends; connection failures are counted in Errors.
// Close the set when done.
func OpenIdle(ctx context.Context, target string, n int) (*IdleSet, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("harness: target %q: want http://host:port", target)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	o := Options{Workload: WorkloadJSON, Path: DefaultPath, Model: DefaultModel}
	s := &IdleSet{Errors: map[string]int64{}}
	base := time.Now()
	clk := func() int64 { return int64(time.Since(base)) }
	jobs := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		jobs <- struct{}{}
	}
	close(jobs)
	var wg sync.WaitGroup
	for w := 0; w < min(idleDialers, n); w++ {
		gen, err := newRequestGen(&o, u.Host, uint64(w))
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := newHTTPConn(addr, clk)
			req, _ := gen.next()
			for range jobs {
				if ctx.Err() != nil {
					return
				}
				kind := errNone
				if err := h.connect(dialTimeout); err != nil {
					kind = ErrConnect
				} else if ex := h.roundTrip(req, false, time.Now().Add(idleRequestTimeout)); ex.kind != errNone {
					kind = ex.kind
				} else if !ex.keepAlive {
					kind = ErrClosed
				}
				s.mu.Lock()
				if kind != errNone {
					s.Errors[kind.String()]++
					s.mu.Unlock()
					h.close()
					continue
				}
				c := h.c
				_ = c.SetDeadline(time.Time{})
				s.conns = append(s.conns, c)
				s.Opened++
				s.mu.Unlock()
				h.mu.Lock()
				h.c = nil // keep the socket, reuse the buffer for the next one
				h.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		s.Close()
		return nil, fmt.Errorf("harness: opening idle connections: %w", err)
	}
	return s, nil
}

// Close closes every connection of the set.
func (s *IdleSet) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
	s.Opened = 0
}
