package llmsim

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// An error about one instance numbers it as llmsim's startup lines do ("instance 0 ... listening
// on"), from 0: a bad value, and an address that cannot be listened on.
func TestInstanceErrorsNumberFromZero(t *testing.T) {
	bad := testInstance()
	bad.Tokens = -5
	_, err := Start(Config{Instances: 2, Defaults: bad})
	require.ErrorContains(t, err, "llmsim: instance 0 (127.0.0.1:")
	require.ErrorContains(t, err, "tokens -5 out of range")

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	second := testInstance()
	second.Listen = taken.Addr().String()
	_, err = Start(Config{Instance: []InstanceConfig{testInstance(), second}})
	require.ErrorContains(t, err, "llmsim: instance 1: listen tcp "+taken.Addr().String())
}
