package health

import (
	"context"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A probe whose connect fails for want of the gateway's own descriptors judges nothing: the
// target stays healthy through any number of them, and probes that reach it count again once
// descriptors are back. A refused connect still counts against it.
func TestProbesTheGatewayCouldNotMakeJudgeNothing(t *testing.T) {
	e := startEngine(t, 200)
	var failWith atomic.Value // syscall.Errno, 0: dial normally
	failWith.Store(syscall.Errno(0))
	var failed atomic.Int32
	var d net.Dialer
	client := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if errno := failWith.Load().(syscall.Errno); errno != 0 {
				failed.Add(1)
				// What the kernel answers socket(2) when the process is out of descriptors.
				return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("socket", errno)}
			}
			return d.DialContext(ctx, network, addr)
		},
	}}
	tgt := NewTarget("engine", e.url, true)
	results := make(chan Result, 1024)
	c := New(spec("/health"), client, []*Target{tgt}, func(r Result) { results <- r })
	c.Start()
	defer c.Stop()
	require.NoError(t, (<-results).Err)

	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.EADDRNOTAVAIL} {
		failWith.Store(errno)
		from := failed.Load()
		require.Eventually(t, func() bool { return failed.Load() >= from+4 }, 10*time.Second, time.Millisecond,
			"four probes failed with %v", errno)
		require.True(t, tgt.Healthy(), "%v is the gateway's own shortage", errno)
	}
	failWith.Store(syscall.Errno(0))
	for r := range results {
		if r.Err == nil {
			break
		}
	}

	failWith.Store(syscall.ECONNREFUSED)
	require.Eventually(t, func() bool { return !tgt.Healthy() }, 10*time.Second, time.Millisecond,
		"a refused connect counts against the target")
}
