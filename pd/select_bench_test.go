package pd

import (
	"fmt"
	"testing"
)

// benchTarget is a target over 8 prefill and 8 decode workers, each with max_active 1024 and
// a few sequences running, as the pair choice sees a busy fleet.
func benchTarget(b *testing.B) *Target {
	var obs []string
	for i := range 16 {
		role := RolePrefill
		if i%2 == 1 {
			role = RoleDecode
		}
		obs = append(obs, fmt.Sprintf(`{"worker_id":"w%d","role":%q,"ready":true,"healthy":true,"active":%d,"max_active":1024,"waiting":0,"state_transfer":true,"execution_config_digest":"d","deployment_generation":1,"epoch":0}`, i, role, i%5))
	}
	return observedTarget(b, obs...)
}

// BenchmarkPickPair is one pair choice over 8 prefill and 8 decode workers, the request
// counted on both, then released (as at the end of its exchange).
func BenchmarkPickPair(b *testing.B) {
	t := benchTarget(b)
	var ex excluded
	key := RequestKey([]byte(`{"model":"chat","messages":[{"role":"user","content":"hi"}]}`))
	b.ReportAllocs()
	for b.Loop() {
		key++
		pr, ok, _ := t.pickPair(key, &ex, nil)
		if !ok {
			b.Fatal("no pair")
		}
		t.service.Backends[pr.p].Release()
		t.service.Backends[pr.d].Release()
	}
}

// BenchmarkPickPairParallel is BenchmarkPickPair from GOMAXPROCS goroutines at once, which
// choose among the same workers and count on the same counters.
func BenchmarkPickPairParallel(b *testing.B) {
	t := benchTarget(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var ex excluded
		key := RequestKey([]byte(`{"model":"chat","messages":[{"role":"user","content":"hi"}]}`))
		for pb.Next() {
			key++
			pr, ok, _ := t.pickPair(key, &ex, nil)
			if !ok {
				b.Error("no pair")
				return
			}
			t.service.Backends[pr.p].Release()
			t.service.Backends[pr.d].Release()
		}
	})
}
