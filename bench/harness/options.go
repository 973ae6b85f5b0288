package harness

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Bounds of the options, so that a typo fails at once instead of exhausting the machine.
const (
	// MaxRate is the highest open-loop rate, in requests per second: far above what one
	// generator process reaches on one machine.
	MaxRate = 1_000_000
	// MinRate is the lowest open-loop rate, in requests per second (one per 1,000 s).
	MinRate = 0.001
	// MaxConnections bounds Concurrency and Connections (each is a goroutine, a socket and
	// its buffers).
	MaxConnections = 100_000
	// MaxDuration bounds Duration, Warmup, Drain and Timeout each.
	MaxDuration = 24 * time.Hour
	// MinDuration is the shortest Duration. A shorter window holds a few responses at most,
	// and none when one takes longer (a stream, a slow upstream): its rates and percentiles
	// say nothing. compare --quick measures 1.2 s.
	MinDuration = 100 * time.Millisecond
)

// exampleTarget is the target the errors about one show as an example.
const exampleTarget = "http://127.0.0.1:8080"

// OptionError is an Options value that Run refuses. Flag names the option as sluice-bench
// run's flag does ("concurrency", "max-tokens"; Drain, which has no flag, "drain"), so that the
// command can name the flag the value came from; Value is the value as that flag prints it,
// and Msg what the option takes. Flag is "" when no one value is wrong (two options that
// exclude each other, or neither of two set): Msg then says so, naming the options as flags.
type OptionError struct{ Flag, Value, Msg string }

// Error returns `harness: concurrency "-3": want 1 to 100000 connections`, or "harness: " and
// Msg when Flag is "".
func (e *OptionError) Error() string {
	if e.Flag == "" {
		return "harness: " + e.Msg
	}
	return fmt.Sprintf("harness: %s %q: %s", e.Flag, e.Value, e.Msg)
}

func refuse(flag, value, format string, a ...any) error {
	return &OptionError{Flag: flag, Value: value, Msg: fmt.Sprintf(format, a...)}
}

func conflict(msg string) error { return &OptionError{Msg: msg} }

// Check returns the first of o's values that Run would refuse, as an *OptionError, or nil. It
// starts nothing, so a command can check its flags before it runs.
func (o Options) Check() error {
	o.normalize()
	return o.check()
}

