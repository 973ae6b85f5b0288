package ingress_test

import (
	"bufio"
	"bytes"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/ingress"
)

// A client that pipelines keeps many requests buffered in the gateway behind the one being
// served. What the gateway spends on each request must not grow with that backlog: reading
// each head from all of the buffered input would copy the backlog once per request (gnet
// copies a peek whose bytes wrap around its ring buffer), quadratic work on the event loop
// and garbage that makes the collector stop every connection it serves. The test counts the
// bytes the process allocates per request, with 512 requests sent ahead and with none, on
// both upstream paths of the gnet engine.
func TestPipelinedBacklogCostsEachRequestItsOwnBytes(t *testing.T) {
	const (
		requests = 4096
		ahead    = 512 // requests the client keeps unanswered
		burst    = 64  // requests per write
	)
	up := newCheapUpstream(t)
	// Requests of about 300 bytes: 512 of them ahead are 150 KiB of backlog.
	pad := strings.Repeat("p", 200)
	body := `{"model":"m","pad":"` + pad + `"}`
	requestsOf := map[string]string{
		"head": "GET /v1/models?pad=" + pad + " HTTP/1.1\r\nHost: gw\r\n\r\n",
		"body": "POST /v1/x HTTP/1.1\r\nHost: gw\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body,
		"chunked": "POST /v1/x HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n",
	}
	for _, loop := range []bool{false, true} {
		for _, kind := range []string{"head", "body", "chunked"} {
			t.Run(map[bool]string{false: "worker", true: "loop"}[loop]+"/"+kind, func(t *testing.T) {
				tr := ingress.NewGnet(ingress.Settings{Name: "web", Address: "127.0.0.1:0", EventLoops: 1,
					UpstreamLoop: loop}, newResolver(t, up.addr()), nil)
				require.NoError(t, tr.Start())
				t.Cleanup(func() { _ = tr.Drain(t.Context()) })

				req := []byte(requestsOf[kind])
				sequential := allocatedPerRequest(t, tr.Addr(), req, requests/8, 1, 1)
				pipelined := allocatedPerRequest(t, tr.Addr(), req, requests, ahead, burst)
				t.Logf("bytes allocated per request: %.0f one at a time, %.0f with %d ahead", sequential, pipelined, ahead)
				// The margin is the parser's first window (4 KiB), which a request may copy
				// once when its bytes wrap around gnet's ring buffer, into a pooled buffer
				// that the race detector's pools sometimes drop.
				require.Less(t, pipelined, sequential+4096,
					"a request behind a backlog of %d costs %.0f bytes more than one alone", ahead, pipelined-sequential)
			})
		}
	}
}

// allocatedPerRequest sends n copies of req on one connection, in writes of burst requests
// with at most ahead unanswered, reads every answer, and returns the bytes the process
// allocated per request meanwhile.
func allocatedPerRequest(t *testing.T, addr string, req []byte, n, ahead, burst int) float64 {
	t.Helper()
	c := dialClient(t, addr)
	require.NoError(t, c.SetDeadline(time.Now().Add(60*time.Second)))
	writes := bytes.Repeat(req, burst)
	credit := make(chan struct{}, ahead/burst)
	wrote := make(chan error, 1)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	go func() {
		for sent := 0; sent < n; sent += burst {
			credit <- struct{}{}
			if _, err := c.Write(writes); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	r := bufio.NewReaderSize(c, 64<<10)
	for got := 1; got <= n; got++ {
		require.NoError(t, skipResponse(r), "answer %d", got)
		if got%burst == 0 {
			<-credit
		}
	}
	runtime.ReadMemStats(&after)
	require.NoError(t, <-wrote)
	require.NoError(t, c.Close())
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
}

// skipResponse reads one response of cheapUpstream's shape (a head whose Content-Length is
// 5, then 5 bytes) without allocating.
func skipResponse(r *bufio.Reader) error {
	status := true
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if status && !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
			return &net.ParseError{Type: "status line", Text: string(line)}
		}
		status = false
		if len(line) == 2 {
			_, err = r.Discard(5)
			return err
		}
	}
}

// cheapUpstream answers every request head with "hello" and allocates nothing per request,
// so that the bytes a test counts are the gateway's.
type cheapUpstream struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newCheapUpstream(t *testing.T) *cheapUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := &cheapUpstream{ln: ln}
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				r := bufio.NewReaderSize(c, 64<<10)
				for {
					line, err := r.ReadSlice('\n')
					if err != nil {
						return
					}
					if len(line) == 2 {
						if _, err := c.Write(answer); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		u.mu.Lock()
		for _, c := range u.conns {
			_ = c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

func (u *cheapUpstream) addr() string { return u.ln.Addr().String() }
