package scaling

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A replica that crashes right after it became ready is a failure in a row, as one that never
// became ready is: its slot is started again a second after the first crash, then two seconds
// after the second, not a second after each, which a command crashing on its first requests
// would keep up forever.
func TestCrashRightAfterReadyBacksOff(t *testing.T) {
	s, err := New(replicaOptions("crashloop", 1, 1, llmsimCommand(t), nil))
	require.NoError(t, err)
	defer s.Close()
	ready := readySlots(s)
	bindSlots(s)
	s.Start()

	waitReady(t, ready)
	first := crash(t, s)
	_, again := waitReady(t, ready)
	require.GreaterOrEqual(t, again.Sub(first), restartDelay(1), "restarted before the backoff after the first crash")
	second := crash(t, s)
	_, again = waitReady(t, ready)
	require.GreaterOrEqual(t, again.Sub(second), restartDelay(2),
		"the second crash right after ready waits as the second failure in a row")
}

// A replica that stays ready for stableReady since the last failure shows the command works:
// the failures before it are forgotten, and its own crash then waits a second.
func TestStableReplicaForgetsFailures(t *testing.T) {
	s, err := New(replicaOptions("stable", 1, 1, llmsimCommand(t), nil))
	require.NoError(t, err)
	defer s.Close()
	s.stableReady = 1500 * time.Millisecond
	ready := readySlots(s)
	bindSlots(s)
	s.Start()

	waitReady(t, ready)
	crash(t, s)
	waitReady(t, ready)
	crash(t, s)
	waitReady(t, ready)
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.anyStable(time.Now())
	}, 10*time.Second, 5*time.Millisecond, "the replica stays ready for stableReady")
	crashed := crash(t, s)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if assert.True(c, s.lastFailure.After(crashed), "the crash is a failure") {
			assert.Equal(c, 1, s.failures, "failures in a row")
			assert.Equal(c, restartDelay(1), s.restartAt.Sub(s.lastFailure), "backoff")
		}
	}, 10*time.Second, 5*time.Millisecond)
	_, again := waitReady(t, ready)
	require.GreaterOrEqual(t, again.Sub(crashed), restartDelay(1))
}

// Failures in a row are forgotten once the last is forgetFailures old: a command that failed
// twice in a row, then was not started for longer (the service scaled to zero), waits a
// second after its next failure, not the four seconds the count before would give.
func TestFailuresAreForgottenAfterAQuietSpell(t *testing.T) {
	o := replicaOptions("quiet", 1, 1, []string{"/bin/sh", "-c", "exit 3", "{port}"}, nil)
	o.ScaleDownDelay, o.ScaleToZeroAfter = time.Millisecond, time.Millisecond
	s, err := New(o)
	require.NoError(t, err)
	defer s.Close()
	s.forgetFailures = 2500 * time.Millisecond
	bindSlots(s)
	s.Start()
	failures := func() (n int, last time.Time, wait time.Duration) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.failures, s.lastFailure, s.restartAt.Sub(s.lastFailure)
	}
	require.Eventually(t, func() bool { n, _, _ := failures(); return n >= 2 }, 10*time.Second, 5*time.Millisecond,
		"the command fails twice in a row")

	// The load goes: no replica starts.
	p := o.Policy()
	p.Min = 0
	s.SetPolicy(p)
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.target == 0 && s.starting == 0 && s.reps[0].state == stateStopped
	}, 10*time.Second, 5*time.Millisecond, "scaled to zero")
	require.Eventually(t, func() bool { _, last, _ := failures(); return time.Since(last) > s.forgetFailures },
		10*time.Second, 5*time.Millisecond, "a quiet spell longer than forgetFailures")

	// The load comes back, and the command fails once more.
	back := time.Now()
	p.Min = 1
	s.SetPolicy(p)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, last, wait := failures()
		if assert.True(c, last.After(back), "a failure after the spell") {
			assert.Equal(c, 1, n, "failures in a row")
			assert.Equal(c, restartDelay(1), wait, "backoff")
		}
	}, 10*time.Second, 5*time.Millisecond)
}

// A replica that was serving when another failed shows nothing of the command since: here
// slot 0's replica runs on while slot 1's crashes, comes back, and crashes again before it
// has been ready for stableReady itself, though stableReady has passed since the first crash.
// The second crash is the second failure in a row and waits two seconds: a crash loop beside
// a healthy replica backs off as one alone does.
func TestReplicaReadyBeforeAFailureDoesNotEndACrashLoop(t *testing.T) {
	s, err := New(replicaOptions("across", 2, 2, llmsimCommand(t), nil))
	require.NoError(t, err)
	defer s.Close()
	s.stableReady = 3 * time.Second
	ready := readySlots(s)
	bindSlots(s)
	s.Start()
	waitReady(t, ready)
	waitReady(t, ready)

	first := crashSlot(t, s, 1)
	slot, _ := waitReady(t, ready)
	require.Equal(t, 1, slot)
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return time.Since(s.lastFailure) > s.stableReady
	}, 10*time.Second, 5*time.Millisecond, "stableReady since the crash")
	s.mu.Lock()
	require.Less(t, time.Since(s.reps[1].readyAt), s.stableReady, "slot 1's replica is not stable itself")
	require.True(t, s.reps[0].readyAt.Before(first), "slot 0's replica served through the crash")
	s.mu.Unlock()

	second := crashSlot(t, s, 1)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if assert.True(c, s.lastFailure.After(second), "the crash is a failure") {
			assert.Equal(c, 2, s.failures, "failures in a row")
			assert.Equal(c, restartDelay(2), s.restartAt.Sub(s.lastFailure), "backoff")
		}
	}, 10*time.Second, 5*time.Millisecond)
}
