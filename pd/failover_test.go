package pd_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/pd"
)

// abortBound is how soon after a failed leg the other worker's abort must arrive: at once,
// not when a reservation or a timeout expires (seconds), with room for a loaded machine
// running the tests under -race.
const abortBound = 300 * time.Millisecond

// faulty makes instance i of the fleet apply spec to every request.
func faulty(i int, spec string) func(int, *llmsim.InstanceConfig) {
	return func(k int, ic *llmsim.InstanceConfig) {
		if k == i {
			ic.FaultRate, ic.Fault = 1, spec
		}
	}
}

// only returns the one execution id of ids.
func only(t *testing.T, ids []string) string {
	t.Helper()
	require.Len(t, ids, 1, "%v", ids)
	return ids[0]
}

// A prefill that fails gets the decode reservation aborted at once, and another pair serves
// the request.
func TestPrefillFailureAbortsReservationAndAnotherPairServes(t *testing.T) {
	f := startFleet(t, faulty(prefillA, "status=503"))
	g := startGateway(t, f.gatewayTOML("", ""))
	msg := promptRankedFirst(t, "prefill-a", "prefill-b")
	status, data := stream(t, g, chatBody(msg))
	require.Equal(t, 200, status, data)
	require.Equal(t, "[DONE]", data[len(data)-1])

	failed := only(t, f.executions(prefillA, "prefill"))
	served := only(t, f.executions(prefillB, "prefill"))
	require.NotEqual(t, failed, served)
	calls := f.calls(failed)
	var decodeW int
	for _, w := range []int{decodeA, decodeB} {
		if len(calls[f.ids[w]]) > 0 {
			decodeW = w
		}
	}
	require.NotZero(t, decodeW, "a decode worker was prepared for the failed execution: %+v", calls)
	prefill := calls["prefill-a"][0]
	abort := f.waitCall(t, decodeW, "abort", failed)
	require.Less(t, abort.At.Sub(prefill.At), abortBound, "the reservation was aborted at once after the prefill")
	for _, w := range []int{decodeA, decodeB} {
		for _, id := range f.executions(w, "decode") {
			require.Equal(t, served, id, "only the second pair decoded")
		}
	}
}

// A decode worker that refuses decode/execute before streaming gets the pair aborted, and
// another pair serves the request.
func TestDecodeFailureBeforeStreamAbortsAndAnotherPairServes(t *testing.T) {
	f := startFleet(t, faulty(decodeA, "status=500"))
	g := startGateway(t, f.gatewayTOML("", ""))
	msg := promptRankedFirst(t, "decode-a", "decode-b")
	status, data := stream(t, g, chatBody(msg))
	require.Equal(t, 200, status, data)
	require.Equal(t, "[DONE]", data[len(data)-1])

	failed := only(t, f.executions(decodeA, "decode"))
	served := only(t, f.executions(decodeB, "decode"))
	require.NotEqual(t, failed, served)
	decode := f.calls(failed)["decode-a"][1]
	require.Equal(t, "decode", decode.Call)
	abortD := f.waitCall(t, decodeA, "abort", failed)
	require.Less(t, abortD.At.Sub(decode.At), abortBound)
	for w, cs := range f.calls(failed) {
		if strings.HasPrefix(w, "prefill") {
			p := -1
			for i := range f.ids {
				if f.ids[i] == w {
					p = i
				}
			}
			abortP := f.waitCall(t, p, "abort", failed)
			require.Less(t, abortP.At.Sub(decode.At), abortBound, "the prefill worker was aborted too: %+v", cs)
		}
	}
}

// A decode that fails mid-stream ends the client's stream with an error event, and nothing
// is replayed.
func TestDecodeFailureMidStreamEndsWithErrorEvent(t *testing.T) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == decodeA || i == decodeB {
			ic.FaultRate, ic.Fault = 1, "reset-after=3"
		}
	})
	g := startGateway(t, f.gatewayTOML("", ""))
	status, data := stream(t, g, chatBody("a long answer please"))
	require.Equal(t, 200, status)
	require.NotEmpty(t, data)
	require.NotContains(t, data, "[DONE]")
	require.Contains(t, data[len(data)-1], `"upstream_stream_error"`, "the stream ends with the gateway's error event: %v", data)
	decodes := len(f.executions(decodeA, "decode")) + len(f.executions(decodeB, "decode"))
	require.Equal(t, 1, decodes, "no replay after the stream started")
	prefills := len(f.executions(prefillA, "prefill")) + len(f.executions(prefillB, "prefill"))
	require.Equal(t, 1, prefills)
}

