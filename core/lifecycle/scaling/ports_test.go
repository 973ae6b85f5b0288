package scaling

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/metrics"
)

// The replica ports of live scalers never coincide: the kernel hands out again a port whose
// listener closed, and two scalers sharing one would leave the replica that binds it second
// failing at every start. A thousand ports from 250 scalers' worth of allocations differ
// (drawn at random from the ephemeral range, some would coincide almost surely); once released,
// a port may be handed out again.
func TestFreePortsNeverHandsOutAReservedPort(t *testing.T) {
	seen := map[int]bool{}
	var all [][]int
	for range 250 {
		ports, err := FreePorts(4)
		require.NoError(t, err)
		for _, p := range ports {
			require.False(t, seen[p], "port %d handed out twice", p)
			seen[p] = true
		}
		all = append(all, ports)
	}
	for _, ports := range all {
		ReleasePorts(ports)
	}
	reserved.mu.Lock()
	defer reserved.mu.Unlock()
	require.Empty(t, reserved.ports, "released ports stay reserved")
}

// While a slot has no replica (the service scaled to zero), no other process takes its port:
// here another server tries to listen on it, which would answer the replica's readiness probe
// and its requests in its place (or leave the replica unable to listen), and the cold start
// that follows is served by the replica, llmsim.
func TestReplicaPortIsHeldWhileNoReplicaRuns(t *testing.T) {
	o := replicaOptions("held", 0, 1, llmsimCommand(t), nil)
	s, err := New(o)
	require.NoError(t, err)
	defer s.Close()
	ready := readySlots(s)
	bindSlots(s)
	s.Start()

	if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(s.ports[0])); err == nil {
		other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "another process")
		})}
		go func() { _ = other.Serve(ln) }()
		defer other.Close()
	}

	p := o.Policy()
	p.Min = 1 // a cold start
	s.SetPolicy(p)
	waitReady(t, ready)
	require.Contains(t, getBody(t, s.URLs()[0]+"/v1/models"), "llmsim", "the replica's port is served by another process")
}

// takenRuns numbers the runs of TestTakenReplicaPortIsReportedAndAvoided in this process.
var takenRuns atomic.Int64

// A slot whose port another process took while the scaler did not hold it (between the
// release of the port and the replica's bind, or as a process of the slot's last replica that
// left its group holds it) is not started: its replica could not listen, and the other
// process would answer its probes. The log says so, the failure is counted with reason
// port_taken, and another slot serves the cold start at once; once the port is free again,
// the slot serves after its own backoff.
func TestTakenReplicaPortIsReportedAndAvoided(t *testing.T) {
	var logged syncBuffer
	// The failure counters are the process's and outlive the scaler: each run (go test
	// -count=N) names its service anew, so that it counts its own failures only.
	service := fmt.Sprintf("taken%d", takenRuns.Add(1))
	o := replicaOptions(service, 0, 2, llmsimCommand(t), slog.New(slog.NewTextHandler(&logged, nil)))
	s, err := New(o)
	require.NoError(t, err)
	defer s.Close()
	s.mu.Lock()
	s.reps[0].hold.release() // as for a start
	s.reps[0].hold = nil
	s.mu.Unlock()
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(s.ports[0]))
	require.NoError(t, err)
	var probed atomic.Int64
	other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		probed.Add(1)
		_, _ = io.WriteString(w, "another process")
	})}
	go func() { _ = other.Serve(ln) }()
	defer other.Close()
	ready := readySlots(s)
	bindSlots(s)
	s.Start()

	p := o.Policy()
	p.Min = 1
	s.SetPolicy(p)
	slot, _ := waitReady(t, ready)
	require.Equal(t, 1, slot, "the replica started on the slot whose port is taken")
	require.Contains(t, getBody(t, s.URLs()[1]+"/v1/models"), "llmsim")
	require.Zero(t, probed.Load(), "the other process was probed as the replica")
	require.False(t, s.Serving(0))
	require.Contains(t, logged.String(), `level=WARN msg="scaling: replica port is taken by another process; another slot is tried, this one again after its backoff" service=`+service+` port=`+strconv.Itoa(s.ports[0]))
	var m bytes.Buffer
	metrics.WritePrometheus(&m)
	require.Contains(t, m.String(), `sluice_scaling_replica_failures_total{service="`+service+`",reason="port_taken"} 1`)

	require.NoError(t, other.Close()) // the port is free again
	p.Min = 2
	s.SetPolicy(p)
	slot, _ = waitReady(t, ready)
	require.Equal(t, 0, slot)
	require.Contains(t, getBody(t, s.URLs()[0]+"/v1/models"), "llmsim")
}

