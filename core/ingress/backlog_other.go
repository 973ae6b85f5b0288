//go:build !linux

package ingress

import "net"

// acceptBacklog takes nothing here: the listener's close resets what waits in its backlog.
func acceptBacklog(net.Listener) []int { return nil }

// wrapBacklog has nothing to wrap here.
func wrapBacklog([]int) []net.Conn { return nil }
