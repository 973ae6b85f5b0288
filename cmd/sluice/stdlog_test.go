package main

import (
	"bytes"
	"encoding/json"
	"log"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Lines written through the standard log package reach the gateway's log at the level they
// name, without the prefix; the metrics library's "ERROR: metrics: ..." is an error.
func TestStandardLogLinesKeepTheirLevel(t *testing.T) {
	var buf bytes.Buffer
	prev, prevFlags := log.Writer(), log.Flags()
	restore := routeStdLog(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	log.Print("ERROR: metrics: cannot open /proc/self/stat: too many open files")
	log.Print("WARNING: something to look at")
	log.Print("a plain line")
	restore()
	require.Equal(t, prev, log.Writer(), "restore puts the previous output back")
	require.Equal(t, prevFlags, log.Flags())

	var got [][2]string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec struct{ Level, Msg string }
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		got = append(got, [2]string{rec.Level, rec.Msg})
	}
	require.Equal(t, [][2]string{
		{"ERROR", "metrics: cannot open /proc/self/stat: too many open files"},
		{"WARN", "something to look at"},
		{"INFO", "a plain line"},
	}, got)
}
