package accesslog

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"
)

func droppedLines() uint64 {
	return vm.GetOrCreateCounter(`sluice_access_log_dropped_total`).Get()
}

// A destination that takes nothing (a log pipe nobody reads) never holds up the requests
// that complete: their lines wait in a bounded buffer, the lines past the bound are dropped
// and counted, and once the destination reads again every line kept arrives whole and in
// order.
func TestSinkDropsPastTheBoundInsteadOfBlocking(t *testing.T) {
	pr, pw := io.Pipe()
	s := newSink(pw)
	line := []byte(strings.Repeat("x", 999) + "\n")
	before := droppedLines()
	// Nobody reads the pipe: the writer's first write blocks with what it took, and the
	// buffer fills behind it. Every Write below returns (a blocking one would hang the test).
	const n = 3 * pendingMaxBytes / 1000
	for i := 0; i < n; i++ {
		_, err := s.Write(line)
		require.NoError(t, err)
	}
	lost := droppedLines() - before
	require.Positive(t, lost, "lines past the bound are dropped")
	require.Less(t, lost, uint64(n), "lines within the bound are kept")

	got, bad := make(chan int), make(chan int)
	go func() {
		k, b := 0, 0
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 2*pendingMaxBytes)
		for sc.Scan() {
			if sc.Text() != string(line[:len(line)-1]) {
				b++
			}
			k++
		}
		got <- k
		bad <- b
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.flush(ctx))
	require.NoError(t, pw.Close())
	require.EqualValues(t, uint64(n)-lost, <-got, "every line kept was written")
	require.Zero(t, <-bad, "whole")
}

// Flush returns once the lines written so far are handed to the destination.
func TestFlushWaitsForTheWriter(t *testing.T) {
	var b strings.Builder
	s := newSink(&b) // flush orders the writer's writes before the read below
	for i := 0; i < 100; i++ {
		_, _ = s.Write([]byte("line\n"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.flush(ctx))
	require.Equal(t, strings.Repeat("line\n", 100), b.String())
}

// recorder keeps each write apart.
type recorder struct{ writes []string }

func (r *recorder) Write(p []byte) (int, error) {
	r.writes = append(r.writes, string(p))
	return len(p), nil
}

// A batch goes out in writes of whole lines no larger than a pipe writes whole, so that a
// line never interleaves with another writer's on a shared pipe; a longer line goes alone.
func TestWriteLinesKeepsLinesWholeInPipeSizedWrites(t *testing.T) {
	short := strings.Repeat("s", 299) + "\n"
	long := strings.Repeat("l", 2*atomicWriteBytes) + "\n"
	batch := strings.Repeat(short, 30) + long + strings.Repeat(short, 3)
	var r recorder
	writeLines(&r, []byte(batch))
	require.Equal(t, batch, strings.Join(r.writes, ""), "every byte, in order")
	for _, w := range r.writes {
		require.True(t, strings.HasSuffix(w, "\n"), "a write ends at a line end")
		if w != long {
			require.LessOrEqual(t, len(w), atomicWriteBytes)
		}
	}
	require.Contains(t, r.writes, long, "the long line goes alone")
}
