package llmsim

import (
	"context"
	"testing"
	"time"
)

func TestClientDisconnectMidStreamStopsGeneration(t *testing.T) {
	const itl = 20 * time.Millisecond
	f, url := startOne(t, func(ic *InstanceConfig) {
		ic.ITL = Duration(itl)
		ic.Tokens = 1000
	})
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, newClient(), url+"/v1/chat/completions", chatBody("x", true, ""), nil)
	got := make(chan struct{}, 1000)
	go readEvents(resp.Body, func(sseEvent) { got <- struct{}{} })
	for range 3 {
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
		}
	}
	cancel()
	resp.Body.Close()
	// The abort is counted before the slot is given back: wait for both.
	waitFor(t, "aborted counted and its slot given back", 5*time.Second, func() bool {
		st := f.Stats(0)
		return st.Aborted == 1 && st.Running == 0
	})
	st := f.Stats(0)
	// Generation stopped: no token is produced during the next 5 ITLs.
	tokens := st.CompletionTokens
	time.Sleep(5 * itl) // the window in which no token may come: what is under test
	if now := f.Stats(0).CompletionTokens; now != tokens {
		t.Fatalf("generated %d tokens after the abort", now-tokens)
	}
	if tokens >= 100 {
		t.Fatalf("%d tokens generated for a stream cancelled after 3", tokens)
	}
}

func TestClientDisconnectDuringPrefill(t *testing.T) {
	f, url := startOne(t, func(ic *InstanceConfig) { ic.TTFT = Duration(10 * time.Second) })
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, newClient(), url+"/v1/chat/completions", chatBody("x", true, ""), nil)
	waitFor(t, "running", 5*time.Second, func() bool { return f.Stats(0).Running == 1 })
	cancel()
	resp.Body.Close()
	start := time.Now()
	waitFor(t, "aborted during prefill", 5*time.Second, func() bool { return f.Stats(0).Aborted == 1 && f.Stats(0).Running == 0 })
	if d := time.Since(start); d > time.Second {
		t.Fatalf("abort noticed after %v", d)
	}
	if st := f.Stats(0); st.CompletionTokens != 0 {
		t.Fatalf("tokens generated: %+v", st)
	}
}
