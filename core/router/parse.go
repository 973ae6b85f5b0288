package router

import (
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-gw/sluice/internal/steps"
)

// parser is a recursive-descent parser over the token stream with one token
// of lookahead. Grammar (precedence ! > && > ||, all binary operators left
// associative):
//
//	rule    = or EOF
//	or      = and { "||" and }
//	and     = unary { "&&" unary }
//	unary   = "!" unary | primary
//	primary = "(" or ")" | NAME "(" STRING { "," STRING } ")"
type parser struct {
	lex      lexer
	tok      token
	depth    int
	matchers int
}

func (p *parser) advance() *SyntaxError {
	t, err := p.lex.next()
	if err != nil {
		return err
	}
	p.tok = t
	return nil
}

func (p *parser) errorf(pos int, msg string) *SyntaxError {
	return &SyntaxError{Offset: pos, Msg: msg}
}

func (p *parser) expect(k tokenKind, what string) *SyntaxError {
	if p.tok.kind != k {
		return p.errorf(p.tok.pos, "expected "+what+", found "+p.tok.kind.String())
	}
	return p.advance()
}

func (p *parser) parseOr() (*node, *SyntaxError) {
	left, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.tok.kind == tokOr {
		if err := p.advance(); err != nil {
			return nil, err
		}
		right, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		left = join(opOr, left, right)
	}
	return left, nil
}

func (p *parser) parseAnd() (*node, *SyntaxError) {
	left, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for p.tok.kind == tokAnd {
		if err := p.advance(); err != nil {
			return nil, err
		}
		right, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		left = join(opAnd, left, right)
	}
	return left, nil
}

func (p *parser) enter(pos int) *SyntaxError {
	p.depth++
	if p.depth > MaxNestingDepth {
		return p.errorf(pos, "nesting deeper than "+strconv.Itoa(MaxNestingDepth)+" levels of '(' and '!'")
	}
	return nil
}

