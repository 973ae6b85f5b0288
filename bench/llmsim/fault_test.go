package llmsim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Fault
		bad  bool
	}{
		{in: "status=503", want: Fault{Status: 503, ResetAfter: -1, StallAfter: -1}},
		{in: "reset-after=3; slow=10ms", want: Fault{ResetAfter: 3, StallAfter: -1, Slow: 10 * time.Millisecond}},
		{in: "stall-after=0,repeat , drop-done;close-idle", want: Fault{ResetAfter: -1, StallAfter: 0, Repeat: true, DropDone: true, CloseIdle: true}},
		{in: "close", want: Fault{ResetAfter: -1, StallAfter: -1, Close: true}},
		{in: " ; ,", want: noFault},
		{in: "trickle", want: Fault{ResetAfter: -1, StallAfter: -1, Trickle: true}},
		{in: "trickle=2ms;slow=1ms", want: Fault{ResetAfter: -1, StallAfter: -1, Trickle: true, TrickleGap: 2 * time.Millisecond, Slow: time.Millisecond}},
		{in: "trickle=2s", bad: true},
		{in: "trickle=x", bad: true},
		{in: "big-line=1048576", want: Fault{ResetAfter: -1, StallAfter: -1, BigLine: 1 << 20}},
		{in: "big-line=0", bad: true},
		{in: "big-line=67108865", bad: true},
		{in: "big-line", bad: true},
		{in: "status=200", bad: true},
		{in: "status=abc", bad: true},
		{in: "reset-after=-1", bad: true},
		{in: "slow=1h", bad: true},
		{in: "repeat=1", bad: true},
		{in: "explode", bad: true},
	} {
		got, err := ParseFault(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseFault(%q) = %+v, want error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseFault(f *testing.F) {
	for _, s := range []string{"status=503", "reset-after=2;stall-after=1,slow=5ms", "repeat,drop-done,close-idle", "=", ";;", "slow=-1s", "trickle=1ms"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fl, err := ParseFault(s)
		if err == nil && (fl.Slow < 0 || fl.Slow > maxFaultSlow || fl.TrickleGap < 0 || fl.TrickleGap > maxTrickleGap ||
			(fl.Status != 0 && (fl.Status < 400 || fl.Status > 599))) {
			t.Fatalf("ParseFault(%q) accepted out-of-range %+v", s, fl)
		}
	})
}

func faultHdr(v string) map[string]string { return map[string]string{FaultHeader: v} }

func TestFaultStatus(t *testing.T) {
	f, url := startOne(t, nil)
	resp := post(t, context.Background(), newClient(), url+"/v1/chat/completions", chatBody("x", true, ""), faultHdr("status=503"))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d", resp.StatusCode)
	}
	readAPIError(t, resp)
	resp = post(t, context.Background(), newClient(), url+"/v1/chat/completions", chatBody("x", true, ""), faultHdr("bogus"))
	if resp.StatusCode != 400 {
		t.Fatalf("bad fault header: status %d", resp.StatusCode)
	}
	readAPIError(t, resp)
	if st := f.Stats(0); st.Faults != 1 || st.Requests != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFaultResetAfter(t *testing.T) {
	_, url := startOne(t, nil)
	resp := post(t, context.Background(), newClient(), url+"/v1/chat/completions", chatBody("x", true, ""), faultHdr("reset-after=3"))
	defer resp.Body.Close()
	evs, err := readEvents(resp.Body, nil)
	if len(evs) != 3 {
		t.Fatalf("%d events before the reset, want 3", len(evs))
	}
	if err == nil || !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "reset")) {
		t.Fatalf("stream ended with %v, want a connection reset", err)
	}
}

func TestFaultResetBeforeAnyEvent(t *testing.T) {
	_, url := startOne(t, nil)
	resp := post(t, context.Background(), newClient(), url+"/v1/chat/completions", chatBody("x", true, ""), faultHdr("reset-after=0"))
	defer resp.Body.Close()
	evs, err := readEvents(resp.Body, nil)
	if len(evs) != 0 || err == nil {
		t.Fatalf("%d events, err %v; want a reset before any event", len(evs), err)
	}
}

