// Package peers runs the processes of a side-by-side benchmark:
// the upstream simulator (llmsim), sluice on each ingress engine, and the
// peer proxies nginx and haproxy with equivalent settings, each from a
// generated config in a temporary directory; it measures their CPU time and
// memory from /proc, and drives harness runs against them in alternating
// rounds (Compare).
package peers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// InstallHint is printed when a peer proxy is missing. The harness installs
// nothing itself.
const InstallHint = "apt-get install nginx haproxy"

// sbinDirs are searched after PATH for nginx and haproxy, which Debian
// installs in /usr/sbin (not on every user's PATH).
var sbinDirs = []string{"/usr/sbin", "/usr/local/sbin", "/sbin"}

// FindBinary returns the path of an executable called name: first in each of
// dirs (e.g. "./bin"), then on PATH, then in /usr/sbin, /usr/local/sbin and
// /sbin. It returns an error naming the places searched when none has it.
func FindBinary(name string, dirs ...string) (string, error) {
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if isExecutable(p) {
			return filepath.Abs(p)
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	for _, d := range sbinDirs {
		p := filepath.Join(d, name)
		if isExecutable(p) {
			return p, nil
		}
	}
	searched := append(slices.DeleteFunc(slices.Clone(dirs), func(d string) bool { return d == "" }), "PATH")
	return "", fmt.Errorf("peers: %s not found in %s", name, strings.Join(append(searched, sbinDirs...), ", "))
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// findSluice returns the path of the sluice binary in dirs or on PATH (FindBinary) for a
// command that needs it. A missing one is an *OptionError for flag, the option that asked for
// sluice, which says where it was looked for and how to go on: build it with make build (into
// ./bin, the default of --bin), name the directory that holds it with --bin, or without, the
// way to run without sluice. Compare and RunAffinity look for it before they start anything.
func findSluice(dirs []string, flag, without string) (string, error) {
	bin, err := FindBinary("sluice", dirs...)
	if err != nil {
		return "", optionError(flag, "sluice not found in %s or PATH: build it with `make build`, name the directory that holds it with --bin DIR, or %s",
			strings.Join(dirs, ", "), without)
	}
	return bin, nil
}
