package testenv

import (
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A connection to RefusingAddr is refused, and no listener can take its port while the test
// runs, whether it binds the loopback address or every address.
func TestRefusingAddrRefusesAndKeepsItsPort(t *testing.T) {
	addr := RefusingAddr(t)
	for range 3 {
		_, err := net.Dial("tcp", addr)
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
	}
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	for _, host := range []string{"127.0.0.1", "0.0.0.0"} {
		_, err := net.Listen("tcp4", net.JoinHostPort(host, port))
		require.ErrorIs(t, err, syscall.EADDRINUSE, host)
	}
}
