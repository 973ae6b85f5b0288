package openai

import "github.com/sluice-gw/sluice/sse"

// RewriteModel appends to dst the body with its "model" value replaced by newModel (an alias
// resolved to the upstream's model id) and returns the extended slice; the caller sets
// Content-Length from the length of what it appended. Every byte outside the model's string
// token (req.ModelSpan, from a successful Peek of this same body) is copied unchanged; the new
// value is written as a JSON string: '"', '\\' and control characters escaped, invalid UTF-8
// replaced by U+FFFD (as encoding/json does), U+2028 and U+2029 escaped. It does not allocate
// when dst has room. Without a model span (Peek failed or was not called) it appends body
// unchanged.
func RewriteModel(body []byte, req *Request, newModel string, dst []byte) []byte {
	s := req.ModelSpan
	if !s.Present() || s.End > len(body) || body[s.Start] != '"' || body[s.End-1] != '"' {
		return append(dst, body...)
	}
	dst = append(dst, body[:s.Start]...)
	dst = sse.AppendJSONString(dst, newModel)
	return append(dst, body[s.End:]...)
}
