package pool

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// An exchange that opened its connection reports how long that took; one on a pooled
// connection, or whose dial failed, reports 0.
func TestConnectTime(t *testing.T) {
	u := startUpstream(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"))
	p := New(Options{Addr: u.addr()})
	defer p.Close()
	for i, fresh := range []bool{true, false} {
		x := AcquireExchange()
		require.NoError(t, x.RoundTrip(p, []byte(getHead), nil, false))
		if fresh {
			require.Positive(t, x.ConnectTime(), "exchange %d dialled", i)
		} else {
			require.Zero(t, x.ConnectTime(), "exchange %d reused", i)
		}
		_, err := readAll(x, false, 64)
		require.NoError(t, err)
		ReleaseExchange(x)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	dead := New(Options{Addr: addr})
	defer dead.Close()
	x := AcquireExchange()
	defer ReleaseExchange(x)
	require.ErrorIs(t, x.RoundTrip(dead, []byte(getHead), nil, false), ErrDial)
	require.Zero(t, x.ConnectTime())
}
