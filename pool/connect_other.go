//go:build !linux

package pool

import (
	"context"
	"net"
	"net/netip"
)

// connectDirect is not available here: the caller dials with the net package.
func connectDirect(context.Context, netip.AddrPort) (net.Conn, bool, error) { return nil, false, nil }

// connectStartAvailable: ConnectStart does not connect here.
const connectStartAvailable = false

// ConnectStart is not available here: the event loops dial with Dial (see connect_linux.go).
func (p *Pool) ConnectStart() (fd int, remote net.Addr, ok bool, err error) {
	return -1, nil, false, nil
}
