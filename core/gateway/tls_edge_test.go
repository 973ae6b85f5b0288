package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/bench/testenv"
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// testCA is a certificate authority for tests: it issues server certificates into files.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	pemFile string // the CA certificate, PEM
	pool    *x509.CertPool
	serial  atomic.Int64
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	ca := &testCA{cert: cert, key: key, pemFile: filepath.Join(t.TempDir(), "ca.pem"), pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	require.NoError(t, os.WriteFile(ca.pemFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	ca.serial.Store(1)
	return ca
}

// issue writes a server certificate named cn for names (DNS names, or IP addresses) to
// dir/base.crt and dir/base.key, replacing them atomically (a write and a rename, as
// certificate renewers do), and returns the paths.
func (ca *testCA) issue(t *testing.T, dir, base, cn string, names ...string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key")
	writeAtomic(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	writeAtomic(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return certFile, keyFile
}

func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// servedCN handshakes with addr asking for serverName and returns the common name of the
// certificate the gateway served.
func servedCN(t *testing.T, addr, serverName string, roots *x509.CertPool) string {
	t.Helper()
	cn, err := tryServedCN(addr, serverName, roots)
	require.NoError(t, err)
	return cn
}

// tryServedCN is servedCN returning the handshake's error, for goroutines other than the
// test's (an Eventually condition).
func tryServedCN(addr, serverName string, roots *x509.CertPool) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{ServerName: serverName, RootCAs: roots})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// The certificate served is the one for the name the client asks (SNI): exact names,
// wildcards for one label, the default for no name or an unknown one.
func TestTLSCertificateChosenBySNI(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	defCert, defKey := ca.issue(t, dir, "default", "default", "127.0.0.1", "default.test")
	apiCert, apiKey := ca.issue(t, dir, "api", "api", "api.test")
	wildCert, wildKey := ca.issue(t, dir, "wild", "wild", "*.models.test")
	up := serveUpstream(t, echo)
	_, addr := startGateway(t, "fasthttp", up.addr(), fmt.Sprintf(`
[entrypoints.web.tls]
cert_file = %q
key_file = %q
certificates = [{ cert_file = %q, key_file = %q }, { cert_file = %q, key_file = %q }]`,
		defCert, defKey, apiCert, apiKey, wildCert, wildKey))
	for _, tc := range []struct{ name, want string }{
		{"api.test", "api"},
		{"API.Test", "api"},
		{"llama.models.test", "wild"},
		{"default.test", "default"},
		{"", "default"},
	} {
		sn := tc.name
		if sn == "" {
			sn = "127.0.0.1" // Go sends no SNI for an IP address
		}
		require.Equal(t, tc.want, servedCN(t, addr, sn, ca.pool), "server name %q", tc.name)
	}
	// A name no certificate is for gets the default, which the client then refuses.
	_, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "other.test", RootCAs: ca.pool})
	require.ErrorContains(t, err, "certificate is valid for")
}

// min_version = "1.3" refuses a client that speaks at most TLS 1.2.
func TestTLSMinVersion(t *testing.T) {
	ca := newTestCA(t)
	cert, key := ca.issue(t, t.TempDir(), "srv", "srv", "127.0.0.1")
	up := serveUpstream(t, echo)
	_, addr := startGateway(t, "fasthttp", up.addr(), fmt.Sprintf(`tls = { cert_file = %q, key_file = %q, min_version = "1.3" }`, cert, key))
	_, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, MaxVersion: tls.VersionTLS12})
	require.Error(t, err)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool})
	require.NoError(t, err)
	require.Equal(t, uint16(tls.VersionTLS13), c.ConnectionState().Version)
	_ = c.Close()
}

