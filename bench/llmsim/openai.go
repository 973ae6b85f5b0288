package llmsim

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"
)

// requestFault parses x-llmsim-fault and merges the instance's random fault; on a bad header
// it answers 400 with errf and returns false. A status fault is answered here too (false).
func (in *instance) requestFault(w http.ResponseWriter, r *http.Request, errf errorWriter) (Fault, bool) {
	f := noFault
	if v := r.Header.Get(FaultHeader); v != "" {
		var err error
		if f, err = ParseFault(v); err != nil {
			errf(w, http.StatusBadRequest, err.Error(), FaultHeader, "invalid_fault")
			return f, false
		}
	}
	f = f.merge(in.randomFault())
	if f.active() {
		in.st.faults.Add(1)
	}
	if f.Status != 0 {
		errf(w, f.Status, "llmsim: injected fault status="+strconv.Itoa(f.Status), "", "injected_fault")
		return f, false
	}
	return f, true
}

// checkServing answers 503 (with errf) while the instance is starting up.
func (in *instance) checkServing(w http.ResponseWriter, errf errorWriter) bool {
	if in.ready() {
		return true
	}
	errf(w, http.StatusServiceUnavailable, "llmsim: instance "+in.cfg.WorkerID+" is starting", "", "not_ready")
	return false
}

// acceptInference is the start every inference handler shares: count the request, read its
// JSON body into dst, apply the fault header and the startup delay. On false it has answered.
func (in *instance) acceptInference(w http.ResponseWriter, r *http.Request, dst any, errf errorWriter) (Fault, bool) {
	in.st.requests.Add(1)
	if !readBodyAs(w, r, dst, errf) {
		return noFault, false
	}
	f, ok := in.requestFault(w, r, errf)
	if !ok || !in.checkServing(w, errf) {
		return f, false
	}
	return f, true
}

// checkModel answers 400 for a missing model and 404 for one the instance does not serve.
func (in *instance) checkModel(w http.ResponseWriter, model string, errf errorWriter) bool {
	if model == "" {
		errf(w, http.StatusBadRequest, "model is required", "model", "missing_model")
		return false
	}
	if !in.modelKnown(model) {
		errf(w, http.StatusNotFound, "The model `"+model+"` does not exist.", "model", "model_not_found")
		return false
	}
	return true
}

// badRequest is a refused request field: the param it names, the message, the error code.
type badRequest struct{ param, msg, code string }

func invalid(param, msg string) *badRequest { return &badRequest{param, msg, "invalid_value"} }

func unsupported(param, msg string) *badRequest {
	return &badRequest{param, "llmsim does not support " + msg, "unsupported_parameter"}
}

// answer writes the 400 for b and reports whether there was one.
func (b *badRequest) answer(w http.ResponseWriter, errf errorWriter) bool {
	if b == nil {
		return false
	}
	errf(w, http.StatusBadRequest, b.msg, b.param, b.code)
	return true
}

// outputCap validates max_completion_tokens / max_tokens (the former wins, as in OpenAI's
// API) and returns the cap (0: none) with the field it came from.
func outputCap(req *inferRequest) (int, string, *badRequest) {
	if v := req.MaxCompletionTokens; v != nil {
		if *v < 1 {
			return 0, "", invalid("max_completion_tokens", "max_completion_tokens must be at least 1")
		}
		return int(*v), "max_completion_tokens", nil
	}
	if v := req.MaxTokens; v != nil {
		if *v < 1 {
			return 0, "", invalid("max_tokens", "max_tokens must be at least 1")
		}
		return int(*v), "max_tokens", nil
	}
	return 0, "", nil
}

// checkWindow refuses a generation that does not fit the context window (MaxModelLen
// tokens; 0: none), with vLLM's messages: a prompt of MaxModelLen tokens or more (no room
// for one output token), or a prompt plus the request's output cap (p.maxTokens, from the
// field p.capParam) over it. The configured output length (Tokens) is not counted: it is
// the simulated model's own end, not an amount the client asked for. The 400's param names
// the field to shorten, its code is context_length_exceeded (OpenAI's).
func (in *instance) checkWindow(promptTokens int, p *genParams) *badRequest {
	limit := in.cfg.MaxModelLen
	if limit <= 0 {
		return nil
	}
	window := "This model's maximum context length is " + strconv.Itoa(limit) + " tokens"
	if promptTokens >= limit {
		return &badRequest{p.promptParam, window + ". However, your request has " + strconv.Itoa(promptTokens) +
			" input tokens. Please reduce the length of the input messages.", "context_length_exceeded"}
	}
	if p.maxTokens > limit-promptTokens {
		return &badRequest{p.capParam, "'" + p.capParam + "' is too large: " + strconv.Itoa(p.maxTokens) + ". " + window +
			" and your request has " + strconv.Itoa(promptTokens) + " input tokens (" + strconv.Itoa(p.maxTokens) +
			" > " + strconv.Itoa(limit) + " - " + strconv.Itoa(promptTokens) + ").", "context_length_exceeded"}
	}
	return nil
}

