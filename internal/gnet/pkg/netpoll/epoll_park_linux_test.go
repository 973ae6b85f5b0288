//go:build linux && !poll_opt

package netpoll

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
