// Package tlscert holds the certificates of a TLS entrypoint: several PEM certificate/key
// pairs, the one served to each connection chosen by the server name the client asks for
// (SNI, RFC 6066 §3), reloaded when their files change on disk. A reload swaps the whole set
// atomically: handshakes in progress finish with the set they started with, open connections
// are not touched, and a file that does not load (a half-written renewal, a key that does not
// match its certificate) keeps the set in use, says so in the log and counts a failure in
// sluice_tls_certificate_reloads_total.
package tlscert

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/internal/dirwatch"
	"github.com/sluice-gw/sluice/internal/linkpath"
)

// Pair names the PEM files of one certificate: the chain (leaf first) and its private key.
type Pair struct {
	CertFile, KeyFile string
}

// PairsOf lists the certificate files of an entrypoint's TLS, the default one first.
func PairsOf(t *config.TLS) []Pair {
	var pairs []Pair
	if t.CertFile != "" || t.KeyFile != "" {
		pairs = append(pairs, Pair{CertFile: t.CertFile, KeyFile: t.KeyFile})
	}
	for _, c := range t.Certificates {
		pairs = append(pairs, Pair{CertFile: c.CertFile, KeyFile: c.KeyFile})
	}
	return pairs
}

// Set is a loaded, immutable set of certificates.
type Set struct {
	def    *tls.Certificate            // served when nothing else matches: the first pair's
	byName map[string]*tls.Certificate // exact DNS names (lower case) and IP addresses
	wild   map[string]*tls.Certificate // "*.example.com" by "example.com"
	sum    [32]byte                    // of every file's bytes, to skip reloads that change nothing
}

// Load reads pairs (at least one; the first is the default certificate) into a Set. Its
// error names the file that failed.
func Load(pairs []Pair) (*Set, error) {
	set, _, err := load(pairs)
	return set, err
}

// load is Load that also returns a digest of what it read: every file's bytes, or the error
// reading it. Equal digests mean the files have not changed between two loads, so a load that
// failed would fail again.
func load(pairs []Pair) (*Set, [32]byte, error) {
	var sum [32]byte
	if len(pairs) == 0 {
		return nil, sum, errors.New("no certificate")
	}
	// Every file is read before any is parsed, so that the digest covers them all.
	h := sha256.New()
	contents := make([][2][]byte, len(pairs))
	var readErr error
	for i, p := range pairs {
		for j, f := range [2]string{p.CertFile, p.KeyFile} {
			b, err := os.ReadFile(f)
			if err != nil {
				b = []byte(err.Error())
				if readErr == nil {
					readErr = err
				}
			}
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
			contents[i][j] = b
		}
	}
	copy(sum[:], h.Sum(nil))
	if readErr != nil {
		return nil, sum, readErr
	}
	s := &Set{byName: map[string]*tls.Certificate{}, wild: map[string]*tls.Certificate{}, sum: sum}
	for i, p := range pairs {
		cert, err := tls.X509KeyPair(contents[i][0], contents[i][1])
		if err != nil {
			return nil, sum, fmt.Errorf("%s, %s: %w", p.CertFile, p.KeyFile, err)
		}
		c := &cert
		if s.def == nil {
			s.def = c
		}
		// The first certificate for a name wins, as the order of the configuration says.
		for _, name := range c.Leaf.DNSNames {
			name = strings.ToLower(strings.TrimSuffix(name, "."))
			if rest, ok := strings.CutPrefix(name, "*."); ok {
				if s.wild[rest] == nil {
					s.wild[rest] = c
				}
			} else if s.byName[name] == nil {
				s.byName[name] = c
			}
		}
		for _, ip := range c.Leaf.IPAddresses {
			if k := ip.String(); s.byName[k] == nil {
				s.byName[k] = c
			}
		}
	}
	return s, sum, nil
}

// Pick returns the certificate for a handshake: the one for the server name asked (exactly,
// or by a wildcard for its first label, RFC 6125 §6.4.3), else, when the client sent no name,
// the one for the IP address it connected to, else the default.
func (s *Set) Pick(hello *tls.ClientHelloInfo) *tls.Certificate {
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	if name != "" {
		if c := s.byName[name]; c != nil {
			return c
		}
		if _, rest, ok := strings.Cut(name, "."); ok {
			if c := s.wild[rest]; c != nil {
				return c
			}
		}
		return s.def
	}
	if hello.Conn != nil {
		if a, ok := hello.Conn.LocalAddr().(*net.TCPAddr); ok {
			if c := s.byName[a.IP.String()]; c != nil {
				return c
			}
		}
	}
	return s.def
}

// Store serves the certificates of one entrypoint and reloads them when their files change.
type Store struct {
	name  string // the entrypoint, for logs and metrics
	pairs []Pair
	log   *slog.Logger
	cur   atomic.Pointer[Set]

	mu        sync.Mutex // serialises reloads
	failed    bool       // the last reload failed: the next one that loads says so, even unchanged
	failedSum [32]byte   // what the failed reload read, so the watcher does not retry it unchanged
	watcher   *fsnotify.Watcher
	debounce  time.Duration // watchDebounce; shorter in tests
	done      chan struct{}
	wg        sync.WaitGroup
}

