//go:build linux

package ingress_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// acceptPauseChildEnv makes the test binary run acceptPauseChild instead of the test: the
// child lowers its own descriptor limit, which the test process must not.
const acceptPauseChildEnv = "SLUICE_TEST_ACCEPT_PAUSE_CHILD"

// TestClosedConnectionEndsTheAcceptPause: out of descriptors, a loop that fails to accept
// leaves the shared listener alone (here for an hour), but a connection the engine closes
// frees a descriptor and ends the pause at once. Twelve queued connections, each served and
// closed in turn, are all accepted; without the resume the second would wait the hour.
func TestClosedConnectionEndsTheAcceptPause(t *testing.T) {
	if os.Getenv(acceptPauseChildEnv) == "1" {
		acceptPauseChild()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestClosedConnectionEndsTheAcceptPause$")
	cmd.Env = append(os.Environ(), acceptPauseChildEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func(prefix string) string {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "the child exited before saying %q", prefix)
				if strings.HasPrefix(l, prefix) {
					return strings.TrimPrefix(l, prefix)
				}
			case <-ctx.Done():
				t.Fatalf("the child did not say %q", prefix)
			}
		}
	}
	addr := next("listening ")

	// The child has one descriptor spare: the first connection takes it.
	held := dialAndGreet(t, addr)
	const queued = 12
	var waiting []net.Conn
	for i := 0; i < queued; i++ {
		c, err := net.Dial("tcp", addr) // the kernel completes it; the child cannot accept it
		require.NoError(t, err)
		defer c.Close()
		waiting = append(waiting, c)
	}
	require.Contains(t, next("paused "), "too many open files")

	// Each connection closed lets the next one in.
	closeByPeer(t, held)
	for i, c := range waiting {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
		greeting, err := bufio.NewReader(c).ReadString('\n')
		require.NoError(t, err, "queued connection %d was not accepted after the one before closed", i)
		require.Equal(t, "hi\n", greeting)
		closeByPeer(t, c)
	}
}

// dialAndGreet connects to addr and reads the child's greeting.
func dialAndGreet(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
	greeting, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "hi\n", greeting)
	return c
}

// closeByPeer asks the child to close c and waits until it has.
func closeByPeer(t *testing.T, c net.Conn) {
	t.Helper()
	_, err := c.Write([]byte("bye"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
}

// pauseHandler greets each connection and closes it when the client writes.
type pauseHandler struct {
	gnet.BuiltinEventEngine
	eng    gnet.Engine
	booted chan gnet.Engine
}

func (h *pauseHandler) OnBoot(e gnet.Engine) gnet.Action {
	h.eng = e
	return gnet.None
}

func (h *pauseHandler) OnTick() (time.Duration, gnet.Action) {
	select {
	case h.booted <- h.eng:
	default:
	}
	return time.Hour, gnet.None
}

func (h *pauseHandler) OnOpen(gnet.Conn) ([]byte, gnet.Action) { return []byte("hi\n"), gnet.None }

func (h *pauseHandler) OnTraffic(c gnet.Conn) gnet.Action {
	_, _ = c.Next(-1)
	return gnet.Close
}

// acceptPauseChild runs a two-loop engine sharing a listener, pausing an hour after a failed
// accept, with exactly one descriptor spare; it prints "listening ADDR" and one "paused ERR"
// line per failed accept, and runs until killed.
func acceptPauseChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	h := &pauseHandler{booted: make(chan gnet.Engine, 1)}
	go func() {
		fail(fmt.Errorf("gnet stopped: %v", gnet.Run(h, "tcp://127.0.0.1:0", gnet.WithNumEventLoop(2),
			gnet.WithTicker(true), gnet.WithAcceptPause(time.Hour))))
	}()
	eng := <-h.booted
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		fail(err)
	}
	fd, dupErr := -1, error(nil)
	if err := rc.Control(func(lfd uintptr) { fd, dupErr = unix.FcntlInt(lfd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || dupErr != nil {
		fail(fmt.Errorf("dup: %v %v", err, dupErr))
	}
	report := func(err error, dropped bool) {
		if !dropped {
			fmt.Println("paused", err)
		}
	}
	if err := eng.ShareListener(fd, "shared", report); err != nil {
		fail(err)
	}
	if err := testenv.ExhaustDescriptorsButOne(); err != nil {
		fail(err)
	}
	fmt.Println("listening", ln.Addr())
	select {}
}
