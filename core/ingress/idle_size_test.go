package ingress

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// gconnBudget bounds the state the gnet engine keeps for each client connection, idle or not
// (its size class, 512 bytes): an idle connection must stay cheap, 10,000 of them within
// 64 MiB of the gateway's RSS. What only a request or a slow client needs (the RequestCtx, the
// send queue) is not part of it.
const gconnBudget = 512

func TestGconnStaysSmall(t *testing.T) {
	size := unsafe.Sizeof(gconn{})
	t.Logf("gconn %d bytes (loop exchange %d); made on first use: send queue %d bytes and its channels", size, unsafe.Sizeof(loopX{}), unsafe.Sizeof(sendQueue{}))
	require.LessOrEqual(t, size, uintptr(gconnBudget), "gconn grew past its budget: keep what a request needs in the pooled RequestCtx, and make what is rare on first use")
}
