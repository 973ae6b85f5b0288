//go:build race

package admission

// raceEnabled: the race detector makes sync.Pool drop a share of what is put back, so
// allocation counts are meaningless under it.
const raceEnabled = true
