//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package ingress

// Peer states of a client socket with unread bytes (peerState).
const (
	peerUnknown = iota
	peerOpen
	peerGone
)

// peerState cannot read the TCP state here: a watch that sees unread bytes stops.
func peerState(int) int { return peerUnknown }

// bytesAcked cannot read the acknowledged byte count here: the stall check then goes by the
// loop's outbound buffer alone.
func bytesAcked(int) (uint64, bool) { return 0, false }

// unreadInput cannot read the receive queue here: a drain closes an idle connection whose
// next request the engine has not read yet.
func unreadInput(int) bool { return false }
