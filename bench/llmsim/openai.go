package llmsim

import (
	"math"
	"net/http"
	"strconv"
	"time"

	json "github.com/goccy/go-json"
)

// requestFault parses x-llmsim-fault and merges the instance's random fault; on a bad header
// it answers 400 and returns false. A status fault is answered here too (false).
func (in *instance) requestFault(w http.ResponseWriter, r *http.Request) (Fault, bool) {
	f := noFault
	if v := r.Header.Get(FaultHeader); v != "" {
		var err error
		if f, err = ParseFault(v); err != nil {
			writeError(w, http.StatusBadRequest, err.Error(), FaultHeader, "invalid_fault")
			return f, false
		}
	}
	f = f.merge(in.randomFault())
	if f.active() {
		in.st.faults.Add(1)
	}
	if f.Status != 0 {
		writeError(w, f.Status, "llmsim: injected fault status="+strconv.Itoa(f.Status), "", "injected_fault")
		return f, false
	}
	return f, true
}

// checkServing answers 503 while the instance is starting up.
func (in *instance) checkServing(w http.ResponseWriter) bool {
	if in.ready() {
		return true
	}
	writeError(w, http.StatusServiceUnavailable, "llmsim: instance "+in.cfg.WorkerID+" is starting", "", "not_ready")
	return false
}

// outputCap validates max_completion_tokens / max_tokens (the former wins, as in OpenAI's
// API) and returns the cap (0: none).
func outputCap(req *inferRequest) (int, string) {
	if v := req.MaxCompletionTokens; v != nil {
		if *v < 1 {
			return 0, "max_completion_tokens"
		}
		return *v, ""
	}
	if v := req.MaxTokens; v != nil {
		if *v < 1 {
			return 0, "max_tokens"
		}
		return *v, ""
	}
	return 0, ""
}

// validateGeneration checks the fields chat and completions share; on error it answers.
func (in *instance) validateGeneration(w http.ResponseWriter, req *inferRequest, p *genParams) bool {
	if req.Model == "" {
		writeError(w, http.StatusBadRequest, "model is required", "model", "missing_model")
		return false
	}
	if !in.modelKnown(req.Model) {
		writeError(w, http.StatusNotFound, "The model `"+req.Model+"` does not exist.", "model", "model_not_found")
		return false
	}
	if req.N != nil && *req.N != 1 {
		writeError(w, http.StatusBadRequest, "llmsim supports only n=1", "n", "unsupported_n")
		return false
	}
	capTok, bad := outputCap(req)
	if bad != "" {
		writeError(w, http.StatusBadRequest, bad+" must be at least 1", bad, "invalid_value")
		return false
	}
	if req.StreamOptions != nil && !req.Stream {
		writeError(w, http.StatusBadRequest, "stream_options is only allowed with stream=true", "stream_options", "invalid_value")
		return false
	}
	p.model = req.Model
	p.stream = req.Stream
	p.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	p.maxTokens = capTok
	p.reqSeed = req.Seed
	p.salt = req.CacheSalt
	return true
}

// handleChat serves POST /v1/chat/completions.
func (in *instance) handleChat(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	in.st.requests.Add(1)
	var req inferRequest
	if !readBody(w, r, &req) {
		return
	}
	f, ok := in.requestFault(w, r)
	if !ok || !in.checkServing(w) {
		return
	}
	p := genParams{kind: kindChat, fault: f, arrival: arrival}
	if !in.validateGeneration(w, &req, &p) {
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "messages must be a non-empty array", "messages", "invalid_value")
		return
	}
	for i := range req.Messages {
		if req.Messages[i].Role == "" {
			writeError(w, http.StatusBadRequest, "messages["+strconv.Itoa(i)+"].role is required", "messages", "invalid_value")
			return
		}
	}
	prompt := appendChatPrompt(make([]byte, 0, 1024), req.Messages, req.Tools)
	in.serveGeneration(w, r, &p, prompt)
}