// tlsReloads reads sluice_tls_certificate_reloads_total of entrypoint web for result.
func tlsReloads(result string) int {
	var b bytes.Buffer
	metrics.WritePrometheus(&b, false)
	m := regexp.MustCompile(`sluice_tls_certificate_reloads_total\{entrypoint="web",result="` + result + `"\} (\d+)`).FindSubmatch(b.Bytes())
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// Renewed certificate files are served to new connections without a restart, while a stream
// on a connection made before goes on to its end; a broken file keeps the certificate in use
// and counts a failed reload.
func TestTLSCertificateReloadKeepsStreams(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	cert, key := ca.issue(t, dir, "srv", "first", "127.0.0.1")
	next := make(chan int)
	up := sseUpstream(t, next)
	_, addr := startGateway(t, "fasthttp", up.addr(), fmt.Sprintf(`tls = { cert_file = %q, key_file = %q }`, cert, key))
	require.Equal(t, "first", servedCN(t, addr, "", ca.pool))

	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool})
	require.NoError(t, err)
	defer c.Close()
	send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
	r := bufio.NewReader(c)
	next <- 0
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "200")

	failedBefore := tlsReloads("failure")
	ca.issue(t, dir, "srv", "second", "127.0.0.1")
	var handshake error // a failed handshake ends the wait, failing the test
	require.Eventually(t, func() bool {
		var cn string
		cn, handshake = tryServedCN(addr, "", ca.pool)
		return handshake != nil || cn == "second"
	}, 10*time.Second, 20*time.Millisecond, "new connections never got the renewed certificate")
	require.NoError(t, handshake)

	// A broken renewal: the certificate in use stays.
	writeAtomic(t, cert, []byte("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"))
	require.Eventually(t, func() bool { return tlsReloads("failure") > failedBefore }, 10*time.Second, 20*time.Millisecond,
		"the failed reload was not counted")
	require.Equal(t, "second", servedCN(t, addr, "", ca.pool))

	// The stream opened under the first certificate flows to its end.
	next <- 1
	next <- -1
	var rest strings.Builder
	for !strings.Contains(rest.String(), "data: [DONE]") {
		line, err := r.ReadString('\n')
		require.NoError(t, err, "the stream was cut: %q", rest.String())
		rest.WriteString(line)
	}
	require.Contains(t, rest.String(), `data: {"i":0}`)
	require.Contains(t, rest.String(), `data: {"i":1}`)
}

// A client that leaves a TLS entrypoint while its request waits for the upstream cancels the
// upstream request at once, as on plaintext.
func TestTLSClientDisconnectCancelsUpstream(t *testing.T) {
	ca := newTestCA(t)
	cert, key := ca.issue(t, t.TempDir(), "srv", "srv", "127.0.0.1")
	got := make(chan struct{}, 1)
	up := serveUpstreamU(t, func(u *upstream, c net.Conn, r *bufio.Reader, _ string, _ []byte) bool {
		u.watchClose(r)
		got <- struct{}{}
		<-u.stop
		return false
	})
	_, addr := startGateway(t, "fasthttp", up.addr(), fmt.Sprintf(`tls = { cert_file = %q, key_file = %q }`, cert, key))
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool})
	require.NoError(t, err)
	send(t, c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the request did not reach the upstream")
	}
	require.NoError(t, c.Close())
	up.waitConnClosed(t, time.Second)
}

// A client of a TLS entrypoint that reads nothing stops the relay: the upstream is blocked
// with a bounded amount in flight, as on plaintext.
func TestTLSSlowReaderStopsUpstreamReads(t *testing.T) {
	ca := newTestCA(t)
	cert, key := ca.issue(t, t.TempDir(), "srv", "srv", "127.0.0.1")
	var written atomic.Int64
	full := make(chan struct{}, 1)
	up := bigUpstream(t, &written, full)
	_, addr := startGateway(t, "fasthttp", up.addr(), fmt.Sprintf(`tls = { cert_file = %q, key_file = %q }`, cert, key))
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool})
	require.NoError(t, err)
	defer c.Close()
	send(t, c, "GET /big HTTP/1.1\r\nHost: gw\r\n\r\n")
	select {
	case <-full:
	case <-time.After(20 * time.Second):
		t.Fatalf("the upstream was never blocked; it wrote %d bytes", written.Load())
	}
	t.Logf("the upstream wrote %d KiB before blocking", written.Load()>>10)
	require.Less(t, written.Load(), int64(64<<20))
}

// https:// servers verified with a CA file and a server name of the service's tls table, on
// both engines; without the CA, or with another name, the connection is refused (502).
func TestUpstreamTLSWithCAFileAndServerName(t *testing.T) {
	ca := newTestCA(t)
	cert, key := ca.issue(t, t.TempDir(), "up", "up", "upstream.internal")
	pair, err := tls.LoadX509KeyPair(cert, key)
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "sni=%s", r.TLS.ServerName)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	server := fmt.Sprintf(`servers = [{ url = "https://%s" }]`, ln.Addr())
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			for _, tc := range []struct {
				name, tls string
				status    int
			}{
				{"ca and server name", fmt.Sprintf(`tls = { ca_file = %q, server_name = "upstream.internal" }`, ca.pemFile), 200},
				{"no ca", `tls = { server_name = "upstream.internal" }`, 502},
				{"other name", fmt.Sprintf(`tls = { ca_file = %q, server_name = "other.internal" }`, ca.pemFile), 502},
			} {
				t.Run(tc.name, func(t *testing.T) {
					_, addr := startGatewayServers(t, engine, server+"\n"+tc.tls)
					resp, err := http.Get("http://" + addr + "/")
					require.NoError(t, err)
					body, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					require.Equal(t, tc.status, resp.StatusCode, string(body))
					if tc.status == 200 {
						require.Equal(t, "sni=upstream.internal", string(body))
					}
				})
			}
		})
	}
}

