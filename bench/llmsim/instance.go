package llmsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"
)

// Version is reported by GET /api/version.
const Version = "llmsim-0.2.0"

// Response headers the simulator sets.
const (
	// CacheHeader is "miss" (no prompt block was cached: a full cache miss, the signal to
	// drop a stale affinity hint), "partial" or "hit" (every cacheable block was cached).
	CacheHeader = "X-Llmsim-Cache"
	// CachedTokensHeader carries the cached prompt tokens (as in usage).
	CachedTokensHeader = "X-Llmsim-Cached-Tokens"
	// InstanceHeader carries the instance's worker id on every response.
	InstanceHeader = "X-Llmsim-Instance"
)

// Stats is an instance's accounting, as served by GET /llmsim/stats. Counters
// are cumulative since the fleet started (crashes do not reset them); Running and Waiting
// are current.
type Stats struct {
	// Requests counts inference requests received (/v1/chat/completions, /v1/completions,
	// /v1/responses, /v1/messages, /v1/embeddings, /power/v1/prefill/execute,
	// /power/v1/decode/execute), any outcome.
	Requests int64 `json:"requests"`
	// PromptTokens sums the prompt tokens of admitted requests.
	PromptTokens int64 `json:"prompt_tokens"`
	// CachedTokens sums the prompt tokens found in the KV cache (or carried by a P/D source).
	CachedTokens int64 `json:"cached_tokens"`
	// FullMisses counts admitted requests whose prompt had no cached block.
	FullMisses int64 `json:"full_misses"`
	// Aborted counts requests whose client left (or that were aborted) before the end.
	Aborted int64 `json:"aborted"`
	// OpenConnections is the number of client connections now open.
	OpenConnections int64 `json:"open_connections"`
	// Calls counts worker protocol calls by kind.
	Calls Calls `json:"calls"`
	// CompletionTokens counts output tokens generated (aborted requests included, so a test
	// can see generation stop).
	CompletionTokens int64 `json:"completion_tokens"`
	// Completed counts requests answered in full.
	Completed int64 `json:"completed"`
	// Rejected counts requests refused by a full waiting queue.
	Rejected int64 `json:"rejected"`
	// Faults counts requests that had a fault injected (header or rate).
	Faults int64 `json:"faults"`
	// Running and Waiting are the sequences running and queued now.
	Running int64 `json:"running"`
	Waiting int64 `json:"waiting"`
	// Epoch counts restarts (0 before the first crash).
	Epoch int64 `json:"epoch"`
	// KVBlocksUsed is the number of KV cache blocks in use.
	KVBlocksUsed int64 `json:"kv_blocks_used"`
}

// Calls counts Power protocol calls by endpoint.
type Calls struct {
	Observation  int64 `json:"observation"`
	Prepare      int64 `json:"prepare"`
	PrepareBatch int64 `json:"prepare_batch"`
	Prefill      int64 `json:"prefill"`
	Decode       int64 `json:"decode"`
	Abort        int64 `json:"abort"`
}

type counters struct {
	requests, promptTokens, cachedTokens, fullMisses, aborted, openConns atomic.Int64
	completionTokens, completed, rejected, faults                        atomic.Int64
	observation, prepare, prepareBatch, prefill, decode, abort           atomic.Int64
}

// instance is one simulated server.
type instance struct {
	idx   int
	cfg   InstanceConfig
	fleet *Fleet
	cache *kvCache
	sched *scheduler
	st    counters
	fault Fault // the fault applied at cfg.FaultRate

	readyAt atomic.Int64 // unix ns
	epoch   atomic.Int64
	seq     atomic.Uint64
	active  atomic.Int64 // handlers running (Close waits for 0)

	rngMu sync.Mutex
	rng   rng

	mu    sync.Mutex
	addr  string
	srv   *http.Server
	down  bool
	execs map[string]*execution // by execution_id, for /power/v1/abort
	resv  map[string]*reservation
	calls callLog
}

func newInstance(f *Fleet, idx int, cfg InstanceConfig) *instance {
	in := &instance{
		idx: idx, cfg: cfg, fleet: f,
		cache: newKVCache(cfg.Blocks),
		sched: newScheduler(cfg.MaxRunning, cfg.MaxWaiting),
		fault: noFault,
		rng:   rng(f.seed ^ uint64(idx+1)*0x9e3779b97f4a7c15),
		execs: make(map[string]*execution),
		resv:  make(map[string]*reservation),
	}
	if cfg.Fault != "" {
		in.fault, _ = ParseFault(cfg.Fault) // validated by resolve
	}
	return in
}

