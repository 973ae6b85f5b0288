//go:build !linux

package pool

import (
	"context"
	"net"
	"net/netip"
)

// connectDirect is not available here: the caller dials with the net package.
func connectDirect(context.Context, netip.AddrPort) (net.Conn, bool, error) { return nil, false, nil }
