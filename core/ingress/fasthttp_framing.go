package ingress

import (
	"bytes"
	"sync"

	"github.com/sluice-gw/sluice/core/http1"
)

// framingCheck follows the request stream of one fasthttp connection with the gateway's own
// parser (core/http1), as the gnet engine reads it, so that the fasthttp engine refuses a
// malformed request at once and with the same status as the gnet engine.
//
// fasthttp waits for the CRLF CRLF that ends a head, so a head whose lines end in bare LF
// (RFC 9112 §2.2) never ends for it: without this check the client would get 408 after
// read_header_timeout instead of 400. And fasthttp repairs some heads it accepts (a bare-LF
// request line, a bare-LF chunk size line), which the handler's parse of fasthttp's pieces
// can no longer see. The check sees the bytes before fasthttp does: when it finds a head
// (or a chunked body) the gateway refuses, it records the error; the connection's next read
// returns that error, which ends fasthttp's wait and reaches the ErrorHandler, and a request
// that fasthttp parses anyway meets the error in the handler (see servedConn.refusal).
//
// It stops following the stream after a request that asks for a protocol upgrade: the bytes
// after it may be another protocol's.
type framingCheck struct {
	lim *http1.Limits
	// bound returns the bound the route of a request head sets on its body
	// (pipeline.Entrypoint.BodyBound); nil: none.
	bound func(*http1.Request) (int64, bool)
	// cutBound is the bound of the body being followed, below lim's, or -1; cutAt is how long
	// the body was known to be when the check stopped following it over the bound (errBodyCut).
	cutBound, cutAt int64
	got             int64 // chunk data bytes of the body being followed
	// cutHead is the head of the request whose body cutBound bounds: the route answers a
	// request cut short from it, since fasthttp forgets the head of a body it failed to read.
	cutHead []byte

	off     bool   // not following the stream: after an upgrade request
	msg     uint64 // messages (head and body) followed to their end
	err     error  // the refusal of request number errMsg; sticky
	errMsg  uint64 // counted from 1 on the connection
	scan    http1.HeadScan
	head    []byte // the head so far, when it came in more than one read
	inBody  bool
	chunked bool
	left    int64 // body bytes still to come (Content-Length)
	dec     http1.ChunkedDecoder
	// empty counts the bytes of empty lines before the head being followed that the
	// connection dropped (dropEmptyLines); pendingCR: it holds back a CR that may begin one.
	empty     int
	pendingCR bool
	// blankRefused: the refusal recorded is of empty lines past the header limit, and
	// fasthttp has nothing of a request line to answer it for (servedConn.Read).
	blankRefused bool
	// minor is the minor version digit raiseMinor made 1 in the head being followed (0:
	// none); raised holds those of the heads followed whose requests fasthttp has not handed
	// to the handler yet (sentMinor), in order.
	minor  byte
	raised []raisedMinor
}

// raisedMinor is the minor version digit the client wrote in request number msg (counted from
// 1 on the connection), which fasthttp was shown as 1.
type raisedMinor struct {
	msg   uint64
	digit byte
}

// sentMinor returns the minor version digit the client wrote in request number msg when
// raiseMinor made it 1 for fasthttp, or 0, and forgets those of requests up to msg.
func (fc *framingCheck) sentMinor(msg uint64) byte {
	var d byte
	i := 0
	for ; i < len(fc.raised) && fc.raised[i].msg <= msg; i++ {
		if fc.raised[i].msg == msg {
			d = fc.raised[i].digit
		}
	}
	fc.raised = fc.raised[:copy(fc.raised, fc.raised[i:])]
	return d
}

// retainedHeadBytes bounds the head buffer a connection keeps between requests; a larger one
// (a head near max_header_bytes that came in pieces) is let go.
const retainedHeadBytes = 4096

// tooLarge is the refusal of a head that fasthttp found over its read buffer, which is
// max_header_bytes: 414 or 431 by where the limit ran out (http1.HeadTooLarge).
func (fc *framingCheck) tooLarge() error {
	return http1.HeadTooLarge(fc.head, fc.lim)
}

