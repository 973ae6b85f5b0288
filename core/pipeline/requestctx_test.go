package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A context given back to the pool holds nothing of its request: an engine that answers a
// request it could not parse (Reject) takes one from the pool and fills in only what it
// parsed, so a method or path left over would be logged as that request's, and a HEAD left
// over would answer it as a HEAD.
func TestReleasedRequestCtxHoldsNoRequest(t *testing.T) {
	rc := AcquireRequestCtx()
	require.NoError(t, rc.Req.ParseRequestHead([]byte("HEAD /x?q=1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\n\r\n"), nil))
	rc.Req.Body = append(rc.Req.Body, "abc"...)
	ReleaseRequestCtx(rc)
	require.Empty(t, rc.Req.Method)
	require.Empty(t, rc.Req.Path)
	require.Empty(t, rc.Req.Headers)
	require.Empty(t, rc.Req.Body)
	require.EqualValues(t, -1, rc.Req.ContentLength)
}
