package report

import "strings"

// CommandLine returns argv as one line that a POSIX shell (sh, dash, bash, zsh) splits back
// into the same argv, for a report's Command: each argument as it is when it holds only
// characters no shell treats specially (ASCII letters and digits, and @%+=:,./_-), and in
// single quotes otherwise (an empty one too), where nothing is special but the closing quote
// (POSIX, Shell Command Language, 2.2.3): a single quote in the argument closes the quotes,
// follows escaped by a backslash, and opens them again.
func CommandLine(argv ...string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a != "" && strings.IndexFunc(a, special) < 0 {
			b.WriteString(a)
			continue
		}
		b.WriteByte('\'')
		b.WriteString(strings.ReplaceAll(a, "'", `'\''`))
		b.WriteByte('\'')
	}
	return b.String()
}

// special reports whether r is anything but an ASCII letter or digit or one of @%+=:,./_-,
// which no shell reads as an operator, a quote, an expansion, a glob or a comment.
func special(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("@%+=:,./_-", r)
}

// CommandMarkdown returns a report's Command line in Markdown, "Command: " and command (a
// CommandLine) in a code span that shows it as it is, ended by a hard line break; "" for a
// command of "".
func CommandMarkdown(command string) string {
	if command == "" {
		return ""
	}
	return "Command: " + codeSpan(command) + "  \n"
}

// codeSpan returns s as a Markdown code span (CommonMark, 6.1): between backtick strings
// longer than any run of backticks in s, with a space inside each when s begins or ends with
// one (which the renderer strips), so that the span shows s as it is.
func codeSpan(s string) string {
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}
