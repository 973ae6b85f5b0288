package llmsim

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"
)

// The Power worker protocol. Handles are opaque JSON objects
// {"llmsim":"<base64url claims>.<base64url HMAC-SHA256>"}, keyed by the fleet seed and API
// key, so a decode worker can refuse a handle that was forged, made for another worker, for
// another deployment generation or a previous epoch (before a crash), or already used.

// execution is a registered in-flight prefill or decode, cancellable by /power/v1/abort.
type execution struct{ cancel context.CancelFunc }

// reservation is decode state reserved by /power/v1/decode/prepare.
type reservation struct {
	execution string
	expires   time.Time
}

// handleClaims is the signed content of a target (decode/prepare) or source
// (prefill/execute) handle.
type handleClaims struct {
	Kind         string `json:"k"`           // "target" or "source"
	Decode       string `json:"d"`           // decode worker id
	DecodeEpoch  int64  `json:"de"`          // decode worker epoch at prepare
	Generation   int64  `json:"g"`           // deployment generation of the issuer
	Reservation  string `json:"r"`           // reservation id on the decode worker
	Execution    string `json:"x"`           // execution_id
	ExpiresMs    int64  `json:"exp"`         // unix ms
	Prefill      string `json:"p,omitempty"` // source: prefill worker id
	PromptHash   uint64 `json:"h,omitempty"` // source: hash of the prefilled prompt
	PromptTokens int    `json:"n,omitempty"` // source: prompt tokens
	Cached       int    `json:"c,omitempty"` // source: prompt tokens the prefill found cached
}

// errHandle is a handle that is malformed or not signed by this fleet (400); errStale is a
// genuine handle this worker refuses (409).
var (
	errHandle = errors.New("invalid handle")
	errStale  = errors.New("stale handle")
)

func handleKey(seed uint64, apiKey string) []byte {
	h := sha256.New()
	h.Write([]byte("llmsim-handle-v1\x00"))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(apiKey))
	return h.Sum(nil)
}

func (f *Fleet) signHandle(c *handleClaims) json.RawMessage {
	payload, _ := json.Marshal(c)
	mac := hmac.New(sha256.New, f.key)
	mac.Write(payload)
	enc := base64.RawURLEncoding
	tok := enc.EncodeToString(payload) + "." + enc.EncodeToString(mac.Sum(nil))
	return json.RawMessage(`{"llmsim":"` + tok + `"}`)
}

func (f *Fleet) openHandle(raw json.RawMessage, kind string) (*handleClaims, error) {
	var wrap struct {
		Token string `json:"llmsim"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &wrap) != nil || wrap.Token == "" {
		return nil, errHandle
	}
	p64, m64, ok := strings.Cut(wrap.Token, ".")
	if !ok {
		return nil, errHandle
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p64)
	sum, err2 := enc.DecodeString(m64)
	if err1 != nil || err2 != nil {
		return nil, errHandle
	}
	mac := hmac.New(sha256.New, f.key)
	mac.Write(payload)
	if !hmac.Equal(sum, mac.Sum(nil)) {
		return nil, errHandle
	}
	var c handleClaims
	if json.Unmarshal(payload, &c) != nil || c.Kind != kind {
		return nil, errHandle
	}
	if time.Now().UnixMilli() > c.ExpiresMs {
		return nil, errStale
	}
	return &c, nil
}

// worker wraps a protocol handler with the bearer key check (401 when the fleet has an API
// key and the request does not carry it as Authorization: Bearer).
func (in *instance) worker(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if key := in.fleet.cfg.APIKey; key != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(key)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="llmsim"`)
				writeError(w, http.StatusUnauthorized, "missing or wrong bearer key", "", "invalid_api_key")
				return
			}
		}
		h(w, r)
	}
}

func (in *instance) registerExec(id string, cancel context.CancelFunc) *execution {
	ex := &execution{cancel: cancel}
	in.mu.Lock()
	in.execs[id] = ex
	in.mu.Unlock()
	return ex
}

func (in *instance) unregisterExec(id string, ex *execution) {
	in.mu.Lock()
	if in.execs[id] == ex {
		delete(in.execs, id)
	}
	in.mu.Unlock()
}

func (in *instance) roleAllows(w http.ResponseWriter, want Role) bool {
	if in.cfg.Role == want || in.cfg.Role == RoleAggregated {
		return true
	}
	writeError(w, http.StatusConflict, "worker "+in.cfg.WorkerID+" has role "+string(in.cfg.Role)+", not "+string(want), "", "wrong_role")
	return false
}

