package gateway_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// startRevisionSim runs one simulator instance answering fast (one token), failing
// faultRate of its requests with a 500.
func startRevisionSim(t *testing.T, faultRate float64) *llmsim.Fleet {
	t.Helper()
	cfg := llmsim.DefaultConfig()
	cfg.Defaults.Listen = "127.0.0.1:0"
	cfg.Defaults.TTFT = llmsim.Duration(2 * time.Millisecond)
	cfg.Defaults.ITL = llmsim.Duration(time.Millisecond)
	cfg.Defaults.Tokens = 2
	if faultRate > 0 {
		cfg.Defaults.FaultRate = faultRate
		cfg.Defaults.Fault = "status=500"
	}
	f, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// revisionsConfig is a gateway whose service "llm" has revisions v1 and v2 on the two
// simulators with the given shares, and the rollout table rollout ("" for none).
func revisionsConfig(v1, v2 *llmsim.Fleet, p1, p2 int, rollout string) string {
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm]
revisions = [
  { name = "v1", traffic_percent = %d, servers = [{ url = "http://%s" }] },
  { name = "v2", traffic_percent = %d, servers = [{ url = "http://%s" }] },
]
%s
`, p1, v1.Addrs()[0], p2, v2.Addrs()[0], rollout)
}

type serviceView struct {
	Name      string `json:"name"`
	Revisions []struct {
		Name           string  `json:"name"`
		TrafficPercent float64 `json:"traffic_percent"`
	} `json:"revisions"`
	Rollout *struct {
		State     string  `json:"state"`
		ToPercent float64 `json:"to_percent"`
		Step      int     `json:"step"`
		Reason    string  `json:"reason"`
		Waiting   bool    `json:"waiting_for_samples"`
		History   []struct {
			Event     string  `json:"event"`
			ToPercent float64 `json:"to_percent"`
			Detail    string  `json:"detail"`
		} `json:"history"`
	} `json:"rollout"`
}

func llmService(t *testing.T, admin string) serviceView {
	t.Helper()
	st, body := adminGet(t, admin+"/api/gateway/services")
	require.Equal(t, 200, st, body)
	var all []serviceView
	require.NoError(t, json.Unmarshal([]byte(body), &all))
	for _, s := range all {
		if s.Name == "llm" {
			return s
		}
	}
	t.Fatalf("no service llm in %s", body)
	return serviceView{}
}

// waitRollout polls the admin API until the rollout's state is one of want, or fails after
// within.
func waitRollout(t *testing.T, admin string, within time.Duration, ok func(serviceView) bool) serviceView {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := llmService(t, admin)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rollout never got there: %+v", s.Rollout)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not an assertion
	}
}

const tinyChat = `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`

// load sends tinyChat from n clients until stop is closed; the function it returns, called on
// the test's goroutine once stop is closed, waits for the clients and returns the statuses
// seen, failing the test if a request got no answer.
func load(t *testing.T, addr string, n int, stop <-chan struct{}) func() map[int]int {
	return loadBody(t, addr, n, tinyChat, stop)
}

// loadBody is load sending chat requests with body. A client whose request gets no answer
// keeps the error for the returned function, which reports it on the test's goroutine, and
// stops.
func loadBody(t *testing.T, addr string, n int, body string, stop <-chan struct{}) func() map[int]int {
	var mu sync.Mutex
	statuses := map[int]int{}
	var errs []error
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := tryCall("POST", "http://"+addr+"/v1/chat/completions", "", body)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					statuses[r.status]++
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	return func() map[int]int {
		t.Helper()
		wg.Wait()
		require.NoError(t, errors.Join(errs...), "a load client got no answer")
		return statuses
	}
}

// Revisions split the traffic exactly: 90/10 over 100 requests is 90 and 10.
func TestRevisionsSplitTrafficExactly(t *testing.T) {
	v1, v2 := startRevisionSim(t, 0), startRevisionSim(t, 0)
	_, addr, admin := startConfigGateway(t, revisionsConfig(v1, v2, 90, 10, ""))
	for i := 0; i < 100; i++ {
		r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
		require.Equal(t, 200, r.status, r.raw)
	}
	require.EqualValues(t, 90, v1.Stats(0).Requests)
	require.EqualValues(t, 10, v2.Stats(0).Requests)
	s := llmService(t, admin)
	require.Len(t, s.Revisions, 2)
	require.Equal(t, 10.0, s.Revisions[1].TrafficPercent)
	require.Nil(t, s.Rollout)
}

// A healthy new revision is rolled out step by step to all of the traffic.
func TestRolloutOfAHealthyRevisionReachesAllTraffic(t *testing.T) {
	v1, v2 := startRevisionSim(t, 0), startRevisionSim(t, 0)
	_, addr, admin := startConfigGateway(t, revisionsConfig(v1, v2, 100, 0, `
[services.llm.rollout]
from = "v1"
to = "v2"
step_percent = 25
step_interval_secs = 0.2
error_rate_threshold = 0.05
latency_threshold_ms = 5000
min_samples = 10
`))
	stop := make(chan struct{})
	statuses := load(t, addr, 4, stop)
	s := waitRollout(t, admin, 30*time.Second, func(s serviceView) bool { return s.Rollout.State != "progressing" })
	close(stop)
	require.Equal(t, "completed", s.Rollout.State, "%+v", s.Rollout)
	require.Equal(t, 100.0, s.Rollout.ToPercent)
	require.Equal(t, 100.0, s.Revisions[1].TrafficPercent)
	var advanced []float64
	for _, e := range s.Rollout.History {
		if e.Event == "advanced" {
			advanced = append(advanced, e.ToPercent)
		}
	}
	require.Equal(t, []float64{50, 75, 100}, advanced, "25% at the start, then one step at a time")
	require.Equal(t, map[int]int{200: sumOf(statuses())}, statuses())
	before := v1.Stats(0).Requests
	for i := 0; i < 10; i++ {
		require.Equal(t, 200, call(t, "POST", "http://"+addr+"/v1/chat/completions", "", tinyChat).status)
	}
	require.Equal(t, before, v1.Stats(0).Requests, "v1 gets nothing once the rollout completed")
	waitMetric(t, admin+"/metrics", `sluice_rollout_state{service="llm"}`, func(v float64) bool { return v == 1 })
	waitMetric(t, admin+"/metrics", `sluice_revision_traffic_percent{service="llm",revision="v2"}`, func(v float64) bool { return v == 100 })
}

func sumOf(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// A new revision failing 10% of its requests is rolled back at once, in its first step,
// with the reason; all the traffic goes back to the old revision.
func TestRolloutRollsBackAFailingRevisionWithinOneStep(t *testing.T) {
	v1, v2 := startRevisionSim(t, 0), startRevisionSim(t, 0.1)
	_, addr, admin := startConfigGateway(t, revisionsConfig(v1, v2, 75, 25, `
[services.llm.rollout]
from = "v1"
to = "v2"
step_percent = 25
step_interval_secs = 30
error_rate_threshold = 0.05
min_samples = 20
`))
	stop := make(chan struct{})
	wait := load(t, addr, 4, stop)
	s := waitRollout(t, admin, 25*time.Second, func(s serviceView) bool { return s.Rollout.State != "progressing" })
	close(stop)
	wait()
	require.Equal(t, "rolled_back", s.Rollout.State, "%+v", s.Rollout)
	require.Equal(t, 0, s.Rollout.Step, "rolled back in its first step, long before the interval ended")
	require.Contains(t, s.Rollout.Reason, "error rate")
	require.Equal(t, 100.0, s.Revisions[0].TrafficPercent)
	require.Equal(t, 0.0, s.Revisions[1].TrafficPercent)
	before := v2.Stats(0).Requests
	for i := 0; i < 20; i++ {
		call(t, "POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
	}
	require.Equal(t, before, v2.Stats(0).Requests, "v2 gets nothing after the rollback")
	waitMetric(t, admin+"/metrics", `sluice_rollout_state{service="llm"}`, func(v float64) bool { return v == 2 })
}

// A step that has not had its samples when its interval ends waits: it does not pass; it
// passes once the samples come.
func TestRolloutStepWithoutTrafficWaits(t *testing.T) {
	v1, v2 := startRevisionSim(t, 0), startRevisionSim(t, 0)
	_, addr, admin := startConfigGateway(t, revisionsConfig(v1, v2, 90, 10, `
[services.llm.rollout]
from = "v1"
to = "v2"
step_percent = 10
step_interval_secs = 0.05
min_samples = 5
`))
	s := waitRollout(t, admin, 10*time.Second, func(s serviceView) bool { return s.Rollout.Waiting })
	require.Equal(t, "progressing", s.Rollout.State)
	require.Equal(t, 10.0, s.Rollout.ToPercent, "no traffic, no step")
	require.Equal(t, 0, s.Rollout.Step)
	require.True(t, strings.Contains(s.Rollout.History[len(s.Rollout.History)-1].Detail, "0 of 5 samples"), "%+v", s.Rollout.History)

	// One request in ten goes to v2: send until it has had four, one short of the samples.
	for v2.Stats(0).Requests < 4 {
		require.Equal(t, 200, call(t, "POST", "http://"+addr+"/v1/chat/completions", "", tinyChat).status)
	}
	s = llmService(t, admin)
	require.Equal(t, 0, s.Rollout.Step, "four samples of five: the step still waits")
	for v2.Stats(0).Requests < 5 {
		require.Equal(t, 200, call(t, "POST", "http://"+addr+"/v1/chat/completions", "", tinyChat).status)
	}
	s = waitRollout(t, admin, 10*time.Second, func(s serviceView) bool { return s.Rollout.Step == 1 })
	require.Equal(t, 20.0, s.Rollout.ToPercent)
}

// A new revision is judged by what it did with its requests, not by the time they waited
// before reaching it: requests queued behind a model's admission bound well past the latency
// threshold, on a revision that answers each well within it, do not roll it back.
func TestRolloutLatencyLeavesOutTheAdmissionQueue(t *testing.T) {
	v1, v2 := startSlowRevisionSim(t), startSlowRevisionSim(t)
	conf := strings.Replace(revisionsConfig(v1, v2, 50, 50, `
[services.llm.rollout]
from = "v1"
to = "v2"
step_percent = 50
step_interval_secs = 0.05
latency_threshold_ms = 150
ttft_p99_threshold_ms = 150
min_samples = 10
[models.m.targets.t]
service = "llm"
[models.m.scheduling]
max_concurrent_requests = 1
max_queued_requests = 64
`), "rule = \"PathPrefix(`/`)\"\nservice = \"llm\"", "rule = \"PathPrefix(`/`)\"\nmodels = true", 1)
	require.Contains(t, conf, "models = true")
	_, addr, admin := startConfigGateway(t, conf)
	// Each request takes about 27 ms upstream (TTFT 25 ms, two tokens); served one at a time,
	// ten clients wait about 240 ms in the queue for every answer.
	stop := make(chan struct{})
	wait := loadStreams(t, addr, 10, stop)
	s := waitRollout(t, admin, 30*time.Second, func(s serviceView) bool { return s.Rollout.State != "progressing" })
	close(stop)
	statuses := wait()
	require.Equal(t, "completed", s.Rollout.State, "%+v", s.Rollout)
	require.Equal(t, map[int]int{200: sumOf(statuses)}, statuses)
}

// startSlowRevisionSim runs one simulator instance with a TTFT of 25 ms and two tokens.
func startSlowRevisionSim(t *testing.T) *llmsim.Fleet {
	t.Helper()
	cfg := llmsim.DefaultConfig()
	cfg.Defaults.Listen = "127.0.0.1:0"
	cfg.Defaults.TTFT = llmsim.Duration(25 * time.Millisecond)
	cfg.Defaults.ITL = llmsim.Duration(time.Millisecond)
	cfg.Defaults.Tokens = 2
	f, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// loadStreams is load sending streamed chat requests for model m.
func loadStreams(t *testing.T, addr string, n int, stop <-chan struct{}) func() map[int]int {
	return loadBody(t, addr, n, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, stop)
}

// A new revision whose servers cannot be reached fails its samples even when the model's next
// target answers its requests: the client was served, the revision was not.
func TestRolloutCountsARevisionItsRequestsLeftAsFailing(t *testing.T) {
	v1, backup := startRevisionSim(t, 0), startRevisionSim(t, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	conf := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
models = true
[services.llm]
revisions = [
  { name = "v1", traffic_percent = 50, servers = [{ url = "http://%s" }] },
  { name = "v2", traffic_percent = 50, servers = [{ url = "http://%s" }] },
]
[services.llm.rollout]
from = "v1"
to = "v2"
step_percent = 50
step_interval_secs = 0.05
error_rate_threshold = 0.05
min_samples = 10
[services.backup.load_balancer]
servers = [{ url = "http://%s" }]
[models.m.targets.first]
service = "llm"
[models.m.targets.second]
service = "backup"
priority = 1
`, v1.Addrs()[0], dead, backup.Addrs()[0])
	_, addr, admin := startConfigGateway(t, conf)
	stop := make(chan struct{})
	wait := loadStreams(t, addr, 4, stop)
	s := waitRollout(t, admin, 30*time.Second, func(s serviceView) bool { return s.Rollout.State != "progressing" })
	close(stop)
	statuses := wait()
	require.Equal(t, "rolled_back", s.Rollout.State, "%+v", s.Rollout)
	require.Contains(t, s.Rollout.Reason, "error rate")
	require.Equal(t, map[int]int{200: sumOf(statuses)}, statuses, "the next target answered every request")
	require.Positive(t, backup.Stats(0).Requests)
}

