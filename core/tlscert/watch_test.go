package tlscert

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/metrics"
)

// testDebounce keeps the watch tests quick; the other files' writes below are spaced wider, so
// a watcher that reacted to them would reload between any two.
const testDebounce = 10 * time.Millisecond

// recordLog is a slog handler that appends every record, as a line, to a file (the gateway's
// log kept next to the certificates) and passes the record's message on to msgs.
type recordLog struct {
	mu   *sync.Mutex
	file string
	msgs chan string
}

func (h recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h recordLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h recordLog) WithGroup(string) slog.Handler            { return h }
func (h recordLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.file != "" {
		f, err := os.OpenFile(h.file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, _ = f.WriteString(r.Level.String() + " " + r.Message + "\n")
		_ = f.Close()
	}
	select {
	case h.msgs <- r.Message:
	default: // a watcher stuck in a loop of reloads must not block Close at the test's end
	}
	return nil
}

// reloadCounts publishes entrypoint's series, as its serving transport does, until the test
// ends, and returns a function that reads how many reloads of entrypoint counted in
// sluice_tls_certificate_reloads_total with result (the series start from zero: each test
// names its own entrypoint, and the release at its end forgets the series for -count=N).
func reloadCounts(t *testing.T, entrypoint string) func(result string) uint64 {
	t.Cleanup(metrics.ForEntrypoint(entrypoint).Publish())
	return func(result string) uint64 {
		var b bytes.Buffer
		vm.WritePrometheus(&b, false)
		prefix := `sluice_tls_certificate_reloads_total{entrypoint="` + entrypoint + `",result="` + result + `"} `
		for _, line := range strings.Split(b.String(), "\n") {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				n, err := strconv.ParseUint(v, 10, 64)
				require.NoError(t, err)
				return n
			}
		}
		return 0
	}
}

// replace writes b to path the way an editor or certbot does: a new file renamed over it.
func replace(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, b, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// waitMsg returns the next logged message that contains want, failing after a deadline; the
// messages it skips are returned too.
func waitMsg(t *testing.T, msgs <-chan string, want string) (skipped []string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-msgs:
			if strings.Contains(m, want) {
				return skipped
			}
			skipped = append(skipped, m)
		case <-deadline:
			t.Fatalf("no log message %q within 10s; saw %q", want, skipped)
		}
	}
}

// logged returns the messages logged so far, without waiting for more.
func logged(msgs <-chan string) []string {
	var out []string
	for {
		select {
		case m := <-msgs:
			out = append(out, m)
		default:
			return out
		}
	}
}

func watchedStore(t *testing.T, name string, pairs []Pair, logFile string) (*Store, chan string) {
	t.Helper()
	msgs := make(chan string, 1024)
	s, err := NewStore(name, pairs, slog.New(recordLog{mu: new(sync.Mutex), file: logFile, msgs: msgs}))
	require.NoError(t, err)
	s.debounce = testDebounce
	require.NoError(t, s.Watch())
	t.Cleanup(s.Close)
	return s, msgs
}

// A broken certificate next to a file being written (here the gateway's own log, which gets
// the reload's ERROR line, and a writer of its own) fails to reload once, not once per write:
// each write is a change in the watched directory, but not of the certificate's files.
func TestBrokenCertificateNextToLogFailsOnce(t *testing.T) {
	dir := t.TempDir()
	p := writePair(t, dir, "srv", "first", "a.test")
	logFile := filepath.Join(dir, "sluice.log")
	const ep = "broken-next-to-log"
	reloads := reloadCounts(t, ep)
	s, msgs := watchedStore(t, ep, []Pair{p}, logFile)

	replace(t, p.CertFile, []byte("garbage\n"))
	waitMsg(t, msgs, "tls certificates not reloaded")

	for i := 0; i < 50; i++ {
		f, err := os.OpenFile(logFile, os.O_APPEND|os.O_WRONLY, 0o600)
		require.NoError(t, err)
		_, err = f.WriteString("INFO request served\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
		time.Sleep(2 * testDebounce) // the writer's pace, wider than the debounce
	}

	writePair(t, dir, "srv", "second", "a.test")
	skipped := waitMsg(t, msgs, "tls certificates reloaded")
	require.Empty(t, skipped, "log lines between the failure and the reload")
	require.EqualValues(t, 1, reloads("failure"))
	require.EqualValues(t, 1, reloads("success"))
	c, _ := s.GetCertificate(&tls.ClientHelloInfo{})
	require.Equal(t, "second", c.Leaf.Subject.CommonName)
}

// Putting back the certificate in use after a failed reload says that it is in force again
// and counts a success, so that the failure is not the last word.
func TestRestoringSameCertificateAfterFailureCountsSuccess(t *testing.T) {
	dir := t.TempDir()
	p := writePair(t, dir, "srv", "first", "a.test")
	good, err := os.ReadFile(p.CertFile)
	require.NoError(t, err)

	t.Run("Reload", func(t *testing.T) {
		reloads := reloadCounts(t, "restore-same-reload")
		msgs := make(chan string, 16)
		s, err := NewStore("restore-same-reload", []Pair{p}, slog.New(recordLog{mu: new(sync.Mutex), msgs: msgs}))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p.CertFile, []byte("garbage\n"), 0o600))
		require.Error(t, s.Reload())
		require.NoError(t, os.WriteFile(p.CertFile, good, 0o600))
		require.NoError(t, s.Reload())
		require.Equal(t, []string{"tls certificates not reloaded; the ones in use stay", "tls certificates load again; the ones in use stay in force"},
			logged(msgs))
		require.EqualValues(t, 1, reloads("failure"))
		require.EqualValues(t, 1, reloads("success"))

		require.NoError(t, s.Reload()) // in force and unchanged: nothing to say
		require.Empty(t, logged(msgs))
		require.EqualValues(t, 1, reloads("success"))
	})

	t.Run("Watch", func(t *testing.T) {
		reloads := reloadCounts(t, "restore-same-watch")
		_, msgs := watchedStore(t, "restore-same-watch", []Pair{p}, "")
		replace(t, p.CertFile, []byte("garbage\n"))
		waitMsg(t, msgs, "tls certificates not reloaded")
		replace(t, p.CertFile, good)
		require.Empty(t, waitMsg(t, msgs, "tls certificates load again"))
		require.EqualValues(t, 1, reloads("failure"))
		require.EqualValues(t, 1, reloads("success"))
	})
}

