package http1

import (
	"hash/maphash"
	"math/bits"

	"github.com/sluice-gw/sluice/internal/steps"
)

// IsHopByHop reports whether the field named key must not be forwarded by a proxy: the
// connection-specific fields of RFC 9110 §7.6.1 (Connection, Keep-Alive, Proxy-Connection, TE,
// Transfer-Encoding, Upgrade), Trailer, Proxy-Authenticate and Proxy-Authorization (as Go's
// net/http/httputil does), plus every field named in this request's Connection header.
// The comparison ignores ASCII case.
func (r *Request) IsHopByHop(key []byte) bool { return isHopByHop(key, r.connTokens, &r.connIndex) }

// IsHopByHop is Request.IsHopByHop for a response from an upstream.
func (r *Response) IsHopByHop(key []byte) bool {
	return isHopByHop(key, r.connTokens, &r.connIndex)
}

func isHopByHop(key []byte, tokens [][]byte, index *tokenIndex) bool {
	switch len(key) {
	case 2:
		if equalFold(key, "te") {
			return true
		}
	case 7:
		if equalFold(key, "upgrade") || equalFold(key, "trailer") {
			return true
		}
	case 10:
		if equalFold(key, "connection") || equalFold(key, "keep-alive") {
			return true
		}
	case 16:
		if equalFold(key, "proxy-connection") {
			return true
		}
	case 17:
		if equalFold(key, "transfer-encoding") {
			return true
		}
	case 18:
		if equalFold(key, "proxy-authenticate") {
			return true
		}
	case 19:
		if equalFold(key, "proxy-authorization") {
			return true
		}
	}
	if index.built() {
		return index.has(tokens, key)
	}
	steps.Add(len(tokens) + 1)
	for _, t := range tokens {
		if equalFoldBytes(key, t) {
			return true
		}
	}
	return false
}

// linearTokens is the number of Connection tokens up to which IsHopByHop compares a name with
// each in turn. More are put in a tokenIndex: a proxy asks about every field of a head, and a
// head of a hundred fields whose Connection header names thousands of tokens would otherwise
// cost hundreds of thousands of comparisons, the square of what the head's size allows.
const linearTokens = 8

// maxKeptIndexSlots bounds the index a reused message keeps between messages: one odd request
// must not pin a large table to its connection.
const maxKeptIndexSlots = 256

// tokenIndex is a hash set of a message's Connection tokens (ASCII case folded), open
// addressing with linear probing. The hash is seeded per process, so that a client cannot
// choose tokens whose hashes collide and make every probe walk a long run.
type tokenIndex struct {
	slots []int32 // 1 + the index of a token in the message's list; 0: empty
	mask  uint64
}

// The seeds of foldHash, drawn once per process.
var (
	foldSeed0 = randomUint64()
	foldSeed1 = randomUint64() | 1
)

func randomUint64() uint64 { return maphash.Bytes(maphash.MakeSeed(), nil) }

// built reports whether the index holds the tokens (there are more than linearTokens).
func (x *tokenIndex) built() bool { return len(x.slots) > 0 }

// reset empties the index, keeping a small table for the next message.
func (x *tokenIndex) reset() {
	if cap(x.slots) > maxKeptIndexSlots {
		x.slots = nil
	}
	x.slots = x.slots[:0]
}

// build indexes tokens when there are more than linearTokens (a repeated token is kept once).
func (x *tokenIndex) build(tokens [][]byte) {
	x.reset()
	if len(tokens) <= linearTokens {
		return
	}
	n := 16
	for n < 2*len(tokens) {
		n <<= 1
	}
	if cap(x.slots) < n {
		x.slots = make([]int32, n)
	} else {
		x.slots = x.slots[:n]
		clear(x.slots)
	}
	x.mask = uint64(n - 1)
	for i, t := range tokens {
		for s := foldHash(t) & x.mask; ; s = (s + 1) & x.mask {
			steps.Add(1)
			j := x.slots[s]
			if j == 0 {
				x.slots[s] = int32(i + 1)
				break
			}
			if equalFoldBytes(tokens[j-1], t) {
				break // a repeat
			}
		}
	}
}

// has reports whether key is one of the indexed tokens.
func (x *tokenIndex) has(tokens [][]byte, key []byte) bool {
	for s := foldHash(key) & x.mask; ; s = (s + 1) & x.mask {
		steps.Add(1)
		j := x.slots[s]
		if j == 0 {
			return false
		}
		if equalFoldBytes(tokens[j-1], key) {
			return true
		}
	}
}

// foldHash hashes b with ASCII letters lower-cased: 8 bytes at a time, each word mixed by a
// 64×64→128-bit multiply with the per-process seeds (as wyhash does), so that which tokens
// collide cannot be known outside the process.
func foldHash(b []byte) uint64 {
	steps.Add(len(b) + 1)
	h := foldSeed0 ^ uint64(len(b))
	for len(b) > 0 {
		var w uint64
		n := min(len(b), 8)
		for i, c := range b[:n] {
			w |= uint64(lower(c)) << (8 * i)
		}
		hi, lo := bits.Mul64(h^w, foldSeed1)
		h = hi ^ lo
		b = b[n:]
	}
	hi, lo := bits.Mul64(h, foldSeed0|1)
	return hi ^ lo
}
