package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fileKey is a key whose value names a file or directory that loading (or validating) a
// configuration reads, with an absolute path as its value.
var fileKey = regexp.MustCompile(`\b(cert_file|key_file|ca_file|token_file|kubeconfig|access_log|directory)(\s*=\s*)"(/[^"]*)"`)

// deploymentFiles stands in for the files an example names at absolute paths (/etc/certs/…,
// /etc/sluice/conf.d/): the paths are mapped into a directory of the test's own, where each
// names a file of its kind, so that validating an example reads the same files on every
// machine, whatever the machine has at those paths, and checks them as serve would.
type deploymentFiles struct {
	t    *testing.T
	root string
	cert []byte // one self-signed certificate and its key, for every pair: each key matches
	key  []byte
}

func newDeploymentFiles(t *testing.T) *deploymentFiles {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "example.com"},
		DNSNames:              []string{"example.com", "*.example.com", "*.models.example.com"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // it is a ca_file too
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	return &deploymentFiles{t: t, root: t.TempDir(),
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}
}

// mapText returns text with every absolute path a file key names moved under the root, the
// file or directory it names made there. The lines keep their numbers; the columns after a
// mapped path move.
func (d *deploymentFiles) mapText(text string) string {
	return fileKey.ReplaceAllStringFunc(text, func(s string) string {
		m := fileKey.FindStringSubmatch(s)
		key, eq, path := m[1], m[2], m[3]
		local := filepath.Join(d.root, filepath.FromSlash(path))
		require.NoError(d.t, os.MkdirAll(filepath.Dir(local), 0o755))
		switch key {
		case "cert_file", "ca_file":
			require.NoError(d.t, os.WriteFile(local, d.cert, 0o644))
		case "key_file":
			require.NoError(d.t, os.WriteFile(local, d.key, 0o600))
		case "token_file":
			require.NoError(d.t, os.WriteFile(local, []byte("a-token\n"), 0o600))
		case "directory":
			require.NoError(d.t, os.MkdirAll(local, 0o755))
		case "access_log":
			// Opened for appending where it is: under the root, which the test removes.
		default:
			d.t.Fatalf("%s = %q: give the test a file of its kind for this key (deploymentFiles.mapText)", key, path)
		}
		if strings.HasSuffix(path, "/") {
			local += string(filepath.Separator)
		}
		return key + eq + `"` + filepath.ToSlash(local) + `"`
	})
}

// copy returns a copy of the configuration at path (a file, or a directory of *.toml) in a
// directory of the test's own, its absolute paths mapped as mapText maps them.
func (d *deploymentFiles) copy(path string) string {
	dst := filepath.Join(d.t.TempDir(), filepath.Base(path))
	st, err := os.Stat(path)
	require.NoError(d.t, err)
	if !st.IsDir() {
		d.copyFile(path, dst)
		return dst
	}
	require.NoError(d.t, os.Mkdir(dst, 0o755))
	entries, err := os.ReadDir(path)
	require.NoError(d.t, err)
	for _, e := range entries {
		if !e.IsDir() {
			d.copyFile(filepath.Join(path, e.Name()), filepath.Join(dst, e.Name()))
		}
	}
	return dst
}

func (d *deploymentFiles) copyFile(src, dst string) {
	data, err := os.ReadFile(src)
	require.NoError(d.t, err)
	require.NoError(d.t, os.WriteFile(dst, []byte(d.mapText(string(data))), 0o644))
}
