package llmsim

import (
	"net/http"
	"strconv"
	"time"

	json "github.com/goccy/go-json"
)

// messagesRequest is the Anthropic Messages API request (POST /v1/messages, which vLLM and
// SGLang serve too) as far as the simulator reads it; docs/llmsim.md lists the fields
// honoured, accepted and refused. Unknown fields are ignored.
type messagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *wholeInt       `json:"max_tokens"`
	Messages      []chatMessage   `json:"messages"`
	System        json.RawMessage `json:"system"`
	Stream        bool            `json:"stream"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *wholeInt       `json:"top_k"`
	StopSequences json.RawMessage `json:"stop_sequences"`
	Tools         json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	Thinking      json.RawMessage `json:"thinking"`
	Seed          *wholeInt       `json:"seed"`       // extension: varies the output
	CacheSalt     string          `json:"cache_salt"` // extension (vLLM): scopes the prefix cache
}

// messagesPrompt serialises system and messages as chat serialises a system message and the
// conversation (appendChatPrompt), so the same conversation hits the same cache blocks
// through either API.
func messagesPrompt(req *messagesRequest) ([]byte, *badRequest) {
	dst := appendTools(make([]byte, 0, 1024), req.Tools)
	if len(req.System) > 0 && string(req.System) != "null" {
		var sys string
		switch req.System[0] {
		case '"':
			if json.Unmarshal(req.System, &sys) != nil {
				return nil, invalid("system", "system must be a string or an array of text blocks")
			}
		case '[':
			var blocks []contentPart
			if json.Unmarshal(req.System, &blocks) != nil {
				return nil, invalid("system", "system must be a string or an array of text blocks")
			}
			for i, bl := range blocks {
				if bl.Type != "text" || bl.Text == nil {
					return nil, invalid("system", "system["+strconv.Itoa(i)+"] must be a text block")
				}
				sys += *bl.Text
			}
		default:
			return nil, invalid("system", "system must be a string or an array of text blocks")
		}
		if sys != "" {
			dst = appendTurn(dst, "system", sys)
		}
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		at := "messages." + strconv.Itoa(i)
		if m.Role != "user" && m.Role != "assistant" {
			return nil, invalid("messages", at+".role: Input should be 'user' or 'assistant'")
		}
		if len(m.Content) == 0 || (m.Content[0] != '"' && m.Content[0] != '[') {
			return nil, invalid("messages", at+".content must be a string or an array of content blocks")
		}
		dst = appendTurnStart(dst, m.Role)
		dst = appendContent(dst, m.Content)
		dst = append(dst, '\n')
	}
	return appendGenerationPrompt(dst), nil
}

// checkMessages validates the Messages API fields and refuses what the simulator cannot do
// (forced tool use, extended thinking).
func checkMessages(req *messagesRequest) *badRequest {
	switch {
	case req.MaxTokens == nil:
		return invalid("max_tokens", "max_tokens: Field required")
	case *req.MaxTokens < 1:
		return invalid("max_tokens", "max_tokens: must be at least 1")
	case len(req.Messages) == 0:
		return invalid("messages", "messages: at least one message is required")
	case req.TopK != nil && *req.TopK < 0:
		return invalid("top_k", "top_k: must not be negative")
	}
	if b := checkRange("temperature", req.Temperature, 0, 1); b != nil {
		return b
	}
	if b := checkRange("top_p", req.TopP, 0, 1); b != nil {
		return b
	}
	if !isNullish(req.ToolChoice) {
		var tc struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(req.ToolChoice, &tc) != nil {
			return invalid("tool_choice", "tool_choice must be an object with a type")
		}
		if tc.Type != "auto" && tc.Type != "none" {
			return unsupported("tool_choice", "forcing tool use (tool_choice "+strconv.Quote(tc.Type)+"): it never calls tools")
		}
	}
	if !isNullish(req.Thinking) {
		var th struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(req.Thinking, &th) != nil || th.Type != "disabled" {
			return unsupported("thinking", "extended thinking")
		}
	}
	return nil
}

// handleMessages serves POST /v1/messages (the Anthropic Messages API): one text block,
// whole or as Anthropic's SSE events, from the same generation as chat completions. Errors
// have Anthropic's shape.
func (in *instance) handleMessages(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	var req messagesRequest
	errf := writeAnthropicError
	f, ok := in.acceptInference(w, r, &req, errf)
	if !ok || !in.checkModel(w, req.Model, errf) || checkMessages(&req).answer(w, errf) {
		return
	}
	stops, bad := parseStops("stop_sequences", req.StopSequences, 0)
	if bad.answer(w, errf) {
		return
	}
	prompt, bad := messagesPrompt(&req)
	if bad.answer(w, errf) {
		return
	}
	p := genParams{
		enc: messagesEnc, fault: f, arrival: arrival, model: req.Model, stream: req.Stream,
		maxTokens: int(*req.MaxTokens), capParam: "max_tokens", promptParam: "messages",
		reqSeed: req.Seed, salt: req.CacheSalt, stops: stops,
	}
	in.serveGeneration(w, r, &p, prompt)
}

// messagesEncoding is /v1/messages: a message object, or Anthropic's named events
// message_start, content_block_start, ping, one content_block_delta per token,
// content_block_stop, message_delta (stop_reason, usage) and message_stop. Usage follows
// Anthropic: input_tokens counts the prompt tokens not read from the cache,
// cache_read_input_tokens those read from it (their sum is chat's prompt_tokens).
type messagesEncoding struct{}

var messagesEnc encoding = messagesEncoding{}

func (messagesEncoding) newID(in *instance) string {
	return "msg_" + in.cfg.WorkerID + "-" + strconv.FormatUint(in.seq.Add(1), 10)
}

func (messagesEncoding) makeHead(g *job) {
	g.head = append(g.head[:0], "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":"...)
}

// anthropicStop returns stop_reason and stop_sequence (JSON) for the result.
func anthropicStop(b []byte, r *genResult) []byte {
	b = append(b, `"stop_reason":`...)
	switch r.finish {
	case finishLength:
		return append(b, `"max_tokens","stop_sequence":null`...)
	case finishStop:
		b = append(b, `"stop_sequence","stop_sequence":`...)
		return appendJSONString(b, r.stopSeq)
	}
	return append(b, `"end_turn","stop_sequence":null`...)
}

// appendAnthropicUsage appends the usage object with output tokens.
func appendAnthropicUsage(b []byte, r *genResult, output int) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(r.promptTokens-r.cached), 10)
	b = append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, int64(r.cached), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(output), 10)
	return append(b, '}')
}

// appendAnthropicMessage appends the message object; done false: message_start's, with no
// content, no stop reason and no output tokens yet.
func appendAnthropicMessage(b []byte, g *job, done bool) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, g.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendJSONString(b, g.p.model)
	if !done {
		b = append(b, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
		b = appendAnthropicUsage(b, &g.res, 0)
		return append(b, '}')
	}
	b = append(b, `,"content":[{"type":"text","text":`...)
	b = appendJSONString(b, g.outText())
	b = append(b, "}],"...)
	b = anthropicStop(b, &g.res)
	b = append(b, `,"usage":`...)
	b = appendAnthropicUsage(b, &g.res, g.res.completion)
	return append(b, '}')
}

// open writes message_start, content_block_start and ping at admission.
func (messagesEncoding) open(g *job) bool {
	b := append(g.buf[:0], "event: message_start\ndata: {\"type\":\"message_start\",\"message\":"...)
	b = appendAnthropicMessage(b, g, false)
	if !g.send(append(b, "}\n\n"...), false) {
		return false
	}
	b = append(g.buf[:0], "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"...)
	if !g.send(b, false) {
		return false
	}
	return g.send(append(g.buf[:0], "event: ping\ndata: {\"type\":\"ping\"}\n\n"...), false)
}

func (messagesEncoding) appendDelta(b []byte, g *job, text string) []byte {
	b = append(b, g.head...)
	b = appendJSONString(b, text)
	return append(b, "}}\n\n"...)
}

// close writes content_block_stop, message_delta and the terminal message_stop.
func (messagesEncoding) close(g *job) bool {
	b := append(g.buf[:0], "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"...)
	if !g.send(b, false) {
		return false
	}
	b = append(g.buf[:0], "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{"...)
	b = anthropicStop(b, &g.res)
	b = append(b, `},"usage":`...)
	b = appendAnthropicUsage(b, &g.res, g.res.completion)
	b = append(b, "}\n\n"...)
	if g.p.fault.DropDone {
		return g.send(b, true)
	}
	if !g.send(b, false) {
		return false
	}
	return g.send(append(g.buf[:0], "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...), true)
}

func (messagesEncoding) appendWhole(b []byte, g *job) []byte {
	return append(appendAnthropicMessage(b, g, true), '\n')
}

func (messagesEncoding) writeError(w http.ResponseWriter, status int, msg, param, code string) {
	writeAnthropicError(w, status, msg, param, code)
}