// blankHead reports whether the head being followed has begun and holds only CR and LF bytes
// so far: the empty lines a client may send before a request line (RFC 9112 §2.2).
func (fc *framingCheck) blankHead() bool {
	if fc.off || fc.inBody || fc.err != nil {
		return false
	}
	if len(fc.head) == 0 {
		return fc.empty > 0 || fc.pendingCR
	}
	for _, b := range fc.head {
		if b != '\r' && b != '\n' {
			return false
		}
	}
	return true
}

// checkRequests recycles the parsed heads of the check; a connection holds one only while a
// head is parsed.
var checkRequests = sync.Pool{New: func() any { return new(http1.Request) }}

// feed follows b, the next bytes read from the client; once it returns an error (an
// *http1.Error) it has stopped and returns that error again.
func (fc *framingCheck) feed(b []byte) error {
	for len(b) > 0 && !fc.off && fc.err == nil {
		var k int
		if fc.inBody {
			k = fc.body(b)
		} else {
			k = fc.headBytes(b)
		}
		b = b[k:]
	}
	return fc.err
}

// fail records err as the refusal of the message being followed.
func (fc *framingCheck) fail(err error) {
	fc.err, fc.errMsg = err, fc.msg+1
}

// headBytes follows the bytes of a head and returns how many of b it consumed.
func (fc *framingCheck) headBytes(b []byte) int {
	buf := b
	if len(fc.head) > 0 {
		fc.head = append(fc.head, b...)
		buf = fc.head
	}
	skip, n := fc.scan.Find(buf)
	if d := raiseMinor(buf, skip, b); d != 0 {
		fc.minor = d
	}
	if n < 0 {
		if err := http1.CheckPartialHead(buf[skip:], fc.lim); err != http1.ErrNeedMore {
			fc.fail(err)
			return len(b)
		}
		if err := http1.CheckLeadingEmptyLines(fc.empty+skip, fc.lim); err != nil {
			fc.fail(err)
			fc.blankRefused = true
			return len(b)
		}
		if len(fc.head) == 0 {
			fc.head = append(fc.head, b...)
		}
		return len(b)
	}
	if err := http1.CheckLeadingEmptyLines(fc.empty+skip, fc.lim); err != nil {
		fc.fail(err) // the empty lines came with the head
		return len(b)
	}
	if fc.minor != 0 {
		fc.raised = append(fc.raised, raisedMinor{msg: fc.msg + 1, digit: fc.minor})
		fc.minor = 0
	}
	req := checkRequests.Get().(*http1.Request)
	err := req.ParseRequestHead(buf[skip:skip+n], fc.lim)
	upgrade, chunked, length := req.Upgrade, req.Chunked, req.ContentLength
	fc.cutBound = -1
	if cap(fc.cutHead) > retainedHeadBytes {
		fc.cutHead = nil
	}
	fc.cutHead = fc.cutHead[:0]
	if err == nil && (chunked || length > 0) && fc.bound != nil {
		if b, ok := fc.bound(req); ok && b < fc.lim.BodyBytes() {
			fc.cutBound = b
			fc.cutHead = append(fc.cutHead, buf[skip:skip+n]...)
		}
	}
	checkRequests.Put(req)
	// Consumed: the head's bytes in b (the part of it in earlier reads is already counted).
	consumed := skip + n - (len(buf) - len(b))
	fc.head = fc.head[:0]
	if cap(fc.head) > retainedHeadBytes {
		fc.head = nil
	}
	fc.scan.Reset()
	fc.empty = 0
	switch {
	case err != nil:
		fc.fail(err)
	case upgrade:
		fc.off = true
	case chunked:
		fc.inBody, fc.chunked, fc.got = true, true, 0
		fc.dec.Reset()
		fc.dec.MaxBodyBytes = fc.lim.BodyBytes()
		// fasthttp refuses whitespace between a chunk size and ';', which the check has
		// followed (RFC 9112 §7.1.1 allows it): it is shown a ';' there.
		fc.dec.MarkExt = true
	case length > 0 && fc.cutBound >= 0 && length > fc.cutBound && length <= fc.lim.BodyBytes():
		// Refused by its route whatever the body: fasthttp reads none of it (and sends no
		// 100 Continue); the handler answers it without it (fastExchange.start).
		fc.cutAt = length
		fc.fail(errBodyCut)
	case length > 0:
		fc.inBody, fc.chunked, fc.left = true, false, length
	default:
		fc.msg++
	}
	return consumed
}

