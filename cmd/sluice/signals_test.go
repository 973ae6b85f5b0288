package main_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// The real binary: SIGHUP reloads (a broken file is refused and the old config keeps
// serving), SIGTERM drains and exits 0.
func TestServeReloadsOnSIGHUPAndDrainsOnSIGTERM(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	serveEach(ln, func(c net.Conn) { // a tiny upstream answering 200 "ok" on every connection's first request
		buf := make([]byte, 4096)
		_, _ = c.Read(buf)
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	port := testenv.FreePort(t)
	admin := testenv.FreePort(t)
	cfg := filepath.Join(t.TempDir(), "sluice.toml")
	write := func(prefix string) {
		require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`[entrypoints.web]
address = "127.0.0.1:%d"
[routers.api]
rule = "PathPrefix(`+"`%s`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[admin]
address = "127.0.0.1:%d"
`, port, prefix, ln.Addr(), admin)), 0o644))
	}
	write("/v1")
	p := testenv.StartProcess(t, bin, "serve", "--config", cfg)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p.WaitHTTP(t, base+"/v1/models", 10*time.Second)
	// The first line says what runs: the version, where the config came from, and its size.
	require.Regexp(t, `msg="sluice starting" version=\S+ config=`+regexp.QuoteMeta(cfg)+` entrypoints=1 routers=1 services=1 models=0\n`, p.Output())

	require.NoError(t, os.WriteFile(cfg, []byte("[routers.api\n"), 0o644))
	require.NoError(t, p.Signal(syscall.SIGHUP))
	p.WaitOutput(t, "reload refused", 5*time.Second)
	p.WaitHTTP(t, base+"/v1/models", 5*time.Second) // the old config still serves

	write("/v2")
	require.NoError(t, p.Signal(syscall.SIGHUP))
	p.WaitOutput(t, "configuration reloaded", 5*time.Second)
	p.WaitHTTP(t, base+"/v2/models", 5*time.Second)
	require.Regexp(t, `msg="configuration reloaded" generation=2 changed=routers.api\n`, p.Output(), "the reload line says what changed")

	require.NoError(t, p.Signal(syscall.SIGTERM))
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("sluice did not exit after SIGTERM")
	}
	exited, err := p.Exited()
	require.True(t, exited)
	require.NoError(t, err, "exit status after SIGTERM: %s", p.Output())
	require.Contains(t, p.Output(), "drained; exiting", "the last log line says the drain ended")
}

// A SIGTERM or SIGINT that comes while the gateway opens its listeners (sent here as soon as it
// says it is starting) is a drain like any other: the process exits 0 after "drained", not
// killed by the signal before its handler was in place.
func TestSignalDuringStartupDrains(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cfg := catchAllConfig(t, testenv.FreePort(t), ln.Addr().String(), "")
		p := testenv.StartProcess(t, bin, "serve", "--config", cfg)
		p.WaitOutput(t, "sluice starting", 10*time.Second)
		require.NoError(t, p.Signal(sig))
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: sluice did not exit", sig)
		}
		exited, err := p.Exited()
		require.True(t, exited)
		require.NoError(t, err, "%v during startup: %s", sig, p.Output())
		require.Contains(t, p.Output(), "drained; exiting", sig.String())
	}
}

// A second SIGTERM or SIGINT during a drain closes what is left at once: the process exits long
// before drain_timeout with the stream in flight cut, says so, and exits as the signal would
// have killed it (128 plus its number), not 0: the drain did not finish.
func TestSecondSignalCutsTheDrainShort(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	for _, c := range []struct {
		name string
		sig  syscall.Signal
		code int
	}{{"SIGTERM", syscall.SIGTERM, 143}, {"SIGINT", syscall.SIGINT, 130}} {
		t.Run(c.name, func(t *testing.T) {
			p, stream := drainingWithAStream(t, bin, c.sig, "60s")
			require.NoError(t, p.Signal(c.sig))
			select {
			case <-p.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("sluice went on draining after a second %v", c.sig)
			}
			require.Contains(t, p.Output(), "drain cut short")
			require.Equal(t, c.code, p.Cmd.ProcessState.ExitCode(), "exit status: %s", p.Output())
			_, err := io.Copy(io.Discard, stream)
			require.NoError(t, err, "the stream ends with the connection (not a timeout)")
		})
	}
}

// A drain that reaches an entrypoint's drain_timeout closes what is left there and exits 0,
// naming in its log line the entrypoint whose connections it cut.
func TestDrainTimeoutNamesTheEntrypointItCut(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	p, stream := drainingWithAStream(t, bin, syscall.SIGTERM, "200ms")
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("sluice went on draining past drain_timeout")
	}
	require.Equal(t, 0, p.Cmd.ProcessState.ExitCode(), "exit status: %s", p.Output())
	require.Contains(t, p.Output(), `msg="entrypoint drain cut connections" entrypoint=web`, "said as the cut happens")
	require.Regexp(t, `msg="drain_timeout reached; closed the connections left" cut="entrypoint web: `, p.Output())
	_, err := io.Copy(io.Discard, stream)
	require.NoError(t, err, "the stream ends with the connection (not a timeout)")
}

// drainingWithAStream starts bin serving a stream that never ends, with drainTimeout, opens one
// such stream, sends sig and returns once the gateway says it is draining: the stream holds the
// drain open.
func drainingWithAStream(t *testing.T, bin string, sig syscall.Signal, drainTimeout string) (*testenv.Process, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	serveEach(ln, func(c net.Conn) { // an upstream that streams a chunk every 50 ms and never ends
		buf := make([]byte, 4096)
		_, _ = c.Read(buf)
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := fmt.Fprint(c, "8\r\ndata: x\n\r\n"); err != nil {
				return
			}
		}
	})
	port := testenv.FreePort(t)
	cfg := catchAllConfig(t, port, ln.Addr().String(), fmt.Sprintf("drain_timeout = %q", drainTimeout))
	p := testenv.StartProcess(t, bin, "serve", "--config", cfg)
	p.WaitOutput(t, "entrypoint listening", 10*time.Second)

	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = fmt.Fprint(c, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	first := make([]byte, 256)
	_, err = c.Read(first)
	require.NoError(t, err, "the stream started")

	require.NoError(t, p.Signal(sig))
	p.WaitOutput(t, "send the signal again", 5*time.Second)
	return p, c
}

// Out of file descriptors, the accept failures are logged once a second, not once per retry:
// with connections piling up beyond the limit, accepts fail and succeed by turns and every
// failure would otherwise be a line.
func TestAcceptFailuresAreLoggedOnceASecond(t *testing.T) {
	port := testenv.FreePort(t)
	p, conns := outOfDescriptors(t, catchAllConfig(t, port, testenv.RefusingAddr(t), ""), port, "entrypoint listening")
	start := time.Now()
	// Closing connections frees descriptors, so accepts succeed and fail by turns.
	for _, c := range conns[:20] {
		_ = c.Close()
		time.Sleep(20 * time.Millisecond) // pacing the closes, not a wait for an event
	}
	elapsed := time.Since(start)
	lines := strings.Count(p.Output(), "accept failed")
	require.LessOrEqual(t, lines, int(elapsed/time.Second)+2, "accept failure lines in %v", elapsed)
	require.Contains(t, p.Output(), "suppressed_since_last=")
	// The gateway still serves once descriptors are free again.
	for _, c := range conns[20:] {
		_ = c.Close()
	}
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err, "an answer once descriptors are free")
	require.True(t, strings.HasPrefix(line, "HTTP/1.1 "), line)
}

// What net/http reports about the admin listener reaches the log as a warning: out of
// descriptors, its accept fails and it says so, retrying. Through the standard log package
// that line was filed under INFO. net/http retries after 5 ms, then twice as long each time
// up to a second, and says so each time; the log holds one such line a second, as it does an
// entrypoint's failed accepts, the next one counting those left out.
func TestAdminAcceptFailureIsAWarning(t *testing.T) {
	port, adminPort := testenv.FreePort(t), testenv.FreePort(t)
	cfg := catchAllConfigAdmin(t, port, testenv.RefusingAddr(t), "", fmt.Sprintf("127.0.0.1:%d", adminPort))
	p, _ := outOfDescriptors(t, cfg, port, "admin listening")
	start := time.Now()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", adminPort))
	require.NoError(t, err)
	defer c.Close()
	const failure = "http: Accept error"
	// The second line comes a second after the first, having left out those in between.
	counted := regexp.MustCompile(failure + `.*suppressed_since_last=[1-9]`)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Regexp(ct, counted, p.Output(), "a line that counts the failures left out since the one before")
	}, 10*time.Second, 20*time.Millisecond)
	elapsed := time.Since(start)
	lines := 0
	for _, line := range strings.Split(p.Output(), "\n") {
		if strings.Contains(line, failure) {
			lines++
			require.Contains(t, line, "level=WARN", line)
			require.Contains(t, line, "component=admin", line)
		}
	}
	require.LessOrEqual(t, lines, int(elapsed/time.Second)+2, "admin accept failure lines in %v:\n%s", elapsed, p.Output())
}

