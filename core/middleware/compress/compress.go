// Package compress is the compress middleware: it codes response bodies with gzip, zstd or
// br (RFC 9110 §8.4), chosen by the client's Accept-Encoding (§12.5.3) and the configured
// preference, on the fly. It never codes an event stream: SSE events go out as they come,
// untouched, whatever the client accepts. Bodies that are empty or shorter than a minimum
// size, of types that do not compress, already coded, marked no-transform or asked for
// without transformation pass as they are.
package compress

import (
	"bytes"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/http1"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// coding is a content coding the stage can apply.
type coding uint8

const (
	codingNone coding = iota
	codingGzip
	codingZstd
	codingBr
)

var codingNames = [...][]byte{codingGzip: []byte("gzip"), codingZstd: []byte("zstd"), codingBr: []byte("br")}

func codingOf(name string) coding {
	switch name {
	case config.EncodingGzip:
		return codingGzip
	case config.EncodingZstd:
		return codingZstd
	case config.EncodingBr:
		return codingBr
	}
	return codingNone
}

// Stage is a compress middleware, a pipeline.ResponseStage. It keeps no per-request state.
type Stage struct {
	order   []coding // the codings offered, preferred first
	minSize int64
	types   []mediaRange
}

// mediaRange is a configured content type: "type/subtype", or "type/*" when sub is nil.
type mediaRange struct{ typ, sub []byte }

// New compiles a compress middleware.
func New(o config.CompressOptions) *Stage {
	s := &Stage{minSize: o.MinSize}
	for _, e := range o.Encodings {
		s.order = append(s.order, codingOf(e))
	}
	for _, t := range o.ContentTypes {
		typ, sub, _ := bytes.Cut([]byte(t), []byte("/"))
		r := mediaRange{typ: typ, sub: sub}
		if string(sub) == "*" {
			r.sub = nil
		}
		s.types = append(s.types, r)
	}
	return s
}

var (
	hdrVary            = []byte("Vary")
	hdrCacheControl    = []byte("Cache-Control")
	hdrContentEncoding = []byte("Content-Encoding")
	hdrAcceptRanges    = []byte("Accept-Ranges")
	hdrETag            = []byte("ETag")
	valAcceptEncoding  = []byte("Accept-Encoding")
	eventStream        = []byte("text/event-stream")
	noTransform        = []byte("no-transform")
)

// OnResponse implements pipeline.ResponseStage. A response to HEAD gets the fields the GET's
// would (RFC 9110 §9.3.2), so that a cache keying on Vary or comparing validators finds the
// same ones: its coding is named, its validator weakened and its length left out (the
// pipeline drops it), though it has no body to code. A 304 gets the Vary and the validator
// the 200 would carry (RFC 9110 §15.4.5): weakened when the 200 would be coded for the
// request, so that a cache holding the coded 200 (W/"x") finds it named by the 304 and
// freshens it (RFC 9111 §4.3.4). The client's If-None-Match goes upstream as it came: it
// compares weakly (RFC 9110 §13.1.2), so the upstream's "x" matches the W/"x" it carries.
// The pipeline leaves out a Vary that the upstream's already lists (or "*").
func (s *Stage) OnResponse(rc *pipeline.RequestCtx) error {
	if rc.Req.Major == 1 && rc.Req.Minor == 0 {
		return nil
	}
	resp := rc.ResponseFields()
	st := rc.UpstreamStatus()
	if st == 304 {
		// A 304 rarely names its content type; when it does, it must be one that is coded.
		// Its 200's length is not known here: a 200 under min_size would go uncoded with
		// the strong validator, which a weak one in the 304 still matches (weak comparison).
		ct, typed := rc.ResponseHeaderValue("Content-Type")
		_, coded := rc.ResponseHeaderValue("Content-Encoding")
		if !coded && (!typed || s.codable(ct)) && !hasDirective(resp, hdrCacheControl, noTransform) {
			rc.AddResponseHeader(hdrVary, valAcceptEncoding)
			if s.requestCoding(rc.Req.Headers) != codingNone {
				weakenETag(rc)
			}
		}
		return nil
	}
	if st < 200 || st >= 300 || st == 204 || st == 206 {
		return nil
	}
	if ct, ok := rc.ResponseHeaderValue("Content-Type"); !ok || !s.codable(ct) {
		return nil
	}
	if _, coded := rc.ResponseHeaderValue("Content-Encoding"); coded || rc.Encoded() {
		// Coded already: by the upstream, or by a compress middleware listed before this one
		// on the router (a second coding on top would gain nothing).
		return nil
	}
	// An intermediary must not transform a response marked no-transform (RFC 9110 §7.7).
	if hasDirective(resp, hdrCacheControl, noTransform) {
		return nil
	}
	// The answer depends on Accept-Encoding from here on, also when it is not coded.
	rc.AddResponseHeader(hdrVary, valAcceptEncoding)
	// An empty body is not coded whatever min_size says: coded, it would grow to a coding's
	// header and trailer.
	if cl := rc.ContentLength(); cl == 0 || (cl > 0 && cl < s.minSize) {
		return nil
	}
	c := s.requestCoding(rc.Req.Headers)
	if c == codingNone {
		return nil
	}
	rc.AddResponseHeader(hdrContentEncoding, codingNames[c])
	// Byte ranges of the coded body are not the upstream's, and a strong validator names the
	// upstream's bytes exactly (RFC 9110 §8.8.1): weaken it.
	rc.RemoveResponseHeader(hdrAcceptRanges)
	weakenETag(rc)
	rc.SetEncoder(acquire(c))
	return nil
}

// weakenETag makes the response's strong ETag weak (W/"x" for "x"): the coded body is another
// representation than the one the strong validator names byte for byte (RFC 9110 §8.8.1,
// §8.8.3), as nginx's gzip does.
func weakenETag(rc *pipeline.RequestCtx) {
	if et, ok := rc.ResponseHeaderValue("ETag"); ok && !bytes.HasPrefix(et, []byte("W/")) {
		var buf [258]byte // an ETag longer than 256 bytes is rare: it costs an allocation
		weak := append(append(buf[:0], "W/"...), et...)
		rc.RemoveResponseHeader(hdrETag)
		rc.AddResponseHeader(hdrETag, weak)
	}
}

// hasDirective reports whether a field named name of hs, on any of its lines, lists directive
// dir (a token, ASCII case-insensitive, with or without "=value"), as Cache-Control does
// (RFC 9111 §5.2). A quoted value is skipped whole: a comma or a name inside it is not a
// directive.
func hasDirective(hs []http1.HeaderField, name, dir []byte) bool {
	for i := range hs {
		if !equalFold(hs[i].Key, name) {
			continue
		}
		for v := hs[i].Value; len(v) > 0; {
			end := listItemEnd(v)
			tok, _, _ := bytes.Cut(v[:end], []byte("="))
			if bytes.EqualFold(bytes.TrimSpace(tok), dir) {
				return true
			}
			if end == len(v) {
				break
			}
			v = v[end+1:]
		}
	}
	return false
}

// listItemEnd returns the index of the comma that ends the first item of list v, or len(v):
// commas inside a quoted string (with its backslash escapes) do not count.
func listItemEnd(v []byte) int {
	quoted := false
	for j := 0; j < len(v); j++ {
		switch c := v[j]; {
		case quoted && c == '\\':
			j++
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			return j
		}
	}
	return len(v)
}

// codable reports whether a body of content type ct is coded: one of s.types, and never an
// event stream.
func (s *Stage) codable(ct []byte) bool {
	return !hasPrefixFold(ct, eventStream) && s.compressible(ct)
}

// compressible reports whether content type ct (parameters ignored) is one of s.types.
func (s *Stage) compressible(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	typ, sub, _ := bytes.Cut(bytes.TrimSpace(ct), []byte("/"))
	for _, r := range s.types {
		if bytes.EqualFold(r.typ, typ) && (r.sub == nil || bytes.EqualFold(r.sub, sub)) {
			return true
		}
	}
	return false
}

// negotiate picks the coding for Accept-Encoding value ae: among the codings offered, the one
// the client weighs highest (q > 0), the stage's preference breaking ties; "*" stands for the
// codings the value does not name (RFC 9110 §12.5.3). codingNone when none is acceptable.
func (s *Stage) negotiate(ae []byte) coding {
	w := newWeights()
	w.add(ae)
	return s.pick(&w)
}

// requestCoding is negotiate over the Accept-Encoding fields of request fields hs, every line
// of the field as one list (RFC 9110 §5.3), in one pass over hs. codingNone when the request
// has none, or asks intermediaries not to transform the content (Cache-Control: no-transform,
// RFC 9111 §5.2.1.6): it then gets the content as the upstream sent it.
func (s *Stage) requestCoding(hs []http1.HeaderField) coding {
	w, seen := newWeights(), false
	for i := range hs {
		switch k := hs[i].Key; {
		case equalFold(k, valAcceptEncoding):
			w.add(hs[i].Value)
			seen = true
		case equalFold(k, hdrCacheControl) && hasDirective(hs[i:i+1], hdrCacheControl, noTransform):
			return codingNone
		}
	}
	if !seen {
		return codingNone
	}
	return s.pick(&w)
}

// weights are the q-values an Accept-Encoding list gives the codings, in thousandths; -1: not
// named.
type weights struct {
	q    [4]int // by coding
	star int
}

func newWeights() weights {
	return weights{q: [4]int{-1, -1, -1, -1}, star: -1}
}

// add reads one Accept-Encoding field line into w; a coding named twice keeps its highest
// weight.
func (w *weights) add(ae []byte) {
	for len(ae) > 0 {
		var item []byte
		if i := bytes.IndexByte(ae, ','); i >= 0 {
			item, ae = ae[:i], ae[i+1:]
		} else {
			item, ae = ae, nil
		}
		name, params, _ := bytes.Cut(item, []byte(";"))
		name = bytes.TrimSpace(name)
		q := qvalue(params)
		switch {
		case string(name) == "*":
			w.star = max(w.star, q)
		case bytes.EqualFold(name, []byte("gzip")), bytes.EqualFold(name, []byte("x-gzip")):
			w.q[codingGzip] = max(w.q[codingGzip], q)
		case bytes.EqualFold(name, []byte("zstd")):
			w.q[codingZstd] = max(w.q[codingZstd], q)
		case bytes.EqualFold(name, []byte("br")):
			w.q[codingBr] = max(w.q[codingBr], q)
		}
	}
}

// pick returns the offered coding w weighs highest, the stage's preference breaking ties.
func (s *Stage) pick(w *weights) coding {
	best, bestQ := codingNone, 0
	for _, c := range s.order {
		q := w.q[c]
		if q < 0 {
			q = w.star
		}
		if q > bestQ {
			best, bestQ = c, q
		}
	}
	return best
}

// qvalue reads the q parameter of an Accept-Encoding item in thousandths (1000 when absent;
// 0 when malformed, which refuses the coding rather than guessing).
func qvalue(params []byte) int {
	for len(params) > 0 {
		var p []byte
		if i := bytes.IndexByte(params, ';'); i >= 0 {
			p, params = params[:i], params[i+1:]
		} else {
			p, params = params, nil
		}
		k, v, _ := bytes.Cut(bytes.TrimSpace(p), []byte("="))
		if len(k) != 1 || k[0]|0x20 != 'q' {
			continue
		}
		return parseQ(bytes.TrimSpace(v))
	}
	return 1000
}

// parseQ parses a qvalue, "0" to "1" with up to three decimals (RFC 9110 §12.4.2), in
// thousandths; 0 when malformed.
func parseQ(v []byte) int {
	if len(v) == 0 || len(v) > 5 || (v[0] != '0' && v[0] != '1') {
		return 0
	}
	n := int(v[0]-'0') * 1000
	if len(v) == 1 {
		return n
	}
	if v[1] != '.' {
		return 0
	}
	scale := 100
	for _, d := range v[2:] {
		if d < '0' || d > '9' {
			return 0
		}
		n += int(d-'0') * scale
		scale /= 10
	}
	return min(n, 1000)
}

// equalFold is bytes.EqualFold with the lengths compared first: most field names differ in
// length from the one looked for.
func equalFold(a, b []byte) bool {
	return len(a) == len(b) && bytes.EqualFold(a, b)
}

func hasPrefixFold(s, prefix []byte) bool {
	return len(s) >= len(prefix) && bytes.EqualFold(s[:len(prefix)], prefix)
}
