package llmsim

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCachedPrefixCutsTTFT(t *testing.T) {
	const perToken = 200 * time.Microsecond
	f, url := startOne(t, func(ic *InstanceConfig) {
		ic.TTFT = Duration(10 * time.Millisecond)
		ic.PerUncachedToken = Duration(perToken)
		ic.Tokens = 4
	})
	c := newClient()
	text := strings.Repeat("a shared system prompt. ", 170) // ~4 KB, ~1,000 tokens
	body := chatBody(text, true, "")
	promptTokens := CountTokens(len(appendChatPrompt(nil, []chatMessage{{Role: "user", Content: []byte(`"` + text + `"`)}}, nil)))
	uncachedModel := 10*time.Millisecond + perToken*time.Duration(promptTokens)

	cold, evs, resp := ttftOf(t, c, url, body)
	if resp.Header.Get(CacheHeader) != "miss" {
		t.Fatalf("first request: %s=%q", CacheHeader, resp.Header.Get(CacheHeader))
	}
	if u := parseChunk(t, evs[len(evs)-2].data).Usage; u.PromptTokens != promptTokens || u.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("cold usage %+v, want %d prompt tokens, 0 cached", u, promptTokens)
	}
	warm, evs, resp := ttftOf(t, c, url, body)
	wantCached := (promptTokens - 1) / 16 * 16
	if u := parseChunk(t, evs[len(evs)-2].data).Usage; u.PromptTokensDetails.CachedTokens != wantCached {
		t.Fatalf("warm cached_tokens %d, want %d", u.PromptTokensDetails.CachedTokens, wantCached)
	}
	if resp.Header.Get(CacheHeader) != "hit" {
		t.Fatalf("second request: %s=%q", CacheHeader, resp.Header.Get(CacheHeader))
	}
	warmModel := 10*time.Millisecond + perToken*time.Duration(promptTokens-wantCached)
	t.Logf("cold TTFT %v (model %v), warm TTFT %v (model %v)", cold, uncachedModel, warm, warmModel)
	if cold < uncachedModel {
		t.Fatalf("cold TTFT %v shorter than the model's %v", cold, uncachedModel)
	}
	if cold-warm < (uncachedModel-warmModel)/2 {
		t.Fatalf("cached prefix saved %v of TTFT; the model saves %v", cold-warm, uncachedModel-warmModel)
	}
	st := f.Stats(0)
	if st.FullMisses != 1 || st.CachedTokens != int64(wantCached) || st.PromptTokens != int64(2*promptTokens) {
		t.Fatalf("stats %+v", st)
	}
}

func TestMultiTurnReplyIsCached(t *testing.T) {
	_, url := startOne(t, func(ic *InstanceConfig) { ic.Tokens = 40; ic.ITL = 0 })
	c := newClient()
	first := strings.Repeat("turn one question ", 20)
	reply := doCompletion(t, c, url, "/v1/chat/completions", chatBody(first, false, "")).Choices[0].Message.Content
	msgs := []chatMessage{
		{Role: "user", Content: []byte(quoteJSON(first))},
		{Role: "assistant", Content: []byte(quoteJSON(reply))},
		{Role: "user", Content: []byte(`"and a follow-up"`)},
	}
	body := `{"model":"m","messages":[{"role":"user","content":` + quoteJSON(first) + `},{"role":"assistant","content":` +
		quoteJSON(reply) + `},{"role":"user","content":"and a follow-up"}]}`
	out := doCompletion(t, c, url, "/v1/chat/completions", body)
	// Prompt and reply of turn one (up to its last full block) are cached.
	turn1 := len(appendChatPrompt(nil, msgs[:1], nil)) + len(reply)
	want := turn1 / (16 * BytesPerToken) * 16
	if got := out.Usage.PromptTokensDetails.CachedTokens; got != want {
		t.Fatalf("follow-up cached %d tokens, want %d (turn one's prompt and reply)", got, want)
	}
}

func quoteJSON(s string) string {
	return string(appendJSONString(nil, s))
}