// leaveDuring sends a streamed request for msg on a raw connection, waits until worker w got
// a call of kind, closes the connection and returns the execution id and when it closed.
func leaveDuring(t *testing.T, addr string, f *fleet, msg string, w int, kind string) (string, time.Time) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	body := chatBody(msg)
	_, err = c.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		itoa(len(body)) + "\r\n\r\n" + body))
	require.NoError(t, err)
	call := f.waitCall(t, w, kind, "")
	closed := time.Now()
	require.NoError(t, c.Close())
	return call.ExecutionID, closed
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// A client that leaves during the prefill gets both workers an abort at once: the decode
// reservation is not left to expire.
func TestClientLeavingDuringPrefillAbortsBothWorkers(t *testing.T) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == prefillA || i == prefillB {
			ic.FaultRate, ic.Fault = 1, "slow=5s"
		}
	})
	g := startGateway(t, f.gatewayTOML("", ""))
	msg := promptRankedFirst(t, "prefill-a", "prefill-b")
	id, closed := leaveDuring(t, g.Addr("web"), f, msg, prefillA, "prefill")
	for w, cs := range f.calls(id) {
		i := indexOf(f.ids, w)
		abort := f.waitCall(t, i, "abort", id)
		require.Less(t, abort.At.Sub(closed), abortBound, "%s aborted at once: %+v", w, cs)
	}
	require.Len(t, f.calls(id), 2, "a prefill and a decode worker were involved")
}

// A client that leaves once the decode stream began, before its first token, gets both
// workers an abort at once.
func TestClientLeavingBeforeFirstTokenAbortsBothWorkers(t *testing.T) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == decodeA || i == decodeB {
			ic.FaultRate, ic.Fault = 1, "slow=5s"
		}
	})
	g := startGateway(t, f.gatewayTOML("", ""))
	var id string
	var closed time.Time
	c, err := net.Dial("tcp", g.Addr("web"))
	require.NoError(t, err)
	body := chatBody("leaving soon")
	_, err = c.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		itoa(len(body)) + "\r\n\r\n" + body))
	require.NoError(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "200", "the decode stream's head reached the client")
	closed = time.Now()
	require.NoError(t, c.Close())
	for _, w := range []int{decodeA, decodeB} {
		if ids := f.executions(w, "decode"); len(ids) > 0 {
			id = ids[0]
		}
	}
	require.NotEmpty(t, id)
	require.Len(t, f.calls(id), 2)
	for w := range f.calls(id) {
		abort := f.waitCall(t, indexOf(f.ids, w), "abort", id)
		require.Less(t, abort.At.Sub(closed), abortBound, "%s aborted at once", w)
	}
}

func indexOf(ids []string, id string) int {
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return -1
}

// A decode worker that stopped listening (within its observation's TTL) fails the connect:
// another pair serves, and passive health keeps the dead worker out of the next request's
// pair, which goes straight to the live one.
func TestDeadDecodeWorkerIsRetriedAwayAndLeftOut(t *testing.T) {
	f := startFleet(t, nil)
	g := startGateway(t, f.gatewayTOML("", ""))
	require.NoError(t, f.sim.Crash(decodeA, 30*time.Second))
	for n := range 2 {
		msg := promptRankedFirst(t, "decode-a", "decode-b")
		if n == 1 {
			msg += " again"
			for pd.Rank(pd.RequestKey([]byte(chatBody(msg))), "decode-a") < pd.Rank(pd.RequestKey([]byte(chatBody(msg))), "decode-b") {
				msg += "!"
			}
		}
		status, data := stream(t, g, chatBody(msg))
		require.Equal(t, 200, status, data)
		require.Len(t, f.executions(decodeB, "decode"), n+1)
	}
	// The first request's failed pair was aborted on its prefill worker; the second request
	// made no attempt on decode-a, so one execution in all was aborted.
	aborted := map[string]bool{}
	for _, w := range []int{prefillA, prefillB} {
		for _, id := range f.executions(w, "abort") {
			aborted[id] = true
		}
	}
	require.Len(t, aborted, 1)
}

// When every pair of a target fails before the response, the next target priority serves
// the request.
func TestExhaustedTargetFallsBackToNextPriority(t *testing.T) {
	broken := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == prefillA || i == prefillB {
			ic.FaultRate, ic.Fault = 1, "status=503"
		}
	})
	healthy := startFleet(t, nil)
	g := startGateway(t, twoTargetsTOML(broken, healthy))
	status, data := stream(t, g, chatBody("fall back"))
	require.Equal(t, 200, status, data)
	require.Equal(t, "[DONE]", data[len(data)-1])
	require.Len(t, f2decodes(healthy), 1, "the second target served")
	require.Len(t, f2decodes(broken), 0)
	require.Len(t, broken.executions(prefillA, "prefill"), 1, "each broken prefill worker was tried once")
	require.Len(t, broken.executions(prefillB, "prefill"), 1)
}

