package scaling

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The replica ports of live scalers never coincide: the kernel hands out again a port whose
// listener closed, and two scalers sharing one would leave the replica that binds it second
// failing at every start. A thousand ports from 250 scalers' worth of allocations differ
// (drawn at random from the ephemeral range, some would coincide almost surely); once released,
// a port may be handed out again.
func TestFreePortsNeverHandsOutAReservedPort(t *testing.T) {
	seen := map[int]bool{}
	var all [][]int
	for range 250 {
		ports, err := FreePorts(4)
		require.NoError(t, err)
		for _, p := range ports {
			require.False(t, seen[p], "port %d handed out twice", p)
			seen[p] = true
		}
		all = append(all, ports)
	}
	for _, ports := range all {
		ReleasePorts(ports)
	}
	reserved.mu.Lock()
	defer reserved.mu.Unlock()
	require.Empty(t, reserved.ports, "released ports stay reserved")
}
