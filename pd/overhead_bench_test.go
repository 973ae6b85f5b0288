package pd_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/pd"
)

// benchConcurrency is the number of requests in flight in the overhead benchmark.
const benchConcurrency = 64

// BenchmarkPDOverhead runs b.N rounds of 64 concurrent streamed requests on a 2 prefill + 2
// decode llmsim fleet whose modelled times are zero, so that what remains is protocol
// handling. "gateway/batch=N" sends them through sluice with prepare_batch_size N and reports
// the percentiles of the gateway's orchestration overhead (its time from the start of the
// exchange to the decode response head, less the time spent waiting on worker calls: a
// batched prepare's queue counts as overhead, its call does not) and of the client's time to
// the response head. "direct" makes the three calls from the client itself, for the time to
// the response head without a gateway.
//
//	go test -run '^$' -bench PDOverhead -benchtime 20x ./pd/
func BenchmarkPDOverhead(b *testing.B) {
	b.Setenv(workerKeyEnv, workerKey)
	f := startBenchFleet(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * benchConcurrency, MaxConnsPerHost: 0}}
	b.Run("direct", func(b *testing.B) {
		var n atomic.Uint64
		runRounds(b, func() time.Duration { return directExchange(b, client, f, n.Add(1)) })
	})
	for _, size := range []int{1, 32} {
		b.Run(fmt.Sprintf("gateway/batch=%d", size), func(b *testing.B) {
			g := startGateway(b, f.gatewayTOML("", fmt.Sprintf("prepare_batch_size = %d", size)))
			url := "http://" + g.Addr("web") + "/v1/chat/completions"
			var n atomic.Uint64
			var mu sync.Mutex
			var overheads []time.Duration
			pd.SetOverheadHook(func(d time.Duration) {
				mu.Lock()
				overheads = append(overheads, d)
				mu.Unlock()
			})
			defer pd.SetOverheadHook(nil)
			calls := func() int64 {
				var c int64
				for _, w := range []int{2, 3} {
					st := f.sim.Stats(w)
					c += st.Calls.Prepare + st.Calls.PrepareBatch
				}
				return c
			}
			before := calls()
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				report(b, overheads, "overhead-")
				b.ReportMetric(float64(calls()-before)/float64(len(overheads)), "prepare-calls/req")
			}()
			runRounds(b, func() time.Duration {
				body := chatBody(fmt.Sprintf("bench %d", n.Add(1)))
				start := time.Now()
				resp, err := client.Post(url, "application/json", strings.NewReader(body))
				if err != nil {
					b.Error(err)
					return 0
				}
				d := time.Since(start)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Errorf("status %d", resp.StatusCode)
				}
				return d
			})
		})
	}
}

func startBenchFleet(b *testing.B) *fleet {
	cfg := llmsim.Config{Seed: 7, APIKey: workerKey}
	for i, r := range []llmsim.Role{llmsim.RolePrefill, llmsim.RolePrefill, llmsim.RoleDecode, llmsim.RoleDecode} {
		ic := llmsim.DefaultInstance()
		ic.Listen, ic.Role, ic.WorkerID = "127.0.0.1:0", r, fmt.Sprintf("w%d", i)
		ic.Generation, ic.Digest = 3, "sha256:good"
		ic.TTFT, ic.PerUncachedToken, ic.ITL, ic.ITLPerRunning, ic.Tokens = 0, 0, 0, 0, 1
		ic.KVTransfer, ic.KVTransferPerToken = 0, 0
		cfg.Instance = append(cfg.Instance, ic)
	}
	sim, err := llmsim.Start(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sim.Close() })
	f := &fleet{sim: sim}
	for _, ic := range cfg.Instance {
		f.ids = append(f.ids, ic.WorkerID)
	}
	return f
}

// runRounds runs b.N rounds of benchConcurrency concurrent calls of one and reports the
// percentiles of the durations they return.
func runRounds(b *testing.B, one func() time.Duration) {
	var mu sync.Mutex
	var ds []time.Duration
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		for range benchConcurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := one()
				mu.Lock()
				ds = append(ds, d)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	report(b, ds, "head-")
	b.ReportMetric(0, "ns/op")
}

// report reports the 50th and 99th percentiles of ds in ms, named with prefix.
func report(b *testing.B, ds []time.Duration, prefix string) {
	if len(ds) == 0 {
		b.Fatal("nothing measured")
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	pct := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.5), prefix+"p50-ms")
	b.ReportMetric(pct(0.99), prefix+"p99-ms")
}

// directExchange runs prepare, prefill and decode on pair n%2 from the client and returns the
// time to the decode response head.
func directExchange(b *testing.B, c *http.Client, f *fleet, n uint64) time.Duration {
	addrs := f.sim.Addrs()
	p, d := "http://"+addrs[n%2], "http://"+addrs[2+n%2]
	id := fmt.Sprintf("direct-%d", n)
	req := chatBody(fmt.Sprintf("bench %d", n))
	start := time.Now()
	var tg struct{ Target json.RawMessage }
	post(b, c, d+"/power/v1/decode/prepare", `{"execution_id":"`+id+`"}`, &tg)
	var src struct{ Source json.RawMessage }
	post(b, c, p+"/power/v1/prefill/execute", `{"execution_id":"`+id+`","request":`+req+`,"target":`+string(tg.Target)+`}`, &src)
	hreq, _ := http.NewRequest("POST", d+"/power/v1/decode/execute", strings.NewReader(`{"execution_id":"`+id+`","request":`+req+`,"source":`+string(src.Source)+`}`))
	hreq.Header.Set("Authorization", "Bearer "+workerKey)
	resp, err := c.Do(hreq)
	if err != nil {
		b.Error(err)
		return 0
	}
	dur := time.Since(start)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return dur
}

func post(b *testing.B, c *http.Client, url, body string, out any) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+workerKey)
	resp, err := c.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.NewDecoder(bytes.NewReader(raw)).Decode(out) != nil {
		b.Errorf("%s: %d %s", url, resp.StatusCode, raw)
	}
}
