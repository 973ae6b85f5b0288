// Package compress is the compress middleware: it codes response bodies with gzip, zstd or
// br (RFC 9110 §8.4), chosen by the client's Accept-Encoding (§12.5.3) and the configured
// preference, on the fly. It never codes an event stream: SSE events go out as they come,
// untouched, whatever the client accepts. Bodies shorter than a minimum size, of types that do
// not compress, already coded or marked no-transform pass as they are.
package compress

import (
	"bytes"

	"github.com/sluice-gw/sluice/core/config"
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
	hdrContentEncoding = []byte("Content-Encoding")
	hdrAcceptRanges    = []byte("Accept-Ranges")
	hdrETag            = []byte("ETag")
	valAcceptEncoding  = []byte("Accept-Encoding")
	eventStream        = []byte("text/event-stream")
	noTransform        = []byte("no-transform")
)

// OnResponse implements pipeline.ResponseStage.
func (s *Stage) OnResponse(rc *pipeline.RequestCtx) error {
	st := rc.UpstreamStatus()
	if rc.IsHEAD() || st < 200 || st >= 300 || st == 204 || st == 206 || (rc.Req.Major == 1 && rc.Req.Minor == 0) {
		return nil
	}
	ct, ok := rc.ResponseHeaderValue("Content-Type")
	if !ok || hasPrefixFold(ct, eventStream) || !s.compressible(ct) {
		return nil
	}
	if _, coded := rc.ResponseHeaderValue("Content-Encoding"); coded || rc.Encoded() {
		// Coded already: by the upstream, or by a compress middleware listed before this one
		// on the router (a second coding on top would gain nothing).
		return nil
	}
	if cc, ok := rc.ResponseHeaderValue("Cache-Control"); ok && containsFold(cc, noTransform) {
		return nil
	}
	// The answer depends on Accept-Encoding from here on, also when it is not coded.
	rc.AddResponseHeader(hdrVary, valAcceptEncoding)
	if cl := rc.ContentLength(); cl >= 0 && cl < s.minSize {
		return nil
	}
	ae, ok := rc.Req.HeaderValue("Accept-Encoding")
	if !ok {
		return nil
	}
	c := s.negotiate(ae)
	if c == codingNone {
		return nil
	}
	rc.AddResponseHeader(hdrContentEncoding, codingNames[c])
	// Byte ranges of the coded body are not the upstream's, and a strong validator names the
	// upstream's bytes exactly (RFC 9110 §8.8.1): weaken it.
	rc.RemoveResponseHeader(hdrAcceptRanges)
	if et, ok := rc.ResponseHeaderValue("ETag"); ok && !bytes.HasPrefix(et, []byte("W/")) {
		var buf [258]byte // an ETag longer than 256 bytes is rare: it costs an allocation
		weak := append(append(buf[:0], "W/"...), et...)
		rc.RemoveResponseHeader(hdrETag)
		rc.AddResponseHeader(hdrETag, weak)
	}
	rc.SetEncoder(acquire(c))
	return nil
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
	var q [4]int // per coding, in thousandths; -1: not named
	q[codingGzip], q[codingZstd], q[codingBr] = -1, -1, -1
	star := -1
	for len(ae) > 0 {
		var item []byte
		if i := bytes.IndexByte(ae, ','); i >= 0 {
			item, ae = ae[:i], ae[i+1:]
		} else {
			item, ae = ae, nil
		}
		name, params, _ := bytes.Cut(item, []byte(";"))
		name = bytes.TrimSpace(name)
		w := qvalue(params)
		switch {
		case string(name) == "*":
			star = w
		case bytes.EqualFold(name, []byte("gzip")), bytes.EqualFold(name, []byte("x-gzip")):
			q[codingGzip] = max(q[codingGzip], w)
		case bytes.EqualFold(name, []byte("zstd")):
			q[codingZstd] = max(q[codingZstd], w)
		case bytes.EqualFold(name, []byte("br")):
			q[codingBr] = max(q[codingBr], w)
		}
	}
	best, bestQ := codingNone, 0
	for _, c := range s.order {
		w := q[c]
		if w < 0 {
			w = star
		}
		if w > bestQ {
			best, bestQ = c, w
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

func hasPrefixFold(s, prefix []byte) bool {
	return len(s) >= len(prefix) && bytes.EqualFold(s[:len(prefix)], prefix)
}

func containsFold(s, sub []byte) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if bytes.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}
