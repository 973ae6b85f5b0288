package gateway_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// Clients that write a whole request before reading (Python's http.client, the OpenAI Node
// SDK, curl with a file) must read the gateway's early refusal, not a reset: the gateway
// answers, closes its sending side and reads on (discarding) until the client closes, so the
// kernel never resets the connection under the unread answer (RFC 9112 §9.6).

// bigBodyBytes is larger than any limit these tests set, and larger than the socket buffers
// between client and gateway, so the gateway answers while most of it is still to come.
const bigBodyBytes = 20 << 20

// earlyRefusal is a request the gateway refuses before reading it whole.
type earlyRefusal struct {
	name   string
	extra  string // entrypoint settings
	head   string // request head, and whatever precedes the 20 MiB the client then writes
	frame  func(w io.Writer, n int) error
	status int
}

var earlyRefusals = []earlyRefusal{
	{
		name:   "413 by Content-Length",
		extra:  "max_body_bytes = 1048576",
		head:   fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", bigBodyBytes),
		frame:  writeRaw,
		status: 413,
	},
	{
		name:   "413 while reading a chunked body",
		extra:  "max_body_bytes = 1048576",
		head:   "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
		frame:  writeChunked,
		status: 413,
	},
	{
		name:   "431 head too large",
		extra:  "max_header_bytes = 2048",
		head:   fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Big: %s\r\nContent-Length: %d\r\n\r\n", strings.Repeat("h", 4096), bigBodyBytes),
		frame:  writeRaw,
		status: 431,
	},
	{
		name:   "400 bad chunk size",
		head:   "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		frame:  writeRaw,
		status: 400,
	},
}

// writeRaw writes n bytes of body as they are.
func writeRaw(w io.Writer, n int) error {
	piece := []byte(strings.Repeat("a", 256<<10))
	for n > 0 {
		k := min(n, len(piece))
		if _, err := w.Write(piece[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// writeChunked writes n bytes of body in 64 KiB chunks, then the last chunk.
func writeChunked(w io.Writer, n int) error {
	const size = 64 << 10
	chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", size, strings.Repeat("c", size)))
	for ; n > 0; n -= size {
		if _, err := w.Write(chunk); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, "0\r\n\r\n")
	return err
}

func TestEarlyErrorReachesClientThatWritesWholeBodyFirst(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		for _, tc := range earlyRefusals {
			t.Run(engine+"/"+tc.name, func(t *testing.T) {
				_, addr := startGateway(t, engine, up.addr(), tc.extra)
				c := dial(t, addr)
				// A send buffer of a few hundred KiB keeps the client's bytes arriving at the
				// gateway after it answered: what made the kernel reset the connection.
				require.NoError(t, c.(*net.TCPConn).SetWriteBuffer(512<<10))
				writeThenReadRefusal(t, c, tc)
			})
		}
	}
}

// The same through TLS (the fasthttp engine): the answer ends with TLS's close_notify and the
// FIN, not a reset.
func TestEarly413ReachesTLSClientThatWritesWholeBodyFirst(t *testing.T) {
	up := serveUpstream(t, echo)
	cert, key, roots := selfSigned(t, t.TempDir())
	for _, tc := range earlyRefusals[:2] {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := startGateway(t, "fasthttp", up.addr(),
				fmt.Sprintf("%s\ntls = { cert_file = %q, key_file = %q }", tc.extra, cert, key))
			raw := dial(t, addr)
			require.NoError(t, raw.(*net.TCPConn).SetWriteBuffer(512<<10))
			c := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
			writeThenReadRefusal(t, c, tc)
		})
	}
}

// writeThenReadRefusal writes tc's request with its 20 MiB on c, then reads the refusal and
// the end of the connection.
func writeThenReadRefusal(t *testing.T, c net.Conn, tc earlyRefusal) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	w := bufio.NewWriterSize(c, 64<<10)
	_, err := io.WriteString(w, tc.head)
	require.NoError(t, err)
	require.NoError(t, tc.frame(w, bigBodyBytes), "the client could not finish its request: the gateway reset the connection")
	require.NoError(t, w.Flush(), "the client could not finish its request: the gateway reset the connection")

	r := bufio.NewReader(c)
	resp := readResponse(t, r, false)
	require.Equal(t, tc.status, resp.status, "body %s", resp.body)
	require.Equal(t, "application/json", resp.headers["content-type"])
	require.Equal(t, "close", strings.ToLower(resp.headers["connection"]))
	require.Contains(t, string(resp.body), `"error"`)
	// The answer ends with the gateway closing its side, not a reset.
	rest, err := io.ReadAll(r)
	require.NoError(t, err, "the connection was reset after the answer")
	require.Empty(t, string(rest))
}

