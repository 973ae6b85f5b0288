package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A missing dependency of the Node and real-engine tests fails them at once with a message
// saying what to do; none of these may wait on anything unbounded.

// fastFail is how soon a missing dependency must fail a test.
const fastFail = 5 * time.Second

// fatalTB records the first Fatal of a helper run under it and ends that helper's goroutine,
// as the testing package does, so that a test can check how a helper fails.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// requireFatal runs helper under a fatalTB and returns its failure message; it fails t if
// helper returns without failing, or has not failed within fastFail.
func requireFatal(t *testing.T, helper func(tb testing.TB)) string {
	t.Helper()
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		helper(f)
	}()
	select {
	case <-done:
	case <-time.After(fastFail):
		t.Fatalf("the helper neither failed nor returned within %v", fastFail)
	}
	require.NotEmpty(t, f.msg, "the helper returned without failing the test")
	return f.msg
}

// withoutNode points PATH at an empty directory, so that no node can be found.
func withoutNode(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
}

func TestMissingNodeFailsAtOnce(t *testing.T) {
	withoutNode(t)
	for name, helper := range map[string]func(testing.TB){
		"NodeDir":            func(tb testing.TB) { NodeDir(tb) },
		"StartLlamaServer":   func(tb testing.TB) { StartLlamaServer(tb) },
		"RunOpenAINodeCheck": func(tb testing.TB) { RunOpenAINodeCheck(tb, "http://127.0.0.1:1/v1", "m") },
	} {
		msg := requireFatal(t, helper)
		require.Contains(t, msg, "node is not on PATH", name)
	}
	start := time.Now()
	_, err := OpenAINodeCheck(context.Background(), "http://127.0.0.1:1/v1", "m")
	require.ErrorContains(t, err, "node is not on PATH")
	require.Less(t, time.Since(start), fastFail)
}

func TestMissingNodePackagesSayMakeNodeDeps(t *testing.T) {
	lock, err := os.ReadFile(filepath.Join(NodeBenchDir(), "package-lock.json"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "package-lock.json"), lock, 0o644))

	_, err = nodePackages(dir) // node_modules absent
	require.ErrorContains(t, err, "Node packages not installed")
	require.ErrorContains(t, err, "make node-deps")

	mods := filepath.Join(dir, "node_modules")
	require.NoError(t, os.MkdirAll(mods, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(mods, nodeStamp), []byte("0123\n"), 0o644))
	_, err = nodePackages(dir) // installed from another lock file
	require.ErrorContains(t, err, "out of date")
	require.ErrorContains(t, err, "make node-deps")

	sum := sha256.Sum256(lock)
	require.NoError(t, os.WriteFile(filepath.Join(mods, nodeStamp), []byte(hex.EncodeToString(sum[:])+"\n"), 0o644))
	_, err = nodePackages(dir) // stamped, but a package is gone
	require.ErrorContains(t, err, "Node package openai missing")
	require.ErrorContains(t, err, "make node-deps")
}

func TestMissingFixtureFailsAtOnce(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("SLUICE_FIXTURES", empty)
	msg := requireFatal(t, func(tb testing.TB) { FixturesDir(tb) })
	require.Contains(t, msg, "fixture model not found")
	require.Contains(t, msg, "SLUICE_FIXTURES")
	require.Contains(t, msg, FixtureModelFile)
	// The real-engine helper fails as soon (on the Node packages first when they are missing).
	msg = requireFatal(t, func(tb testing.TB) { StartLlamaServer(tb) })
	if !strings.Contains(msg, "make node-deps") && !strings.Contains(msg, "node is not on PATH") {
		require.Contains(t, msg, "fixture model not found")
	}
}

// A node that hangs, and leaves a child holding its output, is killed with its child when the
// context ends, and runNode returns.
func TestHangingNodeIsKilledWithItsChildren(t *testing.T) {
	bin := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	script := "#!/bin/sh\nsleep 300 &\necho $! > " + pidFile + "\nexec sleep 300\n"
	require.NoError(t, os.WriteFile(filepath.Join(bin, "node"), []byte(script), 0o755))
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := runNode(ctx, "never-ends.mjs")
	require.Error(t, err)
	require.Less(t, time.Since(start), fastFail, "runNode outlived its context")

	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !alive(child) }, fastFail, 10*time.Millisecond,
		"the child of the fake node (pid %d) survived", child)
}

// alive reports whether pid runs; a zombie (killed, not yet reaped by whoever adopted it) does
// not count.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	switch {
	case err == nil:
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		return len(f) > 0 && f[0] != "Z"
	case os.IsNotExist(err):
		return syscall.Kill(pid, 0) == nil // no such process, or no /proc on this system
	default:
		return true
	}
}
