package gateway_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// A model pool offered ten times what it serves at once: the admitted keep their slots, the
// queue takes as many as it holds and admits them first come, first served as slots free up,
// the rest are refused at once with 429; queued callers that wait past queue_timeout_ms get
// 503 with Retry-After, not later than the timeout by more than the timer's slack.
func TestModelPoolOverload10x(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			base, admin := startModelGatewayAdmin(t, engine, sim)
			// Two streams hold both slots of queued-model until their clients leave.
			holders := []net.Conn{holdSlot(t, base, teamBKey, "queued-model"), holdSlot(t, base, teamBKey, "queued-model")}

			// Four stalled streams queue one after another, so their arrival order is known.
			queued := make([]*bufio.Reader, 4)
			conns := make([]net.Conn, 4)
			for i := range queued {
				conns[i] = sendStalledStream(t, base, teamBKey, "queued-model")
				queued[i] = bufio.NewReader(conns[i])
				waitAdmission(t, admin, "queued-model", func(a admissionState) bool { return a.Queued == int64(i+1) })
			}

			// Fourteen more at once (twenty offered to two slots): each refused at once.
			var wg sync.WaitGroup
			statuses := make([]int, 14)
			errs := make([]error, len(statuses))
			for i := range statuses {
				wg.Go(func() {
					var r apiResult
					r, errs[i] = tryCall("POST", base+"/v1/chat/completions", teamBKey, fmt.Sprintf(chatBody, "queued-model"))
					statuses[i] = r.status
				})
			}
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			for i, st := range statuses {
				require.Equal(t, 429, st, "extra request %d", i)
			}

			// Each slot freed goes to the longest waiting caller: release one at a time and
			// see the queue's head, and only it, answered.
			for i := range queued {
				var free net.Conn
				if i < len(holders) {
					free = holders[i]
				} else {
					free = conns[i-len(holders)]
				}
				require.NoError(t, free.Close())
				require.NoError(t, conns[i].SetReadDeadline(time.Now().Add(10*time.Second)))
				line, err := queued[i].ReadString('\n')
				require.NoError(t, err, "queued stream %d got no answer", i)
				require.Contains(t, line, " 200 ", "queued stream %d", i)
				waitAdmission(t, admin, "queued-model", func(a admissionState) bool {
					return a.Queued == int64(len(queued)-i-1) && a.Active == 2
				})
			}
			for _, c := range conns[len(conns)-len(holders):] {
				require.NoError(t, c.Close())
			}
			waitAdmission(t, admin, "queued-model", func(a admissionState) bool { return a.Active == 0 && a.Queued == 0 })

			// brief-model: one slot held, two callers queue and time out, a third is refused.
			holdSlot(t, base, teamBKey, "brief-model")
			type answer struct {
				status int
				retry  string
				waited time.Duration
				err    error
			}
			answers := make([]answer, 2)
			for i := range answers {
				wg.Go(func() {
					start := time.Now()
					r, err := tryCall("POST", base+"/v1/chat/completions", teamBKey, fmt.Sprintf(chatBody, "brief-model"))
					answers[i] = answer{r.status, r.header.Get("Retry-After"), time.Since(start), err}
				})
			}
			waitAdmission(t, admin, "brief-model", func(a admissionState) bool { return a.Queued == 2 })
			require.Equal(t, 429, call(t, "POST", base+"/v1/chat/completions", teamBKey, fmt.Sprintf(chatBody, "brief-model")).status)
			wg.Wait()
			for i, a := range answers {
				require.NoError(t, a.err, "queued caller %d", i)
				require.Equal(t, 503, a.status, "queued caller %d", i)
				require.Equal(t, "1", a.retry)
				require.GreaterOrEqual(t, a.waited, 2*time.Second, "refused before its queue timeout")
				t.Logf("queued caller %d refused after %v (queue_timeout_ms 2000)", i, a.waited)
			}
		})
	}
}

// sendStalledStream sends a streaming chat request for model that the simulator stalls after
// its head until the client leaves, and returns the connection without reading.
func sendStalledStream(t *testing.T, base, key, model string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	body := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, model)
	_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n%s: stall-after=0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		key, llmsim.FaultHeader, len(body), body)
	require.NoError(t, err)
	return c
}

// admissionState is the admission block of an alias in /api/gateway/models.
type admissionState struct {
	Active int64 `json:"active"`
	Queued int64 `json:"queued"`
}

// waitAdmission polls /api/gateway/models until alias's admission satisfies ok (10 s at most).
func waitAdmission(t *testing.T, admin, alias string, ok func(admissionState) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last admissionState
	for {
		r := call(t, "GET", admin+"/api/gateway/models", "", "")
		require.Equal(t, 200, r.status, r.raw)
		var models []struct {
			Alias     string         `json:"alias"`
			Admission admissionState `json:"admission"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.raw), &models))
		for _, m := range models {
			if m.Alias == alias {
				last = m.Admission
			}
		}
		if ok(last) {
			return
		}
		require.True(t, time.Now().Before(deadline), "admission of %s stayed %+v", alias, last)
		time.Sleep(5 * time.Millisecond) // polling the admin API, not asserting on time
	}
}
