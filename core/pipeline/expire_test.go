package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/pool"
)

var errStageDeadline = &GatewayError{Status: 504, Type: UpstreamError, Code: "upstream_timeout", Message: "a stage's deadline passed"}

// A stage's deadline cuts the exchange of the request it was taken for and names itself as
// the cut, and nothing else: not a request with no exchange in flight (one that finished),
// not a later use of the pooled RequestCtx.
func TestExpireCutsOnlyTheExchangeOfItsUse(t *testing.T) {
	rc := AcquireRequestCtx()
	h := rc.CancelHandle()

	h.Expire(errStageDeadline)
	require.Nil(t, rc.cutError(), "no exchange in flight: nothing to cut")

	x := pool.AcquireExchange()
	defer pool.ReleaseExchange(x)
	require.True(t, rc.watch(x))
	h.Expire(errStageDeadline)
	require.True(t, x.Aborted())
	require.Same(t, errStageDeadline, rc.cutError())
	require.Equal(t, appendSSEErrorShaped(nil, errStageDeadline, rc.errShape), rc.streamFailure(pool.ErrAborted))

	// The request finishes; the same RequestCtx serves the next one (what ReleaseRequestCtx
	// and AcquireRequestCtx would do, without the pool choosing the object).
	rc.unwatch()
	rc.disarmStreamDeadlines()
	h.Expire(errStageDeadline)
	require.Nil(t, rc.cutError(), "finished: nothing to cut")
	rc.cancelMu.Lock()
	rc.seq++
	rc.cancelMu.Unlock()
	y := pool.AcquireExchange()
	defer pool.ReleaseExchange(y)
	require.True(t, rc.watch(y))
	h.Expire(errStageDeadline) // a late deadline of the earlier use
	require.False(t, y.Aborted())
	require.Nil(t, rc.cutError())
	rc.unwatch()
	ReleaseRequestCtx(rc)
}
