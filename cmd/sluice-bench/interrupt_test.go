//go:build unix

package main_test

import (
	"bufio"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// A compare stopped by SIGINT or SIGTERM says so and exits as a shell reports a process the
// signal ended (128 plus its number), not with the error of the run it cut short.
func TestInterruptedCompareExitsWithTheSignalsStatus(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	for _, c := range []struct {
		sig  syscall.Signal
		name string
	}{{syscall.SIGINT, "SIGINT"}, {syscall.SIGTERM, "SIGTERM"}} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, "compare", "--peers", "none", "--engines", "none", "--workload", "json",
				"--bin", t.TempDir(), "--concurrency", "2", "--rounds", "1", "--warmup", "10ms", "--duration", "60s")
			cmd.Dir = t.TempDir()
			stderr, err := cmd.StderrPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			done := make(chan struct{})
			defer func() {
				_ = cmd.Process.Kill()
				<-done
			}()
			lines := make(chan string, 64)
			go func() {
				defer close(done)
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			// The notes it prints before the run: the handler is in place by then.
			deadline := time.After(30 * time.Second)
			for started := false; !started; {
				select {
				case l := <-lines:
					started = strings.Contains(l, "no proxy is running")
				case <-deadline:
					t.Fatal("the compare did not start")
				}
			}
			require.NoError(t, cmd.Process.Signal(c.sig))
			var last string
			for l := range lines {
				last = l
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "exit: %v", err)
			require.Equal(t, 128+int(c.sig), ee.ExitCode())
			require.Equal(t, "sluice-bench compare: interrupted by "+c.name, last)
		})
	}
}
