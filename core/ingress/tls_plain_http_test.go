package ingress_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/ingress"
	"github.com/sluice-gw/sluice/core/tlscert"
)

// startTLSTransport starts a fasthttp engine terminating TLS on loopback with a self-signed
// certificate for 127.0.0.1, routing every path to upstream; it returns the engine and a
// pool that trusts its certificate.
func startTLSTransport(t *testing.T, upstream string) (ingress.Transport, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gw"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	p := tlscert.Pair{CertFile: filepath.Join(dir, "gw.crt"), KeyFile: filepath.Join(dir, "gw.key")}
	require.NoError(t, os.WriteFile(p.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(p.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(cert)

	set := ingress.Settings{Name: "web", Address: "127.0.0.1:0", TLS: &ingress.TLSSettings{Certificates: []tlscert.Pair{p}}}
	tr := ingress.NewFast(set, newResolver(t, upstream), nil)
	require.NoError(t, tr.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = drainWithin(t, tr, ctx, time.Second+cutSlack)
	})
	return tr, roots
}

// A client that speaks plain HTTP to a TLS entrypoint (http:// for https://) gets a 400 that
// says so, as from nginx ("The plain HTTP request was sent to HTTPS port") and Go's net/http,
// in the gateway's JSON error shape, and the connection closes: a connection closed without a
// word leaves the user guessing. The request is told from a TLS ClientHello by its first five bytes, as crypto/tls
// does (tls.RecordHeaderError): a method and a space, whichever the method, or five capitals.
func TestPlainHTTPToTLSEntrypointGets400(t *testing.T) {
	up := newUpstream(t, answerNow)
	tr, roots := startTLSTransport(t, up.addr())

	for _, tc := range []struct {
		name, request string
		head          bool
	}{
		{"GET", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"HEAD", "HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", true},
		{"DELETE", "DELETE /v1/files/1 HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"absolute form", "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"HTTP/1.0", "GET / HTTP/1.0\r\n\r\n", false},
		// The client writes the whole upload before it reads: the answer must still reach it,
		// not a reset for the bytes the gateway did not read.
		{"POST with a body", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n" + strings.Repeat("x", 1<<20), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialClient(t, tr.Addr())
			go func() { _, _ = io.WriteString(c, tc.request) }()
			br := bufio.NewReader(c)
			method := strings.SplitN(tc.request, " ", 2)[0]
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			require.NoError(t, err, "an answer, not a silent close")
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, 400, resp.StatusCode)
			require.Equal(t, "400 Bad Request", resp.Status)
			require.True(t, resp.Close, "Connection: close")
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			require.NotEmpty(t, resp.Header.Get("X-Request-Id"))
			if tc.head {
				require.Empty(t, body, "no body for HEAD (RFC 9110 §9.3.2)")
			} else {
				var e struct {
					Error struct{ Message, Type, Code string }
				}
				require.NoError(t, json.Unmarshal(body, &e), string(body))
				require.Equal(t, "invalid_request_error", e.Error.Type)
				require.Equal(t, "plain_http_to_tls_port", e.Error.Code)
				require.Contains(t, e.Error.Message, "https://")
			}
			_, err = br.ReadByte()
			require.ErrorIs(t, err, io.EOF, "the gateway closes the connection")
		})
	}

	t.Run("not HTTP", func(t *testing.T) {
		// Neither TLS nor HTTP: nothing the gateway could answer that the client reads.
		for _, garbage := range []string{"SSH-2.0-OpenSSH_9.6\r\n", "\x00\x01\x02\x03\x04\x05"} {
			c := dialClient(t, tr.Addr())
			_, err := io.WriteString(c, garbage)
			require.NoError(t, err)
			got, err := io.ReadAll(c)
			if !errors.Is(err, net.ErrClosed) && !isReset(err) {
				require.NoError(t, err)
			}
			require.Empty(t, got, "%q gets no answer", garbage)
		}
	})

	t.Run("TLS still served", func(t *testing.T) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", tr.Addr(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
		resp, body := roundTrip(t, c, "/hello")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "hello", string(body))
	})
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && strings.Contains(oe.Err.Error(), "connection reset")
}
