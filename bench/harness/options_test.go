package harness

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A path of visible ASCII is taken as given: a query, and what is percent-encoded ('#' as %23,
// a non-ASCII character byte by byte) are part of an origin-form request-target.
func TestCheckTakesAPathOfVisibleASCII(t *testing.T) {
	for _, p := range []string{"/", "/v1/chat/completions?api-version=2024-06-01&q=a%20b", "/caf%C3%A9%23x", "/a/../b;c@d:e"} {
		o := Options{Target: "http://127.0.0.1:1", Concurrency: 1, Duration: time.Second, Path: p}
		require.NoError(t, o.Check(), p)
	}
}

// Check refuses what Run would, before anything starts, and names the option as the command's
// flag does, with the value as that flag prints it; Run returns the same error.
func TestCheckNamesTheRefusedOption(t *testing.T) {
	ok := Options{Target: "http://127.0.0.1:1", Concurrency: 1, Duration: time.Second}
	require.NoError(t, ok.Check())
	shortest := ok
	shortest.Duration = MinDuration
	require.NoError(t, shortest.Check())
	for _, c := range []struct {
		change      func(o *Options)
		flag, value string
	}{
		{func(o *Options) { o.Concurrency = -3 }, "concurrency", "-3"},
		{func(o *Options) { o.Concurrency, o.Rate, o.Connections = 0, 5, -1 }, "connections", "-1"},
		{func(o *Options) { o.Concurrency, o.Rate = 0, -1 }, "rate", "-1"},
		{func(o *Options) { o.Duration = 25 * time.Hour }, "duration", "25h0m0s"},
		// A window too short to hold a response's worth of measurement.
		{func(o *Options) { o.Duration = time.Nanosecond }, "duration", "1ns"},
		{func(o *Options) { o.Duration = MinDuration - time.Millisecond }, "duration", "99ms"},
		{func(o *Options) { o.Warmup = -time.Second }, "warmup", "-1s"},
		{func(o *Options) { o.Timeout = -time.Second }, "timeout", "-1s"},
		{func(o *Options) { o.MaxTokens = -1 }, "max-tokens", "-1"},
		{func(o *Options) { o.Turns = -1 }, "turns", "-1"},
		{func(o *Options) { o.ReplyBytes = -1 }, "reply-bytes", "-1"},
		{func(o *Options) { o.Workload = "jsn" }, "workload", "jsn"},
		{func(o *Options) { o.Headers = []string{"A: 1", "B"} }, "header", "B"},
		{func(o *Options) { o.Path = "v1/chat/completions" }, "path", "v1/chat/completions"},
		{func(o *Options) { o.Path = "/a b" }, "path", "/a b"},
		{func(o *Options) { o.Path = "/a\r\nX: 1" }, "path", "/a\r\nX: 1"},
		// What a server that checks its request line refuses (sluice answers 400).
		{func(o *Options) { o.Path = "/v1/chat/completions#x" }, "path", "/v1/chat/completions#x"},
		{func(o *Options) { o.Path = "/caf\u00e9" }, "path", "/caf\u00e9"},
		{func(o *Options) { o.Path = "/a\x7f" }, "path", "/a\x7f"},
		{func(o *Options) { o.Target = "127.0.0.1:8080" }, "target", "127.0.0.1:8080"},
		{func(o *Options) { o.Target = "localhost:8080" }, "target", "localhost:8080"},
		{func(o *Options) { o.Target = "http://127.0.0.1:8080/v1" }, "target", "http://127.0.0.1:8080/v1"},
		{func(o *Options) { o.Target = "http://127.0.0.1:8080?a=1" }, "target", "http://127.0.0.1:8080?a=1"},
		// A query or fragment mark with nothing after it is no part of host:port either.
		{func(o *Options) { o.Target = "http://127.0.0.1:8080?" }, "target", "http://127.0.0.1:8080?"},
		{func(o *Options) { o.Target = "http://127.0.0.1:8080#x" }, "target", "http://127.0.0.1:8080#x"},
		{func(o *Options) { o.Target = "http://127.0.0.1:8080#" }, "target", "http://127.0.0.1:8080#"},
		{func(o *Options) { o.Target = "http://127.0.0.1:8080/#" }, "target", "http://127.0.0.1:8080/#"},
		{func(o *Options) { o.AltTarget = "http://127.0.0.1:2#" }, "alt-target", "http://127.0.0.1:2#"},
		{func(o *Options) { o.AltTarget = "https://127.0.0.1:2" }, "alt-target", "https://127.0.0.1:2"},
		{func(o *Options) { o.Adversary = "slowloris=1,nope" }, "adversary", "slowloris=1,nope"},
		// Two options that exclude each other, or neither of two set: no one value is wrong.
		{func(o *Options) { o.Rate = 5 }, "", ""},
		{func(o *Options) { o.Concurrency = 0 }, "", ""},
		{func(o *Options) { o.EchoReplies, o.ReplyBytes = true, 10 }, "", ""},
		{func(o *Options) { o.Poisson = true }, "", ""}, // Poisson gaps without a rate to draw them for
		{func(o *Options) { o.Target, o.Adversary = "http://192.0.2.1:80", "slowloris=1" }, "", ""},
	} {
		o := ok
		c.change(&o)
		err := o.Check()
		var oe *OptionError
		require.True(t, errors.As(err, &oe), "%+v: %v", o, err)
		require.Equal(t, c.flag, oe.Flag, "%v", err)
		require.Equal(t, c.value, oe.Value, "%v", err)
		require.NotEmpty(t, oe.Msg, "%v", err)
		_, runErr := Run(t.Context(), o)
		require.Equal(t, err, runErr, "Run refuses it as Check does")
	}
}
