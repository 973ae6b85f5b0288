package ingress

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// bootHandler hands over the engine once its loops run (the first tick), when connections
// may be registered, as the gnet engine of the gateway waits for.
type bootHandler struct {
	gnet.BuiltinEventEngine
	eng    gnet.Engine
	once   sync.Once
	booted chan gnet.Engine
}

func (h *bootHandler) OnBoot(e gnet.Engine) gnet.Action {
	h.eng = e
	return gnet.None
}

func (h *bootHandler) OnTick() (time.Duration, gnet.Action) {
	h.once.Do(func() { h.booted <- h.eng })
	return time.Hour, gnet.None
}

// TestEnrolledSocketIsNonBlocking: a connection handed to a gnet loop is made non-blocking
// even when something put it in blocking mode (here os.File.Fd on a duplicate), since the
// loops read and write it with raw system calls that must never wait.
func TestEnrolledSocketIsNonBlocking(t *testing.T) {
	h := &bootHandler{booted: make(chan gnet.Engine, 1)}
	done := make(chan error, 1)
	go func() {
		done <- gnet.Run(h, "tcp://127.0.0.1:0", gnet.WithLoadBalancing(gnet.LeastConnections), gnet.WithNumEventLoop(1), gnet.WithTicker(true))
	}()
	var eng gnet.Engine
	select {
	case eng = <-h.booted:
	case err := <-done:
		t.Fatalf("gnet stopped at start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("gnet did not boot")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Stop(ctx)
		<-done
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	f, err := c.(*net.TCPConn).File()
	require.NoError(t, err)
	defer f.Close()
	fd := int(f.Fd()) // puts the shared file description in blocking mode
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	require.NoError(t, err)
	require.Zero(t, flags&unix.O_NONBLOCK, "os.File.Fd made the socket blocking")

	res, err := eng.Register(gnet.NewNetConnContext(context.Background(), c))
	require.NoError(t, err)
	select {
	case r := <-res:
		require.NoError(t, r.Err)
	case <-time.After(10 * time.Second):
		t.Fatal("enrolment did not finish")
	}
	flags, err = unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	require.NoError(t, err)
	require.NotZero(t, flags&unix.O_NONBLOCK, "the enrolled socket is non-blocking again")
}
