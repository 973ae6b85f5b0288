package http1

import "testing"

// invalidValueByte's word-at-a-time scan must agree with the byte table for every byte value at
// every position of a word, including obs-text neighbours that could confuse the borrow logic.
func TestInvalidValueByteMatchesTable(t *testing.T) {
	fillers := []byte{'a', ' ', 0x80, 0xff, 0x21, 0x7e}
	for _, fill := range fillers {
		for c := 0; c < 256; c++ {
			for pos := 0; pos < 19; pos++ {
				v := make([]byte, 19)
				for i := range v {
					v[i] = fill
				}
				v[pos] = byte(c)
				want := -1
				for i, b := range v {
					if !valueChar[b] {
						want = i
						break
					}
				}
				if got := invalidValueByte(v); got != want {
					t.Fatalf("fill %#x byte %#x at %d: got %d, want %d", fill, c, pos, got, want)
				}
			}
		}
	}
}
