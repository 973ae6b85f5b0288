// Package linkpath resolves the symbolic links of a path element by element, naming each link
// it meets, for the file watches of the configuration and the TLS certificates: a deployment
// switches versions by renaming a new link over an old one (a Kubernetes ConfigMap's or
// secret's ..data, a release directory's current), and the event of that rename is for the
// link's name in its own directory, which a watch must know to look for.
package linkpath

import (
	"os"
	"path/filepath"
	"strings"
)

// MaxHops bounds the links followed from one path: a loop of links ends there.
const MaxHops = 40

// Resolve resolves the links of the absolute path p element by element, as the kernel does,
// and returns each link it met (named within its resolved directory, as the events of a watch
// on that directory name it) and the path p leads to. A missing element ends the walk there,
// with the rest of p kept as it is; so does a link past MaxHops.
func Resolve(p string) (links []string, final string) {
	sep := string(filepath.Separator)
	resolved := sep
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(p), sep), sep)
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		if c == "" || c == "." {
			continue
		}
		next := filepath.Join(resolved, c)
		st, err := os.Lstat(next)
		if err != nil || hops == MaxHops {
			return links, filepath.Join(append([]string{next}, rest...)...)
		}
		target := ""
		if st.Mode()&os.ModeSymlink != 0 {
			target, err = os.Readlink(next)
		}
		if target == "" || err != nil {
			resolved = next
			continue
		}
		hops++
		links = append(links, next)
		if filepath.IsAbs(target) {
			resolved = sep
		}
		rest = append(strings.Split(filepath.Clean(target), sep), rest...)
	}
	return links, resolved
}
