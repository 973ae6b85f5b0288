//go:build !linux

package ingress

import "syscall"

// The loops do not accept here (kqueue has no exclusive wake-up, so every loop would wake
// for each connection): acceptLoop alone does.
func (e *GnetEngine) loopListener() syscall.RawConn { return nil }