// The OpenAI Node SDK streams through a TLS entrypoint with baseURL on https, trusting the
// gateway's certificate through NODE_EXTRA_CA_CERTS.
func TestOpenAINodeSDKOverTLS(t *testing.T) {
	sim := startSimulator(t)
	ca := newTestCA(t)
	cert, key := ca.issue(t, t.TempDir(), "srv", "srv", "localhost", "127.0.0.1")
	_, addr := startGateway(t, "fasthttp", sim, fmt.Sprintf(`tls = { cert_file = %q, key_file = %q }`, cert, key))
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	res := testenv.RunOpenAINodeCheck(t, "https://localhost:"+port+"/v1", "sim-model", testenv.NodeExtraCA(ca.pemFile))
	require.NotNil(t, res.Stream)
	require.Greater(t, res.Stream.ContentChunks, 1, "the stream came in one piece")
	require.True(t, strings.HasPrefix(res.BaseURL, "https://"))
}

// A WebSocket over TLS at both ends: a wss:// client on a TLS entrypoint, tunnelled to a
// server reached over https with a private CA; messages echo, and the server's close reaches
// the client.
func TestWebSocketOverTLSBothEnds(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	upCert, upKey := ca.issue(t, dir, "up", "up", "ws.internal")
	pair, err := tls.LoadX509KeyPair(upCert, upKey)
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if string(msg) == "bye" {
				_ = c.CloseNow()
				return
			}
			if c.Write(r.Context(), typ, msg) != nil {
				return
			}
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	gwCert, gwKey := ca.issue(t, dir, "gw", "gw", "127.0.0.1")
	_, addr := startGatewayTOML(t, "fasthttp", "PathPrefix(`/`)",
		fmt.Sprintf(`tls = { cert_file = %q, key_file = %q }`, gwCert, gwKey),
		fmt.Sprintf("servers = [{ url = \"https://%s\" }]\ntls = { ca_file = %q, server_name = \"ws.internal\" }", ln.Addr(), ca.pemFile))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}}}
	c, resp, err := websocket.Dial(ctx, "wss://"+addr+"/realtime", &websocket.DialOptions{HTTPClient: client})
	require.NoError(t, err)
	defer c.CloseNow()
	require.Equal(t, 101, resp.StatusCode)
	for i := 0; i < 100; i++ {
		m := fmt.Sprintf("message %d", i)
		require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(m)))
		_, got, err := c.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, m, string(got))
	}
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte("bye")))
	readCtx, cancelRead := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelRead()
	_, _, err = c.Read(readCtx)
	require.Error(t, err)
	require.NoError(t, readCtx.Err(), "the server's close did not reach the client")
}

// A half-close through a WebSocket tunnel with TLS at both ends: the client's close_notify
// reaches the server as its end of the stream (the gateway's close_notify, then its FIN), and
// what the server sends after it, and its own close_notify, reach the client.
func TestWebSocketHalfCloseOverTLSBothEnds(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	upCert, upKey := ca.issue(t, dir, "up", "up", "ws.internal")
	pair, err := tls.LoadX509KeyPair(upCert, upKey)
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	type result struct {
		got string
		err error
	}
	upGot := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			upGot <- result{"", err}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		r := bufio.NewReader(c)
		req, err := http.ReadRequest(r)
		if err != nil {
			upGot <- result{"", err}
			return
		}
		h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(h[:]))
		b, err := io.ReadAll(r) // until the gateway relays the client's end
		upGot <- result{string(b), err}
		if err == nil {
			_, _ = io.WriteString(c, "last words after "+string(b))
		}
	}()

	gwCert, gwKey := ca.issue(t, dir, "gw", "gw", "127.0.0.1")
	_, addr := startGatewayTOML(t, "fasthttp", "PathPrefix(`/`)",
		fmt.Sprintf(`tls = { cert_file = %q, key_file = %q }`, gwCert, gwKey),
		fmt.Sprintf("servers = [{ url = \"https://%s\" }]\ntls = { ca_file = %q, server_name = \"ws.internal\" }", ln.Addr(), ca.pemFile))
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = io.WriteString(c, "GET /realtime HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	require.NoError(t, err)
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	require.Equal(t, 101, resp.StatusCode)
	_, err = io.WriteString(c, "hello")
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite()) // close_notify; the socket stays open
	var up result
	select {
	case up = <-upGot:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's close_notify did not reach the server")
	}
	require.NoError(t, up.err)
	require.Equal(t, "hello", up.got)
	rest, err := io.ReadAll(r)
	require.NoError(t, err, "the client's read ends with the server's close_notify")
	require.Equal(t, "last words after hello", string(rest), "what the server sent after the client's close_notify")
}

