package compress

import (
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/sluice-gw/sluice/core/pipeline"
)

// Encoder levels: fast ones, since a gateway codes every response on the fly and flushes at
// every upstream read (which costs ratio any level would win back).
const (
	gzipLevel   = gzip.DefaultCompression
	brotliLevel = 4
	// zstdWindowBytes bounds the memory of a zstd encoder and of the client's decoder.
	zstdWindowBytes = 1 << 20
)

// appendWriter is an io.Writer that appends to a slice it does not own between calls.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// flusher is what each library's writer offers.
type flusher interface {
	Write(p []byte) (int, error)
	Flush() error
	Close() error
}

// coder is one pooled encoder of one coding; it implements pipeline.Encoder.
type coder struct {
	w    appendWriter
	z    flusher
	pool *sync.Pool
}

func (c *coder) Encode(dst, p []byte) []byte {
	c.w.b = dst
	_, _ = c.z.Write(p) // writes to memory cannot fail
	_ = c.z.Flush()
	dst, c.w.b = c.w.b, nil
	return dst
}

func (c *coder) Close(dst []byte) []byte {
	c.w.b = dst
	_ = c.z.Close()
	dst, c.w.b = c.w.b, nil
	return dst
}

func (c *coder) Release() {
	c.w.b = nil
	c.pool.Put(c)
}

var _ pipeline.Encoder = (*coder)(nil)

// pools of encoders, one per coding. An encoder is reset onto its writer when taken.
var (
	gzipPool, zstdPool, brPool sync.Pool
)

func init() {
	gzipPool.New = func() any {
		c := &coder{pool: &gzipPool}
		z, _ := gzip.NewWriterLevel(&c.w, gzipLevel) // a valid level
		c.z = z
		return c
	}
	zstdPool.New = func() any {
		c := &coder{pool: &zstdPool}
		z, _ := zstd.NewWriter(&c.w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(zstdWindowBytes), zstd.WithLowerEncoderMem(true), zstd.WithZeroFrames(true))
		c.z = z
		return c
	}
	brPool.New = func() any {
		c := &coder{pool: &brPool}
		c.z = brotli.NewWriterLevel(&c.w, brotliLevel)
		return c
	}
}

// acquire returns a fresh encoder of coding enc (one of the Coding constants).
func acquire(enc coding) *coder {
	switch enc {
	case codingGzip:
		c := gzipPool.Get().(*coder)
		c.z.(*gzip.Writer).Reset(&c.w)
		return c
	case codingZstd:
		c := zstdPool.Get().(*coder)
		c.z.(*zstd.Encoder).Reset(&c.w)
		return c
	default:
		c := brPool.Get().(*coder)
		c.z.(*brotli.Writer).Reset(&c.w)
		return c
	}
}
