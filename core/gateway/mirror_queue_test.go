package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatedShadow is a shadow upstream that reads each copy, reports its body on got and answers
// it only once the test opens the gate: with one sender, the copies behind the one it holds
// wait in the mirror's queue.
type gatedShadow struct {
	*upstream
	got  chan string
	gate chan struct{}
	once sync.Once
}

func startGatedShadow(t *testing.T) *gatedShadow {
	t.Helper()
	s := &gatedShadow{got: make(chan string, 1024), gate: make(chan struct{})}
	s.upstream = serveUpstreamU(t, func(u *upstream, c net.Conn, _ *bufio.Reader, _ string, body []byte) bool {
		s.got <- string(body)
		select {
		case <-s.gate:
		case <-u.stop:
			return false
		}
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
		return err == nil
	})
	return s
}

// open lets the shadow answer every copy, held or to come.
func (s *gatedShadow) open() { s.once.Do(func() { close(s.gate) }) }

// wait returns the bodies of the next n copies the shadow gets, failing the test when they
// do not all come within the deadline.
func (s *gatedShadow) wait(t *testing.T, n int) []string {
	t.Helper()
	var got []string
	deadline := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case b := <-s.got:
			got = append(got, b)
		case <-deadline:
			t.Fatalf("the shadow got %d of %d copies", len(got), n)
		}
	}
	return got
}

// gatedMirrorConfig mirrors every request of service, served by sim, to the service shadow
// at shadowAddr with one sender and room for 64 copies in the queue; extra ends the file.
func gatedMirrorConfig(engine, sim, shadowAddr, service, shadow, extra string) string {
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %[1]s
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = %[4]q
[services.%[4]s.load_balancer]
servers = [{ url = "http://%[2]s" }]
[services.%[4]s.mirror]
service = %[5]q
percentage = 100
queue_size = 64
max_concurrent = 1
timeout = "1m"
[services.%[5]s.load_balancer]
servers = [{ url = "http://%[3]s" }]
%[6]s`, engineTOML(engine), sim, shadowAddr, service, shadow, extra)
}

// mirrorSeries names the series of the mirror of service to shadow: name, with the labels
// after theirs (`,reason="stopped"`), or none.
func mirrorSeries(name, service, shadow, more string) string {
	return fmt.Sprintf(`%s{service=%q,shadow=%q%s}`, name, service, shadow, more)
}

// copyBody is the body of the i-th request of a test: each copy can be told apart.
func copyBody(i int) string {
	return fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"request %d"}],"max_tokens":2}`, i)
}

// sendChats sends the requests from..to-1 to the gateway at addr and returns their bodies;
// each must be answered by the primary.
func sendChats(t *testing.T, addr string, from, to int) []string {
	t.Helper()
	var bodies []string
	for i := from; i < to; i++ {
		body := copyBody(i)
		r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", body)
		require.Equal(t, 200, r.status, r.raw)
		bodies = append(bodies, body)
	}
	return bodies
}

// queueCopies sends n requests through a mirror whose shadow holds the first copy, and waits
// until that copy is held and the n-1 others wait in the queue. It returns their bodies.
func queueCopies(t *testing.T, addr, admin string, sh *gatedShadow, service, shadow string, n int) []string {
	t.Helper()
	depth := mirrorSeries("sluice_mirror_queue_depth", service, shadow, "")
	depth0 := metricValue(t, admin, depth)
	sent := sendChats(t, addr, 0, n)
	held := sh.wait(t, 1)
	require.Equal(t, sent[:1], held, "the one sender took the first copy")
	waitMetric(t, admin+"/metrics", depth, func(v float64) bool { return v == depth0+float64(n-1) })
	return sent
}

// A copy counts in its shadow backend's requests in flight (sluice_upstream_active, which
// least-connections balances on) only while it is being sent: the copies waiting in the
// queue are not on the upstream.
func TestMirrorQueuedCopiesAreNotInFlight(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			sh := startGatedShadow(t)
			svc, shadow := "inflight-"+engine, "inflight-shadow-"+engine
			_, addr, admin := startConfigGateway(t, gatedMirrorConfig(engine, sim, sh.addr(), svc, shadow, ""))
			active := fmt.Sprintf(`sluice_upstream_active{service=%q,backend="http://%s"}`, shadow, sh.addr())

			queueCopies(t, addr, admin, sh, svc, shadow, 5)
			require.Equal(t, 1.0, metricValue(t, admin, active), "one copy is being sent, four wait in the queue")
			sh.open()
			sh.wait(t, 4)
			waitMetric(t, admin+"/metrics", active, func(v float64) bool { return v == 0 })
		})
	}
}