// handleObservation serves GET /power/v1/observation.
func (in *instance) handleObservation(w http.ResponseWriter, r *http.Request) {
	in.st.observation.Add(1)
	b := make([]byte, 0, 320)
	b = append(b, `{"worker_id":`...)
	b = appendJSONString(b, in.cfg.WorkerID)
	b = append(b, `,"role":`...)
	b = appendJSONString(b, string(in.cfg.Role))
	b = append(b, `,"ready":`...)
	b = strconv.AppendBool(b, in.ready())
	b = append(b, `,"healthy":true,"active":`...)
	b = strconv.AppendInt(b, in.sched.running.Load(), 10)
	b = append(b, `,"max_active":`...)
	b = strconv.AppendInt(b, int64(in.cfg.MaxRunning), 10)
	b = append(b, `,"waiting":`...)
	b = strconv.AppendInt(b, in.sched.waiting.Load(), 10)
	b = append(b, `,"state_transfer":`...)
	b = strconv.AppendBool(b, in.cfg.Role != RoleAggregated)
	b = append(b, `,"execution_config_digest":`...)
	b = appendJSONStringOrNull(b, in.cfg.Digest)
	b = append(b, `,"deployment_generation":`...)
	b = strconv.AppendInt(b, in.cfg.Generation, 10)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendInt(b, in.epoch.Load(), 10)
	b = append(b, `,"observed_at":`...)
	b = appendJSONString(b, time.Now().UTC().Format(time.RFC3339Nano))
	b = append(b, "}\n"...)
	writeJSON(w, b)
}

type prepareItem struct {
	ExecutionID string          `json:"execution_id"`
	Request     json.RawMessage `json:"request"`
}

// prepare reserves decode state for one execution; status 0 means ok.
func (in *instance) prepare(it *prepareItem) (json.RawMessage, int, string) {
	if it.ExecutionID == "" {
		return nil, http.StatusBadRequest, "execution_id is required"
	}
	now := time.Now()
	in.mu.Lock()
	if len(in.resv) >= in.cfg.MaxRunning+in.cfg.MaxWaiting {
		for id, rv := range in.resv {
			if now.After(rv.expires) {
				delete(in.resv, id)
			}
		}
	}
	if len(in.resv) >= in.cfg.MaxRunning+in.cfg.MaxWaiting {
		in.mu.Unlock()
		return nil, http.StatusServiceUnavailable, "no decode capacity left to reserve"
	}
	id := strconv.FormatUint(in.seq.Add(1), 36)
	rv := &reservation{execution: it.ExecutionID, expires: now.Add(in.cfg.PrepareTTL.D())}
	in.resv[id] = rv
	in.mu.Unlock()
	c := handleClaims{
		Kind: "target", Decode: in.cfg.WorkerID, DecodeEpoch: in.epoch.Load(),
		Generation: in.cfg.Generation, Reservation: id, Execution: it.ExecutionID,
		ExpiresMs: rv.expires.UnixMilli(),
	}
	return in.fleet.signHandle(&c), 0, ""
}

// handlePrepare serves POST /power/v1/decode/prepare → {"target": handle}.
func (in *instance) handlePrepare(w http.ResponseWriter, r *http.Request) {
	in.st.prepare.Add(1)
	var it prepareItem
	if !readBody(w, r, &it) || !in.roleAllows(w, RoleDecode) || !in.checkServing(w, writeError) {
		return
	}
	in.calls.add(Call{Call: "prepare", ExecutionID: it.ExecutionID, At: time.Now()})
	t, status, msg := in.prepare(&it)
	if status != 0 {
		writeError(w, status, msg, "", "prepare_failed")
		return
	}
	writeJSON(w, append(append([]byte(`{"target":`), t...), "}\n"...))
}

// handlePrepareBatch serves POST /power/v1/decode/prepare:batch {items:[…]} →
// {"items":[{"target":handle} | {"error":{…}}]} in request order.
func (in *instance) handlePrepareBatch(w http.ResponseWriter, r *http.Request) {
	in.st.prepareBatch.Add(1)
	var req struct {
		Items []prepareItem `json:"items"`
	}
	if !readBody(w, r, &req) || !in.roleAllows(w, RoleDecode) || !in.checkServing(w, writeError) {
		return
	}
	if len(req.Items) == 0 || len(req.Items) > 1024 {
		writeError(w, http.StatusBadRequest, "items must hold 1..1024 entries", "items", "invalid_value")
		return
	}
	b := []byte(`{"items":[`)
	for i := range req.Items {
		if i > 0 {
			b = append(b, ',')
		}
		in.calls.add(Call{Call: "prepare", ExecutionID: req.Items[i].ExecutionID, At: time.Now(), Batch: len(req.Items)})
		t, status, msg := in.prepare(&req.Items[i])
		if status != 0 {
			b = append(b, `{"error":{"message":`...)
			b = appendJSONString(b, msg)
			b = append(b, `,"type":`...)
			b = appendJSONString(b, errorType(status))
			b = append(b, `,"param":null,"code":"prepare_failed","status":`...)
			b = strconv.AppendInt(b, int64(status), 10)
			b = append(b, "}}"...)
			continue
		}
		b = append(b, `{"target":`...)
		b = append(b, t...)
		b = append(b, '}')
	}
	writeJSON(w, append(b, "]}\n"...))
}