// takePort lets s's hold of slot's port go and has another server listen there until the
// test ends, as another process that took the port while the scaler did not hold it.
func takePort(t *testing.T, s *Scaler, slot int) {
	t.Helper()
	s.mu.Lock()
	s.reps[slot].hold.release()
	s.reps[slot].hold = nil
	s.mu.Unlock()
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(s.ports[slot]))
	require.NoError(t, err)
	other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "another process")
	})}
	go func() { _ = other.Serve(ln) }()
	t.Cleanup(func() { _ = other.Close() })
}

// portTakenLines counts the log lines of a slot found with its port taken.
func portTakenLines(logged *syncBuffer) int {
	return strings.Count(logged.String(), `msg="scaling: replica port is taken by another process`)
}

// A slot whose port another process holds is skipped for a while, and the other slots start
// at once: the load asking for a second replica (the first on slot 1, slot 0's port taken)
// starts it on slot 2 then, not after the backoff slot 0's failure would set for the service.
func TestTakenPortDoesNotDelayAScaleUp(t *testing.T) {
	var logged syncBuffer
	o := replicaOptions("takenup", 1, 3, llmsimCommand(t), slog.New(slog.NewTextHandler(&logged, nil)))
	s, err := New(o)
	require.NoError(t, err)
	defer s.Close()
	takePort(t, s, 0)
	ready := readySlots(s)
	bindSlots(s)
	s.Start()
	slot, _ := waitReady(t, ready)
	require.Equal(t, 1, slot)
	require.Equal(t, 1, portTakenLines(&logged), "log:\n%s", &logged)

	p := o.Policy()
	p.Min = 2
	s.SetPolicy(p)
	st := s.Status()
	require.Equal(t, 2, st.Ready+st.Starting, "the second replica waits for slot 0's backoff: %+v", st)
	slot, _ = waitReady(t, ready)
	require.Equal(t, 2, slot)
}

// A crash on a slot whose port is free waits the service's backoff of its own failures, not
// one that a slot found with its port taken, again and again, has grown: here slot 0's port
// stays taken, and slot 1's replica, crashing once, is started again a second later.
func TestTakenPortDoesNotDelayACrashedSlot(t *testing.T) {
	var logged syncBuffer
	s, err := New(replicaOptions("takencrash", 2, 2, llmsimCommand(t), slog.New(slog.NewTextHandler(&logged, nil))))
	require.NoError(t, err)
	defer s.Close()
	takePort(t, s, 0)
	ready := readySlots(s)
	bindSlots(s)
	s.Start()
	slot, _ := waitReady(t, ready)
	require.Equal(t, 1, slot)
	// Slot 0 is tried again and again (the load asks for two replicas): at once, a second
	// later, two seconds after that.
	require.Eventually(t, func() bool { return portTakenLines(&logged) >= 3 }, 10*time.Second, 5*time.Millisecond,
		"slot 0 is tried three times; log:\n%s", &logged)
	require.Regexp(t, `(?s)port=`+strconv.Itoa(s.ports[0])+` retry_in=1s .*retry_in=2s .*retry_in=4s `, logged.String(),
		"slot 0's own backoff doubles")

	crashed := crashSlot(t, s, 1)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if assert.True(c, s.lastFailure.After(crashed), "the crash is a failure") {
			assert.Equal(c, 1, s.failures, "failures in a row")
			assert.Equal(c, restartDelay(1), s.restartAt.Sub(s.lastFailure), "backoff")
		}
	}, 10*time.Second, 5*time.Millisecond)
	slot, again := waitReady(t, ready)
	require.Equal(t, 1, slot)
	require.GreaterOrEqual(t, again.Sub(crashed), restartDelay(1))
	require.Less(t, again.Sub(crashed), restartDelay(1)+1500*time.Millisecond, "slot 1 waited for slot 0's backoff")
}

// The log line of a slot found with its port taken says what happens next as it is: with one
// slot only, no other slot is tried.
func TestTakenPortOfTheOnlySlotIsLoggedAsSuch(t *testing.T) {
	var logged syncBuffer
	s, err := New(replicaOptions("takenonly", 1, 1, llmsimCommand(t), slog.New(slog.NewTextHandler(&logged, nil))))
	require.NoError(t, err)
	defer s.Close()
	takePort(t, s, 0)
	bindSlots(s)
	s.Start()
	require.Eventually(t, func() bool { return portTakenLines(&logged) >= 1 }, 10*time.Second, 5*time.Millisecond)
	require.NotContains(t, logged.String(), "another slot", "log:\n%s", &logged)
}
