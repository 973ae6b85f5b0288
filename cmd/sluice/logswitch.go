package main

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/sluice-gw/sluice/core/config"
)

// logHandler returns the handler [log] asks for, writing to w: its level ("debug", "info",
// "warn", "error"; info when unset) and format ("json", else text).
func logHandler(l config.Log, w io.Writer) slog.Handler {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(l.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if l.Format == "json" {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}

// switchHandler is the process's log handler: it passes each record to the handler in force,
// which a reload that changes [log] replaces (set), so that loggers handed out before (the
// gateway's, slog's default, those derived with attributes or groups) follow the new level
// and format.
type switchHandler struct {
	root  *atomic.Pointer[slog.Handler] // the handler in force, shared by the derived ones
	ops   []logOp                       // what was derived from root: attributes, groups
	cache atomic.Pointer[derived]       // root with ops applied, for the root it was made of
}

// logOp is one WithAttrs (attrs) or WithGroup (group) call.
type logOp struct {
	attrs []slog.Attr
	group string
}

type derived struct {
	from *slog.Handler
	h    slog.Handler
}

func newSwitchHandler(h slog.Handler) *switchHandler {
	s := &switchHandler{root: new(atomic.Pointer[slog.Handler])}
	s.root.Store(&h)
	return s
}

// set puts h in force for every handler derived from s's root.
func (s *switchHandler) set(h slog.Handler) { s.root.Store(&h) }

// current returns the handler in force with s's attributes and groups applied.
func (s *switchHandler) current() slog.Handler {
	root := s.root.Load()
	if len(s.ops) == 0 {
		return *root
	}
	if d := s.cache.Load(); d != nil && d.from == root {
		return d.h
	}
	h := *root
	for _, op := range s.ops {
		if op.group != "" {
			h = h.WithGroup(op.group)
		} else {
			h = h.WithAttrs(op.attrs)
		}
	}
	s.cache.Store(&derived{from: root, h: h})
	return h
}

func (s *switchHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return s.current().Enabled(ctx, l)
}

func (s *switchHandler) Handle(ctx context.Context, r slog.Record) error {
	return s.current().Handle(ctx, r)
}

func (s *switchHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return s
	}
	return &switchHandler{root: s.root, ops: append(slices.Clip(s.ops), logOp{attrs: slices.Clone(attrs)})}
}

func (s *switchHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return s
	}
	return &switchHandler{root: s.root, ops: append(slices.Clip(s.ops), logOp{group: name})}
}
