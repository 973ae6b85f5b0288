package pd_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// concurrentStreams runs n streamed requests at once (each a call of one) and requires each
// to succeed.
func concurrentStreams(t *testing.T, one func() (int, []string, error), n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if status, data, err := one(); err != nil || status != 200 || data[len(data)-1] != "[DONE]" {
				errs <- fmt.Sprint(status, data, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// Concurrent requests' decode/prepare calls to one decode worker are coalesced into
// decode/prepare:batch calls of at most prepare_batch_size items.
func TestConcurrentPreparesAreBatched(t *testing.T) {
	f := startFleet(t, nil)
	g := startGateway(t, f.gatewayTOML("", "prepare_batch_size = 8"))
	var n int
	var mu sync.Mutex
	concurrentStreams(t, func() (int, []string, error) {
		mu.Lock()
		n++
		msg := fmt.Sprintf("batch me %d", n)
		mu.Unlock()
		return streamErr(g.Addr("web"), chatBody(msg))
	}, 64)
	items, batched, rpcs := 0, 0, 0
	for _, w := range []int{decodeA, decodeB} {
		st := f.sim.Stats(w)
		rpcs += int(st.Calls.Prepare + st.Calls.PrepareBatch)
		for _, c := range f.sim.Calls(w) {
			if c.Call == "prepare" {
				items++
				require.LessOrEqual(t, c.Batch, 8)
				if c.Batch > 1 {
					batched++
				}
			}
		}
	}
	require.Equal(t, 64, items, "one reservation per request")
	require.Positive(t, batched, "some prepares went in batches")
	require.Less(t, rpcs, 64, "fewer prepare calls than requests")
	t.Logf("64 requests: %d prepare calls, %d reservations in batches", rpcs, batched)
}

// prepare_batch_size = 1 sends every prepare on its own.
func TestBatchSizeOneSendsEachPrepareAlone(t *testing.T) {
	f := startFleet(t, nil)
	g := startGateway(t, f.gatewayTOML("", "prepare_batch_size = 1"))
	var n int
	var mu sync.Mutex
	concurrentStreams(t, func() (int, []string, error) {
		mu.Lock()
		n++
		msg := fmt.Sprintf("alone %d", n)
		mu.Unlock()
		return streamErr(g.Addr("web"), chatBody(msg))
	}, 16)
	for _, w := range []int{decodeA, decodeB} {
		require.Zero(t, f.sim.Stats(w).Calls.PrepareBatch)
	}
}
