//go:build !linux

package ingress

import "net"

// takeBacklog takes nothing here: the listener's close resets what waits in its backlog.
func takeBacklog(net.Listener) []net.Conn { return nil }
