package harness

import (
	"bufio"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseAdversary(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "", want: ""},
		{in: "none", want: ""},
		// Any other spec that names no adversary is a slip, not a clean run.
		{in: "slowloris=0", err: "want at least one kind above 0"},
		{in: " , ", err: "want at least one kind above 0"},
		{in: "mixed,slowloris=0,slowbody=0,noread=0,reset=0,pipeline=0,bigheader=0,segment=0,up-trickle=0,up-stall=0,up-reset=0,up-bigline=0", err: "want at least one kind above 0"},
		{in: "slowloris=200, noread=50,reset=20", want: "slowloris=200,noread=50,reset=20"},
		{in: "up-stall=0.5%,segment=3,up-trickle=2", want: "segment=3,up-trickle=2%,up-stall=0.5%"},
		{in: "mixed", want: mixedSpec},
		{in: "mixed,slowloris=1,up-reset=0", want: strings.Replace(strings.Replace(mixedSpec, "slowloris=64", "slowloris=1", 1), ",up-reset=0.5%", "", 1)},
		{in: "slowloris", err: "want kind=N"},
		{in: "slowloris=-1", err: "number of connections"},
		{in: "slowloris=10001", err: "number of connections"},
		{in: "slowloris=6000,noread=6000", err: "at most 10000"},
		{in: "up-stall=101", err: "percentage"},
		{in: "up-stall=60%,up-reset=60%", err: "at most 100%"},
		{in: "up-stall=NaN", err: "percentage"},
		{in: "explode=1", err: `unknown kind "explode"`},
		// A kind given twice is a slip (which count was meant?); mixed's counts may be
		// overridden by one of the kind's own.
		{in: "noread=1,noread=2", err: "noread is given twice"},
		{in: "up-stall=1%,segment=2,up-stall=2%", err: "up-stall is given twice"},
		{in: "noread=2;segment=2", err: "several separated by \";\", and each, are for sluice-bench compare"},
		{in: "each", err: "are for sluice-bench compare"},
	} {
		a, err := ParseAdversary(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		if tc.want == "" {
			require.Nil(t, a, tc.in)
			continue
		}
		require.Equal(t, tc.want, a.String(), tc.in)
		again, err := ParseAdversary(a.String())
		require.NoError(t, err)
		require.Equal(t, a.String(), again.String(), "the canonical form parses to itself")
	}
}

func TestParseAdversaries(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "", want: nil},
		{in: "none", want: nil},
		{in: "mixed", want: []string{mixedSpec}},
		{in: "noread=16; segment=8 ;noread=16", want: []string{"noread=16", "segment=8"}},
		{in: "reset=2;mixed", want: []string{"reset=2", mixedSpec}},
		{in: "noread=16;explode=1", err: `adversary "noread=16;explode=1": "explode=1": unknown kind "explode"`},
		{in: ";", err: `adversary ";": want at least one kind above 0`},
		{in: "none;none", err: `adversary "none;none": want at least one kind above 0`},
		{in: "noread=0", err: `adversary "noread=0": want at least one kind above 0`},
		{in: "noread=16;;none", err: `adversary "noread=16;;none": "": want at least one kind above 0`},
		{in: "noread=16;noread=0", err: `adversary "noread=16;noread=0": "noread=0": want at least one kind above 0`},
	} {
		got, err := ParseAdversaries(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}

	each, err := ParseAdversaries("each")
	require.NoError(t, err)
	kinds := AdversaryKinds()
	require.Len(t, each, len(kinds)+1, "every kind alone, then mixed")
	for i, k := range kinds {
		a, err := ParseAdversary(each[i])
		require.NoError(t, err)
		m, _ := ParseAdversary(mixedSpec)
		require.Equal(t, m.Conns(k), a.Conns(k), "%s runs at its count in mixed", k)
		require.Equal(t, m.Percent(k), a.Percent(k), "%s runs at its share in mixed", k)
		require.Len(t, strings.Split(each[i], ","), 1, "%s runs alone", k)
	}
	require.Equal(t, mixedSpec, each[len(each)-1])
	require.Equal(t, AdversaryMixed, AdversaryName(each[len(each)-1]))
	require.Equal(t, "noread=16", AdversaryName("noread=16"))
}

func TestAdversaryRefusesNonLoopbackTargets(t *testing.T) {
	for _, target := range []string{"http://192.0.2.1:8080", "http://example.com"} {
		_, err := Run(context.Background(), Options{Target: target, Workload: WorkloadJSON, Concurrency: 1,
			Duration: time.Second, Adversary: "slowloris=1"})
		require.ErrorContains(t, err, "loopback targets only", target)
	}
}

