package openai

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlain8 checks the word test against strClass for every byte value at every position
// among plain bytes, and for pairs of special bytes (where borrows could interfere).
func TestPlain8(t *testing.T) {
	var w [8]byte
	for pos := range 8 {
		for c := range 256 {
			for i := range w {
				w[i] = 'a'
			}
			w[pos] = byte(c)
			require.Equal(t, !strClass[c], plain8(binary.LittleEndian.Uint64(w[:])), "byte %#x at %d", c, pos)
		}
	}
	for c1 := range 256 {
		for c2 := range 256 {
			w = [8]byte{'x', byte(c1), 'x', 'x', byte(c2), 'x', 'x', 'x'}
			require.Equal(t, !strClass[c1] && !strClass[c2], plain8(binary.LittleEndian.Uint64(w[:])), "bytes %#x %#x", c1, c2)
		}
	}
}

func TestUnescape(t *testing.T) {
	for _, c := range []struct {
		tok, want string
		lone      bool
	}{
		{`"abc"`, "abc", false},
		{`"a\"b\\c\/d\b\f\n\r\t"`, "a\"b\\c/d\b\f\n\r\t", false},
		{`"\u00e9\u65E5\ud83d\ude00"`, "é日😀", false},
		{`"\ud83d"`, "\uFFFD", true},
		{`"\ude00x"`, "\uFFFDx", true},
		{`"\ud83d\u0041"`, "\uFFFDA", true},
		{`"\ud83d\ud83d\ude00"`, "\uFFFD😀", true},
	} {
		got, lone := unescape(nil, []byte(c.tok))
		require.Equal(t, c.want, string(got), c.tok)
		require.Equal(t, c.lone, lone, c.tok)
	}
}

func TestParseInt(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "-0": 0, "7": 7, "9223372036854775807": 1<<63 - 1, "-9223372036854775808": -1 << 63} {
		n, ok := parseInt([]byte(s))
		require.True(t, ok, s)
		require.Equal(t, want, n, s)
	}
	for _, s := range []string{"9223372036854775808", "-9223372036854775809", "99999999999999999999"} {
		_, ok := parseInt([]byte(s))
		require.False(t, ok, s)
	}
}
