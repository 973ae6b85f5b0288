package http1

import "github.com/sluice-gw/sluice/internal/steps"

// Path normalisation: routers match the path sluice sees, upstreams route on the path they
// decode, so the two must not be able to disagree about where a request goes (a rule
// PathPrefix(`/v1`) && !PathPrefix(`/v1/admin`) must not pass /v1//admin, /v1/%61dmin or
// /v1%2fadmin to an upstream that reads them as /v1/admin).

var (
	errBadPercent   = newErr(400, "malformed percent-encoding in the request path (RFC 3986 §2.1)")
	errEncodedSlash = newErr(400, "encoded '/' or a '\\' (%2F, %5C, \\) in the request path: upstreams disagree on what it means; send '/' decoded, or allow these with the entrypoint's allow_encoded_slash")
	errEncodedNUL   = newErr(400, "encoded NUL (%00) in the request path")
)

// needsNormalising reports whether path has a percent-encoding, a backslash or an empty
// segment ("//"), the only cases normalisePath changes or refuses.
func needsNormalising(path []byte) bool {
	steps.Add(len(path) + 1)
	for i, c := range path {
		if c == '%' || c == '\\' || (c == '/' && i > 0 && path[i-1] == '/') {
			return true
		}
	}
	return false
}

// normalisePath appends path to dst in normal form and returns dst: percent-encoded unreserved
// characters are decoded (RFC 3986 §2.3, §6.2.2.2), other percent-encodings get upper-case hex
// digits (§6.2.2.1), and runs of '/' become one '/' (no path segment is empty, as in nginx's
// merge_slashes and Traefik's path sanitising). An encoded '/' or '\', or a raw '\' (which
// some servers read as '/'), is an error unless allowSlash; an encoded NUL or a '%' not followed
// by two hex digits always is (*Error 400).
func normalisePath(dst, path []byte, allowSlash bool) ([]byte, error) {
	steps.Add(len(path) + 1)
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case c == '/' && len(dst) > 0 && dst[len(dst)-1] == '/':
			continue
		case c == '\\' && !allowSlash:
			return dst, errEncodedSlash
		case c != '%':
			dst = append(dst, c)
			continue
		}
		if i+2 >= len(path) || unhex(path[i+1]) > 15 || unhex(path[i+2]) > 15 {
			return dst, errBadPercent
		}
		v := unhex(path[i+1])<<4 | unhex(path[i+2])
		switch {
		case isUnreserved(v):
			dst = append(dst, v)
		case v == 0:
			return dst, errEncodedNUL
		case (v == '/' || v == '\\') && !allowSlash:
			return dst, errEncodedSlash
		default:
			dst = append(dst, '%', "0123456789ABCDEF"[v>>4], "0123456789ABCDEF"[v&15])
		}
		i += 2
	}
	return dst, nil
}

// isUnreserved reports whether c is an unreserved character (RFC 3986 §2.3).
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// hasDotSegmentBetweenSeparators reports whether a normalised path has a "." or ".." segment
// when '\\', %2F and %5C count as separators too: with allow_encoded_slash an upstream that
// decodes them would resolve /v1/x%2F..%2Fadmin to /v1/admin.
func hasDotSegmentBetweenSeparators(p []byte) bool {
	steps.Add(len(p) + 1)
	start := 0
	for i := 0; i <= len(p); {
		sep := 0
		switch {
		case i == len(p):
			sep = 1
		case p[i] == '/' || p[i] == '\\':
			sep = 1
		case p[i] == '%' && i+2 < len(p) && (p[i+1] == '2' && p[i+2] == 'F' || p[i+1] == '5' && p[i+2] == 'C'):
			sep = 3
		}
		if sep == 0 {
			i++
			continue
		}
		if seg := p[start:i]; len(seg) > 0 && len(seg) <= 2 && seg[0] == '.' && seg[len(seg)-1] == '.' {
			return true
		}
		i += sep
		start = i
	}
	return false
}
