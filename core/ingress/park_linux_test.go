package ingress_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/ingress"
)

// loopStates returns the scheduler state of each goroutine running an event loop's poll
// ("IO wait", "syscall", "running", ...), as the runtime's goroutine dump names it.
func loopStates() []string {
	var states []string
	for _, g := range goroutineStacks() {
		if !bytes.Contains(g, []byte("netpoll.(*Poller).Polling")) {
			continue
		}
		head, _, _ := bytes.Cut(g, []byte("\n"))
		open, close := bytes.IndexByte(head, '['), bytes.IndexByte(head, ']')
		if open < 0 || close < open {
			continue
		}
		state, _, _ := bytes.Cut(head[open+1:close], []byte(","))
		states = append(states, string(state))
	}
	return states
}

// allParked reports whether states holds the three polls of a two-loop engine, all parked
// on the netpoller.
func allParked(states []string) bool {
	if len(states) != 3 {
		return false
	}
	for _, s := range states {
		if s != "IO wait" {
			return false
		}
	}
	return true
}

// An idle event loop parks its goroutine on the Go netpoller ("IO wait") instead of blocking
// its thread in epoll_wait(2) ("syscall"), so that it holds no thread or processor while it
// waits; and a parked loop wakes for the next request.
func TestIdleLoopsParkOnTheNetpoller(t *testing.T) {
	up := newUpstream(t, answerNow)
	tr := startLoopEngineSettings(t, up.addr(), ingress.Settings{EventLoops: 2})
	c := dialClient(t, tr.Addr())
	for round := 0; round < 3; round++ {
		resp, body := roundTrip(t, c, "/x")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "hello", string(body))

		// Two event loops and gnet's reactor for its own listeners each run a poll.
		deadline := time.Now().Add(eventWait)
		states := loopStates()
		for !allParked(states) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
			states = loopStates()
		}
		require.True(t, allParked(states), "every idle poll parks on the netpoller: %q", states)
	}
	require.EqualValues(t, 3, ingress.LoopServed(tr))
}
