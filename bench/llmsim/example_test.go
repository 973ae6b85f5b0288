package llmsim_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-gw/sluice/bench/llmsim"
)

// Start a two-instance fleet on free ports with fast timings, stream from it, and read what
// the instance saw.
func ExampleStart() {
	cfg := llmsim.DefaultConfig()
	cfg.Instances = 2
	cfg.Defaults.TTFT = llmsim.Duration(5 * time.Millisecond)
	cfg.Defaults.ITL = llmsim.Duration(time.Millisecond)
	cfg.Defaults.Tokens = 4
	fleet, err := llmsim.Start(cfg)
	if err != nil {
		panic(err)
	}
	defer fleet.Close()

	resp, err := http.Post("http://"+fleet.Addrs()[0]+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	st := fleet.Stats(0)
	fmt.Println(resp.Header.Get("Content-Type"), strings.Count(string(body), "data: "), st.Requests, st.CompletionTokens)
	// Output: text/event-stream 6 1 4
}
