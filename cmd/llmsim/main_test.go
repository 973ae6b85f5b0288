package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A command line llmsim does not accept is refused before any instance starts, with the
// mistake named as in sluice's and sluice-bench's messages.
func TestUsageErrorsNameTheMistake(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--itll", "5ms"}, "llmsim: unknown flag --itll (did you mean --itl?) (llmsim -h lists the flags)"},
		{[]string{"--listen", "127.0.0.1:1", "--listen", "127.0.0.1:2"}, `llmsim: flag --listen given twice ("127.0.0.1:1" and "127.0.0.1:2"); give it once (llmsim -h lists the flags)`},
		{[]string{"--tokens"}, "llmsim: flag --tokens needs a value (llmsim -h lists the flags)"},
		{[]string{"--itl", "abc"}, `llmsim: invalid value "abc" for flag --itl: time: invalid duration "abc" (llmsim -h lists the flags)`},
		{[]string{"--ttft=-1s"}, `llmsim: invalid value "-1s" for flag --ttft: negative duration "-1s" (llmsim -h lists the flags)`},
		{[]string{"serve"}, `llmsim: unexpected argument "serve" (flags only)`},
		{[]string{"--config", "fleet.toml", "--itl", "5ms"}, "llmsim: --itl cannot be combined with --config (put it in the fleet file)"},
		// A value out of range names the instance as the startup line does, from 0.
		{[]string{"--tokens", "-5"}, "llmsim: instance 0 (127.0.0.1:8000): tokens -5 out of range [0, 1048576]"},
		{[]string{"--instances", "2", "--max-running", "0"}, "llmsim: instance 0 (127.0.0.1:0): max_running 0: must be at least 1"},
		{[]string{"--max-model-len", "-1"}, "llmsim: instance 0 (127.0.0.1:8000): max_model_len -1: must not be negative (0: no context window)"},
	} {
		err := run(c.args)
		require.Error(t, err, "%q", c.args)
		require.Equal(t, c.want, err.Error(), "%q", c.args)
	}
}
