package main_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// The command line follows sluice's: help asked for goes to standard output with status 0, on
// the tool and on every subcommand; what the tool does not understand exits 2.
func TestHelpAndUsageErrors(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	run := func(args ...string) (stdout, stderr string, code int) {
		var o, e bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return o.String(), e.String(), code
	}
	for _, args := range [][]string{{"--help"}, {"help"}, {"help", "compare"}, {"compare", "--help"}, {"run", "-h"}, {"affinity", "--help"}} {
		out, errOut, code := run(args...)
		require.Zero(t, code, "%v", args)
		require.NotEmpty(t, out, "%v: help on standard output", args)
		require.Empty(t, errOut, "%v", args)
	}
	for _, args := range [][]string{{}, {"nope"}, {"compare", "--bogus"}, {"run", "extra"}} {
		_, errOut, code := run(args...)
		require.Equal(t, 2, code, "%v", args)
		require.NotEmpty(t, errOut, "%v: the error on standard error", args)
	}
}

// What the tool does not understand is named on the first line of standard error as sluice
// names it, a near miss with what was meant; a single-valued flag given twice with different
// values is refused, while --header repeats.
func TestUsageErrorsNameTheMistake(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	empty := t.TempDir()
	for _, c := range []struct {
		args []string
		line string // the first line on standard error
		code int
	}{
		{[]string{"run", "--targt", "http://127.0.0.1:9"}, "sluice-bench run: unknown flag --targt (did you mean --target?)", 2},
		{[]string{"compare", "-quik"}, "sluice-bench compare: unknown flag -quik (did you mean -quick?)", 2},
		{[]string{"affinity", "--instnces=2"}, "sluice-bench affinity: unknown flag --instnces (did you mean --instances?)", 2},
		{[]string{"run", "--hepl"}, "sluice-bench run: unknown flag --hepl (did you mean --help?)", 2},
		{[]string{"compare", "--bogus"}, "sluice-bench compare: unknown flag --bogus", 2},
		{[]string{"run", "--duration"}, "sluice-bench run: flag --duration needs a value", 2},
		{[]string{"run", "--target", "http://a", "--target", "http://b"}, `sluice-bench run: flag --target given twice ("http://a" and "http://b"); give it once`, 2},
		{[]string{"compare", "--rounds", "1", "--rounds=3"}, `sluice-bench compare: flag --rounds given twice ("1" and "3"); give it once`, 2},
		{[]string{"affinity", "--out", "a.json", "--out", "b.json"}, `sluice-bench affinity: flag --out given twice ("a.json" and "b.json"); give it once`, 2},
		{[]string{"run", "extra"}, `sluice-bench run: unexpected argument "extra" (flags only)`, 2},
		{[]string{"compar"}, `sluice-bench: unknown command "compar" (did you mean compare?)`, 2},
		{[]string{"frobnicate"}, `sluice-bench: unknown command "frobnicate"`, 2},
		{[]string{"--frob"}, `sluice-bench: unknown flag "--frob"`, 2},
		// Values compare refuses are named by their flag, near misses suggested.
		// A list's element is named as the value refused.
		{[]string{"compare", "--peers", "nginxx"}, `sluice-bench compare: invalid value "nginxx" for flag --peers: want nginx, haproxy (did you mean nginx?)`, 2},
		{[]string{"compare", "--peers", "nginx,haproxyy"}, `sluice-bench compare: invalid value "haproxyy" for flag --peers: want nginx, haproxy (did you mean haproxy?)`, 2},
		{[]string{"compare", "--engines", "gnett"}, `sluice-bench compare: invalid value "gnett" for flag --engines: want gnet, gnet-loop, gnet-connect, gnet-worker, fasthttp, each optionally @DIR (did you mean gnet?)`, 2},
		{[]string{"compare", "--engines", "gnet@"}, `sluice-bench compare: invalid value "gnet@" for flag --engines: want a directory after @`, 2},
		{[]string{"compare", "--workload", "jsn"}, `sluice-bench compare: invalid value "jsn" for flag --workload: want one of json, sse, chat-multiturn, mixed (did you mean json?)`, 2},
		// Values out of range are refused by every command in the words run uses, the flag named
		// as typed: a 0 that an option takes for "not given" (compare's defaults, which --quick
		// chooses; affinity's) is refused when written, as a negative is.
		{[]string{"compare", "--rounds", "-2"}, `sluice-bench compare: invalid value "-2" for flag --rounds: want 1 to 100 rounds`, 2},
		{[]string{"compare", "--rounds", "0"}, `sluice-bench compare: invalid value "0" for flag --rounds: want 1 to 100 rounds`, 2},
		{[]string{"compare", "--quick", "--rounds", "0"}, `sluice-bench compare: invalid value "0" for flag --rounds: want 1 to 100 rounds`, 2},
		{[]string{"compare", "--rounds", "101"}, `sluice-bench compare: invalid value "101" for flag --rounds: want 1 to 100 rounds`, 2},
		{[]string{"compare", "--concurrency", "-5"}, `sluice-bench compare: invalid value "-5" for flag --concurrency: want 1 to 100000 connections`, 2},
		{[]string{"compare", "--connections", "-1"}, `sluice-bench compare: invalid value "-1" for flag --connections: want 1 to 100000 connections`, 2},
		{[]string{"compare", "--connections", "0"}, `sluice-bench compare: invalid value "0" for flag --connections: want 1 to 100000 connections`, 2},
		{[]string{"compare", "--duration", "0s"}, `sluice-bench compare: invalid value "0s" for flag --duration: want 100ms to 24h0m0s (a shorter window measures too few responses)`, 2},
		{[]string{"compare", "--duration", "-1s"}, `sluice-bench compare: invalid value "-1s" for flag --duration: want 100ms to 24h0m0s (a shorter window measures too few responses)`, 2},
		// A window too short to measure anything, refused before anything starts.
		{[]string{"compare", "--quick", "--duration", "1ns"}, `sluice-bench compare: invalid value "1ns" for flag --duration: want 100ms to 24h0m0s (a shorter window measures too few responses)`, 2},
		{[]string{"compare", "--duration", "99ms"}, `sluice-bench compare: invalid value "99ms" for flag --duration: want 100ms to 24h0m0s (a shorter window measures too few responses)`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--duration", "1ns"}, `sluice-bench run: invalid value "1ns" for flag --duration: want 100ms to 24h0m0s (a shorter window measures too few responses)`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--rate", "5", "--duration", "0s"}, `sluice-bench run: invalid value "0s" for flag --duration: want 100ms to 24h0m0s (a shorter window measures too few responses)`, 2},
		{[]string{"affinity", "--duration", "10ms"}, `sluice-bench affinity: invalid value "10ms" for flag --duration: want 100ms to 24h0m0s (a shorter window measures too few responses)`, 2},
		{[]string{"compare", "--warmup", "-1s"}, `sluice-bench compare: invalid value "-1s" for flag --warmup: want more than 0, at most 24h0m0s`, 2},
		{[]string{"compare", "--warmup", "0s"}, `sluice-bench compare: invalid value "0s" for flag --warmup: want more than 0, at most 24h0m0s`, 2},
		{[]string{"compare", "--sim-tokens", "0"}, `sluice-bench compare: invalid value "0" for flag --sim-tokens: want 1 to 1048576 tokens`, 2},
		// llmsim's own bound on the tokens of a response.
		{[]string{"compare", "--sim-tokens", "1048577"}, `sluice-bench compare: invalid value "1048577" for flag --sim-tokens: want 1 to 1048576 tokens`, 2},
		{[]string{"compare", "--max-tokens", "-1"}, `sluice-bench compare: invalid value "-1" for flag --max-tokens: want 0 (omitted) or more`, 2},
		{[]string{"compare", "--concurrency", "4", "--rate", "10"}, "sluice-bench compare: set either --concurrency (closed loop) or --rate (open loop), not both", 2},
		// Poisson arrivals are an open loop's: without a rate there are none.
		{[]string{"compare", "--poisson"}, "sluice-bench compare: --poisson needs the open loop: --rate", 2},
		{[]string{"compare", "--quick", "--concurrency", "4", "--poisson"}, "sluice-bench compare: --poisson needs the open loop: --rate", 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--poisson"}, "sluice-bench run: --poisson needs the open loop: --rate", 2},
		// A flag that would do nothing, or a 0 that the flag's default would silently replace.
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--turns", "3"}, "sluice-bench run: --turns, --reply-bytes and --echo-replies shape the chat-multiturn and mixed workloads: want --workload chat-multiturn or mixed", 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--workload", "sse", "--echo-replies"}, "sluice-bench run: --turns, --reply-bytes and --echo-replies shape the chat-multiturn and mixed workloads: want --workload chat-multiturn or mixed", 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--timeout", "0s"}, `sluice-bench run: invalid value "0s" for flag --timeout: want more than 0, at most 24h0m0s`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--adversary", "noread=1,noread=2"}, `sluice-bench run: invalid value "noread=1,noread=2" for flag --adversary: "noread=2": noread is given twice: want each kind once`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--rate", "5", "--connections", "0"}, `sluice-bench run: invalid value "0" for flag --connections: want 1 to 100000 connections`, 2},
		{[]string{"affinity", "--concurrency", "-1"}, `sluice-bench affinity: invalid value "-1" for flag --concurrency: want 1 to 100000 connections`, 2},
		{[]string{"affinity", "--concurrency", "0"}, `sluice-bench affinity: invalid value "0" for flag --concurrency: want 1 to 100000 connections`, 2},
		{[]string{"affinity", "--instances", "-1"}, `sluice-bench affinity: invalid value "-1" for flag --instances: want 1 to 64 instances`, 2},
		{[]string{"affinity", "--instances", "0"}, `sluice-bench affinity: invalid value "0" for flag --instances: want 1 to 64 instances`, 2},
		{[]string{"affinity", "--instances", "65"}, `sluice-bench affinity: invalid value "65" for flag --instances: want 1 to 64 instances`, 2},
		{[]string{"affinity", "--duration", "0s"}, `sluice-bench affinity: invalid value "0s" for flag --duration: want 100ms to 24h0m0s (a shorter window measures too few responses)`, 2},
		{[]string{"affinity", "-warmup=-1s"}, `sluice-bench affinity: invalid value "-1s" for flag -warmup: want more than 0, at most 24h0m0s`, 2},
		{[]string{"affinity", "--turns", "0"}, `sluice-bench affinity: invalid value "0" for flag --turns: want 1 or more turns`, 2},
		{[]string{"affinity", "--max-tokens", "0"}, `sluice-bench affinity: invalid value "0" for flag --max-tokens: want 1 to 1048576 tokens`, 2},
		// The fleet's instances generate at most llmsim's bound.
		{[]string{"affinity", "--max-tokens", "99999999999"}, `sluice-bench affinity: invalid value "99999999999" for flag --max-tokens: want 1 to 1048576 tokens`, 2},
		{[]string{"affinity", "--max-tokens", "1048577"}, `sluice-bench affinity: invalid value "1048577" for flag --max-tokens: want 1 to 1048576 tokens`, 2},
		{[]string{"affinity", "--sim-itl", "0s"}, `sluice-bench affinity: invalid value "0s" for flag --sim-itl: want more than 0, at most 24h0m0s`, 2},
		{[]string{"affinity", "--policies", "round-robbin"}, `sluice-bench affinity: invalid value "round-robbin" for flag --policies: want round-robin, least-connections, affinity, affinity-2, oracle (did you mean round-robin?)`, 2},
		{[]string{"affinity", "--policies", "none"}, `sluice-bench affinity: invalid value "none" for flag --policies: want one or more of round-robin, least-connections, affinity, affinity-2, oracle`, 2},
		{[]string{"affinity", "--policies="}, `sluice-bench affinity: invalid value "" for flag --policies: want one or more of round-robin, least-connections, affinity, affinity-2, oracle`, 2},
		// Parsed: --header takes every value, and the same value twice is harmless.
		{[]string{"run", "--header", "A: 1", "--header", "B: 2", "--seed", "2", "--seed=2"}, "sluice-bench run: --target is required", 2},
		// Values the harness refuses are refused before anything runs, as the flag package
		// refuses a value, the flag named as typed.
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "-3"}, `sluice-bench run: invalid value "-3" for flag --concurrency: want 1 to 100000 connections`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "-concurrency=-3"}, `sluice-bench run: invalid value "-3" for flag -concurrency: want 1 to 100000 connections`, 2},
		// A zero the harness would take for "not given" is refused when written.
		{[]string{"run", "--target", "http://127.0.0.1:1", "--rate", "0"}, `sluice-bench run: invalid value "0" for flag --rate: want a number of requests per second in [0.001, 1000000]`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--rate", "0", "--concurrency", "2"}, `sluice-bench run: invalid value "0" for flag --rate: want a number of requests per second in [0.001, 1000000]`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "0", "--rate", "5"}, `sluice-bench run: invalid value "0" for flag --concurrency: want 1 to 100000 connections`, 2},
		{[]string{"run", "--target", "127.0.0.1:1", "--concurrency", "1"}, `sluice-bench run: invalid value "127.0.0.1:1" for flag --target: want a URL such as http://127.0.0.1:8080`, 2},
		{[]string{"run", "--target", "localhost:8080", "--rate", "5"}, `sluice-bench run: invalid value "localhost:8080" for flag --target: want a URL such as http://127.0.0.1:8080`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--rate", "-1"}, `sluice-bench run: invalid value "-1" for flag --rate: want a number of requests per second in [0.001, 1000000]`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--max-tokens", "-1"}, `sluice-bench run: invalid value "-1" for flag --max-tokens: want 0 (omitted) or more`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--workload", "jsn"}, `sluice-bench run: invalid value "jsn" for flag --workload: want one of json, sse, chat-multiturn, mixed`, 2},
		// A word alone may be a key given without its name: it is not shown.
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--header", "nocolon"}, `sluice-bench run: invalid value "<redacted>" for flag --header: want "Name: value" on one line`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--header", "X-Note a"}, `sluice-bench run: invalid value "X-Note <redacted>" for flag --header: want "Name: value" on one line`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--adversary", "noread=2;segment=2"}, `sluice-bench run: invalid value "noread=2;segment=2" for flag --adversary: want one spec: several separated by ";", and each, are for sluice-bench compare`, 2},
		{[]string{"compare", "--quick", "--engines", "none", "--adversary", "noread=2;explode=1"}, `sluice-bench compare: invalid value "noread=2;explode=1" for flag --adversary: "explode=1": unknown kind "explode" (kinds: slowloris, slowbody, noread, reset, pipeline, bigheader, segment, up-trickle, up-stall, up-reset, up-bigline, or mixed)`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--adversary", "slowloris=1,explode=2"}, `sluice-bench run: invalid value "slowloris=1,explode=2" for flag --adversary: "explode=2": unknown kind "explode" (kinds: slowloris, slowbody, noread, reset, pipeline, bigheader, segment, up-trickle, up-stall, up-reset, up-bigline, or mixed)`, 2},
		// An adversary flag that names no adversary would run a clean comparison under the
		// adversary's name: refused, by both commands, before anything starts.
		{[]string{"compare", "--quick", "--adversary", ";"}, `sluice-bench compare: invalid value ";" for flag --adversary: want at least one kind above 0: kind=N (kinds: slowloris, slowbody, noread, reset, pipeline, bigheader, segment, up-trickle, up-stall, up-reset, up-bigline), or mixed`, 2},
		{[]string{"compare", "--quick", "--adversary", " ; ;none"}, `sluice-bench compare: invalid value " ; ;none" for flag --adversary: want at least one kind above 0: kind=N (kinds: slowloris, slowbody, noread, reset, pipeline, bigheader, segment, up-trickle, up-stall, up-reset, up-bigline), or mixed`, 2},
		{[]string{"compare", "--quick", "--adversary", "noread=0"}, `sluice-bench compare: invalid value "noread=0" for flag --adversary: want at least one kind above 0: kind=N (kinds: slowloris, slowbody, noread, reset, pipeline, bigheader, segment, up-trickle, up-stall, up-reset, up-bigline), or mixed`, 2},
		{[]string{"compare", "--quick", "--adversary", "mixed,slowloris=0,slowbody=0,noread=0,reset=0,pipeline=0,bigheader=0,segment=0,up-trickle=0,up-stall=0,up-reset=0,up-bigline=0"}, `sluice-bench compare: invalid value "mixed,slowloris=0,slowbody=0,noread=0,reset=0,pipeline=0,bigheader=0,segment=0,up-trickle=0,up-stall=0,up-reset=0,up-bigline=0" for flag --adversary: want at least one kind above 0: kind=N (kinds: slowloris, slowbody, noread, reset, pipeline, bigheader, segment, up-trickle, up-stall, up-reset, up-bigline), or mixed`, 2},
		{[]string{"compare", "--quick", "--adversary="}, `sluice-bench compare: invalid value "" for flag --adversary: want at least one kind above 0: kind=N (kinds: slowloris, slowbody, noread, reset, pipeline, bigheader, segment, up-trickle, up-stall, up-reset, up-bigline), or mixed`, 2},
		{[]string{"compare", "--quick", "--adversary", "noread=2;"}, `sluice-bench compare: invalid value "noread=2;" for flag --adversary: "": want at least one kind above 0: kind=N (kinds: slowloris, slowbody, noread, reset, pipeline, bigheader, segment, up-trickle, up-stall, up-reset, up-bigline), or mixed`, 2},
		{[]string{"compare", "--quick", "--adversary", "noread=2;noread=0"}, `sluice-bench compare: invalid value "noread=2;noread=0" for flag --adversary: "noread=0": want at least one kind above 0: kind=N (kinds: slowloris, slowbody, noread, reset, pipeline, bigheader, segment, up-trickle, up-stall, up-reset, up-bigline), or mixed`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--adversary", ";"}, `sluice-bench run: invalid value ";" for flag --adversary: want one spec: several separated by ";", and each, are for sluice-bench compare`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--adversary", "noread=0"}, `sluice-bench run: invalid value "noread=0" for flag --adversary: want at least one kind above 0: kind=N (kinds: slowloris, slowbody, noread, reset, pipeline, bigheader, segment, up-trickle, up-stall, up-reset, up-bigline), or mixed`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--adversary", " , "}, `sluice-bench run: invalid value " , " for flag --adversary: want at least one kind above 0: kind=N (kinds: slowloris, slowbody, noread, reset, pipeline, bigheader, segment, up-trickle, up-stall, up-reset, up-bigline), or mixed`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--adversary="}, `sluice-bench run: invalid value "" for flag --adversary: want at least one kind above 0: kind=N (kinds: slowloris, slowbody, noread, reset, pipeline, bigheader, segment, up-trickle, up-stall, up-reset, up-bigline), or mixed`, 2},
		// An empty workload written out is refused, not taken for the default.
		{[]string{"compare", "--quick", "--workload", ""}, `sluice-bench compare: invalid value "" for flag --workload: want one or more of json, sse, chat-multiturn, mixed`, 2},
		{[]string{"compare", "--quick", "--workload", " , "}, `sluice-bench compare: invalid value " , " for flag --workload: want one or more of json, sse, chat-multiturn, mixed`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--workload="}, `sluice-bench run: invalid value "" for flag --workload: want one of json, sse, chat-multiturn, mixed`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--path", ""}, `sluice-bench run: invalid value "" for flag --path: want a path such as /v1/chat/completions: a / first, then visible ASCII other than # (percent-encode the rest)`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "-model="}, `sluice-bench run: invalid value "" for flag -model: want a model name such as llmsim`, 2},
		// The target is scheme://host:port alone: a query or fragment, even empty, is refused.
		{[]string{"run", "--target", "http://127.0.0.1:8080#x", "--concurrency", "1"}, `sluice-bench run: invalid value "http://127.0.0.1:8080#x" for flag --target: want only http://host:port (the request path is set apart: --path)`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:8080#", "--concurrency", "1"}, `sluice-bench run: invalid value "http://127.0.0.1:8080#" for flag --target: want only http://host:port (the request path is set apart: --path)`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:8080?", "--concurrency", "1"}, `sluice-bench run: invalid value "http://127.0.0.1:8080?" for flag --target: want only http://host:port (the request path is set apart: --path)`, 2},
		{[]string{"run", "--target", "", "--concurrency", "1"}, `sluice-bench run: invalid value "" for flag --target: want a URL such as http://127.0.0.1:8080`, 2},
		// A path that would end the request line, or the target in it, early is no path.
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--path", "v1/chat/completions"}, `sluice-bench run: invalid value "v1/chat/completions" for flag --path: want a path such as /v1/chat/completions: a / first, then visible ASCII other than # (percent-encode the rest)`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--path", "/v1/chat completions"}, `sluice-bench run: invalid value "/v1/chat completions" for flag --path: want a path such as /v1/chat/completions: a / first, then visible ASCII other than # (percent-encode the rest)`, 2},
		// An empty --bin would search PATH alone, an empty compare --out fail after the run.
		{[]string{"compare", "--quick", "--bin", ""}, `sluice-bench compare: invalid value "" for flag --bin: want a directory to look for sluice and llmsim in before PATH`, 2},
		{[]string{"compare", "--quick", "--engines", "none", "--peers", "none", "--workload", "json", "--out="}, `sluice-bench compare: invalid value "" for flag --out: want a file for the JSON report (the SVG chart goes beside it)`, 2},
		{[]string{"affinity", "--bin="}, `sluice-bench affinity: invalid value "" for flag --bin: want a directory to look for sluice in before PATH`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1"}, "sluice-bench run: set --concurrency (closed loop) or --rate (open loop)", 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "2", "--rate", "3"}, "sluice-bench run: set either --concurrency (closed loop) or --rate (open loop), not both", 2},
		{[]string{"compare", "--rate", "-1"}, `sluice-bench compare: invalid value "-1" for flag --rate: want a number of requests per second in [0.001, 1000000]`, 2},
		// compare takes a zero for its default, and refuses it written, as run does.
		{[]string{"compare", "--rate", "0"}, `sluice-bench compare: invalid value "0" for flag --rate: want a number of requests per second in [0.001, 1000000]`, 2},
		{[]string{"compare", "--concurrency", "0"}, `sluice-bench compare: invalid value "0" for flag --concurrency: want 1 to 100000 connections`, 2},
		{[]string{"compare", "--quick", "-concurrency=0"}, `sluice-bench compare: invalid value "0" for flag -concurrency: want 1 to 100000 connections`, 2},
		// A sluice engine asked for, by default or by name, without its binary: refused before
		// anything runs, with the ways on.
		{[]string{"compare", "--quick", "--peers", "none", "--workload", "json"}, "sluice-bench compare: --engines: sluice not found in ./bin or PATH: build it with `make build`, name the directory that holds it with --bin DIR, or run no sluice with --engines none", 2},
		{[]string{"compare", "--quick", "--peers", "none", "--workload", "json", "--engines", "fasthttp", "--bin", "nobin"}, "sluice-bench compare: --engines: sluice not found in nobin or PATH: build it with `make build`, name the directory that holds it with --bin DIR, or run no sluice with --engines none", 2},
		{[]string{"compare", "--quick", "--peers", "none", "--workload", "json", "--engines", "gnet@old"}, "sluice-bench compare: --engines: gnet@old: no sluice binary in old: build one there (`go build -o old/sluice ./cmd/sluice`), or leave gnet@old out", 2},
		// affinity refuses a missing sluice as compare does, before it starts a fleet.
		{[]string{"affinity"}, "sluice-bench affinity: --policies: sluice not found in ./bin or PATH: build it with `make build`, name the directory that holds it with --bin DIR, or run --policies oracle alone", 2},
		{[]string{"affinity", "--policies", "oracle,affinity", "--bin", "nobin"}, "sluice-bench affinity: --policies: sluice not found in nobin or PATH: build it with `make build`, name the directory that holds it with --bin DIR, or run --policies oracle alone", 2},
		// A report file whose directory is not there is refused before the run, not after it.
		{[]string{"compare", "--quick", "--engines", "none", "--out", "nodir/x.json"}, `sluice-bench compare: invalid value "nodir/x.json" for flag --out: want a file in an existing directory (nodir: no such file or directory)`, 2},
		{[]string{"compare", "--quick", "--engines", "none", "--md", "nodir/x.md"}, `sluice-bench compare: invalid value "nodir/x.md" for flag --md: want a file in an existing directory (nodir: no such file or directory)`, 2},
		{[]string{"affinity", "--out", "nodir/x.json"}, `sluice-bench affinity: invalid value "nodir/x.json" for flag --out: want a file in an existing directory (nodir: no such file or directory)`, 2},
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--out", "nodir/x.json"}, `sluice-bench run: invalid value "nodir/x.json" for flag --out: want a file in an existing directory (nodir: no such file or directory)`, 2},
		// A directory is no report file: found before the run, not when the report is written.
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--out", "."}, `sluice-bench run: invalid value "." for flag --out: want a file in an existing directory (. is a directory)`, 2},
		{[]string{"compare", "--quick", "--engines", "none", "--out", ".."}, `sluice-bench compare: invalid value ".." for flag --out: want a file in an existing directory (.. is a directory)`, 2},
		{[]string{"affinity", "--out", "."}, `sluice-bench affinity: invalid value "." for flag --out: want a file in an existing directory (. is a directory)`, 2},
		// compare makes its --workdir, not the directories it would be in.
		{[]string{"compare", "--quick", "--engines", "none", "--workdir", "nodir/wd"}, `sluice-bench compare: invalid value "nodir/wd" for flag --workdir: want a directory, or a new one in an existing directory (nodir: no such file or directory)`, 2},
		{[]string{"compare", "--quick", "--engines", "none", "--workdir", "nodir/wd/"}, `sluice-bench compare: invalid value "nodir/wd/" for flag --workdir: want a directory, or a new one in an existing directory (nodir: no such file or directory)`, 2},
		{[]string{"compare", "--quick", "--engines", "none", "--workdir", "/dev/null"}, `sluice-bench compare: invalid value "/dev/null" for flag --workdir: want a directory, or a new one in an existing directory (/dev/null is not a directory)`, 2},
		{[]string{"compare", "--quick", "--engines", "none", "--workdir", "/dev/null/wd"}, `sluice-bench compare: invalid value "/dev/null/wd" for flag --workdir: want a directory, or a new one in an existing directory (/dev/null is not a directory)`, 2},
		// The file --sluice-extra names is read before anything starts.
		{[]string{"compare", "--quick", "--engines", "none", "--sluice-extra", "nofile.toml"}, `sluice-bench compare: invalid value "nofile.toml" for flag --sluice-extra: want a TOML file that can be read (no such file or directory)`, 2},
		{[]string{"compare", "--quick", "--engines", "none", "--sluice-extra", "."}, `sluice-bench compare: invalid value "." for flag --sluice-extra: want a TOML file that can be read (is a directory)`, 2},
		// A target or workload named twice would not be measured twice.
		{[]string{"compare", "--quick", "--engines", "gnet,fasthttp,gnet"}, `sluice-bench compare: invalid value "gnet" for flag --engines: given twice: want each engine once`, 2},
		{[]string{"compare", "--quick", "--engines", "none", "--peers", "nginx,nginx"}, `sluice-bench compare: invalid value "nginx" for flag --peers: given twice: want each peer once`, 2},
		{[]string{"compare", "--quick", "--engines", "none", "--workload", "json,json"}, `sluice-bench compare: invalid value "json" for flag --workload: given twice: want each workload once`, 2},
		{[]string{"affinity", "--policies", "oracle,oracle"}, `sluice-bench affinity: invalid value "oracle" for flag --policies: given twice: want each policy once`, 2},
		// A '#' or a non-ASCII byte in the path: every request would be refused (400).
		{[]string{"run", "--target", "http://127.0.0.1:1", "--concurrency", "1", "--path", "/v1/chat/completions#x"}, `sluice-bench run: invalid value "/v1/chat/completions#x" for flag --path: want a path such as /v1/chat/completions: a / first, then visible ASCII other than # (percent-encode the rest)`, 2},
	} {
		var o, e bytes.Buffer
		cmd := exec.Command(bin, c.args...)
		// An empty working directory and PATH: ./bin and PATH hold no sluice.
		cmd.Dir, cmd.Env = empty, append(os.Environ(), "PATH="+empty)
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%v: %v", c.args, err)
		require.Equal(t, c.code, ee.ExitCode(), "%v: %s", c.args, e.String())
		line, rest, _ := strings.Cut(e.String(), "\n")
		require.Equal(t, c.line, line, "%v", c.args)
		if strings.Contains(line, ": invalid value ") || strings.HasSuffix(line, ", not both") || strings.Contains(line, " needs ") {
			// As the flag package's own refusals are: the flags follow.
			require.True(t, strings.HasPrefix(rest, "usage: sluice-bench "+c.args[0]+" [flags]\n"), "%v: %s", c.args, rest)
		}
		require.Empty(t, o.String(), "%v", c.args)
	}
}