// A non-streamed response that reset-after cuts is never begun: the client gets the reset
// and no status line, as from a server that dies before it answers, on every API.
func TestFaultResetNonStreamedSendsNoResponse(t *testing.T) {
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", chatBody("x", false, "")},
		{"/v1/completions", `{"model":"m","prompt":"x"}`},
		{"/v1/responses", `{"model":"m","input":"x"}`},
		{"/v1/messages", `{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"x"}]}`},
	} {
		for _, n := range []int{0, 2} {
			t.Run(fmt.Sprintf("%s/reset-after=%d", tc.path, n), func(t *testing.T) {
				_, url := startOne(t, nil)
				req, err := http.NewRequest(http.MethodPost, url+tc.path, strings.NewReader(tc.body))
				require.NoError(t, err)
				req.Header.Set(FaultHeader, fmt.Sprintf("reset-after=%d", n))
				resp, err := newClient().Do(req)
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					require.Failf(t, "a response began", "status %d, body %q: want the connection reset before any response", resp.StatusCode, b)
				}
			})
		}
	}
}

func TestFaultStallAfter(t *testing.T) {
	f, url := startOne(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := post(t, ctx, newClient(), url+"/v1/chat/completions", chatBody("x", true, ""), faultHdr("stall-after=2"))
	defer resp.Body.Close()
	got := make(chan sseEvent, 16)
	done := make(chan error, 1)
	go func() {
		_, err := readEvents(resp.Body, func(e sseEvent) { got <- e })
		done <- err
	}()
	for range 2 {
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
		}
	}
	// 8 ITLs (40ms) pass without a third event while the connection stays open.
	select {
	case e := <-got:
		t.Fatalf("event after stall: %s", e.data)
	case err := <-done:
		t.Fatalf("stream ended during the stall: %v", err)
	case <-time.After(40 * time.Millisecond):
	}
	if st := f.Stats(0); st.Running != 1 || st.OpenConnections != 1 {
		t.Fatalf("stalled stream should hold its slot and connection: %+v", st)
	}
	cancel()
	waitFor(t, "stalled stream counted aborted after the client left", 5*time.Second, func() bool { return f.Stats(0).Aborted == 1 })
}

func TestFaultSlow(t *testing.T) {
	_, url := startOne(t, nil)
	c := newClient()
	start := time.Now()
	resp := post(t, context.Background(), c, url+"/v1/chat/completions", chatBody("slow", true, ""), faultHdr("slow=30ms"))
	evs, err := readEvents(resp.Body, nil)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	ttft := evs[0].at.Sub(start)
	if ttft < 50*time.Millisecond { // TTFT 20ms + 30ms
		t.Fatalf("slow=30ms TTFT %v, want at least 20ms + 30ms", ttft)
	}
	// 7 gaps of ITL 5ms + 30ms each (245ms); unslowed they would be 35ms. Half the slowed
	// sum leaves room for a reader that stamps the first event late on a loaded machine.
	if gap := evs[7].at.Sub(evs[0].at); gap < 7*35*time.Millisecond/2 {
		t.Fatalf("8 slowed tokens took %v", gap)
	}
}

func TestFaultRepeatAndDropDone(t *testing.T) {
	_, url := startOne(t, nil)
	resp := post(t, context.Background(), newClient(), url+"/v1/chat/completions", chatBody("x", true, ""), faultHdr("repeat;drop-done"))
	evs, err := readEvents(resp.Body, nil)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("drop-done must end the stream cleanly: %v", err)
	}
	if len(evs) != 10 || evs[len(evs)-1].data == "[DONE]" {
		t.Fatalf("%d events, last %q: want 8 tokens + finish + usage, no [DONE]", len(evs), evs[len(evs)-1].data)
	}
	first := parseChunk(t, evs[0].data).Choices[0].Delta.Content
	for _, e := range evs[1:8] {
		if c := parseChunk(t, e.data).Choices[0].Delta.Content; c != first {
			t.Fatalf("repeat: token %q after %q", c, first)
		}
	}
}

// close-idle closes the connection after a complete response without announcing it (the
// keep-alive race); close announces Connection: close. Either way the connection ends with
// the response, streamed or not.
func TestFaultCloseIdle(t *testing.T) { testConnectionEnds(t, "close-idle", false) }

func TestFaultClose(t *testing.T) { testConnectionEnds(t, "close", true) }

