package llmsim

import (
	"bytes"
	"math"
	"sort"
	"strconv"

	json "github.com/goccy/go-json"
)

// wholeInt is an integer request field read as vLLM's pydantic models read one: 3, 3.0 and
// 3e0 are 3 (a Python client may write an int as a float); a number with a fractional part,
// one beyond int64, or anything but a number is refused, and the 400 names the field.
type wholeInt int

// wholeIntError is a refused wholeInt: the value as sent and why (pydantic's words).
// readBodyAs answers it with a 400 naming the field that holds the value.
type wholeIntError struct {
	raw, reason string
}

func (e *wholeIntError) Error() string { return e.reason }

const (
	reasonFraction   = "Input should be a valid integer, got a number with a fractional part"
	reasonNotInteger = "Input should be a valid integer"
)

// fieldHolding returns the name of the first top-level field of the JSON object body whose
// value is raw, or "" when none is (the request fields read as wholeInt are all top-level).
func fieldHolding(body []byte, raw string) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return ""
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if string(bytes.TrimSpace(fields[k])) == raw {
			return k
		}
	}
	return ""
}

// UnmarshalJSON reads a JSON number with no fractional part; null leaves n unchanged.
func (n *wholeInt) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if v, err := strconv.ParseInt(s, 10, 0); err == nil {
		*n = wholeInt(v)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || len(s) == 0 || s[0] == '"' {
		return &wholeIntError{raw: s, reason: reasonNotInteger}
	}
	if f != math.Trunc(f) {
		return &wholeIntError{raw: s, reason: reasonFraction}
	}
	// 2^63 as a float64 is the first value past int64; a float never lands between.
	if f >= math.MaxInt64 || f < math.MinInt64 || math.IsInf(f, 0) {
		return &wholeIntError{raw: s, reason: reasonNotInteger}
	}
	*n = wholeInt(f)
	return nil
}
