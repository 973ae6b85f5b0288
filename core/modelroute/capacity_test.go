package modelroute_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
	"github.com/sluice-gw/sluice/core/modelroute"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// Concurrent requests never send an aggregated worker more than its max_active by the
// gateway's own count: a worker's last free sequence goes to one request, and the others
// choose another worker or get the gateway's own 429 model_at_capacity, never a worker's
// refusal. Both workers run one sequence and have no waiting queue, so each request sent to
// one beyond its max_active is refused, and counted; every request asks its worker to hold
// its stream after the first event (an llmsim fault), so the requests served keep their
// sequences until every answer is in, and exactly two are served.
//
// "forced" holds every request once the stage has judged the workers until all have judged
// or been answered, so that all of them judge while none has been counted: the interleaving
// that gives a worker's last sequence to several requests when the judgement and the count
// are two steps. "free" sends the requests at once and lets them interleave as they come.
func TestConcurrentRequestsNeverOverfillAWorker(t *testing.T) {
	for _, tc := range []struct {
		name     string
		affinity bool
		forced   bool
		n        int // requests sent at once
	}{
		{"forced", false, true, 8},
		{"forced/prefix-affinity", true, true, 8},
		{"free", false, false, 64},
		{"free/prefix-affinity", true, false, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := startNarrowWorkers(t, 2)
			g := startModelGateway(t, sim, tc.affinity)

			hold := &chooseBarrier{want: tc.n, open: make(chan struct{})}
			var held atomic.Bool // a request waited at the barrier past its deadline
			if tc.forced {
				modelroute.SetPickHook(func() {
					hold.event()
					select {
					case <-hold.open:
					case <-time.After(10 * time.Second):
						held.Store(true)
					}
				})
				t.Cleanup(func() { modelroute.SetPickHook(nil) })
			}

			client := &http.Client{Timeout: 30 * time.Second}
			type answer struct {
				status int
				body   string
				held   io.Closer // the body of a served stream, held open
				err    error
			}
			answers := make(chan answer, tc.n)
			for k := range tc.n {
				go func() {
					req, err := http.NewRequest("POST", "http://"+g.Addr("web")+"/v1/chat/completions",
						strings.NewReader(fmt.Sprintf(`{"model":"chat","stream":true,"messages":[{"role":"user","content":"concurrent %d"}]}`, k)))
					if err != nil {
						answers <- answer{err: err}
						return
					}
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Llmsim-Fault", "stall-after=1")
					resp, err := client.Do(req)
					a := answer{err: err}
					if err == nil {
						a.status = resp.StatusCode
						if resp.StatusCode == 200 {
							a.held = resp.Body
						} else {
							b, rerr := io.ReadAll(resp.Body)
							resp.Body.Close()
							a.body, a.err = string(b), rerr
						}
					}
					if tc.forced {
						// Answered before the barrier opened: it never judged the workers.
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
				case a.status == 200:
					served++
					t.Cleanup(func() { _ = a.held.Close() })
				case a.status == 429 && strings.Contains(a.body, `"code":"model_at_capacity"`) &&
					strings.Contains(a.body, pipeline.ErrAtCapacity.Message):
					// The gateway's own answer: no worker had room by its count.
					refused++
				default:
					wrong = append(wrong, fmt.Sprintf("%d %s", a.status, strings.TrimSpace(a.body)))
				}
			}
			var seen []string // what each worker was sent and refused
			for i := range 2 {
				st := sim.Stats(i)
				seen = append(seen, fmt.Sprintf("worker %d: requests %d, refused %d", i, st.Requests, st.Rejected))
			}
			require.Empty(t, wrong, "every request is served or refused by the gateway for capacity (served %d, refused %d)\n%s",
				served, refused, strings.Join(seen, "\n"))
			require.False(t, held.Load(), "every request judged the workers or was answered")
			require.Equal(t, 2, served, "one request for each worker's one sequence (refused %d)", refused)
			for i := range 2 {
				st := sim.Stats(i)
				require.Zero(t, st.Rejected, "worker %d refused requests beyond its max_active", i)
				require.EqualValues(t, 1, st.Requests, "worker %d got its one sequence's request only", i)
			}
		})
	}
}

// startNarrowWorkers starts n aggregated llmsim workers of one sequence each and no waiting
// queue.
func startNarrowWorkers(t *testing.T, n int) *llmsim.Fleet {
	t.Helper()
	cfg := llmsim.Config{Seed: 1}
	for i := range n {
		ic := llmsim.DefaultInstance()
		ic.Listen, ic.WorkerID = "127.0.0.1:0", fmt.Sprintf("narrow-%d", i)
		ic.MaxRunning, ic.MaxWaiting = 1, 0
		ic.TTFT, ic.ITL, ic.Tokens = llmsim.Duration(time.Millisecond), llmsim.Duration(time.Millisecond), 8
		cfg.Instance = append(cfg.Instance, ic)
	}
	sim, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

// startModelGateway runs a gateway whose model "chat" has one target over the workers of
// sim, observed, and returns it once every worker has an observation.
func startModelGateway(t *testing.T, sim *llmsim.Fleet, affinity bool) *gateway.Gateway {
	t.Helper()
	var servers []string
	for _, a := range sim.Addrs() {
		servers = append(servers, fmt.Sprintf(`{ url = "http://%s" }`, a))
	}
	toml := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[services.fleet.load_balancer]
servers = [%s]
[services.fleet.workers]
observe_interval = "100ms"
observation_ttl = "10s"
[models.chat.targets.t]
service = "fleet"
[models.chat.scheduling]
prefix_affinity = %t
`, strings.Join(servers, ", "), affinity)
	cfg, err := config.LoadBytes("capacity.toml", []byte(toml))
	require.NoError(t, err)
	g, err := gateway.New(cfg, "", slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + g.AdminAddr() + "/api/gateway/workers")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var rows []struct {
			Kind string `json:"kind"`
		}
		if json.NewDecoder(resp.Body).Decode(&rows) != nil || len(rows) != sim.Len() {
			return false
		}
		for _, r := range rows {
			if r.Kind != "worker" {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the workers were not all observed")
	return g
}

// chooseBarrier opens once want events have happened: a request judging the workers, or a
// request answered without judging them.
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
