//go:build !linux

package ingress

import "syscall"

// The loops do not accept here (no accept4): acceptLoop alone does.
func (e *GnetEngine) loopListener() syscall.RawConn { return nil }
func (e *GnetEngine) acceptOnLoop(*loopState)       {}