// checkRange refuses a number outside [lo, hi].
func checkRange(param string, v *float64, lo, hi float64) *badRequest {
	if v == nil || (*v >= lo && *v <= hi) {
		return nil
	}
	return invalid(param, param+" must be within ["+strconv.FormatFloat(lo, 'g', -1, 64)+", "+strconv.FormatFloat(hi, 'g', -1, 64)+"]")
}

// parseStops reads stop sequences: null, a string, or an array of at most maxN strings
// (maxN 0: any number); an empty sequence is refused (it would match before any output).
func parseStops(param string, raw json.RawMessage, maxN int) ([]string, *badRequest) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var stops []string
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, invalid(param, param+" must be a string or an array of strings")
		}
		stops = []string{s}
	} else if json.Unmarshal(raw, &stops) != nil {
		return nil, invalid(param, param+" must be a string or an array of strings")
	}
	if maxN > 0 && len(stops) > maxN {
		return nil, invalid(param, param+" holds at most "+strconv.Itoa(maxN)+" sequences")
	}
	for _, s := range stops {
		if s == "" {
			return nil, invalid(param, param+" sequences must not be empty")
		}
	}
	return stops, nil
}

// isNullish reports whether raw is absent, null or false.
func isNullish(raw json.RawMessage) bool {
	s := string(raw)
	return s == "" || s == "null" || s == "false"
}

// checkToolChoice refuses a tool choice that forces a tool call: the simulator never calls
// tools, so only "none" and "auto" can be honoured.
func checkToolChoice(param string, raw json.RawMessage) *badRequest {
	switch strings.TrimSpace(string(raw)) {
	case "", "null", `"none"`, `"auto"`:
		return nil
	}
	return unsupported(param, "forcing a tool call ("+param+" other than \"none\" or \"auto\"): it never calls tools")
}

// checkTextFormat refuses a structured output format: the simulator's text is not JSON.
func checkTextFormat(param string, raw json.RawMessage) *badRequest {
	if isNullish(raw) {
		return nil
	}
	var f struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &f) != nil {
		return invalid(param, param+" must be an object with a type")
	}
	if f.Type == "text" {
		return nil
	}
	return unsupported(param, param+" type "+strconv.Quote(f.Type)+": its output is plain text")
}

// checkSampling validates the sampling fields chat and completions share. They do not change
// the output, which is a function of the seed and the prompt, but out-of-range values are
// refused as OpenAI refuses them.
func checkSampling(req *inferRequest) *badRequest {
	if b := checkRange("temperature", req.Temperature, 0, 2); b != nil {
		return b
	}
	if b := checkRange("top_p", req.TopP, 0, 1); b != nil {
		return b
	}
	if b := checkRange("frequency_penalty", req.FrequencyPenalty, -2, 2); b != nil {
		return b
	}
	return checkRange("presence_penalty", req.PresencePenalty, -2, 2)
}

// validateGeneration checks the model and the fields chat and completions share and fills
// p; on error it answers.
func (in *instance) validateGeneration(w http.ResponseWriter, req *inferRequest, p *genParams) bool {
	if !in.checkModel(w, req.Model, writeError) {
		return false
	}
	if checkGeneration(req, p).answer(w, writeError) {
		return false
	}
	p.model = req.Model
	return true
}

// checkGeneration checks the fields chat and completions share, the model aside, and fills
// p's output parameters from them (all but the model). /v1/chat/completions,
// /v1/completions and the P/D workers' forwarded requests (parseInner) share it, so that a
// worker refuses what the endpoint refuses, with the same answer.
func checkGeneration(req *inferRequest, p *genParams) *badRequest {
	if req.N != nil && *req.N != 1 {
		return &badRequest{"n", "llmsim supports only n=1", "unsupported_n"}
	}
	capTok, capParam, bad := outputCap(req)
	if bad != nil {
		return bad
	}
	if req.StreamOptions != nil && !req.Stream {
		return invalid("stream_options", "stream_options is only allowed with stream=true")
	}
	if b := checkSampling(req); b != nil {
		return b
	}
	stops, bad := parseStops("stop", req.Stop, 4)
	if bad != nil {
		return bad
	}
	if req.TopLogprobs != nil && *req.TopLogprobs > 0 {
		return unsupported("top_logprobs", "logprobs")
	}
	p.stream = req.Stream
	p.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	p.maxTokens, p.capParam = capTok, capParam
	p.reqSeed = req.Seed
	p.salt = req.CacheSalt
	p.stops = stops
	return nil
}

