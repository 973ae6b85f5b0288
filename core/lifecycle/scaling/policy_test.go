package scaling

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// SetPolicy applies a new policy to a running scaler at once: a larger min_replicas raises
// the target, a queue longer than a smaller buffer_size keeps its waiters (and refuses new
// ones), and a buffer turned off admits those it held.
func TestSetPolicyAppliesInPlace(t *testing.T) {
	o := Options{
		Service: "policy", Max: 2, Concurrency: 1, Utilization: 1, Buffer: true,
		BufferSize: 4, BufferTimeout: time.Minute, ScaleDownDelay: time.Minute, ScaleToZeroAfter: time.Minute,
		ReadyPath: "/health", ReadyInterval: 50 * time.Millisecond, StartupTimeout: time.Minute, StopTimeout: time.Second,
		Executor: &Exec{Command: []string{"sleep", "60"}}, // never ready
	}
	s, err := New(o)
	require.NoError(t, err)
	defer s.Close()
	backends := []*pipeline.Backend{{URL: s.URLs()[0], LB: &balancer.Backend{}}, {URL: s.URLs()[1], LB: &balancer.Backend{}}}
	s.Bind(backends)
	s.Start()
	svc := &pipeline.Service{Backends: backends}

	var held []*waiter
	for range 3 {
		rc := pipeline.AcquireRequestCtx()
		rc.SetService(svc)
		_, waits := s.WouldWait(rc)
		require.True(t, waits)
		held = append(held, rc.Get(&s.held).(*waiter))
	}

	p := o.Policy()
	p.Min, p.BufferSize = 2, 2
	s.SetPolicy(p)
	s.mu.Lock()
	require.Equal(t, 2, s.target, "min_replicas 2 starts both slots")
	require.Equal(t, 3, s.queued, "the queue keeps its waiters")
	s.mu.Unlock()
	rc := pipeline.AcquireRequestCtx()
	rc.SetService(svc)
	require.Equal(t, ErrBufferFull, s.OnService(rc), "a queue over buffer_size refuses")

	p.Buffer = false
	s.SetPolicy(p)
	for i, w := range held {
		select {
		case <-w.ch:
		default:
			t.Fatalf("waiter %d not admitted when the buffer was turned off", i)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, 0, s.queued)
	require.Equal(t, 3, s.inFlight)
	require.Equal(t, p, s.o.Policy())
}
