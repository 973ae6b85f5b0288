package ingress

import "golang.org/x/sys/unix"

// Peer states of a client socket with unread bytes (peerState).
const (
	peerUnknown = iota
	peerOpen
	peerGone
)

// TCP states of Linux's tcp_info (include/net/tcp_states.h).
const (
	tcpEstablished = 1
	tcpClose       = 7
	tcpCloseWait   = 8
)

// peerState reads whether the client of socket fd has closed its sending side or reset the
// connection (CLOSE_WAIT or CLOSE in TCP_INFO), which a peek cannot see behind unread bytes.
func peerState(fd int) int {
	ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return peerUnknown
	}
	switch ti.State {
	case tcpEstablished:
		return peerOpen
	case tcpClose, tcpCloseWait:
		return peerGone
	}
	return peerUnknown
}

// bytesAcked returns how many bytes of what the gateway sent on socket fd the client's TCP
// has acknowledged (tcpi_bytes_acked, Linux 4.1+), the count that stops growing once a client
// that reads nothing has a full receive window; ok is false when it cannot be read.
func bytesAcked(fd int) (n uint64, ok bool) {
	ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, false
	}
	return ti.Bytes_acked, true
}

// unreadInput reports whether socket fd holds received bytes not read yet (SIOCINQ). A
// descriptor closed meanwhile reports false, or another socket's state: the caller then only
// waits a tick longer.
func unreadInput(fd int) bool {
	n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	return err == nil && n > 0
}
