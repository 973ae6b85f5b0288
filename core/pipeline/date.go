package pipeline

import (
	"bytes"
	"sync/atomic"
	"time"
)

// imfFixdate is the preferred Date format (RFC 9110 §5.6.7), always in GMT.
const imfFixdate = "Mon, 02 Jan 2006 15:04:05 GMT"

// dateLine is the Date field line of one second.
type dateLine struct {
	sec  int64
	line []byte // "Date: <IMF-fixdate>\r\n"
}

// lastDate caches the field line of the current second: formatting a date per response would
// cost more than the rest of the head.
var lastDate atomic.Pointer[dateLine]

// appendDate appends the Date field line for now (RFC 9110 §6.6.1).
func appendDate(dst []byte, now time.Time) []byte {
	sec := now.Unix()
	d := lastDate.Load()
	if d == nil || d.sec != sec {
		b := now.UTC().AppendFormat(append(make([]byte, 0, 40), "Date: "...), imfFixdate)
		d = &dateLine{sec: sec, line: append(b, "\r\n"...)}
		lastDate.Store(d)
	}
	return append(dst, d.line...)
}

var hdrDate = []byte("Date")

// needsDate reports whether the response gets the gateway's Date: a reply of its own (the
// gateway is its origin server), or an upstream response that came without one, which a
// recipient with a clock completes before forwarding it (RFC 9110 §6.6.1). A Date a response
// stage added counts as the response's.
func (rc *RequestCtx) needsDate() bool {
	for _, f := range rc.respExtra {
		if bytes.EqualFold(rc.kv[f.k0:f.k1], hdrDate) {
			return false
		}
	}
	if rc.replied || rc.x == nil { // the gateway's reply, or the head of a held stream
		return true
	}
	_, ok := rc.x.Resp.HeaderValue("Date")
	return !ok
}
