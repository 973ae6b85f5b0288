//go:build !linux

package peers

import (
	"errors"
	"runtime"
)

// errNoUsage says why TreeUsage has nothing: the CPU and memory figures of a compare come from
// Linux's /proc, which other systems lack or lay out differently.
var errNoUsage = errors.New("peers: process CPU and memory use is read from /proc, which " + runtime.GOOS + " does not provide; the compare reports none")

// TreeUsage reports errNoUsage: see usage_linux.go.
func TreeUsage(pid int) (Usage, error) { return Usage{}, errNoUsage }

// ResetPeakRSS reports errNoUsage: see usage_linux.go.
func ResetPeakRSS(pid int) error { return errNoUsage }