func TestKVCacheLRU(t *testing.T) {
	c := newKVCache(3)
	c.insert([]uint64{1, 2, 3})
	if n := c.lookup([]uint64{1}, 10, 16, 16); n != 1 { // 1 becomes most recent
		t.Fatalf("lookup 1: %d", n)
	}
	c.insert([]uint64{4}) // evicts 2, the least recently used
	for h, want := range map[uint64]bool{1: true, 2: false, 3: true, 4: true} {
		if c.contains(h) != want {
			t.Fatalf("block %d cached=%v, want %v", h, !want, want)
		}
	}
	// A lookup counts only the leading run of cached blocks, capped by maxBlocks.
	if n := c.lookup([]uint64{1, 3, 2, 4}, 10, 16, 64); n != 2 {
		t.Fatalf("leading run %d, want 2", n)
	}
	if n := c.lookup([]uint64{1, 3}, 1, 16, 32); n != 1 {
		t.Fatalf("capped run %d, want 1", n)
	}
	if used, hits, queries := c.usage(); used != 3 || hits != 16*4 || queries != 16+64+32 {
		t.Fatalf("usage %d %d %d", used, hits, queries)
	}
	c.reset()
	if used, _, _ := c.usage(); used != 0 || c.contains(1) {
		t.Fatal("reset kept blocks")
	}
	c.insert([]uint64{7, 8, 9, 10})
	if used, _, _ := c.usage(); used != 3 || c.contains(7) {
		t.Fatal("capacity not kept after reset")
	}
}

func TestLRUEvictionAtCapacity(t *testing.T) {
	f, url := startOne(t, func(ic *InstanceConfig) {
		ic.Blocks = 12
		ic.Tokens = 1
		ic.ITL = 0
	})
	c := newClient()
	prompt := func(tag string) string { return tag + strings.Repeat(" filler", 50) } // 5 blocks of 64 bytes
	ask := func(tag string) int {
		return doCompletion(t, c, url, "/v1/chat/completions", chatBody(prompt(tag), false, "")).Usage.PromptTokensDetails.CachedTokens
	}
	ask("A")
	if ask("A") == 0 {
		t.Fatal("A not cached right after it ran")
	}
	ask("B")
	ask("C") // 3 × ~5 blocks > 12: A, the least recently used, is evicted
	if got := ask("A"); got != 0 {
		t.Fatalf("A still has %d cached tokens after B and C filled the cache", got)
	}
	if used := f.Stats(0).KVBlocksUsed; used != 12 {
		t.Fatalf("%d blocks used, capacity 12", used)
	}
}

