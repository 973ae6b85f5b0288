package snapshot_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// boundedTOML has an entrypoint whose routes bound bodies at 100 and 1000 bytes, and one
// route that does not.
const boundedTOML = `
[entrypoints.web]
address = "127.0.0.1:0"
[admin]
address = ""
[services.s.load_balancer]
servers = [{ url = "http://127.0.0.1:9" }]
[routers.small]
rule = "PathPrefix(` + "`/small`" + `)"
service = "s"
middlewares = ["small"]
[routers.large]
rule = "PathPrefix(` + "`/large`" + `)"
service = "s"
middlewares = ["large", "small-too"]
[routers.free]
rule = "PathPrefix(` + "`/free`" + `)"
service = "s"
[middlewares.small]
type = "body-limit"
max_bytes = 100
[middlewares.small-too]
type = "body-limit"
max_bytes = 5000
[middlewares.large]
type = "body-limit"
max_bytes = 1000
`

// parseHead parses the request head s.
func parseHead(t testing.TB, s string) *http1.Request {
	var req http1.Request
	req.Reset()
	in := []byte(s)
	skip, n := http1.FindHeadEnd(in)
	require.GreaterOrEqual(t, n, 0, s)
	require.NoError(t, req.ParseRequestHead(in[skip:skip+n], &http1.Limits{}))
	return &req
}

// The engines learn a request's body bound from its head, on an event loop for gnet, for
// every request with a body: the bound of its route (the smallest of its body-limits) where
// it can cut the body, a chunked one or one whose Content-Length is over it. A
// Content-Length within the smallest bound of the entrypoint's routes, as most requests
// have, is within its route's whichever that is: no bound is reported for it, and no route
// matched for it.
func TestBodyBoundOnlyWhereABoundCanCut(t *testing.T) {
	cfg, err := config.LoadBytes("t.toml", []byte(boundedTOML))
	require.NoError(t, err)
	s, err := snapshot.Compile(cfg, nil, 1)
	require.NoError(t, err)
	t.Cleanup(func() { s.Retire(nil) })

	cl := func(path string, n int) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n", path, n)
	}
	chunked := func(path string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
	}
	for _, c := range []struct {
		head  string
		bound int64
		ok    bool
	}{
		{cl("/small", 50), 0, false},
		{cl("/small", 100), 0, false},
		{cl("/small", 101), 100, true},
		{cl("/large", 100), 0, false},
		{cl("/large", 101), 1000, true},
		{cl("/large", 5001), 1000, true},
		{cl("/free", 50), 0, false},
		{cl("/free", 5000), 0, false},
		{cl("/none", 5000), 0, false},
		{chunked("/small"), 100, true},
		{chunked("/large"), 1000, true},
		{chunked("/free"), 0, false},
		{"GET /small HTTP/1.1\r\nHost: gw\r\n\r\n", 0, false},
	} {
		b, ok := s.BodyBound("web", parseHead(t, c.head))
		require.Equal(t, c.ok, ok, "%q", c.head)
		require.Equal(t, c.bound, b, "%q", c.head)
	}
	b, ok := s.BodyBound("other", parseHead(t, chunked("/small")))
	require.False(t, ok, "an entrypoint without routes")
	require.Zero(t, b)
}

// BenchmarkBodyBound is what an engine asks for a typical chat request's body once its head
// is parsed (on the event loop, for gnet), on an entrypoint whose chat route has a
// body-limit of 1 MiB. Must be 0 allocs/op.
func BenchmarkBodyBound(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[admin]\naddress = \"\"\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n")
	for i := 0; i < 19; i++ {
		fmt.Fprintf(&sb, "[routers.r%02d]\nrule = \"Host(`tenant%d.example.com`) && PathPrefix(`/api/%d`) && Method(`GET`)\"\nservice = \"up\"\n", i, i, i)
	}
	sb.WriteString("[routers.chat]\nrule = \"PathPrefix(`/v1`) && Method(`POST`) && Header(`Content-Type`, `application/json`)\"\nservice = \"up\"\npriority = 1\nmiddlewares = [\"limit\"]\n")
	sb.WriteString("[middlewares.limit]\ntype = \"body-limit\"\nmax_bytes = 1048576\n")
	cfg, err := config.LoadBytes("bench.toml", []byte(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	s, err := snapshot.Compile(cfg, nil, 1)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Retire(nil) })
	req := parseHead(b, chatHead)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = s.BodyBound("web", req)
	}
}