// Any client can make a working revision answer 501 (a method its servers do not implement):
// that judges the revision no more than it judges a server to the circuit breaker or passive
// health. A flood of such requests does not roll back a good revision, while its 502s still
// would.
func TestRolloutIsNotRolledBackByClientProvoked501s(t *testing.T) {
	v1, v2 := serveStrict(t), serveStrict(t)
	_, addr, admin := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm]
revisions = [
  { name = "v1", traffic_percent = 50, servers = [{ url = "http://%s" }] },
  { name = "v2", traffic_percent = 50, servers = [{ url = "http://%s" }] },
]
[services.llm.rollout]
from = "v1"
to = "v2"
step_percent = 50
step_interval_secs = 0.05
error_rate_threshold = 0.05
min_samples = 10
`, v1.addr(), v2.addr()))
	deadline := time.Now().Add(20 * time.Second)
	for llmService(t, admin).Rollout.State == "progressing" {
		require.True(t, time.Now().Before(deadline), "the rollout never ended: %+v", llmService(t, admin).Rollout)
		for range 3 {
			require.Equal(t, 501, rawStatus(t, addr, "BREW /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"), "the upstream's 501")
		}
		require.Equal(t, 200, rawStatus(t, addr, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"))
	}
	s := llmService(t, admin)
	require.Equal(t, "completed", s.Rollout.State, "%+v", s.Rollout)
	require.Positive(t, v2.hits.Load(), "the new revision served well-formed requests")
}

// The thresholds bound the step's true p99, not the bucket of the histogram it falls in: a new
// revision that answers every request in 965 ms (plus the gateway's time), under a latency
// threshold of 1048 ms that the same histogram bucket (958.6 ms to 1048.6 ms) holds, is not
// rolled back; one that takes 1.1 s is. On each engine.
func TestRolloutLatencyThresholdIsExact(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			var delay atomic.Int64
			delay.Store(int64(965 * time.Millisecond))
			v1 := serveUpstream(t, echo)
			v2 := serveUpstreamU(t, func(u *upstream, c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
				select {
				case <-time.After(time.Duration(delay.Load())):
				case <-u.stop:
					return false
				}
				_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				return err == nil
			})
			_, addr, admin := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "llm"
[services.llm]
revisions = [
  { name = "v1", traffic_percent = 50, servers = [{ url = "http://%s" }] },
  { name = "v2", traffic_percent = 50, servers = [{ url = "http://%s" }] },
]
[services.llm.rollout]
from = "v1"
to = "v2"
step_percent = 10
step_interval_secs = 3600
latency_threshold_ms = 1048
min_samples = 3
`, engineTOML(engine), v1.addr(), v2.addr()))
			// Six requests at once: three to each revision, whose three samples judge the step.
			send := func() {
				var wg sync.WaitGroup
				for range 6 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r, err := tryCall("POST", "http://"+addr+"/v1/chat/completions", "", tinyChat)
						assert.NoError(t, err)
						assert.Equal(t, 200, r.status, r.raw)
					}()
				}
				wg.Wait()
			}
			send()
			s := llmService(t, admin)
			require.Equal(t, "progressing", s.Rollout.State, "a p99 of about 965 ms is within 1048 ms: %+v", s.Rollout)

			delay.Store(int64(1100 * time.Millisecond))
			send()
			s = llmService(t, admin)
			require.Equal(t, "rolled_back", s.Rollout.State, "%+v", s.Rollout)
			require.Contains(t, s.Rollout.Reason, "latency p99")
		})
	}
}