// streamGaps returns the median gap between a probe stream's token events.
func streamGaps(t *testing.T, c *http.Client, url, tag string) time.Duration {
	t.Helper()
	_, evs, _ := ttftOf(t, c, url, chatBody(tag, true, `"max_tokens":10`))
	var gaps []time.Duration
	for i := 1; i < 10; i++ {
		gaps = append(gaps, evs[i].at.Sub(evs[i-1].at))
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}

func TestBatchEffectRaisesITL(t *testing.T) {
	f, url := startOne(t, func(ic *InstanceConfig) {
		ic.ITL = Duration(5 * time.Millisecond)
		ic.ITLPerRunning = Duration(2 * time.Millisecond)
		ic.Tokens = 100000
		ic.TTFT = Duration(time.Millisecond)
	})
	c := newClient()
	alone := streamGaps(t, c, url, "alone")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 20 {
		resp := post(t, ctx, c, url+"/v1/chat/completions", chatBody("bg"+string(rune('a'+i)), true, ""), nil)
		wg.Go(func() { io.Copy(io.Discard, resp.Body); resp.Body.Close() })
	}
	defer func() { cancel(); wg.Wait() }()
	waitFor(t, "20 background streams running", 5*time.Second, func() bool { return f.Stats(0).Running == 20 })
	batched := streamGaps(t, c, url, "batched") // ITL = 5ms + 2ms × 20 = 45ms
	t.Logf("ITL alone %v, with 20 others %v", alone, batched)
	if batched < 30*time.Millisecond || batched < 3*alone {
		t.Fatalf("ITL with 20 running %v, alone %v: want about 45ms vs 5ms", batched, alone)
	}
}

func TestWaitingQueueBoundRejects(t *testing.T) {
	for _, status := range []int{429, 503} {
		f, url := startOne(t, func(ic *InstanceConfig) {
			ic.MaxRunning, ic.MaxWaiting, ic.QueueFullStatus = 1, 1, status
			ic.TTFT = Duration(time.Hour)
		})
		c := newClient()
		ctx1, cancel1 := context.WithCancel(context.Background())
		ctx2, cancel2 := context.WithCancel(context.Background())
		done := make(chan int, 2)
		first := make(chan error, 1) // the first stream's head, which comes at its admission
		go func() {
			resp, err := tryPost(ctx1, c, url+"/v1/chat/completions", chatBody("one", true, ""), nil)
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			first <- err
			if err == nil {
				io.Copy(io.Discard, resp.Body)
			}
		}()
		waitFor(t, "first running", 5*time.Second, func() bool { return f.Stats(0).Running == 1 })
		// It is cancelled below as a client leaving a running stream, so after its head came.
		select {
		case err := <-first:
			if err != nil {
				t.Fatalf("first request: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the first stream's head did not come within 5s of its admission")
		}
		go func() {
			req, _ := http.NewRequestWithContext(ctx2, "POST", url+"/v1/chat/completions", strings.NewReader(chatBody("two", true, "")))
			if resp, err := c.Do(req); err == nil {
				done <- resp.StatusCode
				io.Copy(io.Discard, resp.Body)
			}
		}()
		waitFor(t, "second waiting", 5*time.Second, func() bool { return f.Stats(0).Waiting == 1 })
		resp := post(t, context.Background(), c, url+"/v1/chat/completions", chatBody("three", true, ""), nil)
		if resp.StatusCode != status || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("third request: status %d, Retry-After %q; want %d", resp.StatusCode, resp.Header.Get("Retry-After"), status)
		}
		if e := readAPIError(t, resp); e.Error.Code == nil || *e.Error.Code != "queue_full" {
			t.Fatalf("error %+v", e)
		}
		// The first leaves: the waiting one is admitted.
		cancel1()
		waitFor(t, "second admitted", 5*time.Second, func() bool {
			st := f.Stats(0)
			return st.Running == 1 && st.Waiting == 0 && st.Aborted == 1
		})
		cancel2()
		waitFor(t, "all released", 5*time.Second, func() bool { return f.Stats(0).Running == 0 })
		if st := f.Stats(0); st.Rejected != 1 {
			t.Fatalf("stats %+v", st)
		}
	}
}

func TestStartupDelay(t *testing.T) {
	_, url := startOne(t, func(ic *InstanceConfig) { ic.StartupDelay = Duration(300 * time.Millisecond) })
	c := newClient()
	if code := getJSON(t, c, url+"/health", nil); code != 503 {
		t.Fatalf("health during startup: %d", code)
	}
	resp := post(t, context.Background(), c, url+"/v1/chat/completions", chatBody("x", false, ""), nil)
	if resp.StatusCode != 503 {
		t.Fatalf("chat during startup: %d", resp.StatusCode)
	}
	readAPIError(t, resp)
	waitFor(t, "ready", 5*time.Second, func() bool { return getJSON(t, c, url+"/health", nil) == 200 })
	doCompletion(t, c, url, "/v1/chat/completions", chatBody("x", false, ""))
}

func TestCrashAndRestart(t *testing.T) {
	f, url := startOne(t, func(ic *InstanceConfig) { ic.StartupDelay = Duration(50 * time.Millisecond) })
	c := newClient()
	waitFor(t, "ready", 5*time.Second, func() bool { return getJSON(t, c, url+"/health", nil) == 200 })
	body := chatBody(strings.Repeat("cache me ", 40), false, "")
	doCompletion(t, c, url, "/v1/chat/completions", body)
	if doCompletion(t, c, url, "/v1/chat/completions", body).Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Fatal("not cached before the crash")
	}
	// A stream in flight when the instance crashes is cut.
	resp := post(t, context.Background(), c, url+"/v1/chat/completions", chatBody("inflight", true, `"max_tokens":1000`), nil)
	streamErr := make(chan error, 1)
	go func() {
		evs, err := readEvents(resp.Body, nil)
		if err == nil && len(evs) > 0 && evs[len(evs)-1].data == "[DONE]" {
			streamErr <- nil
			return
		}
		streamErr <- io.ErrUnexpectedEOF
	}()
	if err := f.Crash(0, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-streamErr:
		if err == nil {
			t.Fatal("stream completed across a crash")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream not cut by the crash")
	}
	c.CloseIdleConnections()
	if _, err := c.Get(url + "/health"); err == nil {
		t.Fatal("instance answered while crashed")
	}
	waitFor(t, "restarted and ready", 5*time.Second, func() bool {
		resp, err := c.Get(url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if st := f.Stats(0); st.Epoch != 1 || st.KVBlocksUsed != 0 {
		t.Fatalf("after restart: %+v", st)
	}
	if got := doCompletion(t, c, url, "/v1/chat/completions", body).Usage.PromptTokensDetails.CachedTokens; got != 0 {
		t.Fatalf("cache survived the crash: %d cached", got)
	}
}

func TestFleetPortsRolesAndIdentity(t *testing.T) {
	ic := testInstance()
	ic.Generation = 3
	ic.Digest = "sha256:abc"
	f := startFleet(t, Config{Seed: 1, Instances: 4, Roles: []Role{RolePrefill, RoleDecode}, Defaults: ic})
	if f.Len() != 4 {
		t.Fatalf("%d instances", f.Len())
	}
	c := newClient()
	seen := map[string]bool{}
	for i, addr := range f.Addrs() {
		var obs struct {
			WorkerID   string `json:"worker_id"`
			Role       string `json:"role"`
			Ready      bool   `json:"ready"`
			Digest     string `json:"execution_config_digest"`
			Generation int64  `json:"deployment_generation"`
			MaxActive  int    `json:"max_active"`
			Transfer   bool   `json:"state_transfer"`
		}
		if code := getJSON(t, c, "http://"+addr+"/power/v1/observation", &obs); code != 200 {
			t.Fatalf("observation %d", code)
		}
		want := []string{"prefill", "decode"}[i%2]
		if obs.Role != want || !obs.Ready || obs.Digest != "sha256:abc" || obs.Generation != 3 || !obs.Transfer || obs.MaxActive != ic.MaxRunning {
			t.Fatalf("instance %d observation %+v", i, obs)
		}
		if seen[obs.WorkerID] {
			t.Fatalf("duplicate worker id %s", obs.WorkerID)
		}
		seen[obs.WorkerID] = true
		if f.Stats(i).Calls.Observation != 1 {
			t.Fatalf("calls %+v", f.Stats(i).Calls)
		}
	}
}

func TestBasePortConsecutive(t *testing.T) {
	// Find a free block of ports by binding port 0 then trying the next ones.
	ic := testInstance()
	for attempt := 0; attempt < 20; attempt++ {
		probe, err := Start(Config{Instances: 1, Defaults: ic})
		if err != nil {
			t.Fatal(err)
		}
		addr := probe.Addrs()[0]
		probe.Close()
		port, _ := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
		if port > 65000 {
			continue
		}
		f, err := Start(Config{Instances: 3, BasePort: port, Defaults: ic})
		if err != nil {
			continue // raced with another listener: try another block
		}
		defer f.Close()
		for i, a := range f.Addrs() {
			if !strings.HasSuffix(a, ":"+strconv.Itoa(port+i)) {
				t.Fatalf("instance %d on %s, want port %d", i, a, port+i)
			}
		}
		return
	}
	t.Skip("no free block of 3 ports found")
}

func TestFleetFile(t *testing.T) {
	t.Setenv("LLMSIM_TEST_KEY", "k123")
	cfg, err := ParseFleetFile("fleet.toml", []byte(`
seed = 42
api_key_env = "LLMSIM_TEST_KEY"
[defaults]
models = ["m"]
ttft = "15ms"
per_uncached_token = "50us"
itl = "4ms"
tokens = 5
generation = 2
max_model_len = 4096
[[instance]]
listen = "127.0.0.1:0"
role = "prefill"
[[instance]]
listen = "127.0.0.1:0"
role = "decode"
tokens = 9
digest = "sha256:d"
max_model_len = 0
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Seed != 42 || cfg.APIKey != "k123" || len(cfg.Instance) != 2 {
		t.Fatalf("%+v", cfg)
	}
	a, b := cfg.Instance[0], cfg.Instance[1]
	if a.Role != RolePrefill || a.Tokens != 5 || a.TTFT.D() != 15*time.Millisecond || a.PerUncachedToken.D() != 50*time.Microsecond ||
		a.Generation != 2 || a.MaxRunning != defaultMaxRunning || len(a.Models) != 1 || a.MaxModelLen != 4096 {
		t.Fatalf("instance 0 %+v", a)
	}
	if b.Role != RoleDecode || b.Tokens != 9 || b.Digest != "sha256:d" || b.ITL.D() != 4*time.Millisecond || b.MaxModelLen != 0 {
		t.Fatalf("instance 1 %+v", b)
	}
	f := startFleet(t, cfg)
	if f.Len() != 2 {
		t.Fatal(f.Len())
	}
	for _, bad := range []string{
		"[defaults]\nttft = \"fast\"\n",
		"[defaults]\nbogus = 1\n",
		"[[instance]]\nrole = \"leader\"\n",
		"[[instance]]\nbogus = 1\n",
		"api_key_env = \"LLMSIM_UNSET_VARIABLE_X\"\n",
		"seed = \n",
		"roles = [\"prefill\", \"chef\"]\n",
	} {
		if _, err := ParseFleetFile("bad.toml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "bad.toml") {
			t.Errorf("%q: err %v, want an error naming the file", bad, err)
		}
	}
}

// TestFleetFileErrorsArePositioned: an unknown key or a bad value in any table of a fleet
// file is reported as file:line:column (it used to lose the position inside [defaults] and
// [[instance]], which are decoded key by key).
func TestFleetFileErrorsArePositioned(t *testing.T) {
	for bad, want := range map[string]string{
		"[defaults]\nbogus = 1\n": "bad.toml:2:1: unknown key defaults.bogus",
		"[[instance]]\nlisten = \"127.0.0.1:0\"\n\n[[instance]]\n  ttfx = \"1s\"\n": "bad.toml:5:3: unknown key instance.ttfx",
		"[defaults]\nttft = \"fast\"\n":                                             "bad.toml:2:",
		"instances = 2\nbogus = true\n":                                             "bad.toml:2:1: unknown key bogus",
		// go-toml panics placing these (the fuzz corpus keeps the input it found).
		"[\"\\b\"]\n":                       "bad.toml: unknown key written with an escape sequence",
		"[defaults]\n\"\\u0062ogus\" = 1\n": "bad.toml: unknown key written with an escape sequence",
	} {
		_, err := ParseFleetFile("bad.toml", []byte(bad))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want it to contain %q", bad, err, want)
		}
	}
}

// TestFleetFileErrorsAreReadable: no Go type names or repeated prefixes in fleet file errors,
// and settings that were silently accepted are refused.
func TestFleetFileErrorsAreReadable(t *testing.T) {
	for bad, want := range map[string]string{
		"seed = \"abc\"\n":                                  "bad.toml:1:8: cannot decode TOML string into an integer",
		"roles = \"x\"\n":                                   "bad.toml:1:9: cannot decode TOML string into an array of strings",
		"instances = -1\n":                                  "instances -1: want 1..4096",
		"instances = 100000000\n":                           "instances 100000000: want 1..4096",
		"instances = 3\nbase_port = 65535\n":                "base_port 65535 + 3 instances runs past port 65535",
		"base_port = 99999\n":                               "base_port 99999: want a TCP port",
		"api_key = \"a\"\napi_key_env = \"HOME\"\n":         "set api_key or api_key_env, not both",
		"[[instance]]\n[[instance]]\nrole = \"verifier\"\n": "bad.toml: instance 1 (127.0.0.1:8000): unknown role \"verifier\"",
	} {
		_, err := ParseFleetFile("bad.toml", []byte(bad))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want it to contain %q", bad, err, want)
			continue
		}
		if msg := err.Error(); strings.Count(msg, "llmsim: ") > 1 || strings.Contains(msg, "struct field") {
			t.Errorf("%q: %q repeats its prefix or names Go types", bad, msg)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for name, mod := range map[string]func(*InstanceConfig){
		"max_running 0":      func(ic *InstanceConfig) { ic.MaxRunning = 0 },
		"block size 0":       func(ic *InstanceConfig) { ic.BlockSize = 0 },
		"queue status 500":   func(ic *InstanceConfig) { ic.QueueFullStatus = 500 },
		"rate without fault": func(ic *InstanceConfig) { ic.FaultRate = 0.1 },
		"bad fault":          func(ic *InstanceConfig) { ic.Fault = "nope" },
		"bad role":           func(ic *InstanceConfig) { ic.Role = "boss" },
		"max_model_len -1":   func(ic *InstanceConfig) { ic.MaxModelLen = -1 },
	} {
		ic := testInstance()
		mod(&ic)
		if f, err := Start(Config{Instance: []InstanceConfig{ic}}); err == nil {
			f.Close()
			t.Errorf("%s: started", name)
		}
	}
}

// A crashed instance whose address another socket holds when it restarts comes back once the
// address is free: its port is in the ephemeral range, so an outgoing connection may take it,
// or a client polling it may connect to itself, while the instance is down. The test holds the
// address past the downtime (its pace, not an assertion), then lets it go.
func TestCrashedInstanceRestartsOnceItsAddressIsFree(t *testing.T) {
	f, url := startOne(t, nil)
	c := newClient()
	waitFor(t, "ready", 5*time.Second, func() bool { return getJSON(t, c, url+"/health", nil) == 200 })
	c.CloseIdleConnections()
	if err := f.Crash(0, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	squatter, err := net.Listen("tcp", f.Addrs()[0])
	if err != nil {
		t.Fatalf("the crashed instance's address: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // past the downtime: the first restart finds it taken
	if err := squatter.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "restarted once its address was free", 5*time.Second, func() bool {
		resp, err := c.Get(url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}