// A response that ends the connection (the client asked for that) must not be reset by the
// request the client pipelined behind it and is still sending.
func TestLingerAfterClosingResponseWithPipelinedRequest(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "")
			c := dial(t, addr)
			require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
			w := bufio.NewWriterSize(c, 64<<10)
			_, err := fmt.Fprintf(w, "POST /v1/a HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Length: 7\r\n\r\n{\"a\":1}"+
				"POST /v1/b HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n", 8<<20)
			require.NoError(t, err)
			require.NoError(t, writeRaw(w, 8<<20), "the client could not finish writing: the gateway reset the connection")
			require.NoError(t, w.Flush(), "the client could not finish writing: the gateway reset the connection")

			r := bufio.NewReader(c)
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, `{"a":1}`, string(resp.body))
			rest, err := io.ReadAll(r)
			require.NoError(t, err, "the connection was reset after the answer")
			require.Empty(t, string(rest), "the pipelined request is not served after Connection: close")
		})
	}
}

// pyLargeBody posts 20 MiB with http.client, by Content-Length or chunked (argv[2]), and prints
// the response as one JSON line. http.client writes the whole body before it reads.
const pyLargeBody = `
import http.client, json, sys
host, port = sys.argv[1].rsplit(":", 1)
size = int(sys.argv[3])
conn = http.client.HTTPConnection(host, int(port), timeout=30)
hdrs = {"Content-Type": "application/json"}
if sys.argv[2] == "chunked":
    piece = b"a" * (1 << 20)
    conn.request("POST", "/v1/chat/completions", body=(piece for _ in range(size >> 20)), headers=hdrs)
else:
    conn.request("POST", "/v1/chat/completions", body=b"a" * size, headers=hdrs)
resp = conn.getresponse()
print(json.dumps({"status": resp.status, "body": resp.read().decode()}))
`

func TestEarly413ReachesPythonHTTPClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		for _, framing := range []string{"content-length", "chunked"} {
			t.Run(engine+"/"+framing, func(t *testing.T) {
				_, addr := startGateway(t, engine, up.addr(), "max_body_bytes = 1048576")
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				out, err := exec.CommandContext(ctx, py, "-c", pyLargeBody, addr, framing, fmt.Sprint(bigBodyBytes)).CombinedOutput()
				require.NoError(t, err, "http.client failed instead of reading the 413:\n%s", out)
				var got struct {
					Status int
					Body   string
				}
				require.NoError(t, json.Unmarshal(out, &got), "%s", out)
				require.Equal(t, 413, got.Status, "%s", out)
				var body struct {
					Error struct{ Type, Code string }
				}
				require.NoError(t, json.Unmarshal([]byte(got.Body), &body), "%s", got.Body)
				require.Equal(t, "request_too_large", body.Error.Code)
			})
		}
	}
}

func TestEarly413ReachesOpenAINodeSDK(t *testing.T) {
	testenv.NodeDir(t)
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr := startGateway(t, engine, up.addr(), "max_body_bytes = 1048576")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := testenv.OpenAINodeErrorCheck(ctx, "http://"+addr+"/v1", "m", bigBodyBytes)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("timed out: %v", err)
			}
			require.NoError(t, err)
			require.Equal(t, 413, res.Status, "the SDK must see the gateway's answer, not a connection error: %+v", res)
			require.Equal(t, "APIError", res.Class)
			require.Equal(t, "request_too_large", res.Code)
			require.Equal(t, "invalid_request_error", res.Type)
		})
	}
}