// outOfDescriptors starts the gateway on cfg with 48 descriptors and, once it logged ready (the
// line of its last listener: connections opened before that one is bound would take the
// descriptor it needs), opens 80 connections to its entrypoint on port, which the kernel
// queues once the gateway cannot accept them; it returns once the gateway logged a failed
// accept, with the connections (closed at cleanup).
func outOfDescriptors(t *testing.T, cfg string, port int, ready string) (*testenv.Process, []net.Conn) {
	t.Helper()
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	cmd := exec.Command("sh", "-c", `ulimit -n 48 && exec "$0" serve --config "$1"`, bin, cfg)
	p := testenv.StartProcessCmd(t, cmd)
	p.WaitOutput(t, ready, 10*time.Second)
	return p, holdUntilAcceptFails(t, p, fmt.Sprintf("127.0.0.1:%d", port))
}

// holdUntilAcceptFails opens 80 connections to addr, which the gateway p (run with 48
// descriptors) accepts until it has no descriptor left, and returns them once p logged a
// failed accept. They are closed at cleanup.
func holdUntilAcceptFails(t *testing.T, p *testenv.Process, addr string) []net.Conn {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for i := 0; i < 80; i++ {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	p.WaitOutput(t, "accept failed", 10*time.Second)
	return conns
}

// serveEach runs handle on every connection ln accepts, each on a goroutine of its own that
// closes the connection after handle, until ln is closed.
func serveEach(ln net.Listener, handle func(c net.Conn)) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}

// catchAllConfig writes a config whose entrypoint web on port routes every path to upstream
// (host:port), with entrypointKeys added to the entrypoint's table and the admin API off, and
// returns its path.
func catchAllConfig(t *testing.T, port int, upstream, entrypointKeys string) string {
	t.Helper()
	return catchAllConfigAdmin(t, port, upstream, entrypointKeys, "")
}

// catchAllConfigAdmin is catchAllConfig with the admin API on admin (host:port; "": off).
func catchAllConfigAdmin(t *testing.T, port int, upstream, entrypointKeys, admin string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "sluice.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`[entrypoints.web]
address = "127.0.0.1:%d"
%s
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[admin]
address = %q
`, port, entrypointKeys, upstream, admin)), 0o644))
	return cfg
}
