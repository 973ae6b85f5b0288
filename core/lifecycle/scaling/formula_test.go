package scaling

import "testing"

// The worked examples of the seed document (section 11): container_concurrency 8, target
// utilization 0.7, so one replica's effective capacity is 5.6 requests.
func TestDesiredMatchesTheSeedWorkedExamples(t *testing.T) {
	for _, tc := range []struct {
		name             string
		inFlight, queued int
		min, max, want   int
	}{
		{"idle: ⌈0 / 5.6⌉ = 0", 0, 0, 0, 4, 0},
		{"cold start, first request: ⌈1 / 5.6⌉ = ⌈0.18⌉ = 1", 0, 1, 0, 4, 1},
		{"burst to 20: ⌈(8 + 12) / 5.6⌉ = ⌈3.57⌉ = 4", 8, 12, 0, 4, 4},
		{"traffic falls: ⌈2 / 5.6⌉ = ⌈0.36⌉ = 1", 2, 0, 0, 4, 1},
		{"one over one replica's capacity: ⌈6 / 5.6⌉ = 2", 6, 0, 0, 4, 2},
		{"clamped to max_replicas", 40, 60, 0, 4, 4},
		{"clamped to min_replicas", 0, 0, 1, 4, 1},
	} {
		if got := Desired(tc.inFlight, tc.queued, 8, 0.7, tc.min, tc.max); got != tc.want {
			t.Errorf("%s: Desired(%d, %d) = %d, want %d", tc.name, tc.inFlight, tc.queued, got, tc.want)
		}
	}
	// Capacity 5.6 × 2 = 11.2 is not a whole number of requests; 4 × 0.5 × 3 = 6 is.
	if got := Desired(6, 0, 4, 0.5, 0, 10); got != 3 {
		t.Errorf("Desired(6, 0, 4, 0.5) = %d, want 3 (exactly three replicas' capacity)", got)
	}
	if got := Desired(7, 0, 4, 0.5, 0, 10); got != 4 {
		t.Errorf("Desired(7, 0, 4, 0.5) = %d, want 4", got)
	}
}
