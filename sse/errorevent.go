package sse

import (
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// AppendErrorEvent appends to dst the SSE event the gateway sends when an
// upstream fails after the stream has started (no "[DONE]"
// follows it), in OpenAI's error shape:
//
//	event: error
//	data: {"error":{"message":"...","type":"...","param":null,"code":"..."}}
//
// followed by a blank line. message, typ and code are JSON string escaped
// (RFC 8259 §7; invalid UTF-8 becomes U+FFFD), so the data stays on one
// line. An empty code is written as null.
func AppendErrorEvent(dst []byte, message, typ, code string) []byte {
	dst = append(dst, "event: error\ndata: {\"error\":{\"message\":"...)
	dst = AppendJSONString(dst, message)
	dst = append(dst, ",\"type\":"...)
	dst = AppendJSONString(dst, typ)
	dst = append(dst, ",\"param\":null,\"code\":"...)
	if code == "" {
		dst = append(dst, "null"...)
	} else {
		dst = AppendJSONString(dst, code)
	}
	return append(dst, "}}\n\n"...)
}

// AppendJSONString appends s to dst as a quoted JSON string (RFC 8259 §7):
// '"' and '\\' are escaped, control characters become \n, \r, \t or \u00XX,
// U+2028 and U+2029 are escaped, and invalid UTF-8 bytes become \ufffd.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
