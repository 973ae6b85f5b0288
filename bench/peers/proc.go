package peers

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Process is a child process started by the bench (the upstream, sluice or
// a peer proxy) in its own process group, with stdout and stderr in
// Dir/<Name>.log. It is killed with SIGKILL if the bench process dies
// (Linux parent-death signal).
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// StartProcess starts bin with args, logging to dir/name.log. It returns an
// error if the binary cannot be started.
func StartProcess(name, bin string, args []string, dir string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("peers: %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("peers: start %s (%s): %w", name, bin, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
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
// the process has exited.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("peers: %s (pid %d) did not exit after SIGKILL", p.Name, pgid)
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

// clockTicks is USER_HZ, the unit of utime/stime in /proc/PID/stat (100 on
// every Linux architecture Go supports; proc(5)).
const clockTicks = 100

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
	// process of the tree.
	HWMBytes int64
	// Procs is the number of processes in the tree.
	Procs int
}

// TreeUsage reads the usage of pid and all its descendants. It returns an
// error if pid itself cannot be read (it has exited).
func TreeUsage(pid int) (Usage, error) {
	pids := descendants(pid)
	var u Usage
	for i, p := range pids {
		cpu, err := readCPU(p)
		if err != nil {
			if i == 0 {
				return Usage{}, err
			}
			continue // a child exited meanwhile
		}
		rss, hwm := readMem(p)
		u.CPUSeconds += cpu
		u.RSSBytes += rss
		u.HWMBytes = max(u.HWMBytes, hwm)
		u.Procs++
	}
	return u, nil
}

// descendants returns pid followed by all its descendants, from one scan of
// /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fields, err := statFields(p)
		if err != nil || len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(string(fields[1]))
		children[ppid] = append(children[ppid], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// statFields returns the fields of /proc/PID/stat after the command name,
// so that index 0 is field 3 (state) of proc(5).
func statFields(pid int) ([][]byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, errors.New("peers: malformed /proc stat")
	}
	return bytes.Fields(b[i+1:]), nil
}

func readCPU(pid int) (float64, error) {
	if ns, ok := schedstatNs(pid); ok {
		return float64(ns) / 1e9, nil
	}
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 15 {
		return 0, fmt.Errorf("peers: /proc/%d/stat has %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, idx := range []int{11, 12, 13, 14} { // utime stime cutime cstime (fields 14-17)
		n, _ := strconv.ParseInt(string(f[idx]), 10, 64)
		ticks += n
	}
	return float64(ticks) / clockTicks, nil
}

// schedstatNs sums the on-CPU time in ns of every thread of pid from
// /proc/PID/task/*/schedstat (first field; Documentation/scheduler/sched-stats).
func schedstatNs(pid int) (int64, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return 0, false
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			if os.IsNotExist(err) && t == tasks[0] {
				return 0, false
			}
			continue // thread exited meanwhile
		}
		f := bytes.Fields(b)
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, false
		}
		total += n
	}
	return total, true
}

// readMem returns VmRSS and VmHWM of pid in bytes (0 when unreadable).
func readMem(pid int) (rss, hwm int64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			rss = parseKB(line[6:])
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			hwm = parseKB(line[6:])
		}
	}
	return rss, hwm
}

func parseKB(v []byte) int64 {
	f := bytes.Fields(v)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(string(f[0]), 10, 64)
	return n << 10
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
