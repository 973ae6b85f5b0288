package pipeline

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/metrics"
)

// A mirror's copy is taken before its backend is chosen: the head built then and completed
// for the backend chosen later is the head the request itself gets at that backend, with the
// backend's Host, or the client's for a service that passes it through (the backend's when the
// client sent none).
func TestCopyHeadCompletedForItsBackendIsTheRequestsHead(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		pass       bool
		host       string
	}{
		{"backend host", "POST /v1/chat HTTP/1.1\r\nHost: api.example\r\nX-Keep: yes\r\nContent-Length: 2\r\n\r\n", false, "backend:8000"},
		{"client host passed", "POST /v1/chat HTTP/1.1\r\nHost: api.example\r\nX-Keep: yes\r\nContent-Length: 2\r\n\r\n", true, "api.example"},
		{"no client host to pass", "POST /v1/chat HTTP/1.0\r\nX-Keep: yes\r\nContent-Length: 2\r\n\r\n", true, "backend:8000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &Service{Name: "up", PassHostHeader: tc.pass}
			rt := &Route{Name: "copy", Service: svc, M: metrics.ForRoute("copy", "up")}
			ep := NewEntrypoint("copy", false, oneRoute{rt}, metrics.ForEntrypoint("copy"), nil)
			var rc RequestCtx
			rc.SetClientAddr(netip.MustParseAddr("192.0.2.1"))
			require.NoError(t, rc.Req.ParseRequestHead([]byte(tc.head), nil))
			rc.Req.Body = []byte("{}")
			require.NoError(t, ep.route(&rc, time.Now()))
			b := &Backend{Host: []byte("backend:8000")}

			var h CopyHead
			rc.AppendCopyHead(&h, len(rc.Req.Body))
			got := string(h.AppendFor(nil, svc, b))
			require.Equal(t, string(appendUpstreamHead(nil, &rc, b)), got)
			require.Contains(t, got, "\r\nHost: "+tc.host+"\r\n")
			require.Equal(t, got, string(h.AppendFor([]byte(nil), svc, b)), "completing it again gives the same head")
		})
	}
}
