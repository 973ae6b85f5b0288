//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package ingress

import "golang.org/x/sys/unix"

// shutdownWrite sends the FIN of a connection whose fd the caller owns, keeping it open for
// reading.
func shutdownWrite(fd int) error { return unix.Shutdown(fd, unix.SHUT_WR) }