// A Kubernetes secret volume mounts tls.crt as a link to ..data/tls.crt and updates it by
// swapping the link ..data to a new directory: the only event is for ..data.
func TestWatchKubernetesSecretSwap(t *testing.T) {
	dir := t.TempDir()
	writePair(t, mkdir(t, dir, "..2026_01"), "tls", "first", "a.test")
	require.NoError(t, os.Symlink("..2026_01", filepath.Join(dir, "..data")))
	p := Pair{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	require.NoError(t, os.Symlink("..data/tls.crt", p.CertFile))
	require.NoError(t, os.Symlink("..data/tls.key", p.KeyFile))
	s, msgs := watchedStore(t, "k8s-swap", []Pair{p}, filepath.Join(dir, "sluice.log"))

	writePair(t, mkdir(t, dir, "..2026_02"), "tls", "second", "a.test")
	require.NoError(t, os.Symlink("..2026_02", filepath.Join(dir, "..data_tmp")))
	require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "..2026_01")))
	require.Empty(t, waitMsg(t, msgs, "tls certificates reloaded"))
	c, _ := s.GetCertificate(&tls.ClientHelloInfo{})
	require.Equal(t, "second", c.Leaf.Subject.CommonName)
}

func mkdir(t *testing.T, parent, name string) string {
	t.Helper()
	d := filepath.Join(parent, name)
	require.NoError(t, os.Mkdir(d, 0o700))
	return d
}

// Certificates in a release directory behind a link (current -> releases/v1), switched by
// renaming a new link over it, reload on each switch.
func TestWatchLinkedDirectorySwitch(t *testing.T) {
	root := t.TempDir()
	releases := mkdir(t, root, "releases")
	current := filepath.Join(root, "current")
	release := func(name, cn string) {
		writePair(t, mkdir(t, releases, name), "tls", cn, "a.test")
		tmp := filepath.Join(root, "current.new")
		require.NoError(t, os.Symlink(filepath.Join("releases", name), tmp))
		require.NoError(t, os.Rename(tmp, current))
	}
	release("v1", "first")
	p := Pair{CertFile: filepath.Join(current, "tls.crt"), KeyFile: filepath.Join(current, "tls.key")}
	s, msgs := watchedStore(t, "dir-switch", []Pair{p}, filepath.Join(root, "sluice.log"))
	for _, cn := range []string{"second", "third"} {
		release(cn, cn)
		waitMsg(t, msgs, "tls certificates reloaded")
		c, _ := s.GetCertificate(&tls.ClientHelloInfo{})
		require.Equal(t, cn, c.Leaf.Subject.CommonName)
	}
}

// A directory of certificates that a deployment replaces (the old one renamed away, a new one
// renamed into its place) reloads, and so do the changes made in the new directory after it.
func TestWatchReplacedDirectory(t *testing.T) {
	root := t.TempDir()
	dir := mkdir(t, root, "certs")
	p := writePair(t, dir, "tls", "first", "a.test")
	s, _ := watchedStore(t, "dir-replaced", []Pair{p}, filepath.Join(root, "sluice.log"))
	inForce := func(cn string) {
		t.Helper()
		require.Eventually(t, func() bool {
			c, _ := s.GetCertificate(&tls.ClientHelloInfo{})
			return c != nil && c.Leaf.Subject.CommonName == cn
		}, 10*time.Second, 5*time.Millisecond, "certificate %q not in force", cn)
	}

	writePair(t, mkdir(t, root, "certs.next"), "tls", "second", "a.test")
	require.NoError(t, os.Rename(dir, filepath.Join(root, "certs.old")))
	require.NoError(t, os.Rename(filepath.Join(root, "certs.next"), dir))
	inForce("second")

	// A renewal in the new directory: both files renamed into place.
	next := writePair(t, mkdir(t, root, "renewal"), "tls", "third", "a.test")
	crt, err := os.ReadFile(next.CertFile)
	require.NoError(t, err)
	key, err := os.ReadFile(next.KeyFile)
	require.NoError(t, err)
	replace(t, p.KeyFile, key)
	replace(t, p.CertFile, crt)
	inForce("third")
}