// testConnectionEnds sends one request with fault on a connection of its own, streamed and
// not, and checks that the response is whole, says Connection: close exactly when announced,
// and that the connection then ends.
func testConnectionEnds(t *testing.T, fault string, announced bool) {
	_, url := startOne(t, nil)
	addr := strings.TrimPrefix(url, "http://")
	for _, stream := range []bool{false, true} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(chatBody("x", stream, "")))
		req.Header.Set(FaultHeader, fault)
		if err := req.Write(conn); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Close != announced {
			t.Fatalf("%s, stream=%v: Connection: close announced %v, want %v", fault, stream, resp.Close, announced)
		}
		if b, err := io.ReadAll(resp.Body); err != nil || (stream && !strings.Contains(string(b), "[DONE]")) {
			t.Fatalf("%s, stream=%v: body %v %q", fault, stream, err, b)
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("%s, stream=%v: after the response: %v %v, want EOF", fault, stream, n, err)
		}
		conn.Close()
	}
}

func TestFaultRate(t *testing.T) {
	f, url := startOne(t, func(ic *InstanceConfig) {
		ic.FaultRate = 0.5
		ic.Fault = "status=500"
	})
	c := newClient()
	fails := 0
	for range 40 {
		resp := post(t, context.Background(), c, url+"/v1/chat/completions", chatBody("x", false, `"max_tokens":1`), nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 500 {
			fails++
		}
	}
	if fails < 8 || fails > 32 || f.Stats(0).Faults != int64(fails) {
		t.Fatalf("%d of 40 failed at rate 0.5 (stats %+v)", fails, f.Stats(0))
	}
}

func TestFaultStallBetweenFinalEvents(t *testing.T) {
	f, url := startOne(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// 8 tokens + finish, then a stall before the usage event: the finish event must arrive.
	resp := post(t, ctx, newClient(), url+"/v1/chat/completions", chatBody("x", true, ""), faultHdr("stall-after=9"))
	defer resp.Body.Close()
	got := make(chan sseEvent, 16)
	go readEvents(resp.Body, func(e sseEvent) { got <- e })
	for i := range 9 {
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d not delivered before the stall", i)
		}
	}
	cancel()
	waitFor(t, "abort counted", 5*time.Second, func() bool { return f.Stats(0).Aborted == 1 })
}

// TestFaultTrickleSendsOneBytePerChunk reads a trickled stream off the wire: every chunk of
// the chunked body carries one byte, and the stream is still complete.
func TestFaultTrickleSendsOneBytePerChunk(t *testing.T) {
	_, url := startOne(t, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	defer c.Close()
	body := chatBody("x", true, "")
	_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		FaultHeader+": trickle\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	require.NoError(t, err)
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
	// Read the chunk framing ourselves: http.Response.Body would hide it.
	var payload []byte
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if line == "0\r\n" {
			break
		}
		require.Equal(t, "1\r\n", line, "chunk size line")
		b := make([]byte, 3)
		_, err = io.ReadFull(br, b)
		require.NoError(t, err)
		require.Equal(t, "\r\n", string(b[1:]))
		payload = append(payload, b[0])
	}
	require.Contains(t, string(payload), "data: [DONE]")
}

// TestFaultTrickleWholeResponse: a non-streamed answer trickled byte by byte is still the
// whole JSON body its Content-Length announces.
func TestFaultTrickleWholeResponse(t *testing.T) {
	_, url := startOne(t, nil)
	resp := post(t, context.Background(), newClient(), url+"/v1/chat/completions", chatBody("x", false, ""), faultHdr("trickle"))
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.EqualValues(t, len(b), resp.ContentLength)
	require.Contains(t, string(b), `"chat.completion"`)
}

// TestFaultBigLineSendsOneEnormousDataLine: the first delta of a big-line stream is one SSE
// data line longer than the fault's size, still a complete JSON chunk, and the stream goes on
// to its end.
func TestFaultBigLineSendsOneEnormousDataLine(t *testing.T) {
	const size = 300_000
	_, url := startOne(t, nil)
	resp := post(t, context.Background(), newClient(), url+"/v1/chat/completions", chatBody("x", true, ""), faultHdr("big-line="+strconv.Itoa(size)))
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	lines := strings.Split(string(body), "\n")
	long := 0
	for _, l := range lines {
		if len(l) > size {
			long++
			require.True(t, strings.HasPrefix(l, "data: {"), "the long line is a data line")
			var chunk map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(l, "data: ")), &chunk), "the long line is one JSON chunk")
		} else {
			require.Less(t, len(l), 1000, "only one line is enormous")
		}
	}
	require.Equal(t, 1, long, "one enormous line")
	require.Contains(t, string(body), "data: [DONE]")
}