// start listens on addr (the configured address, or the one first bound on restart).
func (in *instance) start(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("llmsim: instance %d: %w", in.idx, err)
	}
	srv := &http.Server{
		Handler:           in,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    1 << 20,
		ConnState:         in.connState,
		ErrorLog:          nil,
	}
	in.readyAt.Store(time.Now().Add(in.cfg.StartupDelay.D()).UnixNano())
	in.mu.Lock()
	select {
	case <-in.fleet.done:
		in.mu.Unlock()
		ln.Close()
		return errors.New("llmsim: fleet closed")
	default:
	}
	if in.cfg.WorkerID == "" {
		in.cfg.WorkerID = "llmsim-" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	}
	in.addr = ln.Addr().String()
	in.srv = srv
	in.down = false
	in.mu.Unlock()
	go srv.Serve(ln)
	return nil
}

// stop closes the listener and every connection (handlers see their contexts end).
func (in *instance) stop() {
	in.mu.Lock()
	srv := in.srv
	in.srv = nil
	in.down = true
	in.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// crash stops the instance and loses its state: KV cache, reservations; epoch+1.
func (in *instance) crash() {
	in.stop()
	in.epoch.Add(1)
	in.cache.reset()
	in.mu.Lock()
	clear(in.resv)
	in.mu.Unlock()
}

func (in *instance) connState(c net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		in.st.openConns.Add(1)
	case http.StateClosed, http.StateHijacked:
		in.st.openConns.Add(-1)
	}
}

func (in *instance) ready() bool { return time.Now().UnixNano() >= in.readyAt.Load() }

// stats snapshots the counters.
func (in *instance) stats() Stats {
	s := &in.st
	used, _, _ := in.cache.usage()
	return Stats{
		Requests: s.requests.Load(), PromptTokens: s.promptTokens.Load(),
		CachedTokens: s.cachedTokens.Load(), FullMisses: s.fullMisses.Load(),
		Aborted: s.aborted.Load(), OpenConnections: s.openConns.Load(),
		Calls: Calls{
			Observation: s.observation.Load(), Prepare: s.prepare.Load(),
			PrepareBatch: s.prepareBatch.Load(), Prefill: s.prefill.Load(),
			Decode: s.decode.Load(), Abort: s.abort.Load(),
		},
		CompletionTokens: s.completionTokens.Load(), Completed: s.completed.Load(),
		Rejected: s.rejected.Load(), Faults: s.faults.Load(),
		Running: in.sched.running.Load(), Waiting: in.sched.waiting.Load(),
		Epoch: in.epoch.Load(), KVBlocksUsed: int64(used),
	}
}

// randomFault draws the instance's fault at its configured rate.
func (in *instance) randomFault() Fault {
	if in.cfg.FaultRate <= 0 {
		return noFault
	}
	in.rngMu.Lock()
	hit := in.rng.float() < in.cfg.FaultRate
	in.rngMu.Unlock()
	if hit {
		return in.fault
	}
	return noFault
}

// ServeHTTP routes the OpenAI, Anthropic, health, stats, metrics and worker endpoints.
func (in *instance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in.active.Add(1)
	defer in.active.Add(-1)
	w.Header().Set(InstanceHeader, in.cfg.WorkerID)
	path := r.URL.Path
	switch path {
	case "/v1/chat/completions":
		in.post(w, r, in.handleChat)
	case "/v1/completions":
		in.post(w, r, in.handleCompletion)
	case "/v1/embeddings":
		in.post(w, r, in.handleEmbeddings)
	case "/v1/responses":
		in.post(w, r, in.handleResponses)
	case "/v1/messages":
		in.postAs(w, r, in.handleMessages, writeAnthropicError)
	case "/v1/models":
		in.get(w, r, in.handleModels)
	case "/health":
		in.get(w, r, in.handleHealth)
	case "/api/version":
		in.get(w, r, func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, []byte(`{"version":"`+Version+`"}`))
		})
	case "/metrics":
		in.get(w, r, in.handleMetrics)
	case "/llmsim/stats":
		in.get(w, r, func(w http.ResponseWriter, r *http.Request) {
			b, _ := json.Marshal(in.stats())
			writeJSON(w, b)
		})
	case "/llmsim/calls":
		in.get(w, r, func(w http.ResponseWriter, r *http.Request) {
			b, _ := json.Marshal(in.calls.snapshot())
			writeJSON(w, b)
		})
	case "/power/v1/observation":
		in.get(w, r, in.worker(in.handleObservation))
	case "/power/v1/decode/prepare":
		in.post(w, r, in.worker(in.handlePrepare))
	case "/power/v1/decode/prepare:batch":
		in.post(w, r, in.worker(in.handlePrepareBatch))
	case "/power/v1/prefill/execute":
		in.post(w, r, in.worker(in.handlePrefill))
	case "/power/v1/decode/execute":
		in.post(w, r, in.worker(in.handleDecode))
	case "/power/v1/abort":
		in.post(w, r, in.worker(in.handleAbort))
	default:
		if id, ok := strings.CutPrefix(path, "/v1/models/"); ok && id != "" {
			in.get(w, r, func(w http.ResponseWriter, r *http.Request) { in.handleModel(w, id) })
			return
		}
		writeError(w, http.StatusNotFound, "no route for "+strconv.Quote(path), "", "not_found")
	}
}

