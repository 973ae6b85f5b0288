package pd

import (
	"context"
	"net"
	"time"
)

// SetOverheadHook makes f receive the orchestration overhead of each request served (nil:
// none). Not safe to change while requests run.
func SetOverheadHook(f func(time.Duration)) { overheadHook = f }

// SetDialHook makes f connect to the workers instead of the dialer (nil: the dialer).
func SetDialHook(f func(ctx context.Context, network, addr string) (net.Conn, error)) {
	if f == nil {
		dialHook.Store(nil)
		return
	}
	dialHook.Store(&f)
}

// SetPairHook makes f run in each request once a pair is chosen, before its exchange begins
// (nil: nothing).
func SetPairHook(f func()) {
	if f == nil {
		pairHook.Store(nil)
		return
	}
	pairHook.Store(&f)
}
