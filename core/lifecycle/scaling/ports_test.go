package scaling

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

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
// the slot serves after the backoff.
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
	require.Contains(t, logged.String(), `level=WARN msg="scaling: replica port is taken by another process; another slot is tried, this one again after the backoff" service=`+service+` port=`+strconv.Itoa(s.ports[0]))
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
