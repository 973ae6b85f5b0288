package router

import "strings"

// MaskValues returns rule with the value argument of every Header, HeaderRegexp, Query and
// QueryRegexp matcher replaced by `mask` where hide(name, value) reports true for the
// matcher's field or parameter name and its value as written, e.g.
// Header(`X-Api-Key`, `k-1`) becomes Header(`X-Api-Key`, `<redacted>`). The rest of the text
// is kept as it is. It is for showing a rule that may hold a credential. Text that does not
// lex is kept from where it stops lexing; a rule that parses lexes whole.
func MaskValues(rule string, hide func(name, value string) bool, mask string) string {
	l := lexer{src: rule}
	var b strings.Builder
	done := 0 // rule[:done] is in b
	// The tokens of the matcher call being read, from its name: name ( `a` , `b`. A call is
	// masked at its ')' when it has exactly these five tokens before it.
	var call [5]token
	var ends [5]int
	n := 0
	for {
		t, err := l.next()
		if err != nil || t.kind == tokEOF {
			break
		}
		switch {
		case t.kind == tokIdent:
			call[0], ends[0], n = t, l.pos, 1
		case t.kind == tokRParen:
			if n == len(call) && valuedMatcher(call[0].val) && call[1].kind == tokLParen &&
				call[2].kind == tokString && call[3].kind == tokComma && call[4].kind == tokString &&
				hide(call[2].val, call[4].val) {
				b.WriteString(rule[done:call[4].pos])
				b.WriteString("`" + mask + "`")
				done = ends[4]
			}
			n = 0
		case n > 0 && n < len(call):
			call[n], ends[n] = t, l.pos
			n++
		default:
			n = 0 // not a call of two arguments
		}
	}
	if done == 0 {
		return rule
	}
	b.WriteString(rule[done:])
	return b.String()
}

// valuedMatcher reports whether the matcher of this name compares a named field or
// parameter with a value given as its second argument.
func valuedMatcher(name string) bool {
	switch name {
	case "Header", "HeaderRegexp", "Query", "QueryRegexp":
		return true
	}
	return false
}
