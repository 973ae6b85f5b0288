package pool

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// descriptorsChildEnv makes the test binary run a child's part instead of the test: the
// child lowers its own descriptor limit, which the test process must not.
const descriptorsChildEnv = "SLUICE_TEST_POOL_DESCRIPTORS_CHILD"

// With one descriptor left, connectDirect's socket and connect succeed and the duplicate
// net.FileConn makes fails: the dial error reads "too many open files", as every other dial
// out of descriptors does, and counts as the gateway's own shortage.
func TestConnectDirectOutOfDescriptors(t *testing.T) {
	if os.Getenv(descriptorsChildEnv) == "1" {
		connectWithOneDescriptorLeft()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestConnectDirectOutOfDescriptors$")
	cmd.Env = append(os.Environ(), descriptorsChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `failure="too many open files" local=true`)
}

func connectWithOneDescriptorLeft() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(2)
	}
	if err := testenv.ExhaustDescriptorsButOne(); err != nil {
		fmt.Println("exhaust:", err)
		os.Exit(2)
	}
	ap := netip.MustParseAddrPort(ln.Addr().String())
	_, _, err = connectDirect(context.Background(), ap)
	ue := &UpstreamError{Addr: ap.String(), Kind: ErrDial, Err: err}
	fmt.Printf("failure=%q local=%v\n", ue.Failure(), LocalResource(err))
}
