package ingress_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/ingress"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/snapshot"
)

// statusStage answers every request itself with the status its path names ("/204").
type statusStage struct{}

func (statusStage) OnRequest(rc *pipeline.RequestCtx) error {
	var status int
	_, _ = fmt.Sscanf(string(rc.Req.Path), "/%d", &status)
	return rc.Reply(status, "", nil)
}

// A stage's 204 or 304 carries no Content-Length and no body (RFC 9110 §8.6, §15.3.5,
// §15.4.5): the client's next request on the connection still parses.
func TestStageReplyWithoutContentHasNoLength(t *testing.T) {
	res := statusResolver(t)
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			tr := startStatusEngine(t, ce, res)
			c, r := dialEngine(t, tr)
			var err error
			for _, path := range []string{"/204", "/304", "/200"} {
				_, err = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: gw\r\n\r\n")
				require.NoError(t, err)
				head := readResponseHead(t, r)
				require.True(t, strings.HasPrefix(head, "HTTP/1.1 "+path[1:]+" "), "%s: %q", path, head)
				lower := strings.ToLower(head)
				require.NotContains(t, lower, "transfer-encoding", path)
				if path == "/200" {
					require.Contains(t, lower, "\r\ncontent-length: 0\r\n", "an empty 200 says so")
				} else {
					require.NotContains(t, lower, "content-length", path)
				}
			}
		})
	}
}

// statusResolver resolves every request to a route whose statusStage answers it (its upstream
// is never reached).
func statusResolver(t *testing.T) withStages {
	t.Helper()
	toml := "[entrypoints.web]\naddress = \"127.0.0.1:0\"\n[routers.all]\nrule = \"PathPrefix(`/`)\"\nservice = \"up\"\n[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:9\" }]\n[admin]\naddress = \"\"\n"
	cfg, err := config.LoadBytes("reply.toml", []byte(toml))
	require.NoError(t, err)
	snap, err := snapshot.Compile(cfg, nil, 1)
	require.NoError(t, err)
	t.Cleanup(func() { snap.Retire(nil) })
	chain, err := pipeline.NewChain(statusStage{})
	require.NoError(t, err)
	return withStages{snap, chain}
}

// startStatusEngine starts engine ce on a loopback port in front of res, drained at the end of
// the test.
func startStatusEngine(t *testing.T, ce contractEngine, res pipeline.Resolver) ingress.Transport {
	t.Helper()
	tr := ce.make(ingress.Settings{Name: "web", Address: "127.0.0.1:0"}, res)
	require.NoError(t, tr.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tr.Drain(ctx)
	})
	return tr
}

// dialEngine connects to tr with a 10 s deadline for the whole exchange.
func dialEngine(t *testing.T, tr ingress.Transport) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", tr.Addr(), 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// readResponseHead reads one response head, through its blank line.
func readResponseHead(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var b strings.Builder
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		b.WriteString(line)
		if line == "\r\n" {
			return b.String()
		}
	}
}
