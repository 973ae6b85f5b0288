package policy

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/middleware/internal/mwtest"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// answer200 ends the chain with a reply, so that a benchmark measures the stages before it
// and the pipeline, not an upstream.
type answer200 struct{}

func (answer200) OnRequest(rc *pipeline.RequestCtx) error {
	return rc.Reply(200, "application/json", emptyJSON)
}

var emptyJSON = []byte(`{}`)

// BenchmarkStage measures each middleware's cost per request on the request path against a
// baseline chain of the answering stage alone:
//
//	go test -run '^$' -bench Stage -benchmem ./core/middleware/policy/
func BenchmarkStage(b *testing.B) {
	head := []byte("POST /api/v1/chat/completions HTTP/1.1\r\nHost: gw\r\nOrigin: https://app.example\r\nCookie: a=b\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n")
	for _, bc := range []struct {
		name  string
		stage any
	}{
		{"baseline", nil},
		{"headers", NewHeaders(config.HeadersOptions{
			RequestSet: []config.HeaderPair{{Name: "X-Env", Value: "prod"}}, RequestRemove: []string{"Cookie"},
			ResponseSet: []config.HeaderPair{{Name: "X-Version", Value: "2"}}, ResponseRemove: []string{"Server"},
		})},
		{"strip-prefix", NewStripPrefix(config.StripPrefixOptions{Prefixes: []string{"/api"}})},
		{"cors", NewCORS(config.CORSOptions{AllowOrigins: []string{"https://app.example"}, AllowMethods: config.DefaultCORSMethods, AllowHeaders: config.DefaultCORSHeaders, MaxAge: time.Minute})},
		{"ip-allow", NewIPAllow(config.IPAllowOptions{SourceRange: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.0/24")}})},
		{"body-limit", NewBodyLimit(config.BodyLimitOptions{MaxBytes: 1 << 20})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			stages := []any{answer200{}}
			if bc.stage != nil {
				stages = []any{bc.stage, answer200{}}
			}
			h := mwtest.New(b, stages)
			var rc pipeline.RequestCtx
			rc.SetClientAddr(netip.MustParseAddr("192.0.2.33"))
			b.ReportAllocs()
			for b.Loop() {
				// Parsed afresh each time: headers and strip-prefix edit the request.
				if err := rc.Req.ParseRequestHead(head, nil); err != nil {
					b.Fatal(err)
				}
				rc.Req.Body = append(rc.Req.Body[:0], "{}"...)
				h.EP.Begin(&rc)
				if rc.Status() != 200 {
					b.Fatal(rc.Status())
				}
				rc.Finish()
			}
		})
	}
}
