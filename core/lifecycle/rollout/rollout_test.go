package rollout

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// feed gives the controller n samples of the new revision, one in every errEvery failing
// (0: none), each of the given latency.
func feed(s *Split, n, errEvery int, latency time.Duration) {
	rc := pipeline.AcquireRequestCtx()
	defer pipeline.ReleaseRequestCtx(rc)
	for i := 1; i <= n; i++ {
		s.ctl.sample(errEvery > 0 && i%errEvery == 0, latency, 0, rc)
	}
}

func seedSplit(t *testing.T, name string, toPercent float64) *Split {
	s := New(name, []Revision{{Name: "v1", Percent: 100 - toPercent, Backends: []int{0}}, {Name: "v2", Percent: toPercent, Backends: []int{1}}},
		&Config{From: 0, To: 1, StepPercent: 10, StepInterval: time.Hour, MaxErrorRate: 0.05, MaxLatencyP99: 5 * time.Second, MinSamples: 20})
	t.Cleanup(s.Close)
	return s
}

// The seed's third minute: v2 at 20% fails 8.7% of its requests, over the 5% threshold: the
// rollout rolls back at once, v1 gets all the traffic, and the reason says why.
func TestSeedExampleRollsBackOnErrorRate(t *testing.T) {
	s := seedSplit(t, "seed-errors", 20)
	// 87 failures in 1,000: one in every 11 or 12. Every 11th fails: 90 of 1,000 (9%).
	feed(s, 1000, 11, 1300*time.Millisecond)
	st := s.Rollout()
	require.Equal(t, StateRolledBack, st.State)
	require.Contains(t, st.Reason, "error rate")
	require.Equal(t, []RevisionStatus{{Name: "v1", TrafficPercent: 100, ConfiguredPercent: 80}, {Name: "v2", TrafficPercent: 0, ConfiguredPercent: 20}}, s.Revisions())
}

// The seed's first minutes: 0.8% errors and 1.2 s latency are within the thresholds: the step
// is not rolled back, and before its interval has passed it does not advance either.
func TestSeedExampleHealthyStepHolds(t *testing.T) {
	s := seedSplit(t, "seed-healthy", 2)
	feed(s, 1000, 125, 1200*time.Millisecond) // 8 failures in 1,000
	st := s.Rollout()
	require.Equal(t, StateProgressing, st.State)
	require.Equal(t, 0, st.Step)
	require.InDelta(t, 0.008, st.ErrorRate, 1e-9)
	require.Equal(t, 2.0, st.ToPercent)
}

// A p99 latency over latency_threshold_ms rolls back; below min_samples nothing is judged.
func TestLatencyThresholdAndMinSamples(t *testing.T) {
	s := seedSplit(t, "seed-latency", 10)
	feed(s, 19, 0, 6*time.Second)
	require.Equal(t, StateProgressing, s.Rollout().State, "19 samples of 20: not judged")
	feed(s, 1, 0, 6*time.Second)
	st := s.Rollout()
	require.Equal(t, StateRolledBack, st.State)
	require.Contains(t, st.Reason, "latency p99")
}

