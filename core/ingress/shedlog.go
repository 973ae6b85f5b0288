package ingress

import (
	"log/slog"
	"net"
	"time"

	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/internal/loglimit"
)

// shedLog writes the warning for a client connection an engine shed: a request answered 408
// because it did not arrive within read_header_timeout, a client cut for reading nothing
// within client_stall_timeout, or a connection closed at once over max_connections. sluice_connections_shed_total counts every one; the line says
// which client it was and why, in the metric's reason label. A flood of such clients (a
// slowloris attack) must not flood the log, so an entrypoint writes at most one line a second
// (loglimit.Limit), and the next line it writes counts in suppressed_since_last the sheds it
// left out. It runs only when a connection is shed, never for a request that arrives and reads
// in time.
type shedLog struct {
	log        *slog.Logger
	entrypoint string
	limit      loglimit.Limit
}

// headTimeout logs the 408 a client connection got for a request not complete within
// read_header_timeout; stalled is the answer's error, which says whether the head or the body
// stalled.
func (l *shedLog) headTimeout(client net.Addr, stalled *http1.Error) {
	if n, ok := l.limit.Allow(); ok {
		l.log.Warn("client connection shed", "entrypoint", l.entrypoint, "reason", metrics.ShedHeaderTimeout.String(),
			"client_addr", addrString(client), "error", stalled.Msg, "suppressed_since_last", n)
	}
}

// clientStall logs the cut of a client connection that took none of its response for
// client_stall_timeout: pending is the response bytes the gateway held for it that its socket
// would not take, stalled how long it took none.
func (l *shedLog) clientStall(client net.Addr, pending int64, stalled time.Duration) {
	if n, ok := l.limit.Allow(); ok {
		l.log.Warn("client connection shed", "entrypoint", l.entrypoint, "reason", metrics.ShedClientStall.String(),
			"client_addr", addrString(client), "error", "the client read nothing of the response within client_stall_timeout",
			"pending_bytes", pending, "stalled_ms", stalled.Milliseconds(), "suppressed_since_last", n)
	}
}

// maxConnections logs the close of a client connection accepted while the entrypoint held
// limit connections (max_connections): it got no answer.
func (l *shedLog) maxConnections(client net.Addr, limit int) {
	if n, ok := l.limit.Allow(); ok {
		l.log.Warn("client connection shed", "entrypoint", l.entrypoint, "reason", metrics.ShedMaxConnections.String(),
			"client_addr", addrString(client), "error", "the entrypoint holds max_connections connections",
			"max_connections", limit, "suppressed_since_last", n)
	}
}

// addrString is a's text ("198.51.100.7:51234"), or "" when there is none: a net.Addr given
// to a JSON log handler as it is would be written as its struct fields.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
