package pool

import (
	"context"
	"net"
	"net/netip"
	"time"
)

// keepAliveIdle is the idle time before TCP keep-alive probes on upstream connections, as
// net.Dialer's KeepAlive of the pool's dialer (probe interval and count: the net package's
// defaults).
const keepAliveIdle = 30 * time.Second

// literalAddr returns addr's address when it is an IP literal and port ("127.0.0.1:8000",
// "[::1]:8000") that needs no name resolution and no IPv6 zone: such an upstream can be
// connected to by connectDirect.
func literalAddr(addr string) (netip.AddrPort, bool) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.Addr().Zone() != "" || ap.Port() == 0 {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// connect opens a TCP connection to the upstream within ctx (its deadline is the dial
// timeout). An IP-literal upstream is connected to by connectDirect where the platform has it;
// a name goes through the dialer's resolver.
func (p *Pool) connect(ctx context.Context) (net.Conn, error) {
	if p.direct.IsValid() {
		if nc, ok, err := connectDirect(ctx, p.direct); ok {
			return nc, err
		}
	}
	return p.dialer.DialContext(ctx, "tcp", p.o.Addr)
}

// dialError is the error of a failed direct connect, shaped like the net package's dial errors
// ("dial tcp 127.0.0.1:9: connect: connection refused"), so that errors.Is finds the errno or
// os.ErrDeadlineExceeded in it as for a dialer's error.
func dialError(ap netip.AddrPort, err error) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: err}
}
