package peers

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Process is a child process started by the bench (the upstream, sluice or
// a peer proxy) in its own process group, with stdout and stderr in
// Dir/<Name>.log. On Linux it is killed with SIGKILL if the bench process
// dies (parent-death signal, proc_linux.go); the processes it forks, as
// nginx's master forks its workers, are not, unless it was started by a
// Reaper.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	reaper  *Reaper // nil when started without one
}

// StartProcess starts bin with args, logging to dir/name.log. When the
// process exits, what is left of its group gets SIGKILL. It returns an error
// if the binary cannot be started.
func StartProcess(name, bin string, args []string, dir string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("peers: %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("peers: start %s (%s): %w", name, bin, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		// What the process forked goes with it (nginx's workers outlive a master that
		// died). Sent at once: a group's number is free for reuse once the group is empty.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = lf.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Stop sends SIGTERM to the process group it leads, waits up to grace for
// the process to exit, then sends SIGKILL to the group. It returns nil once
// the process has exited, and an error when it outlives SIGKILL by 5 s.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		p.forget()
		return nil
	default:
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		p.forget()
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.done:
		p.forget()
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("peers: %s (pid %d) did not exit after SIGKILL", p.Name, pgid)
	}
}

// forget takes the process's group off its reaper's list: the group is gone (see StartProcess).
func (p *Process) forget() {
	if p.reaper != nil {
		p.reaper.forget(p.cmd.Process.Pid)
	}
}

// LogTail returns up to the last n bytes of the process's log.
func (p *Process) LogTail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.TrimSpace(b))
}

// Usage is the resource use of a process and its descendants, read from
// /proc (proc(5)).
type Usage struct {
	// CPUSeconds is CPU time since start, in seconds: the sum over all
	// threads of /proc/PID/task/TID/schedstat's time on CPU (ns resolution),
	// or, where schedstat is missing, utime+stime+cutime+cstime from
	// /proc/PID/stat (10 ms resolution).
	CPUSeconds float64
	// RSSBytes is the sum of current resident set sizes (VmRSS).
	RSSBytes int64
	// HWMBytes is the largest peak resident set size (VmHWM) of any one
	// process of the tree, since the process started or since the last
	// ResetPeakRSS of the tree.
	HWMBytes int64
	// Procs is the number of processes in the tree.
	Procs int
}

// Sampler tracks the peak of a process tree's summed RSS while it runs,
// sampling every interval.
type Sampler struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	peak int64
}

// StartSampler starts sampling pid's tree every interval.
func StartSampler(pid int, interval time.Duration) *Sampler {
	s := &Sampler{stop: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			s.sample(pid)
			select {
			case <-s.stop:
				s.sample(pid)
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *Sampler) sample(pid int) {
	u, err := TreeUsage(pid)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.peak = max(s.peak, u.RSSBytes)
	s.mu.Unlock()
}

// Stop ends sampling and returns the peak summed RSS in bytes.
func (s *Sampler) Stop() int64 {
	close(s.stop)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}
