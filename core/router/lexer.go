package router

import (
	"strconv"
	"strings"

	"github.com/sluice-gw/sluice/internal/steps"
)

// tokenKind is the class of one lexical token of the rule language.
type tokenKind uint8

const (
	tokEOF    tokenKind = iota
	tokIdent            // matcher name: [A-Za-z][A-Za-z0-9]*
	tokString           // `raw` or "Go-quoted" string; val holds the unquoted text
	tokLParen           // (
	tokRParen           // )
	tokComma            // ,
	tokAnd              // &&
	tokOr               // ||
	tokNot              // !
)

// String names the token kind for error messages.
func (k tokenKind) String() string {
	switch k {
	case tokEOF:
		return "end of rule"
	case tokIdent:
		return "matcher name"
	case tokString:
		return "string"
	case tokLParen:
		return "'('"
	case tokRParen:
		return "')'"
	case tokComma:
		return "','"
	case tokAnd:
		return "'&&'"
	case tokOr:
		return "'||'"
	case tokNot:
		return "'!'"
	}
	return "token"
}

type token struct {
	kind tokenKind
	pos  int    // byte offset of the token's first byte
	val  string // identifier text or unquoted string value
}

// lexer splits rule text into tokens. It works on the string in place and
// only allocates for double-quoted strings that contain escapes.
type lexer struct {
	src string
	pos int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isLetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// next returns the next token, or a *SyntaxError (without Rule set).
func (l *lexer) next() (token, *SyntaxError) {
	from := l.pos
	defer func() { steps.Add(l.pos - from + 1) }()
	for l.pos < len(l.src) && isSpace(l.src[l.pos]) {
		l.pos++
	}
	start := l.pos
	if start >= len(l.src) {
		return token{kind: tokEOF, pos: start}, nil
	}
	c := l.src[start]
	switch {
	case c == '(':
		l.pos++
		return token{kind: tokLParen, pos: start}, nil
	case c == ')':
		l.pos++
		return token{kind: tokRParen, pos: start}, nil
	case c == ',':
		l.pos++
		return token{kind: tokComma, pos: start}, nil
	case c == '!':
		l.pos++
		return token{kind: tokNot, pos: start}, nil
	case c == '&' || c == '|':
		if start+1 < len(l.src) && l.src[start+1] == c {
			l.pos += 2
			if c == '&' {
				return token{kind: tokAnd, pos: start}, nil
			}
			return token{kind: tokOr, pos: start}, nil
		}
		return token{}, &SyntaxError{Offset: start, Msg: "expected '" + string(c) + string(c) + "'"}
	case c == '`':
		end := strings.IndexByte(l.src[start+1:], '`')
		if end < 0 {
			return token{}, &SyntaxError{Offset: start, Msg: "unterminated `string`"}
		}
		l.pos = start + 1 + end + 1
		return token{kind: tokString, pos: start, val: l.src[start+1 : start+1+end]}, nil
	case c == '"':
		q, err := strconv.QuotedPrefix(l.src[start:])
		if err != nil {
			return token{}, &SyntaxError{Offset: start, Msg: "invalid or unterminated \"string\""}
		}
		v, err := strconv.Unquote(q)
		if err != nil {
			return token{}, &SyntaxError{Offset: start, Msg: "invalid \"string\": " + err.Error()}
		}
		l.pos = start + len(q)
		return token{kind: tokString, pos: start, val: v}, nil
	case isLetter(c):
		l.pos++
		for l.pos < len(l.src) && (isLetter(l.src[l.pos]) || isDigit(l.src[l.pos])) {
			l.pos++
		}
		return token{kind: tokIdent, pos: start, val: l.src[start:l.pos]}, nil
	}
	return token{}, &SyntaxError{Offset: start, Msg: "unexpected character " + strconv.Quote(l.src[start:start+1])}
}
