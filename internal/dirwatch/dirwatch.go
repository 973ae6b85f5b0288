// Package dirwatch keeps an fsnotify watcher on a wanted set of directories, for the file
// watches of the configuration and the TLS certificates.
package dirwatch

import "github.com/fsnotify/fsnotify"

// Sync makes w watch the directories of want and no other. The watches in place are asked of
// w rather than remembered: a directory removed or renamed away loses its watch there (a
// deployment that replaces conf.d by a new directory, a version directory Kubernetes
// deletes), and the directory that takes its name must be watched anew. want's value says
// whether the directory is needed: a needed one that cannot be watched is reported to
// failed (dir, error); an optional one is skipped quietly. Sync reports whether it added a
// watch.
func Sync(w *fsnotify.Watcher, want map[string]bool, failed func(dir string, err error)) (added bool) {
	watching := map[string]bool{}
	for _, d := range w.WatchList() {
		if _, ok := want[d]; !ok {
			_ = w.Remove(d) // may be gone with its directory
			continue
		}
		watching[d] = true
	}
	for d, needed := range want {
		if watching[d] {
			continue
		}
		if err := w.Add(d); err != nil {
			if needed {
				failed(d, err)
			}
			continue
		}
		added = true
	}
	return added
}
