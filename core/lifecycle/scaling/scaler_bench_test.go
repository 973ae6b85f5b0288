package scaling

import (
	"testing"

	"github.com/sluice-gw/sluice/core/balancer"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// A request admitted at once by a scaler whose replica has room, and completed: the hooks'
// cost on the request path of a warm scaled service.
func BenchmarkScalerAdmitAndComplete(b *testing.B) {
	s, err := New(Options{Service: "bench", Max: 1, Concurrency: 1 << 20, Utilization: 0.7, Buffer: true, BufferSize: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	backends := []*pipeline.Backend{{URL: "http://127.0.0.1:1", LB: &balancer.Backend{}}}
	s.Bind(backends)
	s.mu.Lock()
	s.ready = 1
	s.mu.Unlock()
	svc := &pipeline.Service{Backends: backends}
	rc := pipeline.AcquireRequestCtx()
	rc.SetService(svc)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.OnService(rc); err != nil {
			b.Fatal(err)
		}
		s.OnServiceDone(rc)
	}
}
