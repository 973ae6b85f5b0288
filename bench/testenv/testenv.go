// Package testenv holds the helpers of sluice's end-to-end tests: locate the repository, build a
// command once per test process, run child processes in their own process group with their
// output kept for failure reports, wait for an HTTP endpoint, and run the real clients and the
// real inference engine of issue 2 (the official OpenAI Node SDK, openai-go/v3, and
// node-llama-cpp serving shared/fixtures/tiny-random-llama.gguf behind bench/node/llama-server.mjs).
//
// Every helper that takes a testing.TB fails the test (never skips it) when something it needs is
// missing, with a message saying how to get it (for the Node packages: `make node-deps`).
// Processes started here are killed in t.Cleanup; their output is logged when the test failed.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RepoRoot returns the absolute path of the repository root: the nearest ancestor of this
// source file's package directory (the test's working directory) that holds go.mod. It panics
// when there is none, which only happens when the package is used outside the repository.
func RepoRoot() string {
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			panic(fmt.Sprintf("testenv: getwd: %v", err))
		}
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				root = d
				return
			}
			if filepath.Dir(d) == d {
				panic(fmt.Sprintf("testenv: no go.mod above %s", dir))
			}
		}
	})
	return root
}

var (
	rootOnce sync.Once
	root     string
)

// binBuild is one `go build` result, shared by every test of the process.
type binBuild struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

var (
	binMu     sync.Mutex
	binBuilds = map[string]*binBuild{}
	binDir    string
	binDirErr error
	binDirOne sync.Once
)

// BinDir returns the per-process temporary directory that BuildBinary writes into, creating it
// on first use. Call RemoveBinDir from TestMain to delete it after m.Run; otherwise it stays in
// os.TempDir().
func BinDir() (string, error) {
	binDirOne.Do(func() { binDir, binDirErr = os.MkdirTemp("", "sluice-testbin-") })
	return binDir, binDirErr
}

// RemoveBinDir deletes the directory of BuildBinary's outputs, if one was made. For TestMain:
//
//	func TestMain(m *testing.M) { code := m.Run(); testenv.RemoveBinDir(); os.Exit(code) }
func RemoveBinDir() {
	binMu.Lock()
	defer binMu.Unlock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// BuildBinary builds the main package pkg (an import path such as
// "github.com/sluice-gw/sluice/cmd/sluice", or a path relative to the repository root such as
// "./cmd/llmsim") with CGO_ENABLED=0 into a per-process temporary directory and returns the
// binary's absolute path. The build runs once per package per test process (the result, or the
// failure, is shared by every caller); a failed build fails t with the compiler's output.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	binMu.Lock()
	b, ok := binBuilds[pkg]
	if !ok {
		b = &binBuild{}
		binBuilds[pkg] = b
	}
	binMu.Unlock()
	b.once.Do(func() {
		dir, err := BinDir()
		if err != nil {
			b.err = err
			return
		}
		name := filepath.Base(strings.TrimSuffix(pkg, "/"))
		b.path = filepath.Join(dir, fmt.Sprintf("%s-%08x", name, hashString(pkg)))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.path, pkg)
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		bound(cmd)
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("testenv: go build %s: %v\n%s", pkg, b.err, b.out)
	}
	return b.path
}

