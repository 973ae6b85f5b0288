package http1

import "strconv"

// LastChunk is the last-chunk of the chunked coding with an empty trailer section
// (RFC 9112 §7.1): "0\r\n\r\n". Do not modify it.
var LastChunk = []byte("0\r\n\r\n")

const hexDigits = "0123456789abcdef"

// AppendChunkHeader appends the chunk-size line for a chunk of n payload bytes ("%x\r\n",
// RFC 9112 §7.1) to dst and returns it; it does not allocate when cap(dst) suffices. n = 0
// starts the last-chunk (use LastChunk when there are no trailers). It panics on a negative n,
// a programming error.
func AppendChunkHeader(dst []byte, n int) []byte {
	if n < 0 {
		panic("http1: negative chunk size")
	}
	var tmp [16]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = hexDigits[n&0xf]
		n >>= 4
		if n == 0 {
			break
		}
	}
	dst = append(dst, tmp[i:]...)
	return append(dst, '\r', '\n')
}

// AppendStatusLine appends "HTTP/major.minor status reason\r\n" (RFC 9112 §4) to dst and
// returns it. An empty reason takes StatusText(status). It does not allocate when cap(dst)
// suffices.
func AppendStatusLine(dst []byte, major, minor, status int, reason []byte) []byte {
	dst = append(dst, "HTTP/"...)
	dst = strconv.AppendInt(dst, int64(major), 10)
	dst = append(dst, '.')
	dst = strconv.AppendInt(dst, int64(minor), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(status), 10)
	dst = append(dst, ' ')
	if len(reason) > 0 {
		dst = append(dst, reason...)
	} else {
		dst = append(dst, StatusText(status)...)
	}
	return append(dst, '\r', '\n')
}

// StatusText returns the reason phrase registered for status (RFC 9110 §15, RFC 6585 for
// 428/429/431, RFC 9110 §15.5.21 for 422), or "" for an unknown code.
func StatusText(status int) string {
	switch status {
	case 100:
		return "Continue"
	case 101:
		return "Switching Protocols"
	case 103:
		return "Early Hints"
	case 200:
		return "OK"
	case 201:
		return "Created"
	case 202:
		return "Accepted"
	case 203:
		return "Non-Authoritative Information"
	case 204:
		return "No Content"
	case 205:
		return "Reset Content"
	case 206:
		return "Partial Content"
	case 300:
		return "Multiple Choices"
	case 301:
		return "Moved Permanently"
	case 302:
		return "Found"
	case 303:
		return "See Other"
	case 304:
		return "Not Modified"
	case 307:
		return "Temporary Redirect"
	case 308:
		return "Permanent Redirect"
	case 400:
		return "Bad Request"
	case 401:
		return "Unauthorized"
	case 402:
		return "Payment Required"
	case 403:
		return "Forbidden"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 406:
		return "Not Acceptable"
	case 407:
		return "Proxy Authentication Required"
	case 408:
		return "Request Timeout"
	case 409:
		return "Conflict"
	case 410:
		return "Gone"
	case 411:
		return "Length Required"
	case 412:
		return "Precondition Failed"
	case 413:
		return "Content Too Large"
	case 414:
		return "URI Too Long"
	case 415:
		return "Unsupported Media Type"
	case 416:
		return "Range Not Satisfiable"
	case 417:
		return "Expectation Failed"
	case 421:
		return "Misdirected Request"
	case 422:
		return "Unprocessable Content"
	case 425:
		return "Too Early"
	case 426:
		return "Upgrade Required"
	case 428:
		return "Precondition Required"
	case 429:
		return "Too Many Requests"
	case 431:
		return "Request Header Fields Too Large"
	case 500:
		return "Internal Server Error"
	case 501:
		return "Not Implemented"
	case 502:
		return "Bad Gateway"
	case 503:
		return "Service Unavailable"
	case 504:
		return "Gateway Timeout"
	case 505:
		return "HTTP Version Not Supported"
	}
	return ""
}
