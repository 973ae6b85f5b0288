package pd_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/pd"
)

// Concurrent requests never send a worker more than its max_active by the gateway's own
// count: a worker's last free sequence goes to one request, and the others choose another
// pair or get the gateway's own 429 model_at_capacity, never a worker's refusal (for a
// decode worker, after a prefill computed for nothing). The workers at capacity here have no
// waiting queue, so each request sent to one beyond its max_active is refused, and counted.
//
// "forced" holds every request once it has chosen a pair until all have chosen or been
// answered, so that all of them choose while none has gone further: the interleaving that
// gives a worker's last sequence to several requests when the choice and the count are two
// steps. "free" sends the requests at once and lets them interleave as they come.
func TestConcurrentRequestsNeverOverfillAWorker(t *testing.T) {
	for _, tc := range []struct {
		name   string
		narrow []int // workers with max_active 1 and no waiting queue
		forced bool
		n      int // requests sent at once
	}{
		{"decode/forced", []int{decodeA, decodeB}, true, 8},
		{"prefill/forced", []int{prefillA, prefillB}, true, 8},
		{"decode/free", []int{decodeA, decodeB}, false, 64},
		{"prefill/free", []int{prefillA, prefillB}, false, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
				if slices.Contains(tc.narrow, i) {
					ic.MaxRunning, ic.MaxWaiting = 1, 0
				}
			})
			g := startGateway(t, f.gatewayTOML("", ""))

			hold := &chooseBarrier{want: tc.n, open: make(chan struct{})}
			var held atomic.Bool // a request waited at the barrier past its deadline
			if tc.forced {
				pd.SetPairHook(func() {
					hold.event()
					select {
					case <-hold.open:
					case <-time.After(10 * time.Second):
						held.Store(true)
					}
				})
				t.Cleanup(func() { pd.SetPairHook(nil) })
			}

			client := &http.Client{Timeout: 30 * time.Second}
			type answer struct {
				status int
				body   string
				err    error
			}
			answers := make(chan answer, tc.n)
			for k := range tc.n {
				go func() {
					resp, err := client.Post("http://"+g.Addr("web")+"/v1/chat/completions", "application/json",
						strings.NewReader(chatBody(fmt.Sprintf("concurrent %d", k))))
					a := answer{err: err}
					if err == nil {
						b, rerr := io.ReadAll(resp.Body)
						resp.Body.Close()
						a.status, a.body, a.err = resp.StatusCode, string(b), rerr
					}
					if tc.forced {
						// Answered before the barrier opened: it never chose a pair.
						hold.event()
					}
					answers <- a
				}()
			}
			served, refused := 0, 0
			var wrong []string // answers other than served or the gateway's own 429
			for range tc.n {
				a := <-answers
				require.NoError(t, a.err)
				switch {
				case a.status == 200 && strings.HasSuffix(strings.TrimSpace(a.body), "data: [DONE]"):
					served++
				case a.status == 429 && strings.Contains(a.body, `"code":"model_at_capacity"`) &&
					strings.Contains(a.body, pipeline.ErrAtCapacity.Message):
					// The gateway's own answer: no pair had room by its count.
					refused++
				default:
					wrong = append(wrong, fmt.Sprintf("%d %s", a.status, strings.TrimSpace(a.body)))
				}
			}
			var seen []string // what each worker was sent and refused
			for i, id := range f.ids {
				st := f.sim.Stats(i)
				seen = append(seen, fmt.Sprintf("%s: prepare %d, prefill %d, decode %d, 429s %d, aborts %d",
					id, len(f.executions(i, "prepare")), len(f.executions(i, "prefill")), len(f.executions(i, "decode")),
					st.Rejected, len(f.executions(i, "abort"))))
			}
			require.Empty(t, wrong, "every request is served or refused by the gateway for capacity (served %d, refused %d)\n%s",
				served, refused, strings.Join(seen, "\n"))
			require.False(t, held.Load(), "every request chose a pair or was answered")
			require.Positive(t, served)
			if tc.forced {
				// One request for each worker's one sequence; the rest found no room.
				require.Equal(t, len(tc.narrow), served, "served %d, refused %d", served, refused)
			}

			// Nothing was sent beyond a worker's capacity: no worker refused a call, so every
			// execution a decode worker reserved was prefilled and decoded, and none aborted.
			var prepared, prefilled, decoded []string
			for i, id := range f.ids {
				st := f.sim.Stats(i)
				require.Zero(t, st.Rejected, "%s refused requests beyond its max_active", id)
				require.Empty(t, f.executions(i, "abort"), "%s got aborts of failed exchanges", id)
				prepared = append(prepared, f.executions(i, "prepare")...)
				prefilled = append(prefilled, f.executions(i, "prefill")...)
				decoded = append(decoded, f.executions(i, "decode")...)
			}
			slices.Sort(prepared)
			slices.Sort(prefilled)
			slices.Sort(decoded)
			require.Len(t, decoded, served)
			require.Equal(t, decoded, prepared, "a reservation for each decode, none refused or left")
			require.Equal(t, decoded, prefilled, "a prefill for each decode, none refused or wasted")
		})
	}
}

// chooseBarrier opens once want events have happened: a request choosing its pair, or a
// request answered without one.
type chooseBarrier struct {
	mu     sync.Mutex
	events int
	want   int
	open   chan struct{}
}

func (b *chooseBarrier) event() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.events++; b.events == b.want {
		close(b.open)
	}
}