// normalize fills in the defaults of the fields left zero.
func (o *Options) normalize() {
	if o.Path == "" {
		o.Path = DefaultPath
	}
	if o.Model == "" {
		o.Model = DefaultModel
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Drain == 0 {
		o.Drain = DefaultDrain
	}
	if o.Connections == 0 {
		o.Connections = DefaultConnections
	}
	if o.Workload == "" {
		o.Workload = WorkloadJSON
	}
	if o.NewConnections {
		o.Headers = append(o.Headers[:len(o.Headers):len(o.Headers)], "Connection: close")
	}
}

// check validates normalized options.
func (o *Options) check() error {
	if err := o.checkLoad(); err != nil {
		return err
	}
	if err := o.checkRequests(); err != nil {
		return err
	}
	u, _, err := parseTarget("target", o.Target)
	if err != nil {
		return err
	}
	if o.AltTarget != "" {
		if o.Rate > 0 {
			return conflict("--alt-target needs the closed loop: --concurrency, not --rate")
		}
		if _, _, err := parseTarget("alt-target", o.AltTarget); err != nil {
			return err
		}
	}
	a, err := ParseAdversary(o.Adversary)
	if err != nil {
		return err
	}
	if a != nil {
		return checkLoopback(u.Hostname())
	}
	return nil
}

// checkLoad validates the options that shape the load: its loop, connections and times.
func (o *Options) checkLoad() error {
	if err := CheckRate(o.Rate); err != nil {
		return err
	}
	switch {
	case o.Concurrency > 0 && o.Rate > 0:
		return conflict("set either --concurrency (closed loop) or --rate (open loop), not both")
	case o.Concurrency == 0 && o.Rate == 0:
		return conflict("set --concurrency (closed loop) or --rate (open loop)")
	case o.Poisson && o.Rate == 0:
		// Poisson gaps are an arrival process's, and a closed loop has none: each request
		// leaves when the one before it is answered.
		return conflict("--poisson needs the open loop: --rate")
	case o.Concurrency < 0 || o.Concurrency > MaxConnections:
		return RefuseConcurrency(strconv.Itoa(o.Concurrency))
	case o.Connections < 0 || o.Connections > MaxConnections:
		return RefuseConnections(strconv.Itoa(o.Connections))
	case o.Duration < MinDuration || o.Duration > MaxDuration:
		return RefuseWindow(o.Duration.String())
	case o.Warmup < 0 || o.Warmup > MaxDuration:
		return refuse("warmup", o.Warmup.String(), "want 0 to %v", MaxDuration)
	case o.Timeout < 0 || o.Timeout > MaxDuration:
		// Worded for the command line, where the flag's default is written out and a 0 is
		// refused as well (Options reads 0 as the default).
		return RefuseDuration("timeout", o.Timeout.String())
	case o.Drain < 0 || o.Drain > MaxDuration:
		return refuse("drain", o.Drain.String(), "want 0 (the default) to %v", MaxDuration)
	}
	return nil
}

// checkRequests validates the options that shape the requests.
func (o *Options) checkRequests() error {
	switch {
	case o.MaxTokens < 0:
		return refuse("max-tokens", strconv.Itoa(o.MaxTokens), "want 0 (omitted) or more")
	case o.Turns < 0:
		return refuse("turns", strconv.Itoa(o.Turns), "want 1 or more (0: the default)")
	case o.ReplyBytes < 0 || o.ReplyBytes > maxReplyBytes:
		return refuse("reply-bytes", strconv.Itoa(o.ReplyBytes), "want 0 (the default) to %d", maxReplyBytes)
	case o.EchoReplies && o.ReplyBytes > 0:
		return conflict("set either --echo-replies or --reply-bytes, not both")
	}
	known := false
	for _, w := range Workloads {
		known = known || w == o.Workload
	}
	if !known {
		return RefuseWorkload(o.Workload)
	}
	if o.Workload != WorkloadMultiTurn && o.Workload != WorkloadMixed && (o.Turns != 0 || o.ReplyBytes != 0 || o.EchoReplies) {
		// They shape the conversations of chat-multiturn (and of mixed, whose turns are
		// some): with another workload they would do nothing.
		return conflict("--turns, --reply-bytes and --echo-replies shape the chat-multiturn and mixed workloads: want --workload chat-multiturn or mixed")
	}
	if !isRequestPath(o.Path) {
		return RefusePath(o.Path)
	}
	for _, h := range o.Headers {
		if _, _, ok := headerField(h); !ok {
			return refuse("header", h, `want "Name: value" on one line`)
		}
	}
	return nil
}

// isRequestPath reports whether p can be the target of a request line as the harness writes
// it, "POST p HTTP/1.1": an origin-form path (RFC 9112, section 3.2.1), "/" and more, of
// visible US-ASCII. A space or control character would end the line or the target early; a
// '#' starts a fragment, which is never sent (RFC 3986, section 3.5), and a byte above 0x7e
// is no URI character: a server that checks its request line, sluice among them, answers
// every such request 400, so the run would measure only refusals. Either is sent
// percent-encoded (%23, %C3%A9).
func isRequestPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] >= 0x7f || p[i] == '#' {
			return false
		}
	}
	return true
}

// CheckRate returns an error unless rate is 0 (closed loop) or a number of requests per second
// in [MinRate, MaxRate].
func CheckRate(rate float64) error {
	if rate == 0 {
		return nil
	}
	if math.IsNaN(rate) || rate < MinRate || rate > MaxRate {
		return RefuseRate(strconv.FormatFloat(rate, 'g', -1, 64))
	}
	return nil
}

