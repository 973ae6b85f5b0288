//go:build linux

package ingress_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/ingress"
)

// armedForListener returns, for each epoll instance of this process that holds the listening
// socket of addr with EPOLLONESHOT or EPOLLEXCLUSIVE (the event loops' way of holding it;
// the Go netpoller holds it edge-triggered), whether it is armed for readability
// (/proc/self/fdinfo: "tfd: N events: MASK"), keyed by the instance's descriptor.
func armedForListener(t *testing.T, addr string) map[int]bool {
	t.Helper()
	lfd := listenerFD(t, addr)
	const epollIn, epollExclusive, epollOneshot = 0x1, 1 << 28, 1 << 30
	armed := map[int]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, e := range fds {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || link != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			f := strings.Fields(line)
			if len(f) < 4 || f[0] != "tfd:" || f[1] != strconv.Itoa(lfd) || f[2] != "events:" {
				continue
			}
			mask, err := strconv.ParseUint(f[3], 16, 32)
			require.NoError(t, err)
			if mask&(epollExclusive|epollOneshot) != 0 {
				n, _ := strconv.Atoi(e.Name())
				armed[n] = mask&epollIn != 0
			}
		}
	}
	return armed
}

// listenerFD finds this process's descriptor of the TCP socket listening on addr, by the
// socket's inode in /proc/net/tcp.
func listenerFD(t *testing.T, addr string) int {
	t.Helper()
	ap := netipAddrPort(t, addr)
	want := strings.ToUpper(strconv.FormatInt(int64(ap[0])|int64(ap[1])<<8|int64(ap[2])<<16|int64(ap[3])<<24, 16))
	want = strings.Repeat("0", 8-len(want)) + want + ":" + strings.ToUpper(strconv.FormatInt(int64(ap[4]<<8|ap[5]), 16))
	data, err := os.ReadFile("/proc/net/tcp")
	require.NoError(t, err)
	inode := ""
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && strings.EqualFold(f[1], want) && f[3] == "0A" { // LISTEN
			inode = f[9]
		}
	}
	require.NotEmpty(t, inode, "no socket listens on %s", addr)
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, e := range fds {
		if link, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); link == "socket:["+inode+"]" {
			n, _ := strconv.Atoi(e.Name())
			return n
		}
	}
	t.Fatalf("no descriptor of this process is the socket listening on %s", addr)
	return -1
}

// TestOneLoopAtATimeWaitsToAccept: the event loops share the listening socket, armed on one
// loop at a time, which passes the turn on after it accepts. An idle loop parks on the Go
// netpoller, where an exclusive wake-up (EPOLLEXCLUSIVE) reaches every parked loop: each new
// connection then woke them all, and all but one found nothing to accept.
func TestOneLoopAtATimeWaitsToAccept(t *testing.T) {
	up := newUpstream(t, answerNow)
	tr := startLoopEngineSettings(t, up.addr(), ingress.Settings{EventLoops: 2})

	armedLoop := func() int {
		t.Helper()
		held := armedForListener(t, tr.Addr())
		require.Len(t, held, 2, "both loops hold the listener")
		loop := -1
		for epfd, armed := range held {
			if armed {
				require.Equal(t, -1, loop, "one loop at a time is armed: %v", held)
				loop = epfd
			}
		}
		require.NotEqual(t, -1, loop, "a loop is armed: %v", held)
		return loop
	}

	seen := map[int]bool{armedLoop(): true}
	for i := 0; i < 4; i++ {
		c := dialClient(t, tr.Addr()) // kept open: each adds to its loop's connections
		resp, body := roundTrip(t, c, "/x")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "hello", string(body))
		seen[armedLoop()] = true
	}
	require.Len(t, seen, 2, "the turn to accept passed between the loops")
	require.EqualValues(t, 4, ingress.LoopAccepted(tr), "the loops accepted every client")
}
