package peers

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/PID/stat (100 on
// every Linux architecture Go supports; proc(5)).
const clockTicks = 100

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

// ResetPeakRSS makes the peak resident set size (VmHWM) of pid and of each of its descendants
// start again from its current RSS (proc(5), /proc/PID/clear_refs "5"), so that a later
// TreeUsage's HWMBytes is the peak since this call rather than since each process started. It
// returns an error when pid's peak, or a descendant's still running, could not be reset.
func ResetPeakRSS(pid int) error {
	for i, p := range descendants(pid) {
		err := os.WriteFile("/proc/"+strconv.Itoa(p)+"/clear_refs", []byte("5"), 0)
		if err != nil && (i == 0 || !errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("peers: reset the peak RSS of pid %d: %w", p, err)
		}
	}
	return nil
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
