// Package suggest finds the name a user most likely meant, for "did you mean" in the
// messages of the config loader, the router's rule parser and the command lines.
package suggest

import "github.com/sluice-gw/sluice/internal/steps"

// Distance is the Levenshtein distance between a and b, counted in bytes. Names longer than
// 64 bytes count as far from everything (99), which bounds the work a hostile name can cause
// (the work is counted in internal/steps).
func Distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	steps.Add(len(a)*len(b) + 1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Nearest returns the one of names closest to name by Distance, when it is within two edits
// and fewer edits than the length of either (so that "c" is not taken for "config"); else "".
// Of names equally close, the first wins.
func Nearest(name string, names ...string) string {
	best, bestD := "", 3
	for _, n := range names {
		if len(n) > len(name)+2 || len(name) > len(n)+2 {
			continue // the distance is at least the difference in length
		}
		if d := Distance(name, n); d < bestD && d < len(n) && d < len(name) {
			best, bestD = n, d
		}
	}
	return best
}