func (in *instance) post(w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	in.postAs(w, r, h, writeError)
}

// postAs is post for an API whose errors have another shape (errf).
func (in *instance) postAs(w http.ResponseWriter, r *http.Request, h http.HandlerFunc, errf errorWriter) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		errf(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed; use POST", "", "method_not_allowed")
		return
	}
	h(w, r)
}

func (in *instance) get(w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed; use GET", "", "method_not_allowed")
		return
	}
	h(w, r)
}

func (in *instance) handleHealth(w http.ResponseWriter, r *http.Request) {
	if !in.ready() {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"status":"starting"}`))
		return
	}
	writeJSON(w, []byte(`{"status":"ok"}`))
}

func (in *instance) handleModels(w http.ResponseWriter, r *http.Request) {
	models := in.cfg.Models
	if len(models) == 0 {
		models = []string{"llmsim"}
	}
	b := []byte(`{"object":"list","data":[`)
	for i, m := range models {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendModel(b, m, in.cfg.MaxModelLen)
	}
	b = append(b, "]}"...)
	writeJSON(w, b)
}

// handleModel serves GET /v1/models/{id}: the model object, or 404 model_not_found for a
// model the instance does not serve (any id when no models are configured).
func (in *instance) handleModel(w http.ResponseWriter, id string) {
	if !in.modelKnown(id) {
		writeError(w, http.StatusNotFound, "The model `"+id+"` does not exist.", "model", "model_not_found")
		return
	}
	writeJSON(w, appendModel(nil, id, in.cfg.MaxModelLen))
}

// appendModel appends one model object: OpenAI's fields plus vLLM's root and max_model_len
// (the context window in tokens, left out when the instance has none).
func appendModel(b []byte, id string, maxModelLen int) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"object":"model","created":1700000000,"owned_by":"llmsim","root":`...)
	b = appendJSONString(b, id)
	if maxModelLen > 0 {
		b = append(b, `,"max_model_len":`...)
		b = strconv.AppendInt(b, int64(maxModelLen), 10)
	}
	return append(b, '}')
}

// modelKnown reports whether the instance serves model (any model when none configured).
func (in *instance) modelKnown(model string) bool {
	if len(in.cfg.Models) == 0 {
		return true
	}
	for _, m := range in.cfg.Models {
		if m == model {
			return true
		}
	}
	return false
}

// readBody reads a JSON request body of at most maxRequestBodyBytes; on error it has
// answered (413 or 400) and returns false.
func readBody(w http.ResponseWriter, r *http.Request, dst any) bool {
	return readBodyAs(w, r, dst, writeError)
}

// readBodyAs is readBody answering errors with errf.
func readBodyAs(w http.ResponseWriter, r *http.Request, dst any, errf errorWriter) bool {
	body, err := readAllLimited(w, r)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			errf(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", mbe.Limit), "", "body_too_large")
		} else {
			errf(w, http.StatusBadRequest, "cannot read request body: "+err.Error(), "", "bad_body")
		}
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		errf(w, http.StatusBadRequest, "request body is empty: want a JSON object", "", "invalid_json")
		return false
	}
	if err := json.Unmarshal(body, dst); err != nil {
		var we *wholeIntError
		if errors.As(err, &we) {
			if field := fieldHolding(body, we.raw); field != "" {
				errf(w, http.StatusBadRequest, field+": "+we.reason, field, "invalid_type")
				return false
			}
		}
		msg := err.Error()
		if strings.Contains(msg, "'\x00'") {
			// go-json reads a NUL sentinel past the end of its input: the body was cut short.
			msg = "unexpected end of JSON input"
		}
		errf(w, http.StatusBadRequest, "cannot parse request JSON: "+msg, "", "invalid_json")
		return false
	}
	return true
}

func readAllLimited(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBodyBytes))
}

// contextDone reports whether ctx has ended.
func contextDone(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}