type executeRequest struct {
	ExecutionID    string          `json:"execution_id"`
	Request        json.RawMessage `json:"request"`
	Target         json.RawMessage `json:"target"`
	Source         json.RawMessage `json:"source"`
	PromptCacheKey string          `json:"prompt_cache_key"`
}

// parseInner decodes the request a P/D call forwards (a chat completion request, or a
// completion request with a prompt), refuses what /v1/chat/completions (/v1/completions)
// refuses, with the same answer, the model aside (the workers serve whatever model the
// gateway names), the context window included, fills p's output parameters and serialises
// its prompt. On error it answers.
func (in *instance) parseInner(w http.ResponseWriter, raw json.RawMessage, p *genParams) (*inferRequest, []byte, bool) {
	var req inferRequest
	if len(raw) == 0 || json.Unmarshal(raw, &req) != nil {
		writeError(w, http.StatusBadRequest, "request must be a chat completion request object", "request", "invalid_value")
		return nil, nil, false
	}
	if checkGeneration(&req, p).answer(w, writeError) {
		return nil, nil, false
	}
	var prompt []byte
	if len(req.Messages) == 0 {
		var ok bool
		if prompt, ok = appendTextInput(nil, req.Prompt); !ok {
			writeError(w, http.StatusBadRequest, "request has no messages and no prompt", "request", "invalid_value")
			return nil, nil, false
		}
		if checkCompletionOnly(&req).answer(w, writeError) {
			return nil, nil, false
		}
		p.promptParam = "prompt"
	} else {
		if checkChatOnly(&req).answer(w, writeError) {
			return nil, nil, false
		}
		prompt = appendChatPrompt(make([]byte, 0, 1024), req.Messages, req.Tools)
		p.promptParam = "messages"
	}
	if in.checkWindow(CountTokens(len(prompt)), p).answer(w, writeError) {
		return nil, nil, false
	}
	return &req, prompt, true
}

func writeHandleError(w http.ResponseWriter, err error, param, msg string) {
	if errors.Is(err, errStale) {
		writeError(w, http.StatusConflict, msg, param, "stale_handle")
		return
	}
	writeError(w, http.StatusBadRequest, msg, param, "invalid_handle")
}

