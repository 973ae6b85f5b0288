package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveBinDir()
	os.Exit(code)
}

const echoPkg = "./bench/testenv/testdata/echoserver"

func TestRepoRoot(t *testing.T) {
	root := RepoRoot()
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("RepoRoot %s has no go.mod: %v", root, err)
	}
	if _, err := os.Stat(filepath.Join(root, "bench", "testenv", "testenv.go")); err != nil {
		t.Fatalf("RepoRoot %s is not sluice's root: %v", root, err)
	}
}

func TestBuildBinaryOnce(t *testing.T) {
	a := BuildBinary(t, echoPkg)
	st, err := os.Stat(a)
	if err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("built binary %s: %v %v", a, st, err)
	}
	b := BuildBinary(t, echoPkg)
	if a != b {
		t.Fatalf("second build gave %s, first %s", b, a)
	}
	st2, _ := os.Stat(b)
	if !st2.ModTime().Equal(st.ModTime()) {
		t.Fatalf("binary rebuilt: mtime %v then %v", st.ModTime(), st2.ModTime())
	}
}

var addrRE = regexp.MustCompile(`listening on (\S+)`)

func TestStartProcessWaitHTTP(t *testing.T) {
	bin := BuildBinary(t, echoPkg)
	p := StartProcess(t, bin, "--listen", "127.0.0.1:0", "--delay", "200ms")
	out := p.WaitOutput(t, "listening on ", 10*time.Second)
	addr := addrRE.FindStringSubmatch(out)[1]
	start := time.Now()
	WaitHTTP(t, "http://"+addr+"/health", 10*time.Second)
	t.Logf("healthy after %v of polling", time.Since(start))
	if ok, _ := p.Exited(); ok {
		t.Fatal("process exited early")
	}
	// Stop: SIGTERM to the group ends it (Go's default action for SIGTERM is to exit).
	err := p.Stop(5 * time.Second)
	if ok, _ := p.Exited(); !ok {
		t.Fatal("process still running after Stop")
	}
	t.Logf("stop: %v", err)
}

func TestWaitHTTPFailsFastWhenProcessExits(t *testing.T) {
	bin := BuildBinary(t, echoPkg)
	port := FreePort(t)
	if port <= 0 || port > 65535 {
		t.Fatalf("FreePort %d", port)
	}
	// Healthy only after 1 h, exits after 100 ms: the wait must end on the exit, not the deadline.
	p := StartProcess(t, bin, "--listen", "127.0.0.1:0", "--delay", "1h", "--exit-after", "100ms")
	out := p.WaitOutput(t, "listening on ", 10*time.Second)
	addr := addrRE.FindStringSubmatch(out)[1]
	start := time.Now()
	err := pollHTTP("http://"+addr+"/health", time.Minute, []*Process{p})
	if !errors.Is(err, errExited) {
		t.Fatalf("pollHTTP: %v, want errExited", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("pollHTTP took %v after the process exited", d)
	}
	if got := p.Output(); !regexp.MustCompile("exiting as asked").MatchString(got) {
		t.Fatalf("output not captured: %q", got)
	}
}

// FreePort's port lies below the kernel's ephemeral range, from which the local ports of
// outgoing connections come, so that no connection of a test running beside takes it before
// the server it is for binds it.
func TestFreePortIsOutsideTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	if low-1 <= minFixedPort {
		t.Skipf("ephemeral range starts at %d: no room below it", low)
	}
	for range 20 {
		port := FreePort(t)
		if port < minFixedPort || port >= low {
			t.Fatalf("FreePort %d, want [%d, %d)", port, minFixedPort, low)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("FreePort %d is not free: %v", port, err)
		}
		_ = ln.Close()
	}
}
