// Package http1 implements HTTP/1.1 message framing per RFC 9112 for sluice: request heads from
// clients (gnet ingress), response heads from upstreams (pool/), the chunked transfer coding and
// a few writing helpers.
//
// The package does no I/O: it parses bytes already in memory and does not allocate once its
// reusable objects (Request, Response, ChunkedDecoder) are warm.
//
// Line endings: every line of a head must end in CRLF. A bare LF or a bare CR is rejected
// (RFC 9112 §2.2 allows, but does not require, accepting a bare LF; a proxy that is more lenient
// than the upstream it forwards to invites request smuggling). FindHeadEnd does recognise a
// blank line ended by a bare LF so that such a head is handed to the parser and rejected with
// 400 at once instead of waiting for bytes that never come.
package http1