func f2decodes(f *fleet) []string {
	return append(f.executions(decodeA, "decode"), f.executions(decodeB, "decode")...)
}

// Workers that refuse the gateway's key get the client a 502 naming the configuration, not
// the workers' 401 (which would tell the client its own key is wrong).
func TestWorkersRefusingTheKeyGive502(t *testing.T) {
	f := startFleet(t, nil)
	toml := f.gatewayTOML("", "")
	// The observations use the right key; the exchange uses another.
	toml = strings.Replace(toml, `[models.chat.scheduling.distributed_serving]
api_key_env = "`+workerKeyEnv+`"`, `[models.chat.scheduling.distributed_serving]
api_key_env = "SLUICE_TEST_PD_WRONG_KEY"`, 1)
	t.Setenv("SLUICE_TEST_PD_WRONG_KEY", "not-the-key")
	g := startGateway(t, toml)
	status, data := stream(t, g, chatBody("who am I"))
	require.Equal(t, 502, status, data)
	require.Contains(t, data[0], "distributed_serving.api_key_env")
}

// A worker call the gateway cannot connect for want of its own descriptors is the gateway's
// shortage: the client gets 503 with Retry-After at once, no other pair is tried, the workers
// are not left out of later requests, which the next one shows, and the P/D metrics do not
// count it as a worker's failure, whichever leg could not connect.
func TestOutOfDescriptorsIsTheGatewaysShortage(t *testing.T) {
	for _, tc := range []struct {
		phase string
		// starved lists the fleet's workers whose connects fail; nil: every worker's.
		starved []int
	}{
		{"prepare", nil},
		{"prefill", []int{prefillA, prefillB}},
	} {
		t.Run(tc.phase, func(t *testing.T) {
			f := startFleet(t, nil)
			g := startGateway(t, f.gatewayTOML("", ""))
			starved := map[string]bool{}
			for i, a := range f.sim.Addrs() {
				if tc.starved == nil || slices.Contains(tc.starved, i) {
					starved[a] = true
				}
			}
			retries := pairRetries(t)
			before := pdCounters(t)
			var logs syncBuffer
			prev := slog.Default()
			slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
			defer slog.SetDefault(prev)
			pd.SetDialHook(func(ctx context.Context, network, addr string) (net.Conn, error) {
				if starved[addr] {
					return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("socket", syscall.EMFILE)}
				}
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			})
			status, data := stream(t, g, chatBody("starved"))
			pd.SetDialHook(nil)
			require.Equal(t, 503, status, data)
			require.Contains(t, data[0], `"code":"gateway_resources_exhausted"`)
			require.Equal(t, retries, pairRetries(t), "no other pair tried: it would fail alike")
			require.Contains(t, logs.String(), `msg="cannot connect a worker: the gateway is short of resources"`)
			after := pdCounters(t)
			require.Equal(t, before[`sluice_pd_phase_failures_total{model="chat",target="t",phase="`+tc.phase+`"}`],
				after[`sluice_pd_phase_failures_total{model="chat",target="t",phase="`+tc.phase+`"}`], "no worker failed its leg")
			require.Equal(t, before[`sluice_pd_aborts_total{model="chat",target="t",reason="leg_failed"}`],
				after[`sluice_pd_aborts_total{model="chat",target="t",reason="leg_failed"}`], "no worker failed its leg")
			require.Equal(t, before[`sluice_pd_aborts_total{model="chat",target="t",reason="gateway_resources"}`]+1,
				after[`sluice_pd_aborts_total{model="chat",target="t",reason="gateway_resources"}`], "the abort names the gateway's shortage")

			status, data = stream(t, g, chatBody("served"))
			require.Equal(t, 200, status, data)
			require.Equal(t, "[DONE]", data[len(data)-1])
		})
	}
}