// RefuseRate is the *OptionError for a rate outside [MinRate, MaxRate], value as given. A
// caller that can tell a rate of 0 written out from one left out (Options reads 0 as "not
// given") refuses the first with it.
func RefuseRate(value string) error {
	return refuse("rate", value, "want a number of requests per second in [%v, %d]", MinRate, MaxRate)
}

// RefuseWorkload is the *OptionError for a workload other than those of Workloads, value as
// given; see RefuseRate for an empty one written out (Options reads "" as "not given").
func RefuseWorkload(value string) error {
	return refuse("workload", value, "want one of %s", strings.Join(Workloads, ", "))
}

// RefusePath is the *OptionError for a request path that is not one (isRequestPath), value as
// given; see RefuseRate for an empty one written out (Options reads "" as "not given").
func RefusePath(value string) error {
	return refuse("path", value, "want a path such as %s: a / first, then visible ASCII other than # (percent-encode the rest)", DefaultPath)
}

// RefuseModel is the *OptionError for an empty model written out, which Options reads as "not
// given" (DefaultModel); see RefuseRate.
func RefuseModel(value string) error {
	return refuse("model", value, "want a model name such as %s", DefaultModel)
}

// RefuseTarget is the *OptionError for a target that is no base URL, value as given; see
// RefuseRate for an empty one written out.
func RefuseTarget(value string) error {
	return refuse("target", value, "want a URL such as %s", exampleTarget)
}

// RefuseConcurrency is the *OptionError for a concurrency outside 1..MaxConnections, value as
// given; see RefuseRate for a 0 written out.
func RefuseConcurrency(value string) error {
	return refuse("concurrency", value, "want 1 to %d connections", MaxConnections)
}

// RefuseConnections is the *OptionError for a connection cap outside 1..MaxConnections, value
// as given; see RefuseRate for a 0 written out.
func RefuseConnections(value string) error {
	return refuse("connections", value, "want 1 to %d connections", MaxConnections)
}

// RefuseDuration is the *OptionError for a time of flag that is not more than 0 or is over
// MaxDuration, value as given: what Timeout takes, and what a command takes for another time
// whose 0 its options read as "not given". The measured window has its own: RefuseWindow.
func RefuseDuration(flag, value string) error {
	return refuse(flag, value, "want more than 0, at most %v", MaxDuration)
}

// RefuseWindow is the *OptionError for a measured window (Duration, flag --duration) shorter
// than MinDuration or longer than MaxDuration, value as given; see RefuseRate for a 0 written
// out.
func RefuseWindow(value string) error {
	return refuse("duration", value, "want %v to %v (a shorter window measures too few responses)", MinDuration, MaxDuration)
}

// parseTarget checks the base URL of option flag and returns it with its dial address.
func parseTarget(flag, target string) (*url.URL, string, error) {
	u, err := url.Parse(target)
	if err != nil || !strings.Contains(target, "://") {
		// Without a scheme, "127.0.0.1:8080" fails to parse and "localhost:8080" parses as
		// an opaque URL of scheme localhost: neither says what is missing.
		return nil, "", refuse(flag, target, "want a URL such as %s", exampleTarget)
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, "", refuse(flag, target, "want http://host:port (https is not supported)")
	}
	// The target is scheme://host:port alone. A '?' or '#' is refused by itself, with
	// nothing after it too: url.Parse keeps no trace of an empty fragment, and a query or
	// fragment belongs to the request path, which is set apart.
	if (u.Path != "" && u.Path != "/") || strings.ContainsAny(target, "?#") || u.User != nil {
		return nil, "", refuse(flag, target, "want only http://host:port (the request path is set apart: --path)")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, "", refuse(flag, target, "port %s is not a TCP port", p)
		}
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return u, addr, nil
}
