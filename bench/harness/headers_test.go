package harness

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Extra header fields go out on every workload request (a gateway's API key), and a malformed
// one is refused before any traffic.
func TestHeadersGoOnEveryRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("Authorization") != "Bearer k1" || r.Header.Get("X-Tenant") != "a b" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}]}`)
	}))
	t.Cleanup(srv.Close)
	o := Options{Target: srv.URL, Workload: WorkloadJSON, Concurrency: 2, Duration: 200 * time.Millisecond}
	res, err := Run(context.Background(), o)
	require.NoError(t, err)
	require.Equal(t, res.Requests, res.ErrorsByKind["status_4xx"], "without the key every request is refused")

	o.Headers = []string{"Authorization: Bearer k1", "X-Tenant:  a b "}
	res, err = Run(context.Background(), o)
	require.NoError(t, err)
	require.Positive(t, res.OK)
	require.Zero(t, res.Errors, "%v", res.ErrorsByKind)

	for _, bad := range []string{"no colon", "Bad Name: v", "X: a\r\nY: b", ": v"} {
		o.Headers = []string{bad}
		_, err = Run(context.Background(), o)
		require.ErrorContains(t, err, "want \"Name: value\"", bad)
	}
}
