package scaling

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Executor starts the process (or pod) of one replica listening on a port. Stopping is the
// Process's.
type Executor interface {
	Start(port int) (Process, error)
}

// Process is a started replica.
type Process interface {
	// Exited is closed when the process has ended, whoever ended it.
	Exited() <-chan struct{}
	// Stop ends the process: SIGTERM, then SIGKILL after timeout. It returns once the
	// process has exited.
	Stop(timeout time.Duration)
	// PID identifies the process in the admin API.
	PID() int
}

// Exec is the exec executor: each replica is a local process started from Command, with
// "{port}" in any argument or Env entry replaced by the replica's port.
type Exec struct {
	Command []string
	Env     []string
}

// Start implements Executor. The process inherits the gateway's environment plus Env; its
// output is discarded.
func (e *Exec) Start(port int) (Process, error) {
	if len(e.Command) == 0 {
		return nil, fmt.Errorf("scaling: exec: empty command")
	}
	p := strconv.Itoa(port)
	args := make([]string, len(e.Command))
	for i, a := range e.Command {
		args[i] = strings.ReplaceAll(a, "{port}", p)
	}
	cmd := exec.Command(args[0], args[1:]...)
	// The replica leads a process group of its own, so that Stop reaches the processes it
	// starts too (a command wrapped in a shell script: the shell and the model server it runs).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = os.Environ()
	for _, kv := range e.Env {
		cmd.Env = append(cmd.Env, strings.ReplaceAll(kv, "{port}", p))
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("scaling: exec %s: %w", args[0], err)
	}
	pr := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(pr.exited)
	}()
	return pr, nil
}

type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *proc) Exited() <-chan struct{} { return p.exited }

func (p *proc) PID() int { return p.cmd.Process.Pid }

// ExitStatus is how the process ended ("exit status 1", "signal: killed"), once Exited is
// closed.
func (p *proc) ExitStatus() string {
	<-p.exited
	return p.cmd.ProcessState.String()
}

// exitStatus is p's ExitStatus when it has one (an exec replica), else "".
func exitStatus(p Process) string {
	if e, ok := p.(interface{ ExitStatus() string }); ok {
		return e.ExitStatus()
	}
	return ""
}

// Stop implements Process for the replica's whole process group: SIGTERM to every process of
// it, then SIGKILL to those left after timeout. It returns once the replica's process has
// exited and no other process of its group is alive, or after timeout.
func (p *proc) Stop(timeout time.Duration) {
	pgid := p.cmd.Process.Pid
	select {
	case <-p.exited:
		if !groupAlive(pgid) {
			return
		}
	default:
	}
	deadline := time.Now().Add(timeout)
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
	}
	for groupAlive(pgid) && time.Now().Before(deadline) {
		time.Sleep(stopPoll)
	}
	if groupAlive(pgid) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	_ = p.cmd.Process.Kill() // the replica's own process, should it have left its group
	<-p.exited
}

// stopPoll is how often a stopping replica's process group is looked at.
const stopPoll = 10 * time.Millisecond

// groupAlive reports whether a process of group pgid is alive: the signal 0 reaches one, and
// /proc (where there is one) lists one that is not a zombie (a process whose parent, the
// replica's shell say, ended is reparented, and a zombie nobody reaps would look alive).
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return true
	}
	want := strconv.Itoa(pgid)
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) >= 3 && fields[0] != "Z" && fields[2] == want {
			return true
		}
	}
	return false
}

// FreePorts returns n loopback TCP ports that were free a moment ago (the kernel chose them)
// and that no other live scaler of this process holds: the replicas' ports, reserved until
// ReleasePorts. The kernel may hand a port it chose once again as soon as its listener closes,
// so two scalers (two scaled services, or the scalers of a reload) could otherwise share one,
// and the replica that binds it second would fail at every start. Another process may take a
// port once it is returned; a scaler holds its own (reservePorts) against that.
func FreePorts(n int) ([]int, error) {
	lns, err := reservePorts(n)
	if err != nil {
		return nil, err
	}
	ports := make([]int, len(lns))
	for i, ln := range lns {
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
	}
	return ports, nil
}

// reservePorts is FreePorts with the ports' listeners left open (their ports reserved too),
// for the caller to hold the ports with.
func reservePorts(n int) ([]net.Listener, error) {
	var held, skipped []net.Listener
	defer func() {
		for _, ln := range skipped {
			_ = ln.Close()
		}
	}()
	reserved.mu.Lock()
	defer reserved.mu.Unlock()
	for len(held) < n {
		// Every listener is held open until the end, so that the kernel chooses each port once:
		// the n ports differ, and one skipped as reserved is not chosen again.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			skipped = append(skipped, held...)
			return nil, fmt.Errorf("scaling: allocate a replica port: %w", err)
		}
		if p := ln.Addr().(*net.TCPAddr).Port; !reserved.ports[p] {
			held = append(held, ln)
		} else {
			skipped = append(skipped, ln)
		}
	}
	for _, ln := range held {
		reserved.ports[ln.Addr().(*net.TCPAddr).Port] = true
	}
	return held, nil
}

// portHold holds a replica slot's loopback port while no replica of the slot runs: another
// process cannot listen on it (its bind fails), nor does the kernel choose it as an outgoing
// connection's local port, which it would for a port nothing holds (the replica then could
// not bind it, or another process's server would answer the replica's readiness probe and its
// requests). A connection to a held port is accepted and reset at once: nothing is served
// there, and the caller learns so without waiting.
type portHold struct {
	ln   net.Listener
	done chan struct{} // closed when the accept loop has ended
}

// holdPort holds port, failing when another socket holds it (EADDRINUSE).
func holdPort(port int) (*portHold, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	return newPortHold(ln), nil
}

// newPortHold holds the port of ln, a loopback listener.
func newPortHold(ln net.Listener) *portHold {
	h := &portHold{ln: ln, done: make(chan struct{})}
	go h.refuse()
	return h
}

// refuse resets every connection to the held port until the hold is released. An accept error
// other than the release (out of descriptors, say) ends the loop too: the port stays held,
// and a connection to it then waits in the listener's backlog until the release resets it.
func (h *portHold) refuse() {
	defer close(h.done)
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, leaving no TIME_WAIT on the port
		}
		_ = c.Close()
	}
}

// release lets the port go: the listener is closed once its accept loop has ended, and the
// port is free for the replica to bind.
func (h *portHold) release() {
	_ = h.ln.Close()
	<-h.done
}

// ReleasePorts gives back ports that FreePorts reserved, once their replicas are stopped.
func ReleasePorts(ports []int) {
	reserved.mu.Lock()
	defer reserved.mu.Unlock()
	for _, p := range ports {
		delete(reserved.ports, p)
	}
}

// reserved is the replica ports of the process's live scalers.
var reserved = struct {
	mu    sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}
