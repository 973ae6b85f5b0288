package ingress

// The kernel send buffer of a client connection. Linux grows a TCP socket's send buffer on its
// own (autotuning, up to the third value of net.ipv4.tcp_wmem: 4 MiB by default), and a client
// that stops reading a stream holds all of it, kernel memory the gateway does not count, before
// the gateway holds a byte the socket will not take and client_stall_timeout starts. An
// entrypoint's send_buffer_bytes caps it (SO_SNDBUF, as nginx's listen ... sndbuf=), which
// bounds both.
//
// It is set on each accepted connection, before the gateway writes to it, and not on the
// listening socket, although a connection inherits the listener's value (the kernel copies
// the listener's buffer sizes and their lock into every socket it accepts): SO_SNDBUF also
// turns autotuning off for good, on the listener and so on everything accepted from it, and a
// reload hands the listening socket itself to the entrypoint's next transport. On the listener,
// a reload back to 0 could not give new connections their autotuning again; per connection it
// takes effect on the connections accepted after any reload, as the other entrypoint keys do.

// capSendBuffer sets c's SO_SNDBUF to n bytes when n > 0 (Linux doubles it for its own
// bookkeeping, raises it to its minimum and caps it at net.core.wmem_max). An error is
// dropped: setsockopt on a live TCP socket fails only once the socket is gone, and the
// connection's own reads and writes then say so.
func capSendBuffer(c interface{ SetWriteBuffer(bytes int) error }, n int) {
	if n > 0 {
		_ = c.SetWriteBuffer(n)
	}
}