// Each threshold bounds the step's true p99, not the upper bound of the histogram bucket it
// falls in: samples just under a threshold that shares their bucket do not roll back, and one
// more sample over it than a p99 allows does.
func TestThresholdsJudgeTheTrueP99(t *testing.T) {
	const limit = 1048 * time.Millisecond // in the bucket of 1 s, whose upper bound is 1048.576 ms
	require.Greater(t, histUpper(histIndex(time.Second)), limit)
	require.Equal(t, histIndex(time.Second), histIndex(limit))
	for _, c := range []struct {
		name   string
		cfg    func(*Config)
		sample func(s *Split, rc *pipeline.RequestCtx, d time.Duration)
	}{
		{"latency", func(c *Config) { c.MaxLatencyP99 = limit }, func(s *Split, rc *pipeline.RequestCtx, d time.Duration) {
			s.ctl.sample(false, d, 0, rc)
		}},
		{"TTFT", func(c *Config) { c.MaxTTFTP99 = limit }, func(s *Split, rc *pipeline.RequestCtx, d time.Duration) {
			s.ctl.sample(false, time.Millisecond, d, rc)
		}},
		{"ITL", func(c *Config) { c.MaxITLP99 = limit }, func(s *Split, rc *pipeline.RequestCtx, d time.Duration) {
			g := s.ctl.gapsOf(rc)
			g.OnGap(d)
			s.ctl.sample(false, time.Millisecond, 0, rc)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{From: 0, To: 1, StepPercent: 10, StepInterval: time.Hour, MaxErrorRate: 0.05, MinSamples: 100}
			c.cfg(&cfg)
			s := New("exact-"+c.name, []Revision{{Name: "v1", Percent: 90, Backends: []int{0}}, {Name: "v2", Percent: 10, Backends: []int{1}}}, &cfg)
			t.Cleanup(s.Close)
			rc := pipeline.AcquireRequestCtx()
			defer pipeline.ReleaseRequestCtx(rc)
			// 200 samples: the p99 is the 198th smallest, so two may be over the threshold.
			for range 198 {
				c.sample(s, rc, limit)
			}
			for range 2 {
				c.sample(s, rc, time.Hour)
			}
			st := s.Rollout()
			require.Equal(t, StateProgressing, st.State, "a p99 at the threshold does not exceed it: %s", st.Reason)
			c.sample(s, rc, limit)
			st = s.Rollout()
			require.Equal(t, StateProgressing, st.State, "201 samples: the p99, the 199th, is at the threshold: %s", st.Reason)
			c.sample(s, rc, limit+time.Millisecond)
			st = s.Rollout()
			require.Equal(t, StateRolledBack, st.State, "202 samples, 3 over: the p99, the 200th, is over the threshold")
			require.Contains(t, st.Reason, c.name+" p99")
		})
	}
}

func TestHistogramQuantileIsAnUpperBoundWithinABucket(t *testing.T) {
	var h hist
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Millisecond)
	}
	p99 := h.quantile(.99)
	require.GreaterOrEqual(t, p99, 990*time.Millisecond)
	require.Less(t, p99, 1090*time.Millisecond, "within one bucket (9%)")
	require.Equal(t, time.Duration(0), (&hist{}).quantile(.99))
}

// A step that waited for its samples and then crossed a threshold is rolled back and waits no
// more; each decision is logged as it happens, the rollback as a warning.
func TestRollbackAfterWaitingIsLoggedAndEndsTheWait(t *testing.T) {
	var buf syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	s := New("seed-wait", []Revision{{Name: "v1", Percent: 90, Backends: []int{0}}, {Name: "v2", Percent: 10, Backends: []int{1}}},
		&Config{From: 0, To: 1, StepPercent: 10, StepInterval: 10 * time.Millisecond, MaxErrorRate: 0.05, MinSamples: 20})
	t.Cleanup(s.Close)
	deadline := time.Now().Add(5 * time.Second)
	for !s.Rollout().Waiting {
		require.True(t, time.Now().Before(deadline), "the step never waited for its samples")
		time.Sleep(time.Millisecond) // polling the status, not asserting on time
	}
	feed(s, 20, 2, time.Millisecond) // half of them fail
	st := s.Rollout()
	require.Equal(t, StateRolledBack, st.State)
	require.False(t, st.Waiting, "a rolled-back rollout waits for nothing")
	log := buf.String()
	require.Contains(t, log, `"msg":"rollout","service":"seed-wait","event":"`+metrics.RolloutWaiting+`"`)
	require.Regexp(t, `"level":"WARN","msg":"rollout","service":"seed-wait","event":"`+metrics.RolloutRollback+`".*"detail":"[^"]*error rate`, log)
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
