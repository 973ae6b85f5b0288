//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package pipeline

import "syscall"

// socketError returns the pending error of the socket fd (SO_ERROR): a reset after the peer's
// FIN sets one (EPIPE on Linux), where a read still reports the FIN's EOF.
func socketError(fd uintptr) error {
	v, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_ERROR)
	if err != nil {
		return err
	}
	if v != 0 {
		return syscall.Errno(v)
	}
	return nil
}
