package harness

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Paced attempts whose connect the run's end cut short count as open_at_end, not as nothing,
// and the workload's as unfinished: against a listener whose accept queue is full, every
// connect hangs (its SYN dropped).
func TestPacedConnectsCutByTheEndAreReported(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Close(fd) })
	require.NoError(t, unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, unix.Listen(fd, 0)) // room for one waiting connection, never accepted
	sa, err := unix.Getsockname(fd)
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
	for i := 0; i < 2; i++ { // fill the queue (Linux lets backlog+1 wait)
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
	}
	res, err := Run(context.Background(), Options{Target: "http://" + addr, Workload: WorkloadJSON, Concurrency: 1,
		Duration: 300 * time.Millisecond, Timeout: 200 * time.Millisecond, Drain: 300 * time.Millisecond, Adversary: "reset=2"})
	require.NoError(t, err)
	// The workload's own connect hung too, and the run's end cut it: a request in flight.
	require.Positive(t, res.Unfinished, "the workload's hanging connect: %+v %v ok=%d", res.ErrorsByKind, res.Requests, res.OK)
	require.Zero(t, res.ErrorsByKind["connect"], "a connect the end cut is not a refusal")
	st := kindStat(t, res, AdvReset)
	require.Positive(t, st.Outcomes[outOpenAtEnd], "outcomes %v", st.Outcomes)
	var sum int64
	for o, n := range st.Outcomes {
		if o != outSkipped && o != outLate {
			sum += n
		}
	}
	require.Equal(t, st.Attempts, sum, "every attempt has an outcome: %v", st.Outcomes)
}
