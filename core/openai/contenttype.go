package openai

// JSONContentType reports whether a request's Content-Type field value names a JSON body:
// application/json or a structured "+json" type (RFC 6839 §3.1), case-insensitive, with any
// parameters (charset=utf-8). An absent field (present false) is not JSON.
//
// Why it matters: text/plain, application/x-www-form-urlencoded, multipart/form-data and no
// type at all (a Blob body without one) are what a browser sends across origins without a
// CORS preflight (Fetch standard, "CORS-safelisted request-header"), so a router that parsed
// them as JSON could be driven by any web page its users open, wherever no auth header is
// needed. The OpenAI and Anthropic SDKs always send application/json.
func JSONContentType(v []byte, present bool) bool {
	if !present {
		return false
	}
	mt := v
	for i, c := range v {
		if c == ';' {
			mt = v[:i]
			break
		}
	}
	mt = trimOWS(mt)
	slash := -1
	for i, c := range mt {
		if c == '/' {
			slash = i
			break
		}
	}
	if slash < 0 || !equalFoldASCII(mt[:slash], "application") {
		return false
	}
	sub := mt[slash+1:]
	if equalFoldASCII(sub, "json") {
		return true
	}
	return len(sub) > len("+json") && equalFoldASCII(sub[len(sub)-len("+json"):], "+json")
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func equalFoldASCII(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