func (p *parser) parseUnary() (*node, *SyntaxError) {
	if p.tok.kind == tokNot {
		if err := p.enter(p.tok.pos); err != nil {
			return nil, err
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		operand, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		p.depth--
		if operand.op == opNot { // !!x == x
			return operand.kids[0], nil
		}
		return &node{op: opNot, kids: []*node{operand}, cost: operand.cost}, nil
	}
	return p.parsePrimary()
}

func (p *parser) parsePrimary() (*node, *SyntaxError) {
	switch p.tok.kind {
	case tokLParen:
		if err := p.enter(p.tok.pos); err != nil {
			return nil, err
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		n, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if err := p.expect(tokRParen, "')'"); err != nil {
			return nil, err
		}
		p.depth--
		return n, nil
	case tokIdent:
		return p.parseMatcher()
	}
	return nil, p.errorf(p.tok.pos, "expected a matcher ("+matcherNames()+"), '(' or '!', found "+p.tok.kind.String())
}

func (p *parser) parseMatcher() (*node, *SyntaxError) {
	nameTok := p.tok
	spec := lookupMatcher(nameTok.val)
	if spec == nil {
		return nil, p.errorf(nameTok.pos, "unknown matcher "+strconv.Quote(nameTok.val)+nearestMatcher(nameTok.val)+" (valid: "+matcherNames()+")")
	}
	p.matchers++
	if p.matchers > MaxMatchers {
		return nil, p.errorf(nameTok.pos, "more than "+strconv.Itoa(MaxMatchers)+" matchers in one rule")
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	if p.tok.kind != tokLParen {
		return nil, p.errorf(p.tok.pos, "expected '(' after "+spec.name+", found "+p.tok.kind.String())
	}
	open := p.tok.pos
	if err := p.advance(); err != nil {
		return nil, p.unquoted(spec, open, err)
	}
	var args []token
	for {
		if p.tok.kind != tokString {
			return nil, p.unquoted(spec, open, p.errorf(p.tok.pos, "expected a `string` argument to "+spec.name+", found "+p.tok.kind.String()))
		}
		if len(args) == MaxMatcherArgs {
			return nil, p.errorf(p.tok.pos, "more than "+strconv.Itoa(MaxMatcherArgs)+" arguments to "+spec.name)
		}
		args = append(args, p.tok)
		if err := p.advance(); err != nil {
			return nil, err
		}
		if p.tok.kind == tokComma {
			if err := p.advance(); err != nil {
				return nil, p.unquoted(spec, open, err)
			}
			continue
		}
		break
	}
	closePos := p.tok.pos
	if err := p.expect(tokRParen, "',' or ')' in "+spec.name+"(...)"); err != nil {
		return nil, err
	}
	maxArgs := spec.maxArgs
	if maxArgs == 0 {
		maxArgs = MaxMatcherArgs
	}
	if len(args) < spec.minArgs || len(args) > maxArgs {
		want := strconv.Itoa(spec.minArgs)
		if spec.maxArgs == 0 {
			want = "at least " + want
		} else if spec.maxArgs != spec.minArgs {
			want += " or " + strconv.Itoa(spec.maxArgs)
		}
		return nil, p.errorf(closePos, spec.name+" takes "+want+" argument(s), got "+strconv.Itoa(len(args)))
	}
	m, err := compileMatcher(spec, args)
	if err != nil {
		return nil, err
	}
	return &node{op: opMatch, m: m, cost: spec.cost}, nil
}

// unquoted returns err, the error at an argument of spec's call whose "(" is at offset open,
// reworded when the arguments are written without quotes, the usual slip
// (PathPrefix(/v1), Method(POST), PathPrefix('/v1')): it says that they go in backquotes and,
// when the call's text is plain enough to rewrite, what to write. err keeps its offset.
func (p *parser) unquoted(spec *matcherSpec, open int, err *SyntaxError) *SyntaxError {
	src := p.lex.src
	at := err.Offset
	if at >= len(src) || !(isLetter(src[at]) || isDigit(src[at]) || strings.IndexByte("/'.*^[-_:?", src[at]) >= 0) {
		return err
	}
	msg := spec.name + "'s arguments go in backquotes"
	text, _, closed := strings.Cut(src[open+1:], ")")
	if parts, ok := bareArgs(text); closed && ok && !strings.ContainsAny(text, "`\"(") {
		for i, a := range parts {
			parts[i] = "`" + a + "`"
		}
		return &SyntaxError{Offset: at, Msg: msg + ": write " + spec.name + "(" + strings.Join(parts, ", ") + ")"}
	}
	return &SyntaxError{Offset: at, Msg: msg + ", as in " + spec.name + "(`…`)"}
}

// bareArgs splits text, the arguments of a call written without backquotes, at its commas,
// an argument that starts with a single quote running to the next one ('a,b' is one
// argument), and returns them trimmed of spaces and of those quotes; ok is false when one is
// empty, or a quote that opens one is not closed just before a comma or the end.
func bareArgs(text string) (args []string, ok bool) {
	for rest := text; ; {
		rest = strings.TrimLeft(rest, " \t")
		var a string
		if strings.HasPrefix(rest, "'") {
			end := strings.IndexByte(rest[1:], '\'')
			if end < 0 {
				return nil, false
			}
			a, rest = rest[1:1+end], strings.TrimLeft(rest[2+end:], " \t")
			if rest != "" && rest[0] != ',' {
				return nil, false
			}
		} else {
			i := strings.IndexByte(rest, ',')
			if i < 0 {
				i = len(rest)
			}
			a, rest = strings.TrimSpace(rest[:i]), rest[i:]
		}
		if a == "" {
			return nil, false
		}
		args = append(args, a)
		if rest == "" {
			return args, true
		}
		rest = rest[1:] // the comma
	}
}

// compileMatcher validates the arguments of one matcher call and
// precomputes its comparison values.
func compileMatcher(spec *matcherSpec, args []token) (*matcher, *SyntaxError) {
	m := &matcher{kind: spec.kind}
	for _, a := range args {
		steps.Add(len(a.val) + 1) // the checks and copies below; a regexp's compilation is not counted
	}
	switch spec.kind {
	case mHost:
		for _, a := range args {
			h := strings.ToLower(a.val)
			if n := len(h); n > 1 && h[n-1] == '.' {
				h = h[:n-1]
			}
			if h == "" {
				return nil, &SyntaxError{Offset: a.pos, Msg: "Host: empty host name"}
			}
			if strings.ContainsAny(h, " \t\r\n/?#@") {
				return nil, &SyntaxError{Offset: a.pos, Msg: "Host: invalid host name " + strconv.Quote(a.val)}
			}
			if h[0] != '[' && strings.IndexByte(h, ':') >= 0 {
				return nil, &SyntaxError{Offset: a.pos, Msg: "Host: host name must not carry a port (ports are ignored when matching); write IPv6 literals as [::1]"}
			}
			m.values = append(m.values, []byte(h))
		}
	case mPath, mPathPrefix:
		for _, a := range args {
			if !strings.HasPrefix(a.val, "/") {
				return nil, &SyntaxError{Offset: a.pos, Msg: spec.name + ": path must start with '/', got " + strconv.Quote(a.val)}
			}
			m.values = append(m.values, []byte(a.val))
		}
	case mMethod:
		for _, a := range args {
			if !isToken(a.val) {
				return nil, &SyntaxError{Offset: a.pos, Msg: "Method: invalid method " + strconv.Quote(a.val)}
			}
			m.values = append(m.values, []byte(strings.ToUpper(a.val)))
		}
	case mHostRegexp, mPathRegexp:
		expr := args[0].val
		if spec.kind == mHostRegexp {
			expr = "(?i)" + expr // host names compare case-insensitively
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, &SyntaxError{Offset: args[0].pos, Msg: spec.name + ": " + err.Error()}
		}
		m.re = re
	case mHeader, mHeaderRegexp, mQuery, mQueryRegexp:
		name := args[0]
		if spec.kind == mQuery || spec.kind == mQueryRegexp {
			if name.val == "" {
				return nil, &SyntaxError{Offset: name.pos, Msg: spec.name + ": empty parameter name"}
			}
		} else if !isToken(name.val) {
			return nil, &SyntaxError{Offset: name.pos, Msg: spec.name + ": invalid header field name " + strconv.Quote(name.val)}
		}
		m.name = name.val
		if len(args) == 2 {
			v := args[1]
			if spec.kind == mHeaderRegexp || spec.kind == mQueryRegexp {
				re, err := regexp.Compile(v.val)
				if err != nil {
					return nil, &SyntaxError{Offset: v.pos, Msg: spec.name + ": " + err.Error()}
				}
				m.re = re
			} else {
				m.value = []byte(v.val)
			}
		}
	}
	return m, nil
}

// join builds an n-ary And/Or node, flattening operands of the same
// operator so that a long chain a && b && c stays one level deep.
func join(op opKind, left, right *node) *node {
	steps.Add(len(right.kids) + 1)
	var kids []*node
	if left.op == op {
		kids = left.kids
	} else {
		kids = []*node{left}
	}
	if right.op == op {
		kids = append(kids, right.kids...)
	} else {
		kids = append(kids, right)
	}
	return &node{op: op, kids: kids}
}

// finish orders the operands of every And/Or node by ascending cost
// (matchers have no side effects, so the order does not change the result)
// and computes node costs bottom-up.
func finish(n *node) int {
	switch n.op {
	case opAnd, opOr:
		total := 0
		for _, k := range n.kids {
			total += finish(k)
		}
		sort.SliceStable(n.kids, func(i, j int) bool {
			steps.Add(1)
			return n.kids[i].cost < n.kids[j].cost
		})
		n.cost = total
	case opNot:
		n.cost = finish(n.kids[0])
	}
	return n.cost
}
