package tlscert

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// writePair writes a self-signed certificate named cn for names into dir/base.{crt,key}.
func writePair(t *testing.T, dir, base, cn string, names ...string) Pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	p := Pair{CertFile: filepath.Join(dir, base+".crt"), KeyFile: filepath.Join(dir, base+".key")}
	require.NoError(t, os.WriteFile(p.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(p.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	return p
}

type fakeConn struct {
	net.Conn
	local net.Addr
}

func (c fakeConn) LocalAddr() net.Addr { return c.local }

func TestPick(t *testing.T) {
	dir := t.TempDir()
	set, err := Load([]Pair{
		writePair(t, dir, "def", "def", "default.test"),
		writePair(t, dir, "api", "api", "api.test", "10.0.0.1"),
		writePair(t, dir, "wild", "wild", "*.models.test"),
		writePair(t, dir, "api2", "api2", "api.test"), // the first for a name wins
	})
	require.NoError(t, err)
	cn := func(h *tls.ClientHelloInfo) string { return set.Pick(h).Leaf.Subject.CommonName }
	for name, want := range map[string]string{
		"api.test": "api", "API.TEST.": "api", "a.models.test": "wild", "a.b.models.test": "def",
		"models.test": "def", "unknown.test": "def", "default.test": "def",
	} {
		require.Equal(t, want, cn(&tls.ClientHelloInfo{ServerName: name}), name)
	}
	// No SNI: the certificate for the address connected to, else the default.
	require.Equal(t, "api", cn(&tls.ClientHelloInfo{Conn: fakeConn{local: &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 443}}}))
	require.Equal(t, "def", cn(&tls.ClientHelloInfo{Conn: fakeConn{local: &net.TCPAddr{IP: net.ParseIP("10.0.0.2"), Port: 443}}}))
	require.Equal(t, "def", cn(&tls.ClientHelloInfo{}))
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	good := writePair(t, dir, "good", "good", "a.test")
	other := writePair(t, dir, "other", "other", "b.test")
	_, err := Load([]Pair{{CertFile: filepath.Join(dir, "missing.crt"), KeyFile: good.KeyFile}})
	require.ErrorContains(t, err, "missing.crt")
	_, err = Load([]Pair{{CertFile: good.CertFile, KeyFile: other.KeyFile}}) // a key of another certificate
	require.ErrorContains(t, err, "good.crt")
	_, err = Load(nil)
	require.Error(t, err)
}

// A reload that fails keeps the set in force; one that changes nothing swaps nothing.
func TestReloadKeepsSetOnError(t *testing.T) {
	dir := t.TempDir()
	p := writePair(t, dir, "srv", "first", "a.test")
	var logs bytes.Buffer
	s, err := NewStore("web", []Pair{p}, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	hello := &tls.ClientHelloInfo{ServerName: "a.test"}
	first, _ := s.GetCertificate(hello)
	require.NoError(t, s.Reload())
	same, _ := s.GetCertificate(hello)
	require.Same(t, first, same, "a reload of unchanged files swapped the set")

	require.NoError(t, os.WriteFile(p.KeyFile, []byte("not a key"), 0o600))
	require.Error(t, s.Reload())
	kept, _ := s.GetCertificate(hello)
	require.Same(t, first, kept)
	require.Contains(t, logs.String(), "tls certificates not reloaded")

	writePair(t, dir, "srv", "second", "a.test")
	require.NoError(t, s.Reload())
	c, _ := s.GetCertificate(hello)
	require.Equal(t, "second", c.Leaf.Subject.CommonName)
}