// When every decode worker runs its max_active sequences, the model is busy, not broken: a
// request gets 429 model_at_capacity, as from a full admission queue.
func TestEveryDecodeWorkerAtCapacityGives429(t *testing.T) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == decodeA || i == decodeB {
			// One sequence at a time, which stalls after its first token until its client
			// leaves: a stream there keeps the worker full.
			ic.MaxRunning, ic.FaultRate, ic.Fault = 1, 1, "stall-after=1"
		}
	})
	g := startGateway(t, f.gatewayTOML("", ""))
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	// The holding streams go one at a time: the second is sent once the gateway has seen the
	// first's worker full, so it cannot be sent to the same worker on a stale observation.
	hold := func(n int) {
		go func() {
			req, err := http.NewRequestWithContext(ctx, "POST", "http://"+g.Addr("web")+"/v1/chat/completions",
				strings.NewReader(chatBody("holding "+strconv.Itoa(n))))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	hold(0)
	waitObservedActive(t, g.AdminAddr(), 1, "decode-a", "decode-b")
	hold(1)
	waitObservedActive(t, g.AdminAddr(), 2, "decode-a", "decode-b")

	status, data := stream(t, g, chatBody("one too many"))
	require.Equal(t, 429, status, data)
	require.Contains(t, data[0], `"code":"model_at_capacity"`)
	require.Contains(t, data[0], `"type":"rate_limit_error"`)
}

// pdCounters returns this process's sluice_pd_ series by name and labels.
func pdCounters(t *testing.T) map[string]float64 {
	t.Helper()
	out, err := readPDCounters()
	require.NoError(t, err)
	return out
}

// readPDCounters returns the sluice_pd_ series of this process's metrics by name, or the
// error of a value that does not parse (for conditions polled off the test goroutine).
func readPDCounters() (map[string]float64, error) {
	var b bytes.Buffer
	metrics.WritePrometheus(&b)
	out := map[string]float64{}
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, "sluice_pd_") {
			continue
		}
		series, value, _ := strings.Cut(line, " ")
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", line, err)
		}
		out[series] = f
	}
	return out, nil
}

// pairRetries sums sluice_pd_pair_retries_total over its series in this process's metrics.
func pairRetries(t *testing.T) float64 {
	t.Helper()
	var b bytes.Buffer
	metrics.WritePrometheus(&b)
	sum := 0.0
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "sluice_pd_pair_retries_total{") {
			f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			require.NoError(t, err, line)
			sum += f
		}
	}
	return sum
}

// Workers that answer a leg with 429 are busy, not broken, whichever leg it is and whatever
// the other pairs answered: when no pair served the request and a worker tried refused it so,
// the request gets 429 model_at_capacity with Retry-After, not a 502 or a worker's own answer.
func TestWorkersRefusingBusyGive429(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leg    string
		faults map[int]string
	}{
		{"decode", "decode", map[int]string{decodeA: "status=429", decodeB: "status=429"}},
		{"prefill", "prefill", map[int]string{prefillA: "status=429", prefillB: "status=429"}},
		{"decode-busy-and-failing", "decode", map[int]string{decodeA: "status=500", decodeB: "status=429"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
				if spec, ok := tc.faults[i]; ok {
					ic.FaultRate, ic.Fault = 1, spec
				}
			})
			g := startGateway(t, f.gatewayTOML("", ""))
			// Each worker of the leg first in turn: the answer does not hang on which one
			// was tried last.
			ids := []string{tc.leg + "-a", tc.leg + "-b"}
			for _, first := range ids {
				msg := promptRankedFirst(t, first, slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == first })...)
				resp, err := http.Post("http://"+g.Addr("web")+"/v1/chat/completions", "application/json",
					strings.NewReader(chatBody(msg)))
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(t, err)
				require.Equal(t, 429, resp.StatusCode, string(body))
				require.Equal(t, "1", resp.Header.Get("Retry-After"))
				require.Contains(t, string(body), `"code":"model_at_capacity"`)
				require.Contains(t, string(body), "had no room for the request")
			}
			refused := 0
			for w := range tc.faults {
				refused += len(f.executions(w, tc.leg))
			}
			require.Equal(t, 4, refused, "both failing workers were tried for each request")
		})
	}
}

// Busy workers make the model busy whichever target priority they serve: a model whose
// targets failed, one with workers answering 429 and the other with 500s, gets 429
// model_at_capacity in either order of the targets.
func TestBusyTargetGives429WhicheverTargetFailedLast(t *testing.T) {
	for _, order := range []string{"busy-first", "broken-first"} {
		t.Run(order, func(t *testing.T) {
			prefills := func(spec string) func(int, *llmsim.InstanceConfig) {
				return func(i int, ic *llmsim.InstanceConfig) {
					if i == prefillA || i == prefillB {
						ic.FaultRate, ic.Fault = 1, spec
					}
				}
			}
			first, second := startFleet(t, prefills("status=429")), startFleet(t, prefills("status=500"))
			if order == "broken-first" {
				first, second = second, first
			}
			g := startGateway(t, twoTargetsTOML(first, second))
			resp, err := http.Post("http://"+g.Addr("web")+"/v1/chat/completions", "application/json",
				strings.NewReader(chatBody("two targets")))
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.NotEmpty(t, first.executions(prefillA, "prefill"), "the first target was tried")
			require.NotEmpty(t, second.executions(prefillA, "prefill"), "the second target was tried")
			require.Equal(t, 429, resp.StatusCode, string(body))
			require.Equal(t, "1", resp.Header.Get("Retry-After"))
			require.Contains(t, string(body), `"code":"model_at_capacity"`)
		})
	}
}
