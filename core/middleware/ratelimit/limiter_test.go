package ratelimit

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
)

// fakeClock is a monotonic clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() int64              { return c.ns.Load() }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newTestLimiter(rate float64, burst, maxKeys int) (*Limiter, *fakeClock) {
	l := NewLimiter(rate, burst, maxKeys)
	c := &fakeClock{}
	c.ns.Store(int64(time.Hour)) // any start: buckets are relative to it
	l.now = c.now
	return l, c
}

func TestBucketGivesBurstThenOneTokenPerInterval(t *testing.T) {
	l, clk := newTestLimiter(60, 3, 1024) // one token a second, three at once
	key := []byte("10.0.0.1")
	for want := int64(2); want >= 0; want-- {
		d := l.Take(tagIP, key)
		require.True(t, d.Allowed)
		require.Equal(t, want, d.Remaining)
		require.Equal(t, time.Duration(3-want)*time.Second, d.Reset, "the bucket is full again after the tokens taken")
	}
	d := l.Take(tagIP, key)
	require.False(t, d.Allowed)
	require.Equal(t, time.Second, d.RetryAfter)
	require.Equal(t, 3*time.Second, d.Reset)
	require.Zero(t, d.Remaining)

	clk.advance(999 * time.Millisecond)
	d = l.Take(tagIP, key)
	require.False(t, d.Allowed)
	require.Equal(t, time.Millisecond, d.RetryAfter)

	clk.advance(time.Millisecond)
	d = l.Take(tagIP, key)
	require.True(t, d.Allowed, "a token is back after one interval")
	require.Zero(t, d.Remaining)

	clk.advance(time.Hour)
	d = l.Take(tagIP, key)
	require.True(t, d.Allowed)
	require.Equal(t, int64(2), d.Remaining, "a quiet spell refills up to the burst, not beyond")
}

// Traffic far above the rate for ten seconds gets burst + rate × time through, measured by
// counting admitted requests against the clock the bucket reads.
func TestBucketHoldsTheRateOverTime(t *testing.T) {
	for _, tc := range []struct {
		rate  float64 // per minute
		burst int
		every time.Duration // one attempt per this
	}{
		{rate: 600, burst: 5, every: time.Millisecond},
		{rate: 6000, burst: 1, every: 100 * time.Microsecond},
		{rate: 90, burst: 20, every: 7 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("rate=%v,burst=%d", tc.rate, tc.burst), func(t *testing.T) {
			l, clk := newTestLimiter(tc.rate, tc.burst, 1024)
			const span = 10 * time.Second
			allowed, attempts := 0, 0
			for elapsed := time.Duration(0); elapsed < span; elapsed += tc.every {
				attempts++
				if l.Take(tagIP, []byte("k")).Allowed {
					allowed++
				}
				clk.advance(tc.every)
			}
			want := float64(tc.burst) + tc.rate*span.Minutes()
			require.Greater(t, attempts, 2*allowed, "the traffic exceeds the rate")
			require.InDelta(t, want, allowed, want*0.10, "admitted %d of %d attempts, want %.0f", allowed, attempts, want)
			require.InDelta(t, want, allowed, 1, "GCRA is exact to a request")
		})
	}
}

func TestKeysHaveTheirOwnBuckets(t *testing.T) {
	l, _ := newTestLimiter(1, 1, 1024)
	require.True(t, l.Take(tagIP, []byte("10.0.0.1")).Allowed)
	require.False(t, l.Take(tagIP, []byte("10.0.0.1")).Allowed)
	require.True(t, l.Take(tagIP, []byte("10.0.0.2")).Allowed)
	// The same bytes under another kind are another key: a header cannot spend an address's
	// tokens.
	require.True(t, l.Take(tagHeader, []byte("10.0.0.1")).Allowed)
	require.True(t, l.Take(tagConsumer, []byte("10.0.0.1")).Allowed)
}

