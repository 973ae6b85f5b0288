package pool

import "sync"

// BufSize is the length in bytes of the buffers handed out by GetBuf (32 KiB): large enough for
// a typical response body read or a request head+body write in one system call.
const BufSize = 32 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, BufSize); return &b }}

// GetBuf returns a pooled buffer of len BufSize (32 KiB) from a sync.Pool. Return it with PutBuf
// when done; the contents are not zeroed.
func GetBuf() *[]byte { return bufPool.Get().(*[]byte) }

// PutBuf returns b (from GetBuf) to the pool. b must not be used afterwards. Buffers whose
// capacity is not BufSize are dropped.
func PutBuf(b *[]byte) {
	if b == nil || cap(*b) != BufSize {
		return
	}
	*b = (*b)[:BufSize]
	bufPool.Put(b)
}
