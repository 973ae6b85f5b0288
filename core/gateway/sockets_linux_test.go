package gateway_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// tcpSocket is one TCP socket this process holds open, as the kernel lists it.
type tcpSocket struct {
	local, remote int    // ports
	state         string // the kernel's state, hex: 0A listening, 01 established, 08 close-wait...
}

func (s tcpSocket) String() string {
	return fmt.Sprintf("port %d to port %d (state %s)", s.local, s.remote, s.state)
}

// ownTCPSockets returns the TCP sockets behind this process's open descriptors (IPv4 and
// IPv6), from /proc: a socket the process closed, or one in TIME_WAIT, which no descriptor
// holds, is not among them.
func ownTCPSockets() ([]tcpSocket, error) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if ino, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	var out []tcpSocket
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			if os.IsNotExist(err) {
				continue // no IPv6
			}
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			out = append(out, tcpSocket{local: hexPort(fields[1]), remote: hexPort(fields[2]), state: fields[3]})
		}
		err = sc.Err()
		_ = f.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// hexPort is the port of a /proc/net/tcp address, "0100007F:1F90".
func hexPort(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.ParseUint(p, 16, 16)
	return int(n)
}
