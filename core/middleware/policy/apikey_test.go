package policy

import (
	"crypto/sha256"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/middleware/internal/mwtest"
	"github.com/sluice-gw/sluice/core/pipeline"
)

func registry() *consumer.Registry {
	return consumer.NewRegistry(map[string]*config.Consumer{
		"team-a": {KeyDigests: [][sha256.Size]byte{sha256.Sum256([]byte("sk-team-a"))}, Grants: config.Grants{Models: []string{"*"}, Endpoints: []string{"*"}}},
	})
}

// The api-key middleware on a plain service route: a known key passes, by Bearer or
// X-Api-Key; a missing or unknown one gets 401 and never reaches the upstream.
func TestAPIKeyGuardsAServiceRoute(t *testing.T) {
	up := mwtest.NewUpstream(t, mwtest.Status(200))
	h := mwtest.New(t, []any{consumer.NewAPIKey(registry(), "")}, up.Addr())
	const get = "GET /api/tags HTTP/1.1\r\nHost: gw"
	require.Equal(t, 200, h.Do(t, "192.0.2.1", get+"\r\nAuthorization: Bearer sk-team-a", "").Status)
	require.Equal(t, 200, h.Do(t, "192.0.2.1", get+"\r\nX-Api-Key: sk-team-a", "").Status)
	require.Equal(t, 401, h.Do(t, "192.0.2.1", get+"\r\nAuthorization: Bearer sk-other", "").Status)
	require.Equal(t, 401, h.Do(t, "192.0.2.1", get, "").Status)
	require.Equal(t, 2, up.Count())
}

// BenchmarkAPIKey measures the api-key middleware per request once warm (the key hashed on
// the stack, a map lookup) against the answering stage alone:
//
//	go test -run '^$' -bench APIKey -benchmem ./core/middleware/policy/
func BenchmarkAPIKey(b *testing.B) {
	for _, bc := range []struct {
		name   string
		stages []any
	}{
		{"baseline", []any{answer200{}}},
		{"api-key", []any{consumer.NewAPIKey(registry(), ""), answer200{}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := mwtest.New(b, bc.stages)
			var rc pipeline.RequestCtx
			rc.SetClientAddr(netip.MustParseAddr("192.0.2.33"))
			if err := rc.Req.ParseRequestHead([]byte("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer sk-team-a\r\n\r\n"), nil); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				h.EP.Begin(&rc)
				if rc.Status() != 200 {
					b.Fatal(rc.Status())
				}
				rc.Finish()
			}
		})
	}
}
