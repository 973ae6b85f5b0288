//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package pool

// peeker is empty where MSG_PEEK is not wired up: idle conns are trusted until used, and the
// keep-alive race retry covers a conn the upstream closed.
type peeker struct{}

func (c *conn) initPeek() {}

func (c *conn) alive() bool { return true }
