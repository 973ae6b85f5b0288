package http1

import (
	"math"

	"github.com/sluice-gw/sluice/internal/steps"
)

const (
	// MaxChunkExtBytes bounds the chunk extensions of one chunk-size line, in bytes (from the
	// first ';' or whitespace after the size up to the CR). Extensions are ignored.
	MaxChunkExtBytes = 4096
	// MaxTrailerBytes bounds the whole trailer section after the last chunk, in bytes.
	// Trailer fields are checked for syntax and skipped, never forwarded.
	MaxTrailerBytes = 16384
	// maxChunkSizeDigits bounds the hex digits of a chunk size (leading zeros included).
	maxChunkSizeDigits = 16
)

type chunkState uint8

const (
	csSize         chunkState = iota // expecting the first hex digit of a chunk size
	csSizeMore                       // in the hex digits
	csSizeBWS                        // whitespace after the size: only ';' or more BWS may follow
	csExt                            // in chunk extensions, up to CR
	csSizeLF                         // CR seen after the size line, expecting LF
	csData                           // in chunk data
	csDataCR                         // expecting CR after chunk data
	csDataLF                         // expecting LF after chunk data
	csTrailerStart                   // at the start of a trailer line or the final CRLF
	csTrailerName                    // in a trailer field name
	csTrailerValue                   // in a trailer field value
	csTrailerLF                      // CR seen after a trailer line, expecting LF
	csEndLF                          // CR of the final blank line seen, expecting LF
	csDone                           // message complete
	csError                          // a framing error was returned; it is returned again
)

// ChunkedDecoder is an incremental, zero-copy decoder of the chunked transfer coding
// (RFC 9112 §7.1): chunk-size [chunk-ext] CRLF chunk-data CRLF ... last-chunk trailer-section
// CRLF. Whitespace between the size and ';' or CRLF is accepted (BWS, as Go's net/http does).
// Chunk extensions are validated loosely (no CTLs, at most MaxChunkExtBytes per line) and
// ignored; the trailer section is syntax-checked (field-name ":" value lines, at most
// MaxTrailerBytes) and skipped. Input may be split at any byte boundary across calls.
//
// The zero value is ready to use with no body limit. It holds no references to src between
// calls.
type ChunkedDecoder struct {
	// MaxBodyBytes bounds the total chunk payload in bytes; 0 means no limit. Exceeding it
	// returns *Error 413. Reset keeps it. Set it to Limits.BodyBytes() for request bodies.
	MaxBodyBytes int64
	// MarkExt, when set, has Next overwrite in src the first whitespace after each chunk size
	// with ';', so that the extensions start there: "1 ;a" becomes "1;;a", "1 " becomes "1;".
	// The decoder reads the line as it came. It serves a parser that reads the same bytes
	// after the decoder and refuses the whitespace RFC 9112 §7.1.1 allows before ';'
	// (fasthttp). Reset keeps it.
	MarkExt bool

	state   chunkState
	digits  int    // hex digits of the current size
	size    uint64 // current chunk size being parsed
	remain  int64  // payload bytes left in the current chunk
	total   int64  // payload bytes returned so far
	extLen  int    // bytes of the current size line after the digits
	trailer int    // bytes of the trailer section so far
	err     error
}

// Reset prepares d for a new message, keeping MaxBodyBytes and MarkExt.
func (d *ChunkedDecoder) Reset() {
	*d = ChunkedDecoder{MaxBodyBytes: d.MaxBodyBytes, MarkExt: d.MarkExt}
}

// Done reports whether the last chunk and the trailer section have been consumed.
func (d *ChunkedDecoder) Done() bool { return d.state == csDone }

// Total returns the payload bytes returned by Next so far.
func (d *ChunkedDecoder) Total() int64 { return d.total }

func (d *ChunkedDecoder) fail(err error, consumed int) ([]byte, int, error) {
	d.state, d.err = csError, err
	return nil, consumed, err
}

// Next consumes bytes from src and returns the next run of payload data in it (a sub-slice of
// src, which aliases the caller's buffer) and how many bytes of src were consumed (data lies
// inside src[:consumed]). Call it repeatedly with src[consumed:] until consumed == len(src) or
// Done(); bytes after the end of the message are not consumed (they belong to the next message
// on the connection). It returns (nil, consumed, nil) when src held only framing.
//
// Errors (*Error, sticky: later calls return the same error): 400 for a chunk size that is not
// hex, longer than 16 digits or over 2^63-1, a missing CRLF, a bad chunk extension or trailer
// line, extensions over MaxChunkExtBytes or trailers over MaxTrailerBytes; 413 when the payload
// total exceeds MaxBodyBytes.
func (d *ChunkedDecoder) Next(src []byte) (data []byte, consumed int, err error) {
	data, consumed, err = d.next(src)
	steps.Add(consumed + 1)
	return data, consumed, err
}

