package workers

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/balancer"
)

// A poll the gateway cannot make for want of its own descriptors is recorded and logged as
// the gateway's shortage, not as the worker's failure; once descriptors are back the worker
// is observed again.
func TestPollTheGatewayCouldNotMakeDoesNotBlameTheWorker(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"worker_id":"w1","role":"aggregated","ready":true,"healthy":true,"active":0,"deployment_generation":2,"execution_config_digest":"d2"}`))
	}))
	defer srv.Close()
	var logBuf syncBuffer
	prevLog := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logBuf, nil)))
	defer slog.SetDefault(prevLog)

	// The interval bounds each poll too: a poll slower than it on a loaded machine would log
	// the failure this test says is not logged.
	g := NewGroup(Config{Service: "svc", Interval: 200 * time.Millisecond, TTL: time.Minute},
		[]Member{{URL: srv.URL, Name: srv.URL, LB: &balancer.Backend{ID: 0}}})
	var starved atomic.Bool
	starved.Store(true)
	var d net.Dialer
	g.client.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if starved.Load() {
			// What socket(2) answers a process out of descriptors.
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("socket", syscall.EMFILE)}
		}
		return d.DialContext(ctx, network, addr)
	}
	g.Start()
	defer g.Stop()
	w := g.members[0].Worker
	waitFor(t, func() bool { return w.View().Error != "" })
	require.Equal(t, "the gateway is short of resources: too many open files", w.View().Error)
	log := logBuf.String()
	require.Contains(t, log, `msg="cannot observe the worker: the gateway is short of resources" service=svc server=`+srv.URL+` error="too many open files"`)
	require.NotContains(t, log, "worker observation failed")

	starved.Store(false)
	waitFor(t, func() bool { return w.View().Kind == Observed && w.View().Error == "" })
	require.Equal(t, 1, strings.Count(logBuf.String(), "cannot observe the worker"), "logged once for its reason")
}

// A worker whose observation went stale because the gateway could not poll it for want of its
// own descriptors leaves a choice with no server "short", so that the request is answered for
// the gateway's shortage; one that went stale because it stopped answering does not.
func TestStaleForTheGatewaysShortageIsSaid(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"worker_id":"w1","role":"aggregated","ready":true,"healthy":true,"active":0,"deployment_generation":2,"execution_config_digest":"d2"}`))
	}))
	defer srv.Close()
	g := NewGroup(Config{Service: "svc", Interval: 100 * time.Millisecond, TTL: time.Second},
		[]Member{{URL: srv.URL, Name: srv.URL, LB: &balancer.Backend{ID: 0}}})
	var failWith atomic.Value
	failWith.Store(syscall.Errno(0))
	var d net.Dialer
	g.client.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if errno := failWith.Load().(syscall.Errno); errno != 0 {
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("socket", errno)}
		}
		return d.DialContext(ctx, network, addr)
	}
	g.client.Transport.(*http.Transport).DisableKeepAlives = true
	g.Start()
	defer g.Stop()
	needs := &Needs{Role: "aggregated"}
	observed := func() bool {
		r, _ := g.Judge(0, needs)
		return r == Eligible && g.members[0].Worker.View().Kind == Observed
	}
	waitFor(t, observed)

	for _, tc := range []struct {
		errno syscall.Errno
		short bool
	}{{syscall.EMFILE, true}, {syscall.ECONNREFUSED, false}} {
		failWith.Store(tc.errno)
		waitFor(t, func() bool {
			r, _ := g.Judge(0, needs)
			return r == Stale && strings.Contains(g.members[0].Worker.View().Error, map[bool]string{true: "short", false: "refused"}[tc.short])
		})
		var c balancer.Choice
		full, short := g.Exclude(&c, needs)
		require.False(t, full)
		require.Equal(t, tc.short, short, "%v", tc.errno)
		require.Equal(t, tc.short, g.Short(), "%v", tc.errno)
		failWith.Store(syscall.Errno(0))
		waitFor(t, func() bool { return observed() && g.members[0].Worker.View().Error == "" })
	}
}
