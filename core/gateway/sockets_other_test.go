//go:build !linux

package gateway_test

import "errors"

// tcpSocket is one TCP socket this process holds open.
type tcpSocket struct {
	local, remote int
	state         string
}

// ownTCPSockets is only implemented on Linux (from /proc): elsewhere the tests that look at
// sockets check the goroutines alone.
func ownTCPSockets() ([]tcpSocket, error) { return nil, errors.ErrUnsupported }
