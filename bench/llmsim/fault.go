package llmsim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FaultHeader is the request header that asks for injected faults.
const FaultHeader = "X-Llmsim-Fault"

// Fault is a parsed x-llmsim-fault spec. The zero Fault injects nothing.
type Fault struct {
	// Status, when non-zero, answers at once with this status (400..599) and an OpenAI error.
	Status int
	// ResetAfter ≥ 0 resets the TCP connection (RST) after that many SSE events (or, for a
	// non-streamed response, instead of the response); -1 is off.
	ResetAfter int
	// StallAfter ≥ 0 stops sending after that many SSE events and holds the connection open
	// until the client leaves or the instance closes; -1 is off.
	StallAfter int
	// Slow adds this delay before the first token and between tokens.
	Slow time.Duration
	// Repeat makes the output one token repeated (degenerate repetition).
	Repeat bool
	// DropDone ends a stream without the final "data: [DONE]" event.
	DropDone bool
	// CloseIdle closes the keep-alive connection right after a complete response, without
	// announcing it (no Connection: close), as a server's idle timeout would.
	CloseIdle bool
	// Close answers with Connection: close, so the connection ends with the response, as a
	// server without keep-alive does: every request then needs a new connection.
	Close bool
	// Trickle sends the response body one byte per write and flush (one TCP segment, and one
	// HTTP/1.1 chunk, per byte), TrickleGap apart: what a proxy's per-read cost meets.
	Trickle    bool
	TrickleGap time.Duration
	// BigLine, when > 0, adds that many bytes of text (the letter x) to the first streamed
	// delta: one SSE data line of more than BigLine bytes, as a tool call's arguments or an
	// inline image make; what a proxy that parses or buffers lines meets.
	BigLine int
}

// noFault is the zero spec with the counters off.
var noFault = Fault{ResetAfter: -1, StallAfter: -1}

// maxFaultSlow bounds slow=DUR so that a typo cannot pin a connection for hours;
// maxTrickleGap bounds the pause between the bytes of trickle=DUR (a response of a few
// kilobytes at one byte a second already takes an hour).
const (
	maxFaultSlow  = 10 * time.Minute
	maxTrickleGap = time.Second
	maxBigLine    = 64 << 20 // bytes: a line this long already takes the whole stream's budget of any real server
)

// ParseFault parses an x-llmsim-fault value: items separated by ";" or ",", each one of
// status=CODE (400..599), reset-after=N, stall-after=N (N events, 0..1e6), slow=DUR (a Go
// duration up to 10m), repeat, drop-done, close-idle, close, trickle or trickle=DUR (a pause of up to
// 1s between bytes), big-line=BYTES (1..64 MiB). Blank items are ignored. It returns an error naming the first bad item.
func ParseFault(s string) (Fault, error) {
	f := noFault
	for len(s) > 0 {
		var item string
		i := strings.IndexAny(s, ";,")
		if i < 0 {
			item, s = s, ""
		} else {
			item, s = s[:i], s[i+1:]
		}
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, hasVal := strings.Cut(item, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		val = strings.TrimSpace(val)
		switch key {
		case "status":
			n, err := strconv.Atoi(val)
			if err != nil || n < 400 || n > 599 {
				return noFault, fmt.Errorf("llmsim: fault %q: status must be 400..599", item)
			}
			f.Status = n
		case "reset-after", "stall-after":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > 1_000_000 {
				return noFault, fmt.Errorf("llmsim: fault %q: want a count of events 0..1000000", item)
			}
			if key == "reset-after" {
				f.ResetAfter = n
			} else {
				f.StallAfter = n
			}
		case "slow":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 || d > maxFaultSlow {
				return noFault, fmt.Errorf("llmsim: fault %q: want a duration 0..10m", item)
			}
			f.Slow = d
		case "trickle":
			f.Trickle = true
			if hasVal {
				d, err := time.ParseDuration(val)
				if err != nil || d < 0 || d > maxTrickleGap {
					return noFault, fmt.Errorf("llmsim: fault %q: want a pause between bytes 0..1s", item)
				}
				f.TrickleGap = d
			}
		case "big-line":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > maxBigLine {
				return noFault, fmt.Errorf("llmsim: fault %q: want a number of bytes 1..%d", item, maxBigLine)
			}
			f.BigLine = n
		case "repeat", "drop-done", "close-idle", "close":
			if hasVal {
				return noFault, fmt.Errorf("llmsim: fault %q takes no value", item)
			}
			switch key {
			case "repeat":
				f.Repeat = true
			case "drop-done":
				f.DropDone = true
			case "close":
				f.Close = true
			default:
				f.CloseIdle = true
			}
		default:
			return noFault, fmt.Errorf("llmsim: unknown fault %q (want status=, reset-after=, stall-after=, slow=, trickle, big-line=, repeat, drop-done, close-idle, close)", item)
		}
	}
	return f, nil
}

// merge returns f with every fault set in g added.
func (f Fault) merge(g Fault) Fault {
	if g.Status != 0 {
		f.Status = g.Status
	}
	if g.ResetAfter >= 0 {
		f.ResetAfter = g.ResetAfter
	}
	if g.StallAfter >= 0 {
		f.StallAfter = g.StallAfter
	}
	f.Slow += g.Slow
	f.Repeat = f.Repeat || g.Repeat
	f.DropDone = f.DropDone || g.DropDone
	f.CloseIdle = f.CloseIdle || g.CloseIdle
	f.Close = f.Close || g.Close
	if g.Trickle {
		f.Trickle, f.TrickleGap = true, g.TrickleGap
	}
	return f
}

// active reports whether f injects anything.
func (f Fault) active() bool { return f != noFault }
