package fuzz

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/sluice-gw/sluice/internal/steps"
)

// linearCost bounds the work of one fuzz target: at most PerByte steps (internal/steps) per
// input byte, plus Fixed. The bounds are a few times what valid inputs take, so that a parser
// that looks at every byte a constant number of times stays below them and one whose work
// grows with the square of its input (a rescan per line, a comparison of every field with
// every other) goes above them once its input has a few dozen lines.
type linearCost struct {
	PerByte, Fixed int64
}

// costRepeats is how many times checkCost repeats an input, up to costRepeatBytes: a fuzzed
// input is small, and work that grows faster than the input shows when the input is several
// times longer (a longer input shows it by itself, and repeating it would only slow the
// fuzzer down).
const (
	costRepeats     = 8
	costRepeatBytes = 4096
)

// checkCost runs work on in and on in repeated (costRepeats), counting the steps each
// takes, and fails t when either is over the bound c. work must only do the work (no checks
// that fail t): the target checks its invariants apart.
func checkCost(t *testing.T, c linearCost, in []byte, work func(in []byte)) {
	t.Helper()
	inputs := [][]byte{in}
	if k := min(costRepeats, costRepeatBytes/max(len(in), 1)); k > 1 {
		inputs = append(inputs, bytes.Repeat(in, k))
	}
	for i, x := range inputs {
		n := steps.Count(func() { work(x) })
		if limit := c.PerByte*int64(len(x)) + c.Fixed; n > limit {
			what := "the input"
			if i > 0 {
				what = "the input repeated " + strconv.Itoa(len(x)/len(in)) + " times"
			}
			t.Fatalf("%d steps for %s (%d bytes), more than %d per byte + %d: the work grows faster than the input",
				n, what, len(x), c.PerByte, c.Fixed)
		}
	}
}