// handleCompletion serves POST /v1/completions (prompt: a string or an array of strings).
func (in *instance) handleCompletion(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	in.st.requests.Add(1)
	var req inferRequest
	if !readBody(w, r, &req) {
		return
	}
	f, ok := in.requestFault(w, r)
	if !ok || !in.checkServing(w) {
		return
	}
	p := genParams{kind: kindCompletion, fault: f, arrival: arrival}
	if !in.validateGeneration(w, &req, &p) {
		return
	}
	prompt, ok := appendTextInput(make([]byte, 0, 1024), req.Prompt)
	if !ok {
		writeError(w, http.StatusBadRequest, "prompt must be a non-empty string or array of strings", "prompt", "invalid_value")
		return
	}
	in.serveGeneration(w, r, &p, prompt)
}

// handleEmbeddings serves POST /v1/embeddings: deterministic unit vectors of "dimensions"
// (default EmbeddingDims) floats per input, after TTFT + PerUncachedToken × tokens.
func (in *instance) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	in.st.requests.Add(1)
	var req inferRequest
	if !readBody(w, r, &req) {
		return
	}
	f, ok := in.requestFault(w, r)
	if !ok || !in.checkServing(w) {
		return
	}
	if req.Model == "" || !in.modelKnown(req.Model) {
		writeError(w, http.StatusNotFound, "The model `"+req.Model+"` does not exist.", "model", "model_not_found")
		return
	}
	dims := in.cfg.EmbeddingDims
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > 65536 {
			writeError(w, http.StatusBadRequest, "dimensions must be within [1, 65536]", "dimensions", "invalid_value")
			return
		}
		dims = *req.Dimensions
	}
	var inputs []string
	if len(req.Input) > 0 && req.Input[0] == '[' {
		if err := json.Unmarshal(req.Input, &inputs); err != nil {
			inputs = []string{string(req.Input)} // token arrays: embed their JSON text
		}
	} else if text, ok := appendTextInput(nil, req.Input); ok {
		inputs = []string{string(text)}
	}
	if len(inputs) == 0 {
		writeError(w, http.StatusBadRequest, "input must be a non-empty string or array", "input", "invalid_value")
		return
	}
	start, ok := in.admit(w, r.Context(), arrival)
	if !ok {
		return
	}
	defer in.sched.release()
	tokens := 0
	for _, s := range inputs {
		tokens += CountTokens(len(s))
	}
	in.st.promptTokens.Add(int64(tokens))
	g := jobPool.Get().(*job)
	defer jobPool.Put(g)
	g.ctx = r.Context()
	delay := in.cfg.TTFT.D() + in.cfg.PerUncachedToken.D()*time.Duration(tokens) + f.Slow
	ok = g.sleepUntil(start.Add(delay))
	g.ctx = nil
	if !ok {
		in.st.aborted.Add(1)
		return
	}
	b := make([]byte, 0, 64+len(inputs)*dims*12)
	b = append(b, `{"object":"list","data":[`...)
	for i, s := range inputs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":[`...)
		b = appendEmbedding(b, rng(in.fleet.seed^promptHash([]byte(s))), dims)
		b = append(b, "]}"...)
	}
	b = append(b, `],"model":`...)
	b = appendJSONString(b, req.Model)
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(tokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(tokens), 10)
	b = append(b, "}}\n"...)
	in.st.completed.Add(1)
	writeJSON(w, b)
}

// appendEmbedding appends dims comma-separated floats of a deterministic unit vector.
func appendEmbedding(b []byte, rg rng, dims int) []byte {
	vals := make([]float64, dims)
	var norm float64
	for i := range vals {
		v := rg.float()*2 - 1
		vals[i] = v
		norm += v * v
	}
	norm = math.Sqrt(norm)
	if norm == 0 {
		norm = 1
	}
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, v/norm, 'g', 7, 32)
	}
	return b
}
