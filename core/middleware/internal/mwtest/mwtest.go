// Package mwtest runs middleware stages through the real request pipeline in process, without
// an ingress engine: a request head goes into pipeline.Entrypoint.Begin, the response is
// written into memory and parsed, and Finish runs the completion stages, as an engine would.
// Upstreams, when a test needs them, are real servers on loopback.
package mwtest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/pool"
)

// Harness is one entrypoint whose every request takes one route: the given stages, then a
// service "up" over the given upstreams (round-robin).
type Harness struct {
	EP      *pipeline.Entrypoint
	Route   *pipeline.Route
	Service *pipeline.Service
}

type oneRoute struct{ rt *pipeline.Route }

func (o oneRoute) Resolve(string, *http1.Request) (*pipeline.Route, *pipeline.Chain) {
	return o.rt, nil
}
func (o oneRoute) Hooks() *pipeline.Chain { return nil }

// New returns a harness over stages and upstreams ("host:port"; none: every request that
// passes the stages gets 503 no_backend).
func New(t testing.TB, stages []any, upstreams ...string) *Harness {
	t.Helper()
	return On(t, NewService(t, "up", upstreams...), stages...)
}

// On returns a harness whose route sends requests to svc after stages.
func On(t testing.TB, svc *pipeline.Service, stages ...any) *Harness {
	t.Helper()
	chain, err := pipeline.NewChain(stages...)
	require.NoError(t, err)
	rt := &pipeline.Route{Name: "mwtest", Service: svc, Chain: chain, M: metrics.ForRoute("mwtest", svc.Name)}
	ep := pipeline.NewEntrypoint("mwtest", false, oneRoute{rt}, metrics.ForEntrypoint("mwtest"), nil)
	return &Harness{EP: ep, Route: rt, Service: svc}
}

// NewService returns a service named name over upstreams, with their connection pools closed
// when the test ends. A backend's Key is the service's name and its address, as a snapshot
// would key an upstream listed once.
func NewService(t testing.TB, name string, upstreams ...string) *pipeline.Service {
	t.Helper()
	var lbs []*balancer.Backend
	svc := &pipeline.Service{Name: name}
	for i, addr := range upstreams {
		lb := &balancer.Backend{ID: i, Name: "http://" + addr}
		lbs = append(lbs, lb)
		p := pool.New(pool.Options{Addr: addr})
		t.Cleanup(p.Close)
		svc.Backends = append(svc.Backends, &pipeline.Backend{URL: lb.Name, Host: []byte(addr), LB: lb, Pool: p, Key: name + "\x00" + lb.Name})
	}
	bal, err := balancer.New(balancer.RoundRobin, lbs)
	require.NoError(t, err)
	svc.Balancer = bal
	return svc
}

// Response is a response as a client got it.
type Response struct {
	Status int
	Header http.Header
	Body   string
	// Backend is the URL of the backend the request went to last ("" when none).
	Backend string
}

// Do sends one request from client address peer: head is its request line and fields
// without the blank line that ends them ("GET / HTTP/1.1\r\nHost: x"), body its body.
func (h *Harness) Do(t testing.TB, peer, head, body string) *Response {
	t.Helper()
	rc := pipeline.AcquireRequestCtx()
	defer pipeline.ReleaseRequestCtx(rc)
	rc.SetClientAddr(netip.MustParseAddr(peer))
	full := head + "\r\n"
	if body != "" {
		full += fmt.Sprintf("Content-Length: %d\r\n", len(body))
	}
	require.NoError(t, rc.Req.ParseRequestHead([]byte(full+"\r\n"), nil))
	rc.Req.Body = append(rc.Req.Body[:0], body...)
	h.EP.Begin(rc)
	var out memDownstream
	err := rc.WriteResponse(&out)
	var backend string
	if b := rc.Backend(); b != nil {
		backend = b.URL
	}
	rc.Finish()
	if err != nil && out.Len() == 0 {
		return &Response{Backend: backend}
	}
	resp, rerr := http.ReadResponse(bufio.NewReader(&out.Buffer), nil)
	require.NoError(t, rerr)
	b, _ := io.ReadAll(resp.Body)
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: string(b), Backend: backend}
}

// memDownstream keeps what the pipeline writes to the client.
type memDownstream struct{ bytes.Buffer }

func (m *memDownstream) Send(bp *[]byte, lo, hi int) error {
	m.Write((*bp)[lo:hi])
	pipeline.ReleaseBuf(bp)
	return nil
}

// Upstream is a loopback HTTP/1.1 server whose answer is chosen per request by a function
// that may change during the test.
type Upstream struct {
	ln     net.Listener
	stop   func()
	mu     sync.Mutex
	answer func(head string) string
	heads  []string // the request heads received, in order
}

// NewUpstream starts an upstream answering each request with the raw response answer returns
// for its head.
func NewUpstream(t testing.TB, answer func(head string) string) *Upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := &Upstream{ln: ln, answer: answer}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				u.serve(c)
			}()
		}
	}()
	var once sync.Once
	u.stop = func() {
		once.Do(func() {
			_ = ln.Close()
			mu.Lock()
			for c := range conns {
				_ = c.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	t.Cleanup(u.stop)
	return u
}

func (u *Upstream) serve(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		var head strings.Builder
		_ = req.Header.Write(&head)
		h := req.Method + " " + req.URL.RequestURI() + "\r\n" + head.String()
		u.mu.Lock()
		f := u.answer
		u.heads = append(u.heads, h)
		u.mu.Unlock()
		out, cut := strings.CutSuffix(f(h), Cut)
		if _, err := io.WriteString(c, out); err != nil || cut {
			return
		}
	}
}

// Cut ends an answer that closes the connection once written: alone, the upstream closes
// without answering; after a response head, the response is cut short.
const Cut = "\x00cut"

// Close stops the upstream: its listener and the connections it serves are closed, and
// nothing listens at its address any more.
func (u *Upstream) Close() { u.stop() }

// Addr returns the upstream's host:port.
func (u *Upstream) Addr() string { return u.ln.Addr().String() }

// SetAnswer replaces the upstream's answer function.
func (u *Upstream) SetAnswer(answer func(head string) string) {
	u.mu.Lock()
	u.answer = answer
	u.mu.Unlock()
}

// Count returns the number of requests the upstream received.
func (u *Upstream) Count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.heads)
}

// Heads returns the heads of the requests the upstream received: the request line (method
// and target) and the fields as Go's net/http writes them.
func (u *Upstream) Heads() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.heads...)
}

// Status returns an answer function replying status with a short JSON body.
func Status(status int) func(string) string {
	return func(string) string {
		body := `{"ok":true}`
		return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", status, http.StatusText(status), len(body), body)
	}
}
