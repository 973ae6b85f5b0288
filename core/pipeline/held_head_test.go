package pipeline

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/metrics"
)

// A held stream's events go out under a head the gateway sent itself, without a content
// coding: its request asks the upstream for an answer without one, whatever the client
// accepts; the same request not held passes the client's Accept-Encoding on.
func TestHeldStreamAsksForAnUncodedAnswer(t *testing.T) {
	rt := &Route{Name: "held", Service: &Service{Name: "up"}, M: metrics.ForRoute("held", "up")}
	ep := NewEntrypoint("held", false, oneRoute{rt}, metrics.ForEntrypoint("held"), nil)
	for _, held := range []bool{false, true} {
		var rc RequestCtx
		rc.SetClientAddr(netip.MustParseAddr("192.0.2.1"))
		require.NoError(t, rc.Req.ParseRequestHead([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAccept-Encoding: gzip, br\r\nContent-Length: 0\r\n\r\n"), nil))
		require.NoError(t, ep.route(&rc, time.Now()))
		if held {
			rc.planHeld()
		}
		lines := strings.Split(strings.ToLower(string(appendUpstreamHead(nil, &rc, &Backend{Host: []byte("backend:8000")}))), "\r\n")
		want := []string{"gzip, br"}
		if held {
			want = []string{"identity"}
		}
		require.Equal(t, want, fieldValues(lines, "accept-encoding"), "held %v", held)
	}
}
