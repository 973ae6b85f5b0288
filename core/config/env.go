package config

import "strings"

// expandEnv replaces each ${NAME} in s with the value of environment variable
// NAME, looked up with lookup. "$${" stands for a literal "${"; a
// "$" not followed by "{" is kept as is. NAME is [A-Za-z_][A-Za-z0-9_]*.
// On failure it returns a message saying which variable or what syntax was
// wrong; the caller adds the position.
func expandEnv(s string, lookup func(string) (string, bool)) (string, string) {
	if !strings.Contains(s, "${") {
		return s, ""
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '$' && strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case c == '$' && strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", `unterminated "${" in string (write "$${" for a literal "${")`
			}
			name := s[i+2 : i+2+end]
			if !isEnvName(name) {
				return "", "invalid environment variable name " + quote(name) + ` in "${...}" (want [A-Za-z_][A-Za-z0-9_]*; write "$${" for a literal "${")`
			}
			v, ok := lookup(name)
			if !ok {
				return "", "environment variable " + name + " is not set (referenced as ${" + name + "})"
			}
			b.WriteString(v)
			i += 3 + end
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), ""
}

func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}
