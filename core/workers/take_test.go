package workers

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Requests taking a worker at once never count more of them on it than its max_active: each
// is judged on the count it joins, so the last free sequence goes to one request only, and
// one that finds the worker full counts nothing.
func TestTakeNeverCountsBeyondMaxActive(t *testing.T) {
	g := testGroup(t, 1)
	lb := g.members[0].LB
	o := observation("w0")
	o.Active, o.MaxActive = 0, 4
	g.observe(0, o)

	const takers = 64
	var wg sync.WaitGroup
	var taken, full atomic.Int64
	start := make(chan struct{})
	for range takers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			switch r, _ := g.Take(0, &bound); r {
			case Eligible:
				taken.Add(1)
			case AtCapacity:
				full.Add(1)
			default:
				t.Errorf("reason %v", r)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 4, taken.Load())
	require.EqualValues(t, takers-4, full.Load())
	require.EqualValues(t, 4, lb.Active(), "only the requests that took the worker are counted")

	lb.Release()
	r, load := g.Take(0, &bound)
	require.Equal(t, Eligible, r, "a sequence freed is taken again")
	require.EqualValues(t, 3, load, "the load judged leaves the request out")
	require.EqualValues(t, 4, lb.Active())
}

// A worker left out for another reason than capacity is not counted either.
func TestTakeCountsNothingOnAWorkerLeftOut(t *testing.T) {
	g := testGroup(t, 1)
	o := observation("w0")
	o.Ready = false
	g.observe(0, o)
	r, _ := g.Take(0, &bound)
	require.Equal(t, NotReady, r)
	require.Zero(t, g.members[0].LB.Active())
}

func TestTakeDoesNotAllocate(t *testing.T) {
	g := benchGroup(t, 64)
	n := testing.AllocsPerRun(1000, func() {
		if r, _ := g.Take(0, &bound); r == Eligible {
			g.members[0].LB.Release()
		}
	})
	require.Zero(t, n)
}
