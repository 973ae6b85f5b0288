//go:build unix

package testenv

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ExhaustDescriptorsButOne lowers this process's descriptor limit to 256 (soft and hard) and
// fills it with duplicates of standard input, all but the last free descriptor, so that the
// next descriptor the process opens takes the last one and the one after fails with EMFILE.
// For a test's child process only: nothing gives the descriptors back.
func ExhaustDescriptorsButOne() error {
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 256, Max: 256}); err != nil {
		return err
	}
	last := -1
	for {
		fd, err := unix.Dup(0)
		if err == unix.EMFILE {
			break
		}
		if err != nil {
			return err
		}
		last = fd
	}
	if last < 0 {
		return fmt.Errorf("testenv: no descriptor was free under the limit")
	}
	return unix.Close(last)
}
