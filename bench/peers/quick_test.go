package peers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompareQuick is the smoke compare of `make test` (`sluice-bench
// compare --quick`): llmsim, sluice on both engines and the installed peers,
// one round of json and sse. It runs only when $SLUICE_BENCH_BIN names a
// directory holding sluice and llmsim (make test: go build -o bin/
// ./cmd/... && SLUICE_BENCH_BIN=$PWD/bin go test ./bench/peers), so that a
// plain `go test ./...` does not start proxies for 20 s. Every target must
// answer every request correctly.
func TestCompareQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("~20 s smoke compare")
	}
	bin := os.Getenv("SLUICE_BENCH_BIN")
	if bin == "" {
		t.Skip("set SLUICE_BENCH_BIN to the directory holding sluice and llmsim to run the smoke compare")
	}
	bin, _ = filepath.Abs(bin)
	for _, b := range []string{"sluice", "llmsim"} {
		if !isExecutable(filepath.Join(bin, b)) {
			t.Skipf("%s/%s missing: build with `go build -o bin/ ./cmd/...` (or set SLUICE_BENCH_BIN)", bin, b)
		}
	}
	cmp, err := Compare(context.Background(), CompareOptions{Quick: true, BinDirs: []string{bin}, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	_ = cmp.Markdown(&b)
	t.Log("\n" + b.String())
	for _, n := range cmp.Notes {
		if strings.Contains(n, "skipped") || strings.Contains(n, "exited") {
			t.Errorf("note: %s", n)
		}
	}
	seen := map[string]bool{}
	for _, r := range cmp.Rows {
		seen[r.Target+"/"+r.Workload] = true
		if r.Errors != 0 || r.Unfinished != 0 || r.RPS <= 0 {
			t.Errorf("%s %s: rps %.0f, %d errors, %d unfinished", r.Target, r.Workload, r.RPS, r.Errors, r.Unfinished)
		}
	}
	for _, want := range []string{"direct", TargetSluiceGnet, TargetSluiceFasthttp} {
		for _, wl := range []string{"json", "sse"} {
			if !seen[want+"/"+wl] {
				t.Errorf("no %s row for %s", wl, want)
			}
		}
	}
}