// handlePrefill serves POST /power/v1/prefill/execute {execution_id, request, target,
// prompt_cache_key?} → {"source": handle, "cached_tokens": N} after the modelled prefill time.
func (in *instance) handlePrefill(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	in.st.prefill.Add(1)
	in.st.requests.Add(1)
	var req executeRequest
	if !readBody(w, r, &req) || !in.roleAllows(w, RolePrefill) {
		return
	}
	var fwd struct {
		PromptCacheKey string `json:"prompt_cache_key"`
	}
	_ = json.Unmarshal(req.Request, &fwd)
	in.calls.add(Call{Call: "prefill", ExecutionID: req.ExecutionID, At: arrival, PromptCacheKey: req.PromptCacheKey, RequestCacheKey: fwd.PromptCacheKey})
	f, ok := in.requestFault(w, r, writeError)
	if !ok || !in.checkServing(w, writeError) {
		return
	}
	if req.ExecutionID == "" {
		writeError(w, http.StatusBadRequest, "execution_id is required", "execution_id", "invalid_value")
		return
	}
	tc, err := in.fleet.openHandle(req.Target, "target")
	if err != nil {
		writeHandleError(w, err, "target", "target handle refused: "+err.Error())
		return
	}
	switch {
	case tc.Generation != in.cfg.Generation:
		writeHandleError(w, errStale, "target", "target handle is for deployment generation "+strconv.FormatInt(tc.Generation, 10)+", this worker runs "+strconv.FormatInt(in.cfg.Generation, 10))
		return
	case tc.Execution != req.ExecutionID:
		writeHandleError(w, errHandle, "target", "target handle belongs to another execution")
		return
	}
	// The request is refused here already, before a prefill the decode worker would refuse.
	_, prompt, ok := in.parseInner(w, req.Request, &genParams{})
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ex := in.registerExec(req.ExecutionID, cancel)
	defer in.unregisterExec(req.ExecutionID, ex)
	start, ok := in.admit(w, ctx, arrival, writeError)
	if !ok {
		return
	}
	defer in.sched.release()
	g := jobPool.Get().(*job)
	defer jobPool.Put(g)
	promptTokens := CountTokens(len(prompt))
	var cached int
	g.hashes, cached = in.lookupPrefix(g.hashes, prompt, req.PromptCacheKey, promptTokens)
	in.st.promptTokens.Add(int64(promptTokens))
	in.st.cachedTokens.Add(int64(cached))
	if cached == 0 {
		in.st.fullMisses.Add(1)
	}
	g.ctx = ctx
	ok = g.sleepUntil(start.Add(in.cfg.TTFT.D() + in.cfg.PerUncachedToken.D()*time.Duration(promptTokens-cached) + f.Slow))
	g.ctx = nil
	if !ok {
		in.st.aborted.Add(1)
		return
	}
	in.cache.insert(g.hashes)
	sc := *tc
	sc.Kind, sc.Prefill = "source", in.cfg.WorkerID
	sc.Generation = in.cfg.Generation
	sc.PromptHash, sc.PromptTokens, sc.Cached = promptHash(prompt), promptTokens, cached
	b := append([]byte(`{"source":`), in.fleet.signHandle(&sc)...)
	b = append(b, `,"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(cached), 10)
	w.Header().Set(CacheHeader, cacheState(cached, max(promptTokens-1, 0)/in.cfg.BlockSize, in.cfg.BlockSize))
	in.st.completed.Add(1)
	writeJSON(w, append(b, "}\n"...))
}

// handleDecode serves POST /power/v1/decode/execute {execution_id, request, source} → an SSE
// stream of chat.completion.chunk events, after the KV transfer time instead of prefill.
func (in *instance) handleDecode(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	in.st.decode.Add(1)
	in.st.requests.Add(1)
	var req executeRequest
	if !readBody(w, r, &req) || !in.roleAllows(w, RoleDecode) {
		return
	}
	in.calls.add(Call{Call: "decode", ExecutionID: req.ExecutionID, At: arrival})
	f, ok := in.requestFault(w, r, writeError)
	if !ok || !in.checkServing(w, writeError) {
		return
	}
	sc, err := in.fleet.openHandle(req.Source, "source")
	if err != nil {
		writeHandleError(w, err, "source", "source handle refused: "+err.Error())
		return
	}
	p := genParams{enc: chatEnc, fault: f, executionID: req.ExecutionID, source: sc, arrival: arrival}
	inner, prompt, ok := in.parseInner(w, req.Request, &p)
	if !ok {
		return
	}
	switch {
	case sc.Decode != in.cfg.WorkerID:
		writeHandleError(w, errHandle, "source", "source handle targets worker "+sc.Decode+", not "+in.cfg.WorkerID)
		return
	case sc.Generation != in.cfg.Generation:
		writeHandleError(w, errStale, "source", "source handle comes from deployment generation "+strconv.FormatInt(sc.Generation, 10)+", this worker runs "+strconv.FormatInt(in.cfg.Generation, 10))
		return
	case sc.DecodeEpoch != in.epoch.Load():
		writeHandleError(w, errStale, "source", "source handle predates a restart of this worker")
		return
	case sc.Execution != req.ExecutionID:
		writeHandleError(w, errHandle, "source", "source handle belongs to another execution")
		return
	case sc.PromptHash != promptHash(prompt):
		writeHandleError(w, errHandle, "source", "source handle was prefilled for another prompt")
		return
	}
	in.mu.Lock()
	rv := in.resv[sc.Reservation]
	if rv != nil && rv.execution == sc.Execution {
		delete(in.resv, sc.Reservation)
	}
	in.mu.Unlock()
	if rv == nil || rv.execution != sc.Execution {
		writeHandleError(w, errStale, "source", "no decode reservation for this handle (used, aborted, expired or lost)")
		return
	}
	// The request's stream decides the shape, as on /v1/chat/completions (parseInner): a
	// gateway forwards the client's request, streamed or not.
	p.model = inner.Model
	if p.model == "" {
		p.model = "llmsim"
	}
	in.serveGeneration(w, r, &p, prompt)
}

// handleAbort serves POST /power/v1/abort {execution_id} → {"aborted": bool}: cancels a
// running prefill or decode of that execution and drops its reservations. Best effort.
func (in *instance) handleAbort(w http.ResponseWriter, r *http.Request) {
	in.st.abort.Add(1)
	var req struct {
		ExecutionID string `json:"execution_id"`
	}
	if !readBody(w, r, &req) {
		return
	}
	if req.ExecutionID == "" {
		writeError(w, http.StatusBadRequest, "execution_id is required", "execution_id", "invalid_value")
		return
	}
	in.calls.add(Call{Call: "abort", ExecutionID: req.ExecutionID, At: time.Now()})
	found := false
	in.mu.Lock()
	if ex := in.execs[req.ExecutionID]; ex != nil {
		ex.cancel()
		found = true
	}
	for id, rv := range in.resv {
		if rv.execution == req.ExecutionID {
			delete(in.resv, id)
			found = true
		}
	}
	in.mu.Unlock()
	writeJSON(w, []byte(`{"aborted":`+strconv.FormatBool(found)+"}\n"))
}
