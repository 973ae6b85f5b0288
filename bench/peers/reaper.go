package peers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// reaperScript is the reaper's program, run by /bin/sh. Its standard input comes from the
// bench: the first line is the directory to remove (empty: none), then "+PGID" for a process
// group to end and "-PGID" for one that is gone. When the input ends it sends SIGKILL to every
// group still listed and removes the directory. The input ends when the bench closes it
// (Reaper.Close) or when the bench dies by any signal, SIGKILL included: the kernel closes the
// bench's end of the pipe, which no other process holds (the descriptor is close-on-exec).
//
// The directory comes on the input, not in the arguments, so that the reaper's command line
// holds neither the bench's name nor its work directory's (/tmp/sluice-bench-*): `pkill -f
// sluice-bench` matches the bench and nginx's master, which is given that directory, and
// leaves the reaper to end nginx's workers and remove the directory.
//
// The group kill is spelt `kill -9 -PGID`, which dash (Debian's /bin/sh) takes, as bash does;
// dash refuses `kill -s KILL -PGID` and `kill -KILL -- -PGID`.
const reaperScript = `
IFS= read -r dir
groups=
while IFS= read -r line; do
	case $line in
	+*) groups="$groups ${line#+}" ;;
	-*)
		left=
		for g in $groups; do
			if [ "$g" != "${line#-}" ]; then left="$left $g"; fi
		done
		groups=$left ;;
	esac
done
for g in $groups; do kill -9 "-$g" 2>/dev/null; done
if [ -n "$dir" ]; then rm -rf -- "$dir"; fi
`

// reaperShell runs reaperScript; a shell is on every system the bench runs on (it is Unix only).
const reaperShell = "/bin/sh"

// reaperName is the reaper's argv[0] and $0: what ps shows for it and `pgrep -f` matches. It
// names no program of the bench's (see reaperScript).
const reaperName = "bench-peer-reaper"

// Reaper ends what the bench started when the bench ends, however it ends. The parent-death
// signal (proc_linux.go) reaches only the process the bench started: nginx's master, killed,
// leaves its workers serving on the bench's port, and a bench killed with SIGKILL (by hand, or
// by `pkill -9 -f sluice-bench`) runs no deferred cleanup, so its work directory stays. The
// reaper is a small process named bench-peer-reaper, in a process group of its own (a
// terminal's Ctrl-C or Ctrl-\ does not reach it), that outlives the bench: when the bench
// closes its pipe or dies, it kills the process group of every process started with
// Reaper.StartProcess and not stopped since, and removes the work directory.
type Reaper struct {
	mu     sync.Mutex
	w      *os.File // the reaper's standard input
	cmd    *exec.Cmd
	closed bool
	err    error // Close's result
}

// StartReaper starts a reaper that removes dir, and everything in it, when the bench ends; ""
// removes nothing (a work directory the user named is kept). It returns an error when dir
// cannot be made absolute or holds a newline (the reaper reads it as one line), or when the
// reaper's shell cannot be started.
func StartReaper(dir string) (*Reaper, error) {
	if dir != "" {
		// The reaper's working directory is the bench's, but an absolute path says which
		// directory goes without depending on it.
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("peers: reaper: %w", err)
		}
		dir = abs
	}
	if strings.Contains(dir, "\n") {
		return nil, fmt.Errorf("peers: reaper: directory %q holds a newline", dir)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("peers: reaper: %w", err)
	}
	// Written before the reaper starts, into the pipe's buffer: a bench that dies right after
	// the start still has its directory removed.
	if _, err := w.WriteString(dir + "\n"); err != nil {
		_, _ = r.Close(), w.Close()
		return nil, fmt.Errorf("peers: reaper: %w", err)
	}
	cmd := &exec.Cmd{Path: reaperShell, Args: []string{reaperName, "-c", reaperScript, reaperName}, Stdin: r}
	// No parent-death signal: the reaper's work starts when the bench dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	_ = r.Close()
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("peers: start the reaper (%s): %w", reaperShell, err)
	}
	return &Reaper{w: w, cmd: cmd}, nil
}

// StartProcess is the function StartProcess, with the new process's group handed to the
// reaper until Process.Stop has ended it. It returns an error, and leaves nothing running,
// when the process cannot be started or the reaper has exited.
func (r *Reaper) StartProcess(name, bin string, args []string, dir string) (*Process, error) {
	p, err := StartProcess(name, bin, args, dir)
	if err != nil {
		return nil, err
	}
	if err := r.send(fmt.Sprintf("+%d\n", p.PID())); err != nil {
		_ = p.Stop(0)
		return nil, fmt.Errorf("peers: %s: %w", name, err)
	}
	p.reaper = r
	return p, nil
}

// forget tells the reaper that the process group pgid has ended, so that the reaper never
// kills a later group that reuses the number.
func (r *Reaper) forget(pgid int) {
	_ = r.send(fmt.Sprintf("-%d\n", pgid))
}

func (r *Reaper) send(line string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("reaper: closed")
	}
	if _, err := r.w.WriteString(line); err != nil {
		return fmt.Errorf("reaper: %w", err)
	}
	return nil
}

// Close ends the reaper as the bench's death would: it kills the groups of the processes not
// stopped yet, removes the directory given to StartReaper, and exits. Close waits for that and
// returns an error when the reaper did not exit cleanly. Calling it again returns the same.
func (r *Reaper) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return r.err
	}
	r.closed = true
	_ = r.w.Close()
	if err := r.cmd.Wait(); err != nil {
		r.err = fmt.Errorf("peers: reaper: %w", err)
	}
	return r.err
}