// Each flag's help gives its default once: the flag package's "(default 64)", or the help's own
// words where the flag's zero leaves the choice to another flag (compare's --rounds, which
// --quick changes), not both.
func TestHelpGivesEachDefaultOnce(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	mention := regexp.MustCompile(`\((0: the )?default`)
	for _, cmd := range []string{"run", "compare", "affinity"} {
		out, err := exec.Command(bin, cmd, "-h").Output()
		require.NoError(t, err, cmd)
		// A flag's help is its line "  --name type" and the indented lines after it.
		flags := strings.Split(string(out), "\n  -")[1:]
		require.NotEmpty(t, flags, "%s -h:\n%s", cmd, out)
		for _, f := range flags {
			require.LessOrEqual(t, len(mention.FindAllString(f, -1)), 1, "%s -%s", cmd, f)
		}
	}
}

// A default the usage line shows ("[--concurrency 30]") is the one the subcommand's help gives
// for the flag, which is the one it takes.
func TestUsageLineShowsTheFlagDefaults(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/sluice-bench")
	usage, err := exec.Command(bin, "--help").Output()
	require.NoError(t, err)
	// A flag with a value in lower case: a default, not a placeholder (URL, SPEC, FILE.json).
	shown := regexp.MustCompile(`\[--([a-z-]+) ([a-z0-9][a-z0-9.,]*)\]`)
	checked := 0
	for _, line := range strings.Split(string(usage), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "sluice-bench" {
			continue
		}
		help, err := exec.Command(bin, f[1], "-h").Output()
		require.NoError(t, err, f[1])
		// A flag's help is its line "  --name type" and the indented lines after it.
		flags := strings.Split(string(help), "\n  -")[1:]
		for _, m := range shown.FindAllStringSubmatch(line, -1) {
			name, value := m[1], m[2]
			i := slices.IndexFunc(flags, func(s string) bool { return strings.HasPrefix(s, "-"+name+" ") })
			require.GreaterOrEqual(t, i, 0, "%s -h has no --%s", f[1], name)
			require.Regexp(t, `\(default "?`+regexp.QuoteMeta(value)+`"?[;)]`, flags[i], "%s --%s: the usage line shows %s", f[1], name, value)
			checked++
		}
	}
	// Every flag the usage shows with a value in lower case is optional, in brackets: run's
	// --workload and --duration too.
	require.NotRegexp(t, ` --[a-z-]+ [a-z0-9|-]+[ \n]`, string(usage))
	require.GreaterOrEqual(t, checked, 9, "defaults found in the usage:\n%s", usage)
}
