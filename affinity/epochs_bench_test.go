package affinity

import "testing"

// BenchmarkEpochsSee is a choice's look at the epochs of 8 candidates, none restarted, and
// the check before learning, from every core at once.
func BenchmarkEpochsSee(b *testing.B) {
	x := NewIndex(Config{})
	e := NewEpochs(8)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for i := range 8 {
				e.See(x, i, Target(i), 3)
			}
			if !e.Current(5, 3) {
				b.Fatal("not current")
			}
		}
	})
}
