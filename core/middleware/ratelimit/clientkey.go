package ratelimit

import "net/netip"

// appendNetworkKey appends to dst the key of client address a: its network, the first v4
// bits of an IPv4 address or the first v6 bits of an IPv6 one, with the other bits zero. An
// IPv4-mapped IPv6 address (::ffff:192.0.2.1) is the IPv4 client it maps. The key is 4 bytes
// for IPv4 and 16 for IPv6, so that the two families never share one. v4 is 1–32 and v6
// 1–128; a length out of range keeps the whole address. The zero Addr (a peer without an IP
// address) has the empty key. It allocates nothing.
//
// An IPv6 client is given a whole network, a /64 at least (RFC 6177, RFC 7934), and may
// pick any address of it for each request, as privacy addresses do (RFC 8981): counted by
// the address, it would never run out of tokens.
func appendNetworkKey(dst []byte, a netip.Addr, v4, v6 int) []byte {
	if !a.IsValid() {
		return dst
	}
	a = a.Unmap()
	bits := v6
	if a.Is4() {
		bits = v4
	}
	if p, err := a.Prefix(bits); err == nil {
		a = p.Addr()
	}
	if a.Is4() {
		b := a.As4()
		return append(dst, b[:]...)
	}
	b := a.As16()
	return append(dst, b[:]...)
}
