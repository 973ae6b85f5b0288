// Package accesslog writes one JSON line per request, as a completion stage of the request
// pipeline: who asked what, where it went, how it ended and how long it took. It never writes
// bodies, credentials, header values or query values, so that the log can be shipped and kept
// without becoming a store of secrets or prompts.
package accesslog

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// Logger is the access log: a pipeline.CompletionStage that every request of a configuration
// completes with. It is safe for concurrent use.
type Logger struct {
	log *slog.Logger
	// sample is the fraction of successful requests logged, 0..1; failed, cancelled and
	// gateway-answered requests are always logged.
	sample float64
	// async: the lines go to a destination of Open, which never blocks.
	async bool
}

// New returns a Logger writing JSON lines to w, logging the fraction sample (0..1) of the
// requests that succeeded and every other request.
func New(w io.Writer, sample float64) *Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: dropLevel})
	_, async := w.(*sink)
	return &Logger{log: slog.New(h), sample: sample, async: async}
}

// LoopSafe implements pipeline.LoopSafe when l writes to a destination of Open: a line is
// formatted (a few microseconds, no body) and appended to a bounded buffer, never written
// to the destination by the request, so a request may complete on an event loop.
func (l *Logger) LoopSafe() bool { return l.async }

// dropLevel removes the level and message keys slog adds: every line is an access record.
func dropLevel(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && (a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
		return slog.Attr{}
	}
	return a
}

// OnComplete implements pipeline.CompletionStage: it writes the line for rc.
//
// Fields: time (RFC 3339, when the request was complete), request_id, entrypoint, router,
// service, backend (the server's URL), method, path (the client's, without the query: before
// a strip-prefix stage rewrote it), status, bytes_in (request body; for a WebSocket tunnel,
// what the client sent through it), bytes_out (response body bytes sent, the gateway's own
// included; for a tunnel, what the upstream sent), duration_ms, ttft_ms (streamed
// responses), upstream_error (a failure reason), canceled (the client left), gateway_reply
// (the gateway answered itself), client_ip; on model routers also model (the alias),
// consumer, usage_known and prompt_tokens, completion_tokens, cached_tokens (the upstream's
// usage; usage_known false when it reported none, so no zero is taken for a count); on
// requests prefix affinity routed also prefix_outcome (hit, miss, short, busy, shared, behind),
// prefix_matched_bytes (the normalised prefix length that routed it: not cached tokens),
// prefix_estimated_ms (the prefill time that prefix is estimated to save: not a measured
// TTFT) and prefix_invalidated (the backend reported a full cache miss and the hint was
// dropped).
func (l *Logger) OnComplete(rc *pipeline.RequestCtx) {
	o := rc.Outcome()
	failed := o.Status >= 500 || o.Status == 0 || o.UpstreamError != "" || o.Canceled
	if !failed && l.sample < 1 && rand.Float64() >= l.sample {
		return
	}
	req := &rc.Req
	var router, service, backend string
	if rt := rc.Route(); rt != nil {
		router = rt.Name
	}
	// The service the request went to: the route's, or the one a stage chose (a model
	// router's target); a model router has no service of its own.
	if s := rc.Service(); s != nil {
		service = s.Name
	} else if rt := rc.Route(); rt != nil && rt.Service != nil {
		service = rt.Service.Name
	}
	if b := rc.Backend(); b != nil {
		backend = b.URL
	}
	attrs := [...]slog.Attr{
		slog.String("request_id", string(rc.RequestID())),
		slog.String("entrypoint", rc.Entrypoint()),
		slog.String("router", router),
		slog.String("service", service),
		slog.String("backend", backend),
		slog.String("method", string(req.Method)),
		slog.String("path", string(rc.ClientPath())),
		slog.Int("status", o.Status),
		slog.Int64("bytes_in", int64(len(req.Body))+o.TunnelIn),
		slog.Int64("bytes_out", o.BytesOut),
		slog.Float64("duration_ms", ms(time.Since(rc.Start()))),
		slog.Float64("ttft_ms", ms(o.TTFT)),
		slog.String("upstream_error", o.UpstreamError),
		slog.Bool("canceled", o.Canceled),
		slog.Bool("gateway_reply", o.GatewayReply),
		slog.String("client_ip", string(rc.ClientIP)),
	}
	if o.Model == "" && !o.UsageKnown {
		l.log.LogAttrs(context.Background(), slog.LevelInfo, "", attrs[:]...)
		return
	}
	more := [...]slog.Attr{
		slog.String("model", o.Model),
		slog.String("consumer", o.Consumer),
		slog.Bool("usage_known", o.UsageKnown),
		slog.Int64("prompt_tokens", o.Usage.Prompt),
		slog.Int64("completion_tokens", o.Usage.Completion),
		slog.Int64("cached_tokens", o.Usage.Cached),
	}
	all := append(attrs[:], more[:]...)
	if p := &o.Prefix; p.Routed {
		all = append(all,
			slog.String("prefix_outcome", p.Outcome),
			slog.Int("prefix_matched_bytes", p.MatchedBytes),
			slog.Float64("prefix_estimated_ms", p.EstimatedMs),
			slog.Bool("prefix_invalidated", p.Invalidated))
	}
	l.log.LogAttrs(context.Background(), slog.LevelInfo, "", all...)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Destinations of Open besides a file path.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

var (
	sinksMu sync.Mutex
	sinks   = map[string]*sink{} // by destination
)

// Open returns the writer for an access_log destination: "stdout", "stderr" or a file path,
// opened for appending (created with mode 0640 when missing). Lines go out through a
// writer goroutine of the destination, never blocking the request that completes (see
// pendingMaxBytes for what happens to lines a destination cannot take). A destination stays
// open for the life of the process and is shared by every configuration that names it, so a
// reload neither loses nor reorders lines.
func Open(dest string) (io.Writer, error) {
	s, err := open(dest)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ProcessLog returns the writer for the gateway's own log on standard error: the same
// writer goroutine as the access_log destination "stderr", so that neither kind of line
// waits on the other's pipe and their order is kept. A full standard error (a log pipe nobody
// reads) would otherwise hold up whatever logs, an event loop or the drain included; lines it
// cannot take past 1 MiB are dropped and counted in sluice_log_dropped_total. Flush writes
// them out.
func ProcessLog() io.Writer {
	s, _ := open(Stderr) // standard error needs no opening: no error
	return processLog{s}
}

type processLog struct{ s *sink }

func (l processLog) Write(p []byte) (int, error) { return l.s.write(p, metrics.LogDropped) }

func open(dest string) (*sink, error) {
	sinksMu.Lock()
	defer sinksMu.Unlock()
	if s := sinks[dest]; s != nil {
		return s, nil
	}
	var w io.Writer
	switch dest {
	case Stdout:
		w = os.Stdout
	case Stderr:
		w = os.Stderr
	default:
		f, err := os.OpenFile(dest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return nil, err
		}
		w = f
	}
	s := newSink(w)
	sinks[dest] = s
	return s, nil
}
