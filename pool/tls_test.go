package pool

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"testing"
	"time"
)

// testCert returns a self-signed certificate for 127.0.0.1 and a pool of roots trusting it.
func testCert(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice test upstream"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots
}

// TestTLSUpstream: an https upstream, verified against its certificate (ServerName taken from
// Addr), keep-alive reuse over TLS, and Abort closing the TCP socket under TLS at once.
func TestTLSUpstream(t *testing.T) {
	cert, roots := testCert(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	gotSlow := make(chan struct{})
	sawEOF := make(chan time.Time, 1)
	u := serveUpstream(t, ln, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		for {
			req, ok := readReq(br)
			if !ok {
				return
			}
			if req.URL.Path == "/slow" {
				close(gotSlow)
				sawEOF <- waitEOF(c, br)
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntls\r\n0\r\n\r\n")
		}
	})
	p := New(Options{Addr: u.addr(), TLS: &tls.Config{RootCAs: roots}})
	defer p.Close()
	for i := 0; i < 2; i++ {
		if _, body, err := roundTrip(t, p, getHead, false, 64); err != nil || body != "tls" {
			t.Fatal(body, err)
		}
	}
	if s := p.Stats(); s.Dials != 1 || s.Reuses != 1 {
		t.Fatalf("stats %+v", s)
	}
	x := AcquireExchange()
	defer ReleaseExchange(x)
	rt := make(chan error, 1)
	go func() { rt <- x.RoundTrip(p, []byte("GET /slow HTTP/1.1\r\nHost: u\r\n\r\n"), nil, false) }()
	recv(t, gotSlow, "slow request at upstream")
	t0 := time.Now()
	x.Abort()
	if d := recv(t, sawEOF, "upstream EOF").Sub(t0); d > abortLatency {
		t.Fatalf("upstream saw EOF %v after Abort", d)
	}
	if err := recv(t, rt, "RoundTrip return"); !errors.Is(err, ErrAborted) {
		t.Fatalf("err %v, want ErrAborted", err)
	}
}

func TestTLSBadCertificate(t *testing.T) {
	cert, _ := testCert(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	u := serveUpstream(t, ln, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	p := New(Options{Addr: u.addr(), TLS: &tls.Config{RootCAs: x509.NewCertPool()}}) // untrusted
	defer p.Close()
	if _, _, err := roundTrip(t, p, getHead, false, 64); !errors.Is(err, ErrDial) {
		t.Fatalf("err %v, want ErrDial", err)
	}
	if s := p.Stats(); s.DialErrors != 1 || s.Active != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// stallHandshake accepts TCP conns and never answers the TLS ClientHello.
func stallHandshake(t *testing.T) (addr string, accepted <-chan struct{}) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acc := make(chan struct{}, 4)
	serveUpstream(t, ln, func(c net.Conn, n int) {
		acc <- struct{}{}
		io.Copy(io.Discard, c)
	})
	return ln.Addr().String(), acc
}

func TestDialTimeout(t *testing.T) {
	addr, _ := stallHandshake(t)
	p := New(Options{Addr: addr, TLS: &tls.Config{}, DialTimeout: 30 * time.Millisecond})
	defer p.Close()
	if _, _, err := roundTrip(t, p, getHead, false, 64); !errors.Is(err, ErrDial) {
		t.Fatalf("err %v, want ErrDial", err)
	}
}

// TestAbortDuringDial: the client leaves while the TLS handshake is pending.
func TestAbortDuringDial(t *testing.T) {
	addr, accepted := stallHandshake(t)
	p := New(Options{Addr: addr, TLS: &tls.Config{}})
	defer p.Close()
	x := AcquireExchange()
	defer ReleaseExchange(x)
	rt := make(chan error, 1)
	go func() { rt <- x.RoundTrip(p, []byte(getHead), nil, false) }()
	recv(t, accepted, "TCP connect")
	x.Abort()
	if err := recv(t, rt, "RoundTrip return"); !errors.Is(err, ErrAborted) {
		t.Fatalf("err %v, want ErrAborted", err)
	}
	if s := p.Stats(); s.DialErrors != 0 || s.Active != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestTLSIdleCheckAllocatesNoError: the check of an idle TLS conn before each reuse (nothing
// pending on its socket, nothing held by crypto/tls), which runs for every request reusing an
// https upstream's conn, sets no deadline and allocates no error of one: at most the reader
// crypto/tls makes for each read that reaches its conn (atLeastReader).
func TestTLSIdleCheckAllocatesNoError(t *testing.T) {
	cert, roots := testCert(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	u := serveUpstream(t, ln, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		for {
			if _, ok := readReq(br); !ok {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntls")
		}
	})
	p := New(Options{Addr: u.addr(), TLS: &tls.Config{RootCAs: roots}})
	defer p.Close()
	for range 2 { // the second reuses the conn, past any session ticket
		if _, body, err := roundTrip(t, p, getHead, false, 64); err != nil || body != "tls" {
			t.Fatal(body, err)
		}
	}
	c := p.getIdle()
	if c == nil {
		t.Fatal("no idle conn")
	}
	defer func() {
		if c != nil {
			p.discard(c)
		}
	}()
	if n := testing.AllocsPerRun(100, func() {
		if !c.alive() {
			t.Fatal("an idle TLS conn found not alive")
		}
	}); n > 1 {
		t.Fatalf("%v allocations per check of an idle TLS conn, want at most crypto/tls's own", n)
	}
	// The conn still carries a request after the checks.
	p.put(c)
	c = nil
	if _, body, err := roundTrip(t, p, getHead, false, 64); err != nil || body != "tls" {
		t.Fatal(body, err)
	}
	if s := p.Stats(); s.Dials != 1 {
		t.Fatalf("stats %+v: conn not reused", s)
	}
}
