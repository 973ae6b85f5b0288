package main

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"time"
)

// routeStdLog sends what libraries write through the standard log package to h, at the level
// the line names: the metrics library writes "ERROR: metrics: ..." there (a process metric it
// cannot read, for want of descriptors), and slog.SetDefault alone would file every such line
// under INFO. A line may start with "ERROR: ", "WARN: " or "WARNING: " (the prefix is dropped
// from the message); any other line is INFO. It returns a function that restores the log
// package's previous output and flags.
func routeStdLog(h slog.Handler) (restore func()) {
	out, flags := log.Writer(), log.Flags()
	log.SetFlags(0)
	log.SetOutput(stdLogWriter{h})
	return func() {
		log.SetOutput(out)
		log.SetFlags(flags)
	}
}

// stdLogWriter is the log package's output: one Write per line.
type stdLogWriter struct{ h slog.Handler }

var stdLogLevels = []struct {
	prefix []byte
	level  slog.Level
}{
	{[]byte("ERROR: "), slog.LevelError},
	{[]byte("WARN: "), slog.LevelWarn},
	{[]byte("WARNING: "), slog.LevelWarn},
}

func (w stdLogWriter) Write(p []byte) (int, error) {
	msg, level := bytes.TrimSuffix(p, []byte("\n")), slog.LevelInfo
	for _, l := range stdLogLevels {
		if bytes.HasPrefix(msg, l.prefix) {
			msg, level = msg[len(l.prefix):], l.level
			break
		}
	}
	ctx := context.Background()
	if !w.h.Enabled(ctx, level) {
		return len(p), nil
	}
	return len(p), w.h.Handle(ctx, slog.NewRecord(time.Now(), level, string(msg), 0))
}
