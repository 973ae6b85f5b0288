package gateway

import (
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluice-gw/sluice/internal/dirwatch"
	"github.com/sluice-gw/sluice/internal/linkpath"
)

// watcher reloads the gateway when its configuration files change ([providers.file]
// watch = true): it watches the directories holding them (editors and deployments replace a
// file by renaming another over it, which a watch on the file itself would lose), and
// reloads once the files have been quiet for the debounce time, so that several writes make
// one reload. A reload that fails keeps the running configuration, as SIGHUP does.
type watcher struct {
	g        *Gateway
	fs       *fsnotify.Watcher
	debounce time.Duration
	paths    map[string]bool // the files and directories whose changes count
	// recheck asks run for a reload after the debounce time, as a change does (recheckNew).
	recheck chan struct{}
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex // guards debounce and paths, which syncWatcher changes
}

// syncWatcher starts, adjusts or stops the file watcher to follow the configuration in
// force: started when it sets providers.file.watch, stopped when it no longer does, and
// watching the files the configuration was loaded from.
func (g *Gateway) syncWatcher() {
	g.watchMu.Lock() // one syncWatcher at a time
	defer g.watchMu.Unlock()
	cfg := g.live.Load().Config
	f := cfg.Providers.File
	if !f.Watch || g.ConfigPath == "" || g.draining.Load() {
		if g.watch != nil {
			g.watch.close()
			g.watch = nil
			g.Log.Info("configuration file watch stopped")
		}
		return
	}
	started := false // the watch starts here
	if g.watch == nil {
		fw, err := fsnotify.NewWatcher()
		if err != nil {
			g.Log.Error("configuration file watch cannot start; reload with SIGHUP or the admin API", "error", err.Error())
			return
		}
		g.watch = &watcher{g: g, fs: fw, recheck: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
		go g.watch.run()
		g.Log.Info("watching the configuration files", "debounce", f.Debounce.String())
		started = true
	}
	w := g.watch
	w.setDebounce(f.Debounce)
	paths, dirs := watchedPaths(append(cfg.WatchPaths(), g.ConfigPath))
	added := dirwatch.Sync(w.fs, dirs, func(dir string, err error) {
		g.Log.Warn("cannot watch a configuration directory", "path", dir, "error", err.Error())
	})
	w.setPaths(paths)
	if added && !started {
		// A directory watched from now on (one that replaced another) may have changed
		// since the reload read it, before its watch: a change there would go unseen.
		w.recheckNew()
	}
}

// recheckNew asks for a reload after the debounce time, which finds what changed in a
// directory before it was watched; nothing when one is asked for already.
func (w *watcher) recheckNew() {
	select {
	case w.recheck <- struct{}{}:
	default:
	}
}

// watchedPaths returns, for the configuration files and directories ps, the paths whose
// events mean the configuration may have changed (true for a configuration directory, whose
// *.toml files count too), and the directories to watch for them: each path as its links
// resolve, the directory a file is in (which a deployment may replace whole), and every link
// met on the way, in any element of the path, since renaming a new link over one is how a
// deployment switches versions. A Kubernetes ConfigMap mounts sluice.toml as a link to
// ..data/sluice.toml and updates it by renaming a new ..data link over the old one; a release
// directory behind a link (current -> releases/v2) is switched the same way. Every path is
// written with its directory's links resolved, as the events of a directory watched by that
// name are.
func watchedPaths(ps []string) (paths, dirs map[string]bool) {
	paths, dirs = map[string]bool{}, map[string]bool{}
	for _, p := range ps {
		a, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		links, final := linkpath.Resolve(a)
		for _, l := range links {
			paths[l] = true
			dirs[filepath.Dir(l)] = true
		}
		// The path's own name in its parent is watched, for a directory too: a new directory
		// (or a link to one) that takes its name reloads, which then watches the new one.
		paths[final] = true
		dirs[filepath.Dir(final)] = true
		if st, err := os.Stat(final); err == nil && st.IsDir() {
			dirs[final] = true
		} else if d := filepath.Dir(final); d != filepath.Dir(d) {
			// So is a file's directory, replaced whole by a deployment: its name counts
			// (false: not a configuration directory, whose other *.toml files count too).
			if _, ok := paths[d]; !ok {
				paths[d] = false
			}
			dirs[filepath.Dir(d)] = true
		}
	}
	return paths, dirs
}

func (w *watcher) setDebounce(d time.Duration) {
	w.mu.Lock()
	w.debounce = d
	w.mu.Unlock()
}

func (w *watcher) setPaths(p map[string]bool) {
	w.mu.Lock()
	w.paths = p
	w.mu.Unlock()
}

// relevant reports whether a change of name concerns the configuration: a path watchedPaths
// lists (a file loaded, a link leading to one, a directory holding one), or a *.toml file in
// a configuration directory (a new file there is part of the next load).
func (w *watcher) relevant(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.paths[name]; ok {
		return true
	}
	dir := filepath.Dir(name)
	base := filepath.Base(name)
	return w.paths[dir] && filepath.Ext(base) == ".toml" && base[0] != '.'
}

func (w *watcher) run() {
	defer close(w.done)
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-w.stop:
			if timer != nil {
				timer.Stop()
			}
			return
		case ev, ok := <-w.fs.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod || !w.relevant(ev.Name) {
				continue
			}
			fire = w.arm(&timer)
		case <-w.recheck:
			fire = w.arm(&timer)
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			w.g.Log.Warn("configuration file watch error", "error", err.Error())
		case <-fire:
			fire = nil
			_ = w.g.Reload() // Reload logs a refusal
		}
	}
}

// arm starts the debounce time of a change over, on *timer (made at the first change), and
// returns the channel that says it passed.
func (w *watcher) arm(timer **time.Timer) <-chan time.Time {
	w.mu.Lock()
	d := w.debounce
	w.mu.Unlock()
	if *timer == nil {
		*timer = time.NewTimer(d)
	} else {
		(*timer).Stop()
		(*timer).Reset(d)
	}
	return (*timer).C
}

// close stops the watcher and waits for its goroutine. It must not be called from it.
func (w *watcher) close() {
	close(w.stop)
	_ = w.fs.Close()
	<-w.done
}