// kindStat returns the stats of kind in res.
func kindStat(t *testing.T, res *Result, kind string) AdversaryKindStat {
	t.Helper()
	require.NotNil(t, res.Adversary)
	for _, k := range res.Adversary.Kinds {
		if k.Kind == kind {
			return k
		}
	}
	require.Failf(t, "no stats", "kind %s missing from %+v", kind, res.Adversary.Kinds)
	return AdversaryKindStat{}
}

// TestAdversaryClientKindsBesideAWorkload runs every client kind against the basic upstream:
// each opens connections and reaches outcomes, none fails to connect, and the workload's own
// requests stay correct and counted apart.
func TestAdversaryClientKindsBesideAWorkload(t *testing.T) {
	target := startBasicUpstream(t, UpstreamOptions{Tokens: 8})
	spec := "slowloris=2,slowbody=2,noread=2,reset=2,pipeline=1,bigheader=2,segment=2"
	res, err := Run(context.Background(), Options{Target: target, Workload: WorkloadSSE, Concurrency: 2,
		Duration: 400 * time.Millisecond, Warmup: 50 * time.Millisecond, Seed: 3, Adversary: spec})
	require.NoError(t, err)
	require.Zero(t, res.Errors, "workload errors %v", res.ErrorsByKind)
	require.Positive(t, res.OK)
	require.Equal(t, spec, res.Adversary.Spec)
	require.Len(t, res.Adversary.Kinds, 7)
	for _, k := range res.Adversary.Kinds {
		require.Positive(t, k.Opened, k.Kind)
		require.Positive(t, k.Attempts, k.Kind)
		require.Zero(t, k.Outcomes[outConnect], k.Kind)
		var sum int64
		for o, n := range k.Outcomes {
			if o != outSkipped && o != outLate {
				sum += n
			}
		}
		require.Equal(t, k.Attempts, sum, "%s: every attempt has one outcome", k.Kind)
	}
	// The basic upstream has no header timeout and answers every valid request.
	require.Equal(t, map[string]int64{outOpenAtEnd: 2}, kindStat(t, res, AdvSlowloris).Outcomes)
	require.Equal(t, map[string]int64{outOpenAtEnd: 2}, kindStat(t, res, AdvNoRead).Outcomes)
	seg := kindStat(t, res, AdvSegment)
	require.Equal(t, seg.Attempts, seg.Outcomes[outOK], "segmented requests are valid: %v", seg.Outcomes)
	pipe := kindStat(t, res, AdvPipeline)
	require.Equal(t, pipe.Attempts, pipe.Outcomes["status_200"], "pipelined answers: %v", pipe.Outcomes)
	// Besides its own resets: an attempt the run's end cut off, and starts the pacing skipped
	// or the harness reached late (a loaded machine), which are not attempts.
	for o := range kindStat(t, res, AdvReset).Outcomes {
		require.Contains(t, []string{outResetBefore, outResetMid, outResetAfter, outOpenAtEnd, outSkipped, outLate}, o)
	}
}

// A target that answers the reset kind's streaming request with a whole JSON body and closes
// has sent its complete response before the reset: the attempt counts as a reset after the
// response, not as the target closing on it.
func TestResetSeesAWholeBodyByContentLength(t *testing.T) {
	const answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"choices\": []}\n"
	target := connServer(t, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body) // a close with unread bytes would send a reset
		_, _ = c.Write([]byte(answer))
	})
	res, err := Run(context.Background(), Options{Target: target, Workload: WorkloadJSON, Concurrency: 1,
		Duration: 300 * time.Millisecond, Seed: 5, Adversary: "reset=2"})
	require.NoError(t, err)
	st := kindStat(t, res, AdvReset)
	require.Positive(t, st.Outcomes[outResetAfter], "outcomes %v", st.Outcomes)
	for o := range st.Outcomes {
		require.Contains(t, []string{outResetBefore, outResetMid, outResetAfter, outOpenAtEnd}, o, "outcomes %v", st.Outcomes)
	}
}