func hashString(s string) uint32 {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// waitDelay bounds how long Wait waits for a child's output pipes to close after the child
// exited or was killed: a grandchild that escaped the kill and holds a pipe could otherwise
// keep Wait (and the test) waiting for ever.
const waitDelay = 5 * time.Second

// bound makes cmd, run with a context, end as a whole when the context ends: it starts in its
// own process group, the whole group gets SIGKILL, and Wait waits at most waitDelay more.
func bound(cmd *exec.Cmd) {
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for a server started
// with a fixed address. It lies below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range) where that leaves room: the local port of an
// outgoing connection, which every test making connections takes from that range, can then
// not take it before the server binds it. Another listener may still take it; prefer letting a
// server bind port 0 and report its address where the server can do that.
func FreePort(t testing.TB) int {
	t.Helper()
	if low := ephemeralLow(); low-1 > minFixedPort {
		for range 64 {
			port := minFixedPort + rand.IntN(low-minFixedPort) // seeded per process: test processes spread
			if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				_ = ln.Close()
				return port
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: FreePort: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// minFixedPort is the lowest port FreePort returns: above the ports services commonly run on.
const minFixedPort = 20000

// ephemeralLow returns the lowest port of the kernel's ephemeral range, or 0 when it cannot
// be read (not Linux).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return low
}

// outputBuffer is a goroutine-safe buffer that wakes waiters on every write.
type outputBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newOutputBuffer() *outputBuffer { return &outputBuffer{changed: make(chan struct{})} }

func (b *outputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	close(b.changed)
	b.changed = make(chan struct{})
	return n, err
}

// snapshot returns the output so far and a channel closed at the next write.
func (b *outputBuffer) snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String(), b.changed
}

// Process is a child process started by StartProcess, in its own process group.
type Process struct {
	// Cmd is the started command; read-only for callers.
	Cmd  *exec.Cmd
	name string
	out  *outputBuffer // stdout and stderr, interleaved as written
	done chan struct{} // closed when the process has exited and its output is drained
	err  error         // Wait's result; valid after done
}

// procRegistry maps a test to the processes it started, so that WaitHTTP can report their
// output when a wait fails.
var (
	procMu       sync.Mutex
	procRegistry = map[testing.TB][]*Process{}
)

// StartProcess starts bin with args in a new process group, stdout and stderr captured together.
// In t.Cleanup the whole group gets SIGTERM, then SIGKILL if it has not exited within 3 s, and
// the captured output is logged when t failed. Env: the test's environment; set p.Cmd fields
// only through StartProcessCmd. A start failure fails t.
func StartProcess(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	return StartProcessCmd(t, exec.Command(bin, args...))
}

// StartProcessCmd is StartProcess for a prepared, not yet started command (to set Dir or Env).
// Its Stdout, Stderr and SysProcAttr are replaced.
func StartProcessCmd(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{Cmd: cmd, name: filepath.Base(cmd.Path), out: newOutputBuffer(), done: make(chan struct{})}
	cmd.Stdout = p.out
	cmd.Stderr = p.out
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start %s: %v", cmd.String(), err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	procMu.Lock()
	procRegistry[t] = append(procRegistry[t], p)
	procMu.Unlock()
	t.Cleanup(func() {
		p.Stop(3 * time.Second)
		procMu.Lock()
		delete(procRegistry, t)
		procMu.Unlock()
		if t.Failed() {
			t.Logf("testenv: output of %s (%v):\n%s", cmd.String(), p.exitStatus(), p.Output())
		}
	})
	return p
}

// Output returns everything the process wrote to stdout and stderr so far.
func (p *Process) Output() string {
	s, _ := p.out.snapshot()
	return s
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and Wait's error if so.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

func (p *Process) exitStatus() string {
	if ok, err := p.Exited(); ok {
		if err != nil {
			return "exited: " + err.Error()
		}
		return "exited: status 0"
	}
	return "running"
}

// Signal sends sig to the process group.
func (p *Process) Signal(sig syscall.Signal) error {
	return syscall.Kill(-p.Cmd.Process.Pid, sig)
}

// killWait bounds the wait for a process to be gone after SIGKILL (and for Wait to return:
// see waitDelay).
const killWait = 2 * waitDelay

// Stop sends SIGTERM to the process group, waits up to grace for the process to exit, then
// sends SIGKILL to the group and waits for the exit, at most killWait. It returns Wait's error,
// or an error saying the process outlived SIGKILL. Safe to call twice.
func (p *Process) Stop(grace time.Duration) error {
	if ok, err := p.Exited(); ok {
		_ = p.Signal(syscall.SIGKILL) // leftovers of the group, if any
		return err
	}
	_ = p.Signal(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
	}
	_ = p.Signal(syscall.SIGKILL)
	timer.Reset(killWait)
	select {
	case <-p.done:
		return p.err
	case <-timer.C:
		return fmt.Errorf("testenv: %s (pid %d) still running %v after SIGKILL", p.name, p.Cmd.Process.Pid, killWait)
	}
}

// WaitOutput waits until the process's output contains substr and returns the output so far.
// It fails t with the output when the process exits first or deadline passes.
func (p *Process) WaitOutput(t testing.TB, substr string, deadline time.Duration) string {
	t.Helper()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	for {
		s, changed := p.out.snapshot()
		if strings.Contains(s, substr) {
			return s
		}
		select {
		case <-changed:
		case <-p.done:
			s, _ = p.out.snapshot()
			if strings.Contains(s, substr) {
				return s
			}
			t.Fatalf("testenv: %s %s before printing %q; output:\n%s", p.name, p.exitStatus(), substr, s)
		case <-timer.C:
			t.Fatalf("testenv: %s did not print %q within %v; output:\n%s", p.name, substr, deadline, s)
		}
	}
}

// WaitHTTP polls GET url every 20 ms until it answers 2xx, and fails t on deadline (or at once
// if the process exits first) with the last error and the process's output.
func (p *Process) WaitHTTP(t testing.TB, url string, deadline time.Duration) {
	t.Helper()
	if err := pollHTTP(url, deadline, []*Process{p}); err != nil {
		t.Fatalf("testenv: %v\n--- output of %s (%s):\n%s", err, p.name, p.exitStatus(), p.Output())
	}
}

// WaitHTTP polls GET url every 20 ms until it answers 2xx. On deadline, or when a process that
// t started through StartProcess exits meanwhile, it fails t with the last error and the output
// of every process t started.
func WaitHTTP(t testing.TB, url string, deadline time.Duration) {
	t.Helper()
	procMu.Lock()
	procs := append([]*Process(nil), procRegistry[t]...)
	procMu.Unlock()
	if err := pollHTTP(url, deadline, procs); err != nil {
		var b strings.Builder
		for _, p := range procs {
			fmt.Fprintf(&b, "\n--- output of %s (%s):\n%s", p.Cmd.String(), p.exitStatus(), p.Output())
		}
		t.Fatalf("testenv: %v%s", err, b.String())
	}
}

var errExited = errors.New("process exited")

func pollHTTP(url string, deadline time.Duration, procs []*Process) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	end := time.Now().Add(deadline)
	var last error
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode >= 200 && resp.StatusCode < 300 {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		for _, p := range procs {
			if ok, _ := p.Exited(); ok {
				return fmt.Errorf("GET %s: %w (%s) while waiting; last error: %v", url, errExited, p.exitStatus(), last)
			}
		}
		if time.Now().After(end) {
			return fmt.Errorf("GET %s: no 2xx within %v; last error: %v", url, deadline, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
