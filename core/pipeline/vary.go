package pipeline

import (
	"bytes"
)

// varyListed reports whether respExtra[i], when it is a Vary field, adds nothing to the Vary
// the client gets: every member it lists is listed already, by a Vary field of the upstream's
// response that goes to the client or by one a stage added before it, or one of those is "*",
// which stands for all (RFC 9110 §12.5.5). Such a field is left out of the head: a stage adds
// Vary for the request fields its work depends on whatever the upstream says, and a member
// listed twice (Vary: Accept-Encoding on two lines) only lengthens the head.
func (rc *RequestCtx) varyListed(i int) bool {
	f := rc.respExtra[i]
	if !isVary(rc.kv[f.k0:f.k1]) {
		return false
	}
	for rest := rc.kv[f.k1:f.v1]; len(rest) > 0; {
		var m []byte
		if j := bytes.IndexByte(rest, ','); j >= 0 {
			m, rest = rest[:j], rest[j+1:]
		} else {
			m, rest = rest, nil
		}
		if m = bytes.TrimSpace(m); len(m) > 0 && !rc.varies(m, i) {
			return false
		}
	}
	return true
}

// varies reports whether member m (a field name) is listed, or "*" is, by the Vary fields of
// the upstream's response that go to the client or by those of respExtra[:i].
func (rc *RequestCtx) varies(m []byte, i int) bool {
	if rc.x != nil && !rc.replied && !rc.held {
		resp := &rc.x.Resp
		hs := resp.Headers
		for j := range hs {
			// A Vary its Connection names is the upstream hop's alone (passToClient).
			if isVary(hs[j].Key) && listsMember(hs[j].Value, m) && passToClient(resp, hs[j].Key) {
				return true
			}
		}
	}
	for _, f := range rc.respExtra[:i] {
		if isVary(rc.kv[f.k0:f.k1]) && listsMember(rc.kv[f.k1:f.v1], m) {
			return true
		}
	}
	return false
}

// isVary reports whether field name k is Vary, in any ASCII case (each byte of "vary" is a
// letter: OR-ing in 0x20 lowers an upper-case one and maps no other byte to it).
func isVary(k []byte) bool {
	return len(k) == 4 && k[0]|0x20 == 'v' && k[1]|0x20 == 'a' && k[2]|0x20 == 'r' && k[3]|0x20 == 'y'
}

// listsMember reports whether the comma-separated list v has member m, or "*" (which stands
// for every member in Vary, and is no field name elsewhere), ignoring ASCII case and optional
// whitespace (RFC 9110 §5.6.1).
func listsMember(v, m []byte) bool {
	for len(v) > 0 {
		el := v
		if j := bytes.IndexByte(v, ','); j >= 0 {
			el, v = v[:j], v[j+1:]
		} else {
			v = nil
		}
		el = bytes.TrimSpace(el)
		if (len(el) == 1 && el[0] == '*') || (len(el) == len(m) && bytes.EqualFold(el, m)) {
			return true
		}
	}
	return false
}
