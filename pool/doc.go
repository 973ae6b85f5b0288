// Package pool owns sluice's upstream HTTP/1.1 connections: a per-backend keep-alive pool of
// net.Conn (TCP_NODELAY, optional TLS via crypto/tls), one request/response Exchange at a time
// per connection, and cancellation by close (fasthttp's client cannot be
// cancelled, so the gateway owns the sockets and closes them when the client leaves).
//
// Typical use, one request:
//
//	x := pool.AcquireExchange()
//	defer pool.ReleaseExchange(x)          // returns the conn to the pool, or closes it
//	h := x.AbortHandle()                   // hand to the client-disconnect callback
//	if err := x.RoundTrip(p, head, body, false); err != nil { ... }   // errors.Is(err, pool.ErrTimeout) ...
//	for { n, err := x.ReadBody(buf, true); ...; if err == io.EOF { break } }
//
// No goroutine runs per connection: deadlines are socket deadlines; an idle connection is
// checked when taken from the pool (IdleTimeout, then a non-blocking MSG_PEEK for an upstream
// close or unsolicited bytes), and stale ones are closed by a lazy sweep on get/put (or
// Pool.Sweep from one process-wide ticker). A request that still meets a dead reused conn (the
// keep-alive race) is retried once on a fresh conn.
package pool