// NewStore loads pairs for entrypoint name; the error names the file that failed.
func NewStore(name string, pairs []Pair, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	set, err := Load(pairs)
	if err != nil {
		return nil, err
	}
	s := &Store{name: name, pairs: pairs, log: log, debounce: watchDebounce, done: make(chan struct{})}
	s.cur.Store(set)
	return s, nil
}

// GetCertificate implements tls.Config.GetCertificate over the set in force.
func (s *Store) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cur.Load().Pick(hello), nil
}

// Reload loads the files again and puts the new set in force when it loads and differs from
// the one in force; after a failed reload, one that loads logs that the set is in force again
// and counts a success even when the files are those in force. On an error the set in force
// stays; the error is logged, counted and returned.
func (s *Store) Reload() error {
	return s.reload(false)
}

// reload is Reload; with onlyChanged, a failed reload is not repeated while the files hold
// what it read, since it would fail the same way: a file event that left them as they were
// (another file of the directory, a touch) would log the same error again.
func (s *Store) reload(onlyChanged bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	set, sum, err := load(s.pairs)
	if err != nil {
		if onlyChanged && s.failed && sum == s.failedSum {
			return err
		}
		s.failed, s.failedSum = true, sum
		metrics.TLSCertificateReload(s.name, false)
		s.log.Error("tls certificates not reloaded; the ones in use stay", "entrypoint", s.name, "error", err.Error())
		return err
	}
	recovered := s.failed
	s.failed = false
	if set.sum == s.cur.Load().sum {
		if recovered {
			// The files were put back as they are in force; without this line the last word
			// in the log would be the failure.
			metrics.TLSCertificateReload(s.name, true)
			s.log.Info("tls certificates load again; the ones in use stay in force", "entrypoint", s.name)
		}
		return nil // an event that changed nothing (a touch, a reload of unchanged files)
	}
	s.cur.Store(set)
	metrics.TLSCertificateReload(s.name, true)
	s.log.Info("tls certificates reloaded", "entrypoint", s.name)
	return nil
}

// watchDebounce is how long the store waits after a file event before it reloads: a renewal
// writes the certificate and the key one after the other, and a reload between the two would
// find them mismatched.
const watchDebounce = 100 * time.Millisecond

// Watch starts reloading the certificates when their files change. It watches the files'
// directories rather than the files, so that a file replaced by a rename (an atomic write, a
// Kubernetes secret's symlink swap, a release directory's link switched, the directory itself
// replaced) is seen too; events for other files of those directories (a log written next to
// the certificates) are ignored.
func (s *Store) Watch() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	names, dirs := s.watched()
	for d, needed := range dirs {
		if err := w.Add(d); err != nil && needed {
			_ = w.Close()
			return fmt.Errorf("watch %s: %w", d, err)
		}
	}
	s.watcher = w
	s.wg.Add(1)
	go s.watch(w, names)
	return nil
}

// watched lists the paths whose events mean a certificate or key may have changed, and the
// directories to watch for them: each file as its links resolve, and every link met on the
// way (linkpath.Resolve). A Kubernetes secret mounts tls.crt as a link to ..data/tls.crt and
// updates it by swapping the link ..data, so the event is for ..data, not tls.crt; a link
// cert.pem -> cert-2024.pem sees cert-2024.pem written in place; a directory current ->
// releases/v1 switched to releases/v2 sees current. The directory a file is in counts too,
// watched in its parent, for a deployment that replaces the whole directory (the old one
// renamed away, a new one renamed into its place): a directory of dirs is false when it is
// watched for that alone, a watch that may be refused (a parent the gateway cannot read).
func (s *Store) watched() (names, dirs map[string]bool) {
	names, dirs = map[string]bool{}, map[string]bool{}
	for _, p := range s.pairs {
		for _, f := range []string{p.CertFile, p.KeyFile} {
			a, err := filepath.Abs(f)
			if err != nil {
				continue
			}
			links, final := linkpath.Resolve(a)
			for _, n := range append(links, final) {
				names[n] = true
				dirs[filepath.Dir(n)] = true
			}
			if d := filepath.Dir(final); d != filepath.Dir(d) {
				names[d] = true
				if parent := filepath.Dir(d); !dirs[parent] {
					dirs[parent] = false
				}
			}
		}
	}
	return names, dirs
}

func (s *Store) watch(w *fsnotify.Watcher, names map[string]bool) {
	defer s.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-s.done:
			t.Stop()
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if ev.Op != fsnotify.Chmod && names[filepath.Clean(ev.Name)] {
				t.Reset(s.debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			s.log.Warn("tls certificate watch", "entrypoint", s.name, "error", err.Error())
		case <-t.C:
			_ = s.reload(true)
			// A file may have become a link, or a link may lead elsewhere now, or a
			// directory may have been replaced: watch where the files are now.
			var dirs map[string]bool
			names, dirs = s.watched()
			dirwatch.Sync(w, dirs, func(d string, err error) {
				s.log.Warn("tls certificate watch", "entrypoint", s.name, "path", d, "error", err.Error())
			})
		}
	}
}

// Close stops watching. It is safe to call more than once.
func (s *Store) Close() {
	s.mu.Lock()
	w := s.watcher
	s.watcher = nil
	s.mu.Unlock()
	if w == nil {
		return
	}
	close(s.done)
	_ = w.Close()
	s.wg.Wait()
}
