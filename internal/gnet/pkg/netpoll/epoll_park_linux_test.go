//go:build linux && !poll_opt

package netpoll

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	errorx "github.com/panjf2000/gnet/v2/pkg/errors"
	"github.com/panjf2000/gnet/v2/pkg/queue"
)

func openPoller(t *testing.T) *Poller {
	t.Helper()
	p, err := OpenPoller()
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// A busy loop yields its processor when another loop is parked with an event ready, or when
// no other loop is parked (every processor may be held by a busy loop); not while another
// loop is parked with nothing to do (a processor is free), and never for its own events.
func TestOthersWaitForAParkedLoopWithAnEventOrWhenNoneIsParked(t *testing.T) {
	busy, idle, other := openPoller(t), openPoller(t), openPoller(t)
	busy.enlist()
	t.Cleanup(busy.delist)
	require.True(t, busy.othersWait(), "a single loop yields: nothing else frees a processor")

	idle.enlist()
	t.Cleanup(idle.delist)
	other.enlist()
	require.True(t, busy.othersWait(), "every other loop runs: no processor may be free")

	other.parked.Store(true)
	require.False(t, busy.othersWait(), "another loop is parked with nothing ready")

	busy.parked.Store(true)
	require.NoError(t, busy.wake())
	require.False(t, busy.othersWait(), "a loop's own events never make it yield")

	require.NoError(t, other.wake()) // its eventfd is readable: a task waits for it
	require.True(t, busy.othersWait(), "a parked loop has an event ready")

	idle.parked.Store(true)
	require.True(t, busy.othersWait(), "one parked loop of two has an event ready")

	other.delist()
	require.False(t, busy.othersWait(), "a poller no loop runs any more is not looked at")
}

// A loop in Polling is marked parked only while its poll finds nothing, and is running (not
// parked) when it handles an event: the flag othersWait reads follows the real poll.
func TestPollingMarksItsLoopParkedWhileIdle(t *testing.T) {
	p := openPoller(t)
	done := make(chan error, 1)
	go func() {
		done <- p.Polling(func(int, uint32, uint16) error { return nil })
	}()

	require.Eventually(t, p.parked.Load, 10*time.Second, time.Millisecond, "an idle loop parks")

	seen := make(chan bool, 1)
	require.NoError(t, p.Trigger(queue.HighPriority, func(any) error {
		seen <- p.parked.Load()
		return nil
	}, nil))
	select {
	case parked := <-seen:
		require.False(t, parked, "a loop running a task is not parked")
	case <-time.After(10 * time.Second):
		t.Fatal("the parked loop did not wake for a task")
	}
	require.Eventually(t, p.parked.Load, 10*time.Second, time.Millisecond, "the loop parks again")

	listed := func() bool {
		for _, q := range *loops.list.Load() {
			if q == p {
				return true
			}
		}
		return false
	}
	require.True(t, listed(), "a loop in Polling is listed for othersWait")
	require.NoError(t, p.Trigger(queue.HighPriority, func(any) error { return errorx.ErrEngineShutdown }, nil))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Polling did not return after its task stopped the engine")
	}
	require.False(t, listed(), "a loop that left Polling is no longer listed")
}

// socketPair returns a connected pair of non-blocking stream sockets, closed at the test's end.
func socketPair(t *testing.T) (int, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Close(fds[0]); _ = unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// runPolling runs p.Polling with handle until the test ends.
func runPolling(t *testing.T, p *Poller, handle PollEventHandler) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.Polling(handle) }()
	t.Cleanup(func() {
		_ = p.Trigger(queue.HighPriority, func(any) error { return errorx.ErrEngineShutdown }, nil)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Polling did not return after its task stopped the engine")
		}
	})
}

// An event whose callback left it ready (LeftReady) is fetched again before the loop parks:
// no wake-up comes for bytes that were already there. A handler that takes one byte per event
// gets every byte of a single write.
func TestPollingFetchesAgainWhatACallbackLeftReady(t *testing.T) {
	p := openPoller(t)
	r, w := socketPair(t)
	require.NoError(t, p.AddRead(&PollAttachment{FD: r}, false))
	got := make(chan byte, 64)
	runPolling(t, p, func(fd int, _ uint32, _ uint16) error {
		var b [1]byte
		if n, err := unix.Read(fd, b[:]); err == nil && n == 1 {
			got <- b[0]
			p.LeftReady()
		}
		return nil
	})
	require.Eventually(t, p.parked.Load, 10*time.Second, time.Millisecond, "an idle loop parks")

	msg := []byte("one write, read a byte at a time")
	_, err := unix.Write(w, msg)
	require.NoError(t, err)
	for i := range msg {
		select {
		case b := <-got:
			require.Equal(t, msg[i], b)
		case <-time.After(10 * time.Second):
			t.Fatalf("the loop parked with %d of %d bytes left ready", len(msg)-i, len(msg))
		}
	}
}

// A loop parks at once after a batch it consumed, without fetching again: an event that
// becomes ready while it handles the batch still wakes it.
func TestPollingWakesForAnEventReadyDuringItsBatch(t *testing.T) {
	p := openPoller(t)
	r1, w1 := socketPair(t)
	r2, w2 := socketPair(t)
	require.NoError(t, p.AddRead(&PollAttachment{FD: r1}, false))
	require.NoError(t, p.AddRead(&PollAttachment{FD: r2}, false))
	second := make(chan struct{})
	runPolling(t, p, func(fd int, _ uint32, _ uint16) error {
		var b [16]byte
		_, _ = unix.Read(fd, b[:])
		switch fd {
		case r1: // after the batch was fetched: r2 is ready only now
			_, err := unix.Write(w2, []byte("x"))
			require.NoError(t, err)
		case r2:
			close(second)
		}
		return nil
	})
	require.Eventually(t, p.parked.Load, 10*time.Second, time.Millisecond, "an idle loop parks")

	_, err := unix.Write(w1, []byte("x"))
	require.NoError(t, err)
	select {
	case <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("an event ready during the batch did not wake the parked loop")
	}
}
