// Package router compiles and evaluates routing rules in the rule language
// of Traefik v2/v3 (https://doc.traefik.io/traefik/routing/routers/#rule) and
// keeps the ordered route table an entrypoint matches requests against.
//
// A rule is a boolean expression over matcher calls:
//
//	Host(`example.com`) && (PathPrefix(`/v1`) || Header(`X-Canary`, `1`)) && !Method(`DELETE`)
//
// Operators, from tightest to loosest binding: `!` (not), `&&` (and), `||`
// (or); parentheses group. Arguments are `backtick` strings (taken literally)
// or "double-quoted" Go string literals (escapes allowed). Matcher names are
// case-insensitive (`host` == `Host`). Matchers:
//
//   - Host(`a.com`, ...): the request's Host without its port (and without
//     one trailing "."), compared ASCII case-insensitively (RFC 9110 §4.2.3).
//     IPv6 literals are written with brackets: Host(`[::1]`). A host with a
//     port in the rule is an error.
//   - Path(`/x`, ...): the request path (no query) equals one argument,
//     byte for byte (case-sensitive, no normalisation).
//   - PathPrefix(`/v1`, ...): the request path starts with one argument.
//     As in Traefik this is a byte prefix: PathPrefix(`/v1`) also matches
//     "/v10"; write PathPrefix(`/v1/`) || Path(`/v1`) for a segment match.
//   - Method(`POST`, ...): the request method equals one argument. Rule
//     arguments are upper-cased at compile time; request methods are
//     compared case-sensitively (RFC 9110 §9.1), so a "post" request does not
//     match Method(`POST`).
//   - Header(`K`, `V`): header field K (name case-insensitive, as looked up by
//     Request.HeaderValue) is present and its value equals V exactly.
//   - HeaderRegexp(`K`, `re`): header K is present and its value matches the
//     Go regexp re.
//   - Query(`k`, `v`): query parameter k is present with value v (as returned
//     by Request.QueryValue). Query(`k`): parameter k is present, any value.
//   - HostRegexp(`re`): the host (port and trailing "." removed) matches re,
//     case-insensitively ((?i) is prepended), e.g. HostRegexp(`^.+\.example\.com$`).
//   - PathRegexp(`re`): the request path matches re.
//   - QueryRegexp(`k`, `re`): query parameter k is present and matches re.
//
// Regular expressions are Go RE2 (linear time, no backtracking blow-up) and
// unanchored: anchor with ^...$.
//
// Host, Path, PathPrefix and Method accept several arguments, meaning any of
// them (OR): Host(`a.com`, `b.com`) == Host(`a.com`) || Host(`b.com`).
//
// Rules are compiled once by Parse into a small tree (n-ary and/or nodes,
// cheapest operands first) and evaluated without allocation.
//
// A Table answers as if it tried its routes one by one in priority order,
// but it only evaluates routes that can match. NewTable derives from each
// rule the hosts and paths any matching request must have: a Host, Path or
// PathPrefix operand of &&, or an || whose every operand has such a
// requirement. It files the route under those hosts (lower case, as Host
// compares them) and, per host, in a radix tree of exact paths and path
// prefixes. Rules that do not confine the host or path (negations, regexps,
// header and query rules, || mixing kinds) are filed under every host and
// path. Match looks up the request host and walks the request path, so its
// cost follows the number of routes sharing the request's host and path,
// not the size of the table.
package router

import "github.com/sluice-gw/sluice/internal/steps"

// Request is the view of an HTTP request a rule evaluates. The gateway's
// HTTP/1.1 request object (core/http1.Request) implements it. No method may
// allocate; returned slices are only read, and only during Match.
type Request interface {
	// MethodBytes returns the request method as received, e.g. "POST".
	MethodBytes() []byte
	// HostBytes returns the Host header field value (RFC 9112 §3.2), port
	// included if the client sent one, e.g. "api.example.com:8080".
	HostBytes() []byte
	// PathBytes returns the path of the request target without the query,
	// e.g. "/v1/chat/completions".
	PathBytes() []byte
	// HeaderValue returns the value of the first header field whose name
	// equals name case-insensitively (RFC 9110 §5.1), and whether it exists.
	HeaderValue(name string) ([]byte, bool)
	// QueryValue returns the value of the first query parameter named name
	// (percent-decoding is up to the implementation, and documented there),
	// and whether it exists.
	QueryValue(name string) ([]byte, bool)
}

// opKind is the operator of a rule tree node.
type opKind uint8

const (
	opMatch opKind = iota
	opAnd
	opOr
	opNot
)

type node struct {
	op   opKind
	kids []*node // operands of opAnd / opOr (two or more), opNot (one)
	m    *matcher
	cost int
}

// Rule is a compiled routing rule. It is immutable and safe for concurrent
// use by any number of goroutines.
type Rule struct {
	text string
	root *node
}

// Parse compiles rule text. It returns a *SyntaxError (byte offset into the
// text and a message) when the text is not a valid rule or exceeds
// MaxRuleBytes, MaxNestingDepth, MaxMatchers or MaxMatcherArgs.
func Parse(rule string) (*Rule, error) {
	if len(rule) > MaxRuleBytes {
		return nil, &SyntaxError{Rule: rule, Offset: MaxRuleBytes, Msg: "rule longer than " + itoa(MaxRuleBytes) + " bytes"}
	}
	p := parser{lex: lexer{src: rule}}
	root, err := p.parseRule()
	if err != nil {
		err.Rule = rule
		return nil, err
	}
	finish(root)
	return &Rule{text: rule, root: root}, nil
}

func (p *parser) parseRule() (*node, *SyntaxError) {
	if err := p.advance(); err != nil {
		return nil, err
	}
	if p.tok.kind == tokEOF {
		return nil, p.errorf(p.tok.pos, "empty rule")
	}
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tokEOF {
		return nil, p.errorf(p.tok.pos, "expected '&&', '||' or end of rule, found "+p.tok.kind.String())
	}
	return n, nil
}

// MustParse is like Parse but panics on error. It is meant for rules that
// are constants in code and tests, never for configuration input.
func MustParse(rule string) *Rule {
	r, err := Parse(rule)
	if err != nil {
		panic(err)
	}
	return r
}

// String returns the rule text the Rule was parsed from.
func (r *Rule) String() string { return r.text }

// Match reports whether req satisfies the rule. It does not allocate. A nil
// Rule matches nothing.
func (r *Rule) Match(req Request) bool {
	if r == nil {
		return false
	}
	return eval(r.root, req)
}

// eval evaluates a node with short-circuiting. Recursion depth is bounded by
// MaxNestingDepth (And/Or chains are flattened, so they add no depth).
func eval(n *node, req Request) bool {
	steps.Add(1)
	switch n.op {
	case opMatch:
		return n.m.match(req)
	case opAnd:
		for _, k := range n.kids {
			if !eval(k, req) {
				return false
			}
		}
		return true
	case opOr:
		for _, k := range n.kids {
			if eval(k, req) {
				return true
			}
		}
		return false
	case opNot:
		return !eval(n.kids[0], req)
	}
	return false
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return string(b[i:])
}