// checkChatOnly refuses the chat fields that ask for what the simulator cannot produce.
func checkChatOnly(req *inferRequest) *badRequest {
	switch {
	case !isNullish(req.Logprobs):
		return unsupported("logprobs", "logprobs")
	case !isNullish(req.Audio):
		return unsupported("audio", "audio output")
	case !isNullish(req.WebSearchOptions):
		return unsupported("web_search_options", "web search")
	}
	for _, m := range req.Modalities {
		if m != "text" {
			return unsupported("modalities", "the output modality "+strconv.Quote(m))
		}
	}
	if b := checkTextFormat("response_format", req.ResponseFormat); b != nil {
		return b
	}
	if b := checkToolChoice("tool_choice", req.ToolChoice); b != nil {
		return b
	}
	if b := checkToolChoice("function_call", req.FunctionCall); b != nil {
		return b
	}
	for i := range req.Messages {
		if req.Messages[i].Role == "" {
			return invalid("messages", "messages["+strconv.Itoa(i)+"].role is required")
		}
	}
	return nil
}

// checkCompletionOnly refuses the completions fields that ask for what the simulator cannot
// produce.
func checkCompletionOnly(req *inferRequest) *badRequest {
	switch {
	case !isNullish(req.Logprobs):
		return unsupported("logprobs", "logprobs")
	case req.Echo != nil && *req.Echo:
		return unsupported("echo", "echo")
	case req.BestOf != nil && *req.BestOf != 1:
		return unsupported("best_of", "best_of other than 1")
	case req.Suffix != nil && *req.Suffix != "":
		return unsupported("suffix", "suffix (insertion)")
	}
	return nil
}

// handleChat serves POST /v1/chat/completions.
func (in *instance) handleChat(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	var req inferRequest
	f, ok := in.acceptInference(w, r, &req, writeError)
	if !ok {
		return
	}
	p := genParams{enc: chatEnc, fault: f, arrival: arrival, promptParam: "messages"}
	if !in.validateGeneration(w, &req, &p) {
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "messages must be a non-empty array", "messages", "invalid_value")
		return
	}
	if checkChatOnly(&req).answer(w, writeError) {
		return
	}
	prompt := appendChatPrompt(make([]byte, 0, 1024), req.Messages, req.Tools)
	in.serveGeneration(w, r, &p, prompt)
}

// handleCompletion serves POST /v1/completions (prompt: a string or an array of strings).
func (in *instance) handleCompletion(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	var req inferRequest
	f, ok := in.acceptInference(w, r, &req, writeError)
	if !ok {
		return
	}
	p := genParams{enc: completionEnc, fault: f, arrival: arrival, promptParam: "prompt"}
	if !in.validateGeneration(w, &req, &p) || checkCompletionOnly(&req).answer(w, writeError) {
		return
	}
	prompt, ok := appendTextInput(make([]byte, 0, 1024), req.Prompt)
	if !ok {
		writeError(w, http.StatusBadRequest, "prompt must be a non-empty string or array of strings", "prompt", "invalid_value")
		return
	}
	in.serveGeneration(w, r, &p, prompt)
}

// maxEmbeddingInputs bounds the inputs of one embeddings request, as OpenAI does.
const maxEmbeddingInputs = 2048

// embeddingInput is one input of an embeddings request: text, or the JSON of a token array
// (embedded as that text; tokens counts its tokens either way).
type embeddingInput struct {
	text   []byte
	tokens int
}