func (d *ChunkedDecoder) next(src []byte) (data []byte, consumed int, err error) {
	if d.state == csError {
		return nil, 0, d.err
	}
	i := 0
	for i < len(src) {
		c := src[i]
		switch d.state {
		case csData:
			n := int64(len(src) - i)
			if n > d.remain {
				n = d.remain
			}
			d.remain -= n
			d.total += n
			if d.remain == 0 {
				d.state = csDataCR
			}
			end := i + int(n)
			return src[i:end], end, nil

		case csSize, csSizeMore:
			v := unhex(c)
			if v < 16 {
				if d.digits == maxChunkSizeDigits {
					return d.fail(errChunkSizeLong, i)
				}
				d.size = d.size<<4 | uint64(v)
				d.digits++
				d.state = csSizeMore
				break
			}
			if d.state == csSize {
				return d.fail(errChunkSize, i)
			}
			switch c {
			case '\r':
				d.state = csSizeLF
			case ';':
				d.state = csExt
				d.extLen = 1
			case ' ', '\t':
				d.state = csSizeBWS
				d.extLen = 1
				if d.MarkExt {
					src[i] = ';'
				}
			default:
				return d.fail(errChunkSize, i)
			}
			if d.size > math.MaxInt64 {
				return d.fail(errChunkSize, i)
			}

		case csSizeBWS:
			switch c {
			case ' ', '\t':
			case ';':
				d.state = csExt
			case '\r':
				d.state = csSizeLF
			default:
				return d.fail(errChunkExt, i)
			}
			d.extLen++
			if d.extLen > MaxChunkExtBytes {
				return d.fail(errChunkExtLong, i)
			}

		case csExt:
			if c == '\r' {
				d.state = csSizeLF
				break
			}
			if !valueChar[c] {
				return d.fail(errChunkExt, i)
			}
			d.extLen++
			if d.extLen > MaxChunkExtBytes {
				return d.fail(errChunkExtLong, i)
			}

		case csSizeLF:
			if c != '\n' {
				return d.fail(errChunkCRLF, i)
			}
			size := int64(d.size)
			d.size, d.digits, d.extLen = 0, 0, 0
			if size == 0 {
				d.state = csTrailerStart
				break
			}
			if d.MaxBodyBytes > 0 && size > d.MaxBodyBytes-d.total {
				return d.fail(errChunkedTooBig, i)
			}
			d.remain = size
			d.state = csData

		case csDataCR:
			if c != '\r' {
				return d.fail(errChunkCRLF, i)
			}
			d.state = csDataLF

		case csDataLF:
			if c != '\n' {
				return d.fail(errChunkCRLF, i)
			}
			d.state = csSize

		case csTrailerStart:
			if c == '\r' {
				d.state = csEndLF
				break
			}
			if !tokenChar[c] {
				return d.fail(errTrailer, i)
			}
			d.state = csTrailerName
			if d.trailer++; d.trailer > MaxTrailerBytes {
				return d.fail(errTrailerTooLong, i)
			}

		case csTrailerName:
			if c == ':' {
				d.state = csTrailerValue
			} else if !tokenChar[c] {
				return d.fail(errTrailer, i)
			}
			if d.trailer++; d.trailer > MaxTrailerBytes {
				return d.fail(errTrailerTooLong, i)
			}

		case csTrailerValue:
			if c == '\r' {
				d.state = csTrailerLF
			} else if !valueChar[c] {
				return d.fail(errTrailer, i)
			}
			if d.trailer++; d.trailer > MaxTrailerBytes {
				return d.fail(errTrailerTooLong, i)
			}

		case csTrailerLF:
			if c != '\n' {
				return d.fail(errChunkCRLF, i)
			}
			d.state = csTrailerStart

		case csEndLF:
			if c != '\n' {
				return d.fail(errChunkCRLF, i)
			}
			d.state = csDone
			return nil, i + 1, nil

		case csDone:
			return nil, i, nil
		}
		i++
	}
	return nil, i, nil
}

// unhex returns the value of hex digit c, or 255.
func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	}
	return 255
}
