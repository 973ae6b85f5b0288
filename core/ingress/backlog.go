package ingress

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// backlogListener is the fasthttp engine's innermost listener. Its Close takes the
// connections waiting in the socket's backlog before it closes the socket (acceptBacklog), unless
// the socket went to a transport taking over the address (donated), and its Accept hands them
// out once the socket is closed, before it reports the close: the engine's Serve serves them as
// a drain does instead of the close resetting them.
type backlogListener struct {
	net.Listener
	donated *atomic.Bool

	mu    sync.Mutex
	taken []net.Conn
}

// Close implements net.Listener. It holds mu from the take to the wrapping, so that an Accept
// that finds the socket closed waits for the connections taken.
func (l *backlogListener) Close() error {
	if backlogHook != nil {
		backlogHook()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var fds []int
	if !l.donated.Load() {
		fds = acceptBacklog(l.Listener)
	}
	err := l.Listener.Close()
	l.taken = append(l.taken, wrapBacklog(fds)...)
	return err
}

// Accept implements net.Listener.
func (l *backlogListener) Accept() (net.Conn, error) {
	if acceptGate != nil {
		acceptGate()
	}
	c, err := l.Listener.Accept()
	if err != nil && errors.Is(err, net.ErrClosed) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.taken) > 0 {
			c, l.taken = l.taken[0], l.taken[1:]
			return c, nil
		}
	}
	return c, err
}

// acceptGate, when set (by tests), runs before each accept of the fasthttp engine's listener:
// a test holds connections in the backlog by blocking in it.
var acceptGate func()
