package pool

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// connectDirect opens a TCP connection to ap with a non-blocking connect(2) and, when the
// handshake finished within that system call (a loopback or same-host upstream: the peer's
// SYN-ACK is processed before connect returns), returns it without waiting for the Go
// netpoller. The net package's dialer always parks the dialling goroutine until the netpoller
// reports the socket writable, and while every processor runs a busy event loop the netpoller
// is polled only by the runtime's monitor thread, up to 10 ms later: that wait was the tail of
// requests that had to dial. A connect still in progress waits for the netpoller as the dialer
// does, within ctx (its deadline is the dial timeout; a cancel ends the wait at once).
//
// ok is false when the platform has no direct connect (the caller then dials); err, when not
// nil, is a *net.OpError like the dialer's.
func connectDirect(ctx context.Context, ap netip.AddrPort) (nc net.Conn, ok bool, err error) {
	fd, sa, err := socketFor(ap)
	if err != nil {
		return nil, true, dialError(ap, err)
	}
	pending := false
	switch cerr := unix.Connect(fd, sa); cerr {
	case nil:
	case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
		done, serr := connectDone(fd)
		if done && serr != nil {
			_ = unix.Close(fd)
			return nil, true, dialError(ap, os.NewSyscallError("connect", serr))
		}
		pending = !done
	default:
		_ = unix.Close(fd)
		return nil, true, dialError(ap, os.NewSyscallError("connect", cerr))
	}
	f := os.NewFile(uintptr(fd), "")
	nc, err = net.FileConn(f) // a duplicate of fd, in the netpoller
	_ = f.Close()
	if err != nil {
		return nil, true, dialError(ap, fileConnCause(err))
	}
	if pending {
		if err := waitConnected(ctx, nc); err != nil {
			_ = nc.Close()
			return nil, true, dialError(ap, err)
		}
	}
	tc := nc.(*net.TCPConn)
	_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle})
	return nc, true, nil
}

// fileConnCause is the cause of net.FileConn's error, without its "file file+net" wrapping
// (out of descriptors, the duplicate fails: "fcntl: too many open files"), so that the dial
// error reads as the others do.
func fileConnCause(err error) error {
	if oe, ok := err.(*net.OpError); ok && oe.Err != nil {
		return oe.Err
	}
	return err
}

// socketFor returns a non-blocking, close-on-exec TCP socket for ap's family, and ap as a
// socket address. (net.FileConn then sets TCP_NODELAY, as the dialer does.)
func socketFor(ap netip.AddrPort) (int, unix.Sockaddr, error) {
	family := unix.AF_INET6
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	if ap.Addr().Is4() {
		family = unix.AF_INET
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return -1, nil, os.NewSyscallError("socket", err)
	}
	return fd, sa, nil
}

// connectDone reports whether the connect in progress on fd ended, and its error (nil:
// connected). It does not wait: poll(2) with a zero timeout.
func connectDone(fd int) (bool, error) {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	if n, err := unix.Poll(pfd, 0); n <= 0 || err != nil {
		return false, nil
	}
	soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return true, err
	}
	if soerr != 0 {
		return true, syscall.Errno(soerr)
	}
	return true, nil
}

// waitConnected waits through the netpoller until the connect in progress on nc ends, ctx is
// cancelled (ctx.Err()) or its deadline passes (os.ErrDeadlineExceeded).
func waitConnected(ctx context.Context, nc net.Conn) error {
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = nc.SetWriteDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	var cerr error
	werr := rc.Write(func(fd uintptr) bool {
		done, err := connectDone(int(fd))
		cerr = err
		return done
	})
	if werr != nil {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return ctx.Err()
		}
		if errors.Is(werr, os.ErrDeadlineExceeded) {
			return os.ErrDeadlineExceeded // the dial timeout, worded as the dialer words it
		}
		return werr
	}
	if cerr != nil {
		return os.NewSyscallError("connect", cerr)
	}
	return nc.SetWriteDeadline(time.Time{})
}

// connectStartAvailable: ConnectStart connects here.
const connectStartAvailable = true

// ConnectStart begins a plain TCP connection to the pool's upstream and does not wait for
// it: it returns a non-blocking socket on which connect(2) was called (done or in progress),
// with TCP_NODELAY and the keep-alive probes Dial sets, for an event loop to register and see
// through (gnet.Connector); remote is the upstream's address. ok is false when only Dial can
// connect to the upstream: a name to resolve, TLS, or a retired pool. A failure the kernel
// reports at once (no route, no local port) comes back as err, from ConnectDone. The caller
// bounds the wait by DialTimeout and reports the end with ConnectDone.
//
// Its system calls are raw (they never wait on a non-blocking socket), so that an event loop
// that makes them does not enter the Go scheduler's system call state: with a connection per
// request that state kept the runtime's monitor thread polling every 20 µs.
func (p *Pool) ConnectStart() (fd int, remote net.Addr, ok bool, err error) {
	if !p.ConnectsOnLoop() {
		return -1, nil, false, nil
	}
	fd, _, err = socketFor(p.direct)
	if err != nil {
		return -1, nil, true, p.ConnectDone(err)
	}
	if cerr := rawConnect(fd, p.direct); cerr != nil && cerr != unix.EINPROGRESS && cerr != unix.EINTR {
		_ = rawClose(fd)
		return -1, nil, true, p.ConnectDone(os.NewSyscallError("connect", cerr))
	}
	setUpstreamSockopts(fd)
	return fd, net.TCPAddrFromAddrPort(p.direct), true, nil
}

// setUpstreamSockopts sets what net.FileConn and the keep-alive configuration set on a
// connection Dial makes: TCP_NODELAY, and keep-alive probes after keepAliveIdle (interval
// and count as the net package's defaults: 15 s, 9). Failures leave the kernel's defaults.
func setUpstreamSockopts(fd int) {
	rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	rawSetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(keepAliveIdle/time.Second))
	rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15)
	rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9)
}

// rawConnect calls connect(2) on non-blocking socket fd as a raw system call. (The address is
// converted to uintptr in the call itself, so that it stays valid through it.)
func rawConnect(fd int, ap netip.AddrPort) error {
	var e unix.Errno
	if ap.Addr().Is4() {
		sa := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: ap.Addr().As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], ap.Port())
		_, _, e = unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
	} else {
		sa := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: ap.Addr().As16()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], ap.Port())
		_, _, e = unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
	}
	if e != 0 {
		return e
	}
	return nil
}

func rawSetsockoptInt(fd, level, opt, v int) {
	i := int32(v)
	_, _, _ = unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&i)), unsafe.Sizeof(i), 0)
}

func rawClose(fd int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0); e != 0 {
		return e
	}
	return nil
}
