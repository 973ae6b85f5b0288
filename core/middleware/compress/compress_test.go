package compress

import (
	"bytes"
	"io"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/http1"
)

func TestNegotiate(t *testing.T) {
	s := New(config.CompressOptions{Encodings: config.DefaultCompressEncodings, ContentTypes: config.DefaultCompressTypes})
	gzipOnly := New(config.CompressOptions{Encodings: []string{"gzip"}})
	for _, c := range []struct {
		s    *Stage
		ae   string
		want coding
	}{
		{s, "gzip", codingGzip},
		{s, "GZIP", codingGzip},
		{s, "x-gzip", codingGzip},
		{s, "gzip, deflate, br, zstd", codingZstd},
		{s, "gzip;q=1.0, br;q=0.999", codingGzip},
		{s, "br;q=0.5, gzip;q=0.5", codingBr},
		{s, "*;q=0.2, zstd;q=0", codingBr},
		{s, "gzip;q=0", codingNone},
		{s, "gzip;q=2", codingNone},
		{s, "gzip;q=abc", codingNone},
		{s, "identity", codingNone},
		{s, "", codingNone},
		{s, " , ,gzip ; q=0.3 ", codingGzip},
		{gzipOnly, "zstd, br", codingNone},
		{gzipOnly, "*", codingGzip},
	} {
		require.Equal(t, c.want, c.s.negotiate([]byte(c.ae)), "%q", c.ae)
	}
}

// Accept-Encoding on several lines is one list (RFC 9110 §5.3); no field at all is no coding,
// nor is a request that asks for no-transform.
func TestRequestCoding(t *testing.T) {
	s := New(config.CompressOptions{Encodings: config.DefaultCompressEncodings, ContentTypes: config.DefaultCompressTypes})
	fields := func(kv ...string) []http1.HeaderField {
		var hs []http1.HeaderField
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, http1.HeaderField{Key: []byte(kv[i]), Value: []byte(kv[i+1])})
		}
		return hs
	}
	for _, c := range []struct {
		hs   []http1.HeaderField
		want coding
	}{
		{fields("Accept-Encoding", "identity", "accept-encoding", "gzip"), codingGzip},
		{fields("Accept-Encoding", "br;q=0.1", "X-Other", "zstd", "ACCEPT-ENCODING", "gzip;q=0.5"), codingGzip},
		{fields("Accept-Encoding", "*;q=0", "Accept-Encoding", "*;q=0.3"), codingZstd},
		{fields("Accept-Encoding", ""), codingNone},
		{fields("X-Accept-Encoding", "gzip"), codingNone},
		{fields("Accept-Encoding", "gzip", "Cache-Control", "max-age=0, no-transform"), codingNone},
		{fields("Cache-Control", "no-cache", "Accept-Encoding", "gzip"), codingGzip},
		{nil, codingNone},
	} {
		require.Equal(t, c.want, s.requestCoding(c.hs), "%q", c.hs)
	}
}

// Cache-Control directives are matched whole, on any line, outside quoted strings.
func TestHasDirective(t *testing.T) {
	cc := []byte("Cache-Control")
	for v, want := range map[string]bool{
		"no-transform":                            true,
		"public, No-Transform":                    true,
		"max-age=60,no-transform ":                true,
		"no-transform=1":                          true,
		"no-transformer":                          false,
		"x-no-transform":                          false,
		`private="x, no-transform"`:               false,
		`private="a\"b, no-transform", max-age=1`: false,
		`private="a", no-transform`:               true,
		"":                                        false,
	} {
		hs := []http1.HeaderField{{Key: []byte("Cache-Control"), Value: []byte("public")}, {Key: []byte("cache-control"), Value: []byte(v)}}
		require.Equal(t, want, hasDirective(hs, cc, noTransform), "%q", v)
	}
}

func TestCompressible(t *testing.T) {
	s := New(config.CompressOptions{Encodings: config.DefaultCompressEncodings, ContentTypes: config.DefaultCompressTypes})
	for ct, want := range map[string]bool{
		"application/json": true, "Application/JSON; charset=utf-8": true, "text/html": true,
		"text/plain;charset=utf-8": true, "image/png": false, "application/octet-stream": false,
		"application/x-ndjson": true,
	} {
		require.Equal(t, want, s.compressible([]byte(ct)), ct)
	}
}

// Each coder's output, piece by piece with a flush each, decodes to the input; a coder taken
// from the pool again starts a new stream.
func TestCodersRoundTrip(t *testing.T) {
	pieces := [][]byte{[]byte(`{"a":1}` + "\n"), bytes.Repeat([]byte("tokens "), 1000), []byte("end\n")}
	want := bytes.Join(pieces, nil)
	for _, c := range []coding{codingGzip, codingZstd, codingBr} {
		for range 2 {
			enc := acquire(c)
			var out []byte
			for _, p := range pieces {
				out = enc.Encode(out, p)
			}
			out = enc.Close(out)
			enc.Release()
			var r io.Reader
			switch c {
			case codingGzip:
				zr, err := gzip.NewReader(bytes.NewReader(out))
				require.NoError(t, err)
				r = zr
			case codingZstd:
				zr, err := zstd.NewReader(bytes.NewReader(out))
				require.NoError(t, err)
				defer zr.Close()
				r = zr
			case codingBr:
				r = brotli.NewReader(bytes.NewReader(out))
			}
			got, err := io.ReadAll(r)
			require.NoError(t, err)
			require.Equal(t, want, got, string(codingNames[c]))
		}
	}
}

// BenchmarkEncode measures coding a 7 KB JSON body in one piece, per coding, with the
// negotiation of a browser's Accept-Encoding:
//
//	go test -run '^$' -bench Encode -benchmem ./core/middleware/compress/
func BenchmarkEncode(b *testing.B) {
	body := bytes.Repeat([]byte(`{"token":"hello"},`), 400)
	s := New(config.CompressOptions{Encodings: config.DefaultCompressEncodings, ContentTypes: config.DefaultCompressTypes})
	for _, c := range []coding{codingGzip, codingZstd, codingBr} {
		b.Run(string(codingNames[c]), func(b *testing.B) {
			out := make([]byte, 0, 64<<10)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				_ = s.negotiate([]byte("gzip, deflate, br, zstd"))
				enc := acquire(c)
				out = enc.Close(enc.Encode(out[:0], body))
				enc.Release()
			}
			b.ReportMetric(float64(len(out))/float64(len(body)), "ratio")
		})
	}
}

// BenchmarkRequestFields measures what the stage reads of a browser's request for every
// codable response (whether it asks for no-transform, its Accept-Encoding lines negotiated):
//
//	go test -run '^$' -bench RequestFields -benchmem ./core/middleware/compress/
func BenchmarkRequestFields(b *testing.B) {
	s := New(config.CompressOptions{Encodings: config.DefaultCompressEncodings, ContentTypes: config.DefaultCompressTypes})
	var req http1.Request
	head := "GET /v1/models HTTP/1.1\r\nHost: gw\r\nUser-Agent: Mozilla/5.0\r\nAccept: application/json\r\n" +
		"Accept-Language: en-US,en;q=0.9\r\nCache-Control: max-age=0\r\nAccept-Encoding: gzip, deflate, br, zstd\r\n\r\n"
	if err := req.ParseRequestHead([]byte(head), nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if s.requestCoding(req.Headers) != codingZstd {
			b.Fatal("wrong answer")
		}
	}
}
