package scaling

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// A request that gives up its wait (its deadline passed, or its client left) is taken out of
// the queue, not only counted out of it: while no replica gets ready (here its process never
// listens) nothing is admitted to pop the queue's head, and a thousand requests that queued and
// timed out one after the other must leave it no longer than the buffer.
func TestQueueKeepsNoRequestThatGaveUp(t *testing.T) {
	s, err := New(Options{
		Service: "never-ready", Max: 1, Concurrency: 1, Utilization: 1, Buffer: true,
		BufferSize: 4, BufferTimeout: time.Millisecond, ScaleDownDelay: time.Minute, ScaleToZeroAfter: time.Minute,
		ReadyPath: "/health", ReadyInterval: 50 * time.Millisecond, StartupTimeout: time.Minute, StopTimeout: time.Second,
		Executor: &Exec{Command: []string{"sleep", "60"}},
	})
	require.NoError(t, err)
	defer s.Close()
	backends := []*pipeline.Backend{{URL: s.URLs()[0], LB: &balancer.Backend{}}}
	s.Bind(backends)
	s.Start()
	svc := &pipeline.Service{Backends: backends}
	for range 1000 {
		// A request context that never went through an entrypoint: it arrived at time zero,
		// so its wait is past its deadline as soon as it queues.
		rc := pipeline.AcquireRequestCtx()
		rc.SetService(svc)
		require.Equal(t, ErrBufferTimeout, s.OnService(rc))
		s.OnServiceDone(rc)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, 0, s.queued)
	require.Equal(t, 1, s.starting, "the replica is still starting")
	require.LessOrEqual(t, len(s.queue), 2*s.o.BufferSize, "the queue holds the requests that gave up")
}