// With watch = false, a configuration reload puts renewed certificate files in force.
func TestTLSCertificatesReloadWithConfiguration(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	cert, key := ca.issue(t, dir, "srv", "first", "127.0.0.1")
	up := serveUpstream(t, echo)
	path := filepath.Join(dir, "gateway.toml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
tls = { cert_file = %q, key_file = %q, watch = false }
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[admin]
address = ""
`, cert, key, up.addr())), 0o600))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	g, err := gateway.New(cfg, path, nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Drain(ctx)
	})
	addr := g.Addr("web")
	require.Equal(t, "first", servedCN(t, addr, "", ca.pool))
	ca.issue(t, dir, "srv", "second", "127.0.0.1")
	require.Equal(t, "first", servedCN(t, addr, "", ca.pool), "not watched: the old certificate until a reload")
	require.NoError(t, g.Reload())
	require.Equal(t, "second", servedCN(t, addr, "", ca.pool))
}

// curl -N through a TLS entrypoint with a JWT streams a chat completion from the simulator
// event by event: the events arrive spread over the simulator's pacing, not in one piece.
func TestCurlStreamsThroughTLSWithJWT(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed")
	}
	cfg := llmsim.DefaultConfig()
	cfg.Defaults.Listen = "127.0.0.1:0"
	cfg.Defaults.TTFT = llmsim.Duration(10 * time.Millisecond)
	const itl, tokens = 30 * time.Millisecond, 12
	cfg.Defaults.ITL = llmsim.Duration(itl)
	cfg.Defaults.Tokens = tokens
	sim, err := llmsim.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })

	t.Setenv("SLUICE_TEST_JWT_SECRET", jwtSecret)
	ca := newTestCA(t)
	cert, key := ca.issue(t, t.TempDir(), "srv", "srv", "localhost", "127.0.0.1")
	base := startGatewayConfig(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
tls = { cert_file = %q, key_file = %q }
[routers.llm-api]
rule = "PathPrefix(`+"`/v1`"+`) && Method(`+"`POST`"+`)"
service = "llm"
middlewares = ["jwt-auth"]
[services.llm.load_balancer]
servers = [{ url = "http://%s" }]
[middlewares.jwt-auth]
type = "jwt"
value = "${SLUICE_TEST_JWT_SECRET}"
[admin]
address = ""
`, cert, key, sim.Addrs()[0]))
	url := strings.Replace(base, "http://", "https://", 1) + "/v1/chat/completions"
	run := func(token string) (*exec.Cmd, io.ReadCloser) {
		cmd := exec.Command(curl, "-sS", "-N", "--cacert", ca.pemFile, url,
			"-H", "Authorization: Bearer "+token, "-H", "Content-Type: application/json",
			"-d", `{"model":"sim-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, out
	}
	// Without a valid token: refused, nothing streamed.
	cmd, out := run("not-a-token")
	body, _ := io.ReadAll(out)
	require.NoError(t, cmd.Wait())
	require.Contains(t, string(body), `"code":"invalid_token"`)

	cmd, out = run(hs256(t, []byte(jwtSecret), time.Now().Add(time.Hour)))
	r := bufio.NewReader(out)
	var arrivals []time.Time
	done := false
	for !done {
		line, err := r.ReadString('\n')
		if strings.HasPrefix(line, "data: ") {
			arrivals = append(arrivals, time.Now())
			done = strings.HasPrefix(line, "data: [DONE]")
		}
		if err != nil {
			break
		}
	}
	require.True(t, done, "the stream did not end with [DONE]")
	require.GreaterOrEqual(t, len(arrivals), tokens)
	// The simulator spaces the tokens itl apart; a gateway that buffered would deliver them
	// together. Half the pacing leaves room for a loaded machine.
	spread := arrivals[len(arrivals)-1].Sub(arrivals[0])
	require.GreaterOrEqual(t, spread, (tokens-1)*itl/2, "the events arrived together: %v apart", spread)
	require.NoError(t, cmd.Wait())
}

// ALPN: a client that offers HTTP/1.1 or HTTP/1.0 (curl --http1.0) agrees on its protocol
// (RFC 7301 §3.2: no common protocol is a handshake failure).
func TestTLSALPNOffersEveryHTTP1Version(t *testing.T) {
	ca := newTestCA(t)
	cert, key := ca.issue(t, t.TempDir(), "srv", "srv", "127.0.0.1")
	up := serveUpstream(t, echo)
	_, addr := startGateway(t, "fasthttp", up.addr(), fmt.Sprintf(`tls = { cert_file = %q, key_file = %q }`, cert, key))
	for _, offer := range []string{"http/1.1", "http/1.0"} {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, NextProtos: []string{offer}})
		require.NoError(t, err, offer)
		require.Equal(t, offer, c.ConnectionState().NegotiatedProtocol)
		_ = c.Close()
	}
}