// raiseMinor makes fasthttp see a request of a later HTTP/1 minor version as the HTTP/1.1
// request the gateway's parser takes it for (RFC 9110 §2.5): fasthttp would hold it to
// HTTP/1.0's rules (no chunked body, no persistence without keep-alive, no chunked
// response). When the request line so far, the first line of buf[skip:] (whose last
// len(b) bytes are b, the bytes now read), ends in " HTTP/1." and a digit above 1, the
// digit, if it is in b, becomes 1 before fasthttp reads it; the check has followed the
// bytes as received. The line may not be complete: should more than CRLF follow, the line
// is malformed whatever the digit, and the check refuses it. It returns the digit it
// replaced, 0 when it replaced none.
func raiseMinor(buf []byte, skip int, b []byte) byte {
	line := buf[skip:]
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimSuffix(line, crByte)
	const v = " HTTP/1."
	d := len(line) - 1 // the minor digit's index in line, and in buf past skip
	if d < len(v) || line[d] < '2' || line[d] > '9' || string(line[d-len(v):d]) != v {
		return 0
	}
	if i := skip + d - (len(buf) - len(b)); i >= 0 {
		sent := b[i]
		b[i] = '1'
		return sent
	}
	return 0
}

var crByte = []byte{'\r'}

// dropEmptyLines takes out of the start of b, the next bytes read, the empty lines (CRLF)
// that come before a request line, so that fasthttp never buffers them (RFC 9112 §2.2 lets
// a server ignore them; fasthttp closes without an answer once its read buffer holds nothing
// else). A CR held back from the read before leads b when it does not begin an empty line:
// b then starts one byte into its buffer, which has room for it. It returns the bytes left
// to pass on, counted toward the header limit as the head's own would be; past the limit it
// records the refusal (431), which the next read returns.
func (fc *framingCheck) dropEmptyLines(b []byte, room []byte) []byte {
	if fc.off || fc.inBody || fc.err != nil || len(fc.head) > 0 {
		return b
	}
	if fc.pendingCR {
		fc.pendingCR = false
		if len(b) > 0 && b[0] == '\n' {
			fc.empty += 2
			b = b[1:]
		} else {
			room[0] = '\r'
			return room[:len(b)+1]
		}
	}
	k := 0
	for k+1 < len(b) && b[k] == '\r' && b[k+1] == '\n' {
		k += 2
	}
	fc.empty += k
	if len(b)-k == 1 && b[k] == '\r' {
		fc.pendingCR = true
		k++
	}
	if err := http1.CheckLeadingEmptyLines(fc.empty, fc.lim); err != nil {
		fc.fail(err)
		fc.blankRefused = true
	}
	return b[k:]
}

// body follows the bytes of a body and returns how many of b it consumed.
func (fc *framingCheck) body(b []byte) int {
	if !fc.chunked {
		k := int64(len(b))
		if k > fc.left {
			k = fc.left
		}
		fc.left -= k
		if fc.left == 0 {
			fc.inBody = false
			fc.msg++
		}
		return int(k)
	}
	off := 0
	for off < len(b) && !fc.dec.Done() {
		data, k, err := fc.dec.Next(b[off:])
		off += k
		if err != nil {
			fc.fail(err)
			return len(b)
		}
		if fc.got += int64(len(data)); fc.cutBound >= 0 && fc.got > fc.cutBound {
			fc.cutAt = fc.got
			fc.fail(errBodyCut)
			return len(b)
		}
		if k == 0 {
			break
		}
	}
	if fc.dec.Done() {
		fc.inBody = false
		fc.msg++
	}
	return off
}
