package router

import "fmt"

// Limits on rule text. A rule that exceeds one of them is rejected by Parse
// with a *SyntaxError instead of being compiled, so that hostile or broken
// configuration can neither exhaust the stack nor make matching slow.
const (
	// MaxRuleBytes is the longest rule text Parse accepts, in bytes.
	MaxRuleBytes = 16 << 10
	// MaxNestingDepth is the deepest nesting of parentheses and `!`
	// operators Parse accepts.
	MaxNestingDepth = 32
	// MaxMatchers is the largest number of matcher calls (Host(...),
	// Path(...), ...) one rule may contain.
	MaxMatchers = 256
	// MaxMatcherArgs is the largest number of arguments one matcher call
	// may take (for example hosts in Host(`a`, `b`, ...)).
	MaxMatcherArgs = 64
)

// SyntaxError reports a rule that Parse cannot compile: a lexical or grammar
// error, an unknown matcher, a wrong argument count, an invalid argument
// (empty host, path not starting with "/", bad regular expression) or a rule
// over one of the limits (MaxRuleBytes, MaxNestingDepth, MaxMatchers,
// MaxMatcherArgs).
type SyntaxError struct {
	// Rule is the rule text as given to Parse.
	Rule string
	// Offset is the byte offset in Rule where the problem was found,
	// 0 <= Offset <= len(Rule) (len(Rule) means "at the end of the text").
	Offset int
	// Msg says what is wrong, without the rule text.
	Msg string
}

// Error formats the error as `cannot parse rule "..." at offset N: msg`.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("cannot parse rule %q at offset %d: %s", e.Rule, e.Offset, e.Msg)
}