// connServer runs serve, each on a goroutine of its own, for every connection to a loopback
// listener the test or benchmark closes at its end, and returns the listener's base URL.
func connServer(tb testing.TB, serve func(c net.Conn)) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// readFor reads and discards what c sends for d from the first read on.
func readFor(c net.Conn, d time.Duration) {
	buf := make([]byte, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(d))
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// refusingServer answers every connection with 408 and closes it 20 ms after its first byte,
// as a server with a short header timeout would (it reads what came meanwhile, so that its
// close is not a reset).
func refusingServer(t *testing.T) string {
	return connServer(t, func(c net.Conn) {
		if _, err := c.Read(make([]byte, 1)); err != nil {
			return
		}
		readFor(c, 20*time.Millisecond)
		_, _ = io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	})
}

// TestAdversaryReportsTheTargetsRefusals: against a target that refuses every request at
// its first byte, each kind reports the status or the close, and how long the target held
// the slow connections.
func TestAdversaryReportsTheTargetsRefusals(t *testing.T) {
	target := refusingServer(t)
	res, err := Run(context.Background(), Options{Target: target, Workload: WorkloadJSON, Concurrency: 1,
		Duration: 300 * time.Millisecond, Adversary: "slowloris=2,slowbody=2,bigheader=2,segment=1,reset=1,pipeline=1"})
	require.NoError(t, err)
	require.Equal(t, res.Requests, res.ErrorsByKind["status_4xx"], "the workload's requests are refused too")
	for _, kind := range []string{AdvSlowloris, AdvSlowBody, AdvBigHeader, AdvSegment, AdvReset, AdvPipeline} {
		k := kindStat(t, res, kind)
		switch kind {
		case AdvSlowloris, AdvSlowBody, AdvBigHeader:
			// Whatever the target answered before the request was complete.
			require.Positive(t, k.Outcomes["status_408"], "%s: %v", kind, k.Outcomes)
			require.Equal(t, k.Attempts-k.Outcomes[outOpenAtEnd], k.HeldCount, kind)
			require.Positive(t, k.HeldMaxMs, kind)
		}
		// A request still being written when the target closes may meet a reset; an attempt
		// begun just before the end of the run is still open then; a paced start may be
		// skipped, or missed by a harness the machine ran late.
		for o := range k.Outcomes {
			require.Contains(t, []string{"status_408", outClosed, outReset, outResetBefore, outOpenAtEnd, outSkipped, outLate}, o, kind)
		}
	}
}

// slowRefusingServer answers every connection with 431 hold after it opened, then closes
// it, as a target that is slow to refuse would.
func slowRefusingServer(t *testing.T, hold time.Duration) string {
	return connServer(t, func(c net.Conn) {
		readFor(c, hold)
		_, _ = io.WriteString(c, "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	})
}

// The reset and bigheader kinds start an attempt every advPeriod however long the target
// takes to answer, so that every target meets the same attempts per second: against a target
// that holds each one 100 ms, a slot that waited for each answer would make a third of them.
// (The slot's advMaxInFlight attempts cover 200 ms of holding: 100 ms leave the other half
// to a loaded machine's scheduling, which a hold nearer 200 ms would not.)
func TestPacedKindsKeepTheirRateAgainstASlowTarget(t *testing.T) {
	const hold = 100 * time.Millisecond
	run := 1200 * time.Millisecond
	res, err := Run(context.Background(), Options{Target: slowRefusingServer(t, hold), Workload: WorkloadJSON,
		Concurrency: 1, Duration: run, Adversary: "bigheader=1,reset=1"})
	require.NoError(t, err)
	closedLoop := int64(run / (hold + advPeriod))
	for _, kind := range []string{AdvBigHeader, AdvReset} {
		k := kindStat(t, res, kind)
		started := k.Attempts + k.Outcomes[outSkipped]
		require.Greater(t, started, 2*closedLoop, "%s: %d attempts started, %v", kind, started, k.Outcomes)
		require.LessOrEqual(t, started, int64(run/advPeriod)+advMaxInFlight,
			"%s: no more than one start per period (%d started)", kind, started)
		require.Zero(t, k.Outcomes[outSkipped], "%s: 100 ms answers leave a slot's %d attempts room: %v",
			kind, advMaxInFlight, k.Outcomes)
	}
	require.Positive(t, kindStat(t, res, AdvBigHeader).Outcomes["status_431"])
}

// A paced slot whose goroutine runs long after a start was due (a harness too loaded for its
// slots) does not make the missed starts up in a burst: that would fill the slot at once and
// count the rest as skipped, as if the target had held four attempts, against a target that
// answers in 20 ms. The missed starts are counted late, and the schedule goes on.
func TestPacedSlotBehindItsScheduleCountsLateNotSkipped(t *testing.T) {
	const behind = 10 * advPeriod
	var jump atomic.Int64 // added to the schedule's clock: how late the slot's goroutine ran
	ctx, cancel := context.WithTimeout(context.Background(), 6*advPeriod)
	defer cancel()
	r := &advRun{ctx: ctx, cancel: cancel,
		now: func() time.Time { return time.Now().Add(time.Duration(jump.Load())) }}
	st := &advStat{kind: AdvReset, outcomes: map[string]int64{}}
	r.paced(st, rand.New(rand.NewPCG(1, 2)), func(*rand.Rand) {
		if st.attempts.Load() == 0 {
			jump.Store(int64(behind))
		}
		time.Sleep(20 * time.Millisecond) // the behaviour under test: an attempt the target holds 20 ms, under a period
		st.add(outClosed)
	})
	res := st.result(1, 0)
	require.Zero(t, res.Outcomes[outSkipped], "no attempt was held: %v", res.Outcomes)
	require.GreaterOrEqual(t, res.Outcomes[outLate], int64(behind/advPeriod)-1, "%v", res.Outcomes)
	require.Equal(t, res.Attempts, res.Outcomes[outClosed], "%v", res.Outcomes)
}

// silentServer reads what every connection sends and never answers.
func silentServer(t *testing.T) string {
	return connServer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
}

// Attempts a target still holds when the run ends are reported as open_at_end, not dropped:
// against a target that never answers, every paced slot ends the run with attempts open.
func TestPacedAttemptsOpenAtTheEndAreReported(t *testing.T) {
	res, err := Run(context.Background(), Options{Target: silentServer(t), Workload: WorkloadJSON,
		Concurrency: 1, Duration: 300 * time.Millisecond, Timeout: 200 * time.Millisecond,
		Adversary: "bigheader=2,reset=2"})
	require.NoError(t, err)
	for _, kind := range []string{AdvBigHeader, AdvReset} {
		k := kindStat(t, res, kind)
		require.Positive(t, k.Outcomes[outOpenAtEnd], "%s: %v", kind, k.Outcomes)
		var sum int64
		for o, n := range k.Outcomes {
			if o != outSkipped && o != outLate {
				sum += n
			}
		}
		require.Equal(t, k.Attempts, sum, "%s: every attempt has one outcome", kind)
		// Every connection opened has its outcome; an attempt whose connect the end cut has
		// one without a connection.
		require.LessOrEqual(t, k.Opened, k.Attempts, kind)
	}
}

// faultUpstream is an SSE upstream that acts on llmsim's fault header: trickle answers
// normally, stall-after holds the response open, reset-after resets the connection, big-line
// sends its first event with that much content.
func faultUpstream(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fault := r.Header.Get(faultHeaderName)
		if strings.HasPrefix(fault, "reset-after") {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = c.(*net.TCPConn).SetLinger(0)
				_ = c.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		content := "x"
		if strings.HasPrefix(fault, "big-line=") {
			n, _ := strconv.Atoi(strings.TrimPrefix(fault, "big-line="))
			content = strings.Repeat("x", n)
		}
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\""+content+"\"}}]}\n\n")
		if strings.HasPrefix(fault, "stall-after") {
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAdversaryUpstreamFaultsStayOutOfTheWorkloadsFigures: the requests that carry a fault
// are counted under their kind, with the upstream's misbehaviour as their outcome, and not in
// the workload's errors or latencies.
func TestAdversaryUpstreamFaultsStayOutOfTheWorkloadsFigures(t *testing.T) {
	target := faultUpstream(t)
	// The seed fixes which requests carry which fault, in the order they are sent: the window
	// must hold enough requests for every kind to come up (under -race on a loaded machine,
	// 300 ms held 30 requests, none of them trickled).
	res, err := Run(context.Background(), Options{Target: target, Workload: WorkloadSSE, Concurrency: 4,
		Duration: time.Second, Seed: 5, Adversary: "up-trickle=10,up-stall=2,up-reset=10,up-bigline=10"})
	require.NoError(t, err)
	require.Zero(t, res.Errors, "workload errors %v", res.ErrorsByKind)
	require.Equal(t, res.OK, res.Latency.Count)
	trickle, stall, reset := kindStat(t, res, AdvUpTrickle), kindStat(t, res, AdvUpStall), kindStat(t, res, AdvUpReset)
	require.Positive(t, trickle.Attempts, "%d requests sent", res.TotalSent)
	require.Positive(t, reset.Attempts, "%d requests sent", res.TotalSent)
	require.Equal(t, map[string]int64{outOK: trickle.Attempts}, trickle.Outcomes)
	require.Equal(t, map[string]int64{outTimeout: stall.Attempts}, stall.Outcomes)
	big := kindStat(t, res, AdvUpBigLine)
	require.Positive(t, big.Attempts)
	require.Equal(t, map[string]int64{outOK: big.Attempts}, big.Outcomes, "the enormous line is read, and the stream after it")
	for o := range reset.Outcomes {
		require.Contains(t, []string{outReset, outClosed}, o)
	}
	require.InDelta(t, 10, float64(trickle.Attempts)*100/float64(res.TotalSent), 5, "about 10% of the requests")
}

// TestWithHeaderAddsTheLineAfterTheRequestLine checks the faulted request's bytes.
func TestWithHeaderAddsTheLineAfterTheRequestLine(t *testing.T) {
	var w worker
	req := []byte("POST /v1 HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}")
	got := w.withHeader(req, "X-Llmsim-Fault: trickle\r\n")
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(got))))
	require.NoError(t, err)
	require.Equal(t, "trickle", r.Header.Get(faultHeaderName))
	body, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	require.Equal(t, "{}", string(body))
	require.Equal(t, "POST /v1 HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}", string(req), "the prebuilt request is untouched")
}

// responseComplete goes by the response's framing: [DONE], a chunked body through its last
// chunk (Transfer-Encoding before Content-Length), a valid Content-Length, or the close.
// A reset attempt names the target's final answer: a 200 of HTTP/1.0 is a 200, and interim
// 1xx responses before it are not the answer.
func TestResetOutcomeReadsTheFinalStatus(t *testing.T) {
	const whole = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
	for _, c := range []struct {
		name, p string
		eof     bool
		want    string
	}{
		{"whole", whole, false, outResetAfter},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, outResetAfter},
		{"after 100 Continue", "HTTP/1.1 100 Continue\r\n\r\n" + whole, false, outResetAfter},
		{"after two interim responses", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n" + whole, false, outResetAfter},
		{"interim head split", "HTTP/1.1 100 Continue\r\n", false, ""},
		{"final status yet to come", "HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 2", false, ""},
		{"status code split", "HTTP/1.1 20", false, ""},
		{"body short", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", false, ""},
		{"delimited by the close", "HTTP/1.0 200 OK\r\n\r\nhello", true, outResetAfter},
		{"refused", "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n", false, "status_503"},
		{"refused after 100 Continue", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many", false, "status_429"},
		{"status line before its end", "HTTP/1.1 404 ", false, "status_404"},
		{"switching protocols is final", "HTTP/1.1 101 Switching Protocols\r\n\r\n", false, "status_101"},
		{"not HTTP", "SSH-2.0-OpenSSH_9.6\r\n", false, ErrBadResponse.String()},
	} {
		require.Equal(t, c.want, resetOutcome([]byte(c.p), c.eof), c.name)
	}
}

func TestResponseCompleteFollowsTheFraming(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\n"
	for _, c := range []struct {
		name, p  string
		eof      bool
		complete bool
	}{
		{"sse done", ok + "Content-Type: text/event-stream\r\n\r\ndata: x\n\ndata: [DONE]\n\n", false, true},
		{"length whole", ok + "Content-Length: 5\r\n\r\nhello", false, true},
		{"length short", ok + "Content-Length: 6\r\n\r\nhello", true, false},
		{"length negative", ok + "Content-Length: -1\r\n\r\n", false, false},
		{"length signed", ok + "Content-Length: +5\r\n\r\nhello", false, false},
		{"head split", ok + "Content-Length: 5\r\n", false, false},
		{"chunked whole", ok + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false, true},
		{"chunked with extension and trailer", ok + "Transfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nT: v\r\n\r\n", false, true},
		{"chunked without its last chunk", ok + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", true, false},
		{"chunked data holding a zero line", ok + "Transfer-Encoding: chunked\r\n\r\n7\r\n\r\n0\r\n\r\n\r\n", false, false},
		{"chunked over length", ok + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n5\r\nhello\r\n", false, false},
		{"delimited by the close", ok + "\r\nhello", true, true},
		{"open without framing", ok + "\r\nhello", false, false},
	} {
		require.Equal(t, c.complete, responseComplete([]byte(c.p), c.eof), c.name)
	}
}