// parseEmbeddingInput reads "input": a non-empty string, an array of non-empty strings, an
// array of token ids, or an array of token id arrays (each non-empty), at most 2048 inputs.
func parseEmbeddingInput(raw json.RawMessage) ([]embeddingInput, *badRequest) {
	bad := invalid("input", "input must be a non-empty string, an array of non-empty strings, an array of token ids or an array of token id arrays")
	if len(raw) == 0 {
		return nil, bad
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil || s == "" {
			return nil, bad
		}
		return []embeddingInput{{[]byte(s), CountTokens(len(s))}}, nil
	case '[':
		var ss []string
		if json.Unmarshal(raw, &ss) == nil {
			if len(ss) == 0 || len(ss) > maxEmbeddingInputs {
				return nil, bad
			}
			out := make([]embeddingInput, len(ss))
			for i, s := range ss {
				if s == "" {
					return nil, invalid("input", "input["+strconv.Itoa(i)+"] is an empty string")
				}
				out[i] = embeddingInput{[]byte(s), CountTokens(len(s))}
			}
			return out, nil
		}
		var ids []int64
		if json.Unmarshal(raw, &ids) == nil {
			if len(ids) == 0 {
				return nil, bad
			}
			return []embeddingInput{{raw, len(ids)}}, nil
		}
		var arrays []json.RawMessage
		if json.Unmarshal(raw, &arrays) != nil || len(arrays) == 0 || len(arrays) > maxEmbeddingInputs {
			return nil, bad
		}
		out := make([]embeddingInput, len(arrays))
		for i, a := range arrays {
			if json.Unmarshal(a, &ids) != nil || len(ids) == 0 {
				return nil, bad
			}
			out[i] = embeddingInput{a, len(ids)}
		}
		return out, nil
	}
	return nil, bad
}

// checkEmbeddingWindow refuses an embeddings input longer than the context window
// (MaxModelLen tokens; 0: none), with vLLM's message. Each input is one sequence: only its
// own length counts.
func (in *instance) checkEmbeddingWindow(inputs []embeddingInput) *badRequest {
	limit := in.cfg.MaxModelLen
	if limit <= 0 {
		return nil
	}
	for i, s := range inputs {
		if s.tokens > limit {
			return &badRequest{"input", "This model's maximum context length is " + strconv.Itoa(limit) + " tokens. However, you requested " +
				strconv.Itoa(s.tokens) + " tokens in the input for embedding generation (input " + strconv.Itoa(i) +
				"). Please reduce the length of the input.", "context_length_exceeded"}
		}
	}
	return nil
}

// handleEmbeddings serves POST /v1/embeddings: deterministic unit vectors of "dimensions"
// (default EmbeddingDims) float32 values per input, after TTFT + PerUncachedToken × tokens,
// as JSON numbers ("encoding_format": "float" or absent) or as the base64 of the
// little-endian float32 array ("base64", what the OpenAI Node SDK asks for by default).
func (in *instance) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	var req inferRequest
	f, ok := in.acceptInference(w, r, &req, writeError)
	if !ok || !in.checkModel(w, req.Model, writeError) {
		return
	}
	dims := in.cfg.EmbeddingDims
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > 65536 {
			writeError(w, http.StatusBadRequest, "dimensions must be within [1, 65536]", "dimensions", "invalid_value")
			return
		}
		dims = int(*req.Dimensions)
	}
	b64 := false
	if req.EncodingFormat != nil {
		switch *req.EncodingFormat {
		case "float":
		case "base64":
			b64 = true
		default:
			writeError(w, http.StatusBadRequest, "encoding_format must be \"float\" or \"base64\", not "+strconv.Quote(*req.EncodingFormat), "encoding_format", "invalid_value")
			return
		}
	}
	inputs, bad := parseEmbeddingInput(req.Input)
	if bad.answer(w, writeError) || in.checkEmbeddingWindow(inputs).answer(w, writeError) {
		return
	}
	start, ok := in.admit(w, r.Context(), arrival, writeError)
	if !ok {
		return
	}
	defer in.sched.release()
	tokens := 0
	for _, s := range inputs {
		tokens += s.tokens
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
	per := dims * 24
	if b64 {
		per = base64.StdEncoding.EncodedLen(dims * 4)
	}
	b := make([]byte, 0, 128+len(inputs)*(per+48))
	b = append(b, `{"object":"list","data":[`...)
	vec := make([]float32, dims)
	raw := make([]byte, 0, dims*4)
	for i, s := range inputs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":`...)
		embedding(vec, rng(in.fleet.seed^promptHash(s.text)))
		if b64 {
			raw = raw[:0]
			for _, v := range vec {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
			}
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, raw)
			b = append(b, '"')
		} else {
			b = appendFloats(b, vec)
		}
		b = append(b, '}')
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

// embedding fills vec with a deterministic unit vector drawn from rg.
func embedding(vec []float32, rg rng) {
	vals := make([]float64, len(vec))
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
		vec[i] = float32(v / norm)
	}
}

// appendFloats appends vec as a JSON array. Each float32 is written as the shortest decimal
// of its exact float64 value, so a client parsing doubles gets exactly the numbers the
// base64 encoding carries.
func appendFloats(b []byte, vec []float32) []byte {
	b = append(b, '[')
	for i, v := range vec {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, float64(v), 'g', -1, 64)
	}
	return append(b, ']')
}
