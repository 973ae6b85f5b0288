package gateway

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"time"

	"github.com/sluice-gw/sluice/internal/loglimit"
)

// acceptErrorPrefix starts the line net/http's Server writes when its listener's Accept fails
// with an error it retries ("http: Accept error: ...; retrying in 5ms").
const acceptErrorPrefix = "http: Accept error: "

// newAdminErrorLog returns the admin server's ErrorLog, which net/http writes what went wrong
// serving to (an accept that failed for want of descriptors, a handler's panic): warnings
// to h, where the standard log package would file them under slog's default level, INFO.
func newAdminErrorLog(h slog.Handler) *log.Logger {
	return log.New(&adminErrorLog{h: h}, "", 0)
}

// adminErrorLog is the output of the admin server's ErrorLog, one Write per line. Out of
// descriptors, net/http retries a failed accept after 5 ms, then twice as long each time up
// to a second, and after every accept that succeeds starts again at 5 ms, writing a line
// each time: its accept failures are written once a second at most (loglimit), as an
// entrypoint's are, the next line counting in suppressed_since_last those left out. Other
// lines, each about a request of its own, are written as they come.
type adminErrorLog struct {
	h      slog.Handler
	accept loglimit.Limit
}

func (l *adminErrorLog) Write(p []byte) (int, error) {
	ctx := context.Background()
	if !l.h.Enabled(ctx, slog.LevelWarn) {
		return len(p), nil
	}
	msg := strings.TrimSuffix(string(p), "\n")
	r := slog.NewRecord(time.Now(), slog.LevelWarn, msg, 0)
	if strings.HasPrefix(msg, acceptErrorPrefix) {
		n, ok := l.accept.Allow()
		if !ok {
			return len(p), nil
		}
		r.AddAttrs(slog.Int64("suppressed_since_last", n))
	}
	return len(p), l.h.Handle(ctx, r)
}