func TestLongKeysAreTrackedByHash(t *testing.T) {
	l, _ := newTestLimiter(1, 1, 1024)
	long := make([]byte, 5000)
	for i := range long {
		long[i] = 'a'
	}
	other := append([]byte(nil), long...)
	other[len(other)-1] = 'b'
	require.True(t, l.Take(tagHeader, long).Allowed)
	require.False(t, l.Take(tagHeader, long).Allowed)
	require.True(t, l.Take(tagHeader, other).Allowed, "keys differing in their last byte")
	require.True(t, l.Take(tagHeader, long[:maxKeyLen]).Allowed, "a short key never matches a hashed one")
	for i := range l.shards {
		for _, e := range l.shards[i].ents {
			require.LessOrEqual(t, len(e.key), 2+maxKeyLen, "stored keys are bounded")
		}
	}
}

// At most maxKeys keys are tracked, and a key that is still refilling survives a flood of
// new keys as long as full buckets can make room.
func TestMemoryIsBoundedAndFullBucketsGoFirst(t *testing.T) {
	l, clk := newTestLimiter(60, 1, 256)
	hot := []byte("hot")
	require.True(t, l.Take(tagIP, hot).Allowed)
	for i := range 100_000 {
		l.Take(tagIP, []byte(strconv.Itoa(i)))
		if i%64 == 0 {
			// Time passes: the keys seen so far have full buckets again, except hot's,
			// which keeps spending.
			clk.advance(time.Second)
			require.True(t, l.Take(tagIP, hot).Allowed)
		}
		require.LessOrEqual(t, l.Len(), 256)
	}
	require.False(t, l.Take(tagIP, hot).Allowed, "hot's bucket was never forgotten")
}

// Past maxKeys active keys the limiter stays within its bound by forgetting keys: it then
// admits, never grows.
func TestMemoryIsBoundedUnderAFloodOfActiveKeys(t *testing.T) {
	l, _ := newTestLimiter(1, 1, 64)
	for i := range 10_000 {
		require.True(t, l.Take(tagIP, []byte(strconv.Itoa(i))).Allowed)
	}
	require.LessOrEqual(t, l.Len(), 64)
	require.Equal(t, 64, l.MaxKeys())
}

// Concurrent requests of one key share its burst exactly (run with -race).
func TestConcurrentTakesShareOneBucket(t *testing.T) {
	l, _ := newTestLimiter(1, 100, 1024) // the clock stands still: no refill
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if l.Take(tagIP, []byte("shared")).Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(100), allowed.Load())
}

func TestTakeDoesNotAllocateForAKnownKey(t *testing.T) {
	l, clk := newTestLimiter(6e7, 1000, 1024)
	key := []byte("192.0.2.33")
	long := make([]byte, 300)
	l.Take(tagIP, key)
	l.Take(tagHeader, long)
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		clk.advance(time.Microsecond)
		l.Take(tagIP, key)
		l.Take(tagHeader, long)
	}))
}

// BenchmarkTake is one token taken for a key already tracked.
func BenchmarkTake(b *testing.B) {
	l := NewLimiter(1e8, 1_000_000, config.DefaultRateLimitMaxKeys)
	key := []byte("192.0.2.33")
	l.Take(tagIP, key)
	b.ReportAllocs()
	for b.Loop() {
		l.Take(tagIP, key)
	}
}

// BenchmarkTakeParallel is BenchmarkTake on every core, each goroutine with its own keys.
func BenchmarkTakeParallel(b *testing.B) {
	l := NewLimiter(1e8, 1_000_000, config.DefaultRateLimitMaxKeys)
	var id atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := id.Add(1)
		keys := make([][]byte, 16)
		for i := range keys {
			keys[i] = []byte(fmt.Sprintf("10.%d.0.%d", n, i))
			l.Take(tagIP, keys[i])
		}
		i := 0
		for pb.Next() {
			l.Take(tagIP, keys[i&15])
			i++
		}
	})
}
