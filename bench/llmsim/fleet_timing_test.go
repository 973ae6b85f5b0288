package llmsim

import (
	"bufio"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// timingRun is the result of driving many concurrent streams at a fleet.
type timingRun struct {
	medianErr, p99Err time.Duration // |actual − modelled| TTFT
	medianITL         time.Duration
	failures          int
	wall              time.Duration
}

var runSeq atomic.Int64

// runConcurrentStreams opens `streams` keep-alive connections spread over the fleet, then
// (ramping the starts over `ramp`) sends one streamed chat request on each and measures
// the time from writing the request to reading its first event, against the model's
// TTFT = TTFT + PerUncachedToken × prompt tokens (every prompt is unique, so nothing is
// cached, and the fleet has batch room for all, so nothing waits).
func runConcurrentStreams(tb testing.TB, f *Fleet, streams int, ramp time.Duration) timingRun {
	addrs := f.Addrs()
	conns := make([]net.Conn, streams)
	for i := range conns {
		c, err := net.Dial("tcp", addrs[i%len(addrs)])
		if err != nil {
			tb.Fatalf("dial %d: %v", i, err)
		}
		conns[i] = c
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	run := runSeq.Add(1) // prompts differ between runs, or the fleet's caches would hit
	errs := make([]time.Duration, streams)
	itls := make([]time.Duration, streams)
	failed := make([]bool, streams)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range streams {
		ic := f.Instance(i % len(addrs))
		wg.Go(func() {
			if ramp > 0 {
				time.Sleep(ramp * time.Duration(i) / time.Duration(streams))
			}
			content := fmt.Sprintf("run %d stream %06d: %s", run, i, strings.Repeat("lorem ipsum dolor sit amet ", 12))
			body := chatBody(content, true, "")
			msgs := []chatMessage{{Role: "user", Content: []byte(strconv.Quote(content))}}
			tokens := CountTokens(len(appendChatPrompt(nil, msgs, nil)))
			modelled := ic.TTFT.D() + ic.PerUncachedToken.D()*time.Duration(tokens)
			req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
				strconv.Itoa(len(body)) + "\r\n\r\n" + body
			c := conns[i]
			c.SetDeadline(time.Now().Add(60 * time.Second))
			t0 := time.Now()
			if _, err := c.Write([]byte(req)); err != nil {
				failed[i] = true
				return
			}
			br := bufio.NewReaderSize(c, 4096)
			var first, last time.Time
			n := 0

			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					failed[i] = true
					return
				}
				if len(line) > 6 && string(line[:6]) == "data: " {
					now := time.Now()
					if n == 0 {
						first = now
					}
					last = now
					n++
					if string(line) == "data: [DONE]\n" {
						break
					}
				}
			}
			d := first.Sub(t0) - modelled
			errs[i] = max(d, -d)
			if n > 3 {
				itls[i] = last.Sub(first) / time.Duration(n-3) // finish, usage, [DONE] come at once
			}
		})
	}
	wg.Wait()
	res := timingRun{wall: time.Since(start)}
	var ok, okITL []time.Duration
	for i := range errs {
		if failed[i] {
			res.failures++
			continue
		}
		ok = append(ok, errs[i])
		okITL = append(okITL, itls[i])
	}
	if len(ok) == 0 {
		tb.Fatal("every stream failed")
	}
	slices.Sort(ok)
	slices.Sort(okITL)
	res.medianErr = ok[len(ok)/2]
	res.p99Err = ok[len(ok)*99/100]
	res.medianITL = okITL[len(okITL)/2]
	return res
}

// processCPU returns the user + system CPU time of the process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchStreams runs `streams` concurrent streams (64 tokens at ITL 30ms, TTFT 50ms + 100µs
// per uncached token) against a fleet of `instances` and reports, for the median run, the
// median and p99 of |actual − modelled| TTFT and the median ITL, and the process CPU
// (simulator and client) per stream.
func benchStreams(b *testing.B, instances, streams int) {
	ic := DefaultInstance()
	ic.Listen = ""
	ic.TTFT = Duration(50 * time.Millisecond)
	ic.ITL = Duration(30 * time.Millisecond)
	ic.ITLPerRunning = 0
	ic.Tokens = 64
	f := startFleet(b, Config{Seed: 1, Instances: instances, Defaults: ic})
	var runs []timingRun
	var cpus []time.Duration
	fails := 0
	for b.Loop() {
		c0 := processCPU()
		r := runConcurrentStreams(b, f, streams, 300*time.Millisecond)
		cpus = append(cpus, processCPU()-c0)
		runs = append(runs, r)
		fails += r.failures
	}
	// The median run: one run disturbed by another process on a shared machine does not
	// move the figure.
	slices.SortFunc(runs, func(a, b timingRun) int { return int(a.medianErr - b.medianErr) })
	slices.Sort(cpus)
	mid := runs[len(runs)/2]
	b.ReportMetric(float64(mid.medianErr)/1e6, "median-ttft-err-ms")
	b.ReportMetric(float64(mid.p99Err)/1e6, "p99-ttft-err-ms")
	b.ReportMetric(float64(mid.medianITL)/1e6, "median-itl-ms")
	b.ReportMetric(float64(cpus[len(cpus)/2])/1e6/float64(streams), "cpu-ms/stream")
	b.ReportMetric(float64(fails), "failed-streams")
}

// BenchmarkFleet1000Streams measures the simulator's timing error at load: 8 instances,
// 1,000 concurrent streams (the bar: median |actual − modelled| TTFT < 5ms).
//
//	go test -run '^$' -bench Fleet1000Streams -benchtime 3x ./bench/llmsim
func BenchmarkFleet1000Streams(b *testing.B) { benchStreams(b, 8, 1000) }

// BenchmarkFleet2000Streams16 is the cost check: 16 instances, 2,000 concurrent streams.
func BenchmarkFleet2000Streams16(b *testing.B) { benchStreams(b, 16, 2000) }
