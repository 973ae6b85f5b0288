package llmsim

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"
)

// responsesRequest is the OpenAI Responses API request (POST /v1/responses) as far as the
// simulator reads it; docs/llmsim.md lists the fields honoured, accepted and refused.
// Unknown fields are ignored.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Stream             bool            `json:"stream"`
	StreamOptions      *streamOptions  `json:"stream_options"`
	MaxOutputTokens    *wholeInt       `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	TopLogprobs        *wholeInt       `json:"top_logprobs"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	Background         *bool           `json:"background"`
	Prompt             json.RawMessage `json:"prompt"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Text               *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	Include    []string        `json:"include"`
	Truncation *string         `json:"truncation"`
	Reasoning  json.RawMessage `json:"reasoning"`
	Metadata   json.RawMessage `json:"metadata"`
	User       *string         `json:"user"`
	Seed       *wholeInt       `json:"seed"`       // extension (vLLM): varies the output
	CacheSalt  string          `json:"cache_salt"` // extension (vLLM): scopes the prefix cache
}

// responseEcho holds the request fields a Responses API response object repeats.
type responseEcho struct {
	instructions      *string
	maxOutputTokens   *wholeInt
	temperature, topP *float64
	tools, toolChoice json.RawMessage
	parallelToolCalls bool
	truncation        string
	metadata          json.RawMessage
	user              *string
}

// responsesItem is one input item: a message {role, content} ("type":"message" or absent).
type responsesItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// responsesPrompt serialises instructions and input as chat serialises a system message and
// the conversation (appendChatPrompt), so the same conversation hits the same cache blocks
// through either API.
func responsesPrompt(req *responsesRequest) ([]byte, *badRequest) {
	bad := invalid("input", "input must be a non-empty string or a non-empty array of message items")
	if len(req.Input) == 0 {
		return nil, bad
	}
	dst := appendTools(make([]byte, 0, 1024), req.Tools)
	if req.Instructions != nil && *req.Instructions != "" {
		dst = appendTurn(dst, "system", *req.Instructions)
	}
	switch req.Input[0] {
	case '"':
		var s string
		if json.Unmarshal(req.Input, &s) != nil || s == "" {
			return nil, bad
		}
		dst = appendTurn(dst, "user", s)
	case '[':
		var items []responsesItem
		if json.Unmarshal(req.Input, &items) != nil || len(items) == 0 {
			return nil, bad
		}
		for i := range items {
			it := &items[i]
			at := "input[" + strconv.Itoa(i) + "]"
			if it.Type != "" && it.Type != "message" {
				return nil, unsupported("input", "input items of type "+strconv.Quote(it.Type)+" ("+at+"): only message items")
			}
			switch it.Role {
			case "user", "assistant", "system", "developer":
			default:
				return nil, invalid("input", at+".role must be user, assistant, system or developer")
			}
			if len(it.Content) == 0 || (it.Content[0] != '"' && it.Content[0] != '[') {
				return nil, invalid("input", at+".content must be a string or an array of content parts")
			}
			dst = appendTurnStart(dst, it.Role)
			dst = appendContent(dst, it.Content)
			dst = append(dst, '\n')
		}
	default:
		return nil, bad
	}
	return appendGenerationPrompt(dst), nil
}

// checkResponses refuses what the simulator cannot do: stored state (previous responses,
// conversations, background runs, prompt templates), structured output, forced tool calls,
// logprobs.
func checkResponses(req *responsesRequest) *badRequest {
	switch {
	case req.PreviousResponseID != nil && *req.PreviousResponseID != "":
		return unsupported("previous_response_id", "previous_response_id: it stores no responses; send the whole conversation in input")
	case !isNullish(req.Conversation):
		return unsupported("conversation", "conversations: it stores no state; send the whole conversation in input")
	case req.Background != nil && *req.Background:
		return unsupported("background", "background responses")
	case !isNullish(req.Prompt):
		return unsupported("prompt", "prompt templates")
	case req.TopLogprobs != nil && *req.TopLogprobs > 0:
		return unsupported("top_logprobs", "logprobs")
	case req.MaxOutputTokens != nil && *req.MaxOutputTokens < 1:
		return invalid("max_output_tokens", "max_output_tokens must be at least 1")
	case req.StreamOptions != nil && !req.Stream:
		return invalid("stream_options", "stream_options is only allowed with stream=true")
	case req.Truncation != nil && *req.Truncation != "auto" && *req.Truncation != "disabled":
		return invalid("truncation", "truncation must be \"auto\" or \"disabled\"")
	}
	for _, inc := range req.Include {
		if strings.Contains(inc, "logprobs") {
			return unsupported("include", "logprobs")
		}
	}
	if b := checkRange("temperature", req.Temperature, 0, 2); b != nil {
		return b
	}
	if b := checkRange("top_p", req.TopP, 0, 1); b != nil {
		return b
	}
	if req.Text != nil {
		if b := checkTextFormat("text.format", req.Text.Format); b != nil {
			return b
		}
	}
	return checkToolChoice("tool_choice", req.ToolChoice)
}

// handleResponses serves POST /v1/responses (the OpenAI Responses API): one assistant
// message, whole or as typed SSE events, from the same generation as chat completions.
func (in *instance) handleResponses(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	var req responsesRequest
	f, ok := in.acceptInference(w, r, &req, writeError)
	if !ok || !in.checkModel(w, req.Model, writeError) || checkResponses(&req).answer(w, writeError) {
		return
	}
	prompt, bad := responsesPrompt(&req)
	if bad.answer(w, writeError) {
		return
	}
	echo := &responseEcho{
		instructions: req.Instructions, maxOutputTokens: req.MaxOutputTokens,
		temperature: req.Temperature, topP: req.TopP,
		tools: req.Tools, toolChoice: req.ToolChoice, parallelToolCalls: true,
		truncation: "disabled", metadata: req.Metadata, user: req.User,
	}
	if req.ParallelToolCalls != nil {
		echo.parallelToolCalls = *req.ParallelToolCalls
	}
	if req.Truncation != nil {
		echo.truncation = *req.Truncation
	}
	p := genParams{
		enc: responsesEnc, fault: f, arrival: arrival, model: req.Model, stream: req.Stream,
		reqSeed: req.Seed, salt: req.CacheSalt, echo: echo, promptParam: "input",
	}
	if req.MaxOutputTokens != nil {
		p.maxTokens, p.capParam = int(*req.MaxOutputTokens), "max_output_tokens"
	}
	in.serveGeneration(w, r, &p, prompt)
}

// responsesEncoding is /v1/responses: a response object, or typed events (`event:` and
// `data:` lines; every data object has type and sequence_number) from response.created to
// response.completed, with no [DONE]. An output cut by max_output_tokens makes the response
// "incomplete" (incomplete_details.reason "max_output_tokens"), ended by
// response.incomplete, as OpenAI does.
type responsesEncoding struct{}

var responsesEnc encoding = responsesEncoding{}

func (responsesEncoding) newID(in *instance) string {
	return "resp_" + in.cfg.WorkerID + "-" + strconv.FormatUint(in.seq.Add(1), 10)
}

// itemID is the output message's id: "msg_" and the response id's suffix.
func (g *job) itemID() string { return "msg_" + strings.TrimPrefix(g.id, "resp_") }

func (responsesEncoding) makeHead(g *job) {
	b := append(g.head[:0], "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":"...)
	b = appendJSONString(b, g.itemID())
	g.head = append(b, `,"output_index":0,"content_index":0,"delta":`...)
}

// appendEventStart appends `event: typ\ndata: {"type":"typ","sequence_number":N` and counts
// the sequence number.
func appendEventStart(b []byte, g *job, typ string) []byte {
	b = append(b, "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, int64(g.seq), 10)
	g.seq++
	return b
}

// responseStatus is the response's (and its message's) status once generation has ended.
func responseStatus(r *genResult) string {
	if r.finish == finishLength {
		return "incomplete"
	}
	return "completed"
}

// appendOutputText appends the output_text content part with text.
func appendOutputText(b []byte, text string) []byte {
	b = append(b, `{"type":"output_text","text":`...)
	b = appendJSONString(b, text)
	return append(b, `,"annotations":[],"logprobs":[]}`...)
}

// appendMessageItem appends the output message item; done false: in progress, no content.
func appendMessageItem(b []byte, g *job, done bool) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, g.itemID())
	b = append(b, `,"type":"message","status":`...)
	if !done {
		return append(b, `"in_progress","role":"assistant","content":[]}`...)
	}
	b = appendJSONString(b, responseStatus(&g.res))
	b = append(b, `,"role":"assistant","content":[`...)
	b = appendOutputText(b, g.outText())
	return append(b, "]}"...)
}

func appendFloatOr(b []byte, v *float64, def float64) []byte {
	if v != nil {
		def = *v
	}
	return strconv.AppendFloat(b, def, 'g', -1, 64)
}

func appendRawOr(b []byte, raw json.RawMessage, def string) []byte {
	if len(raw) == 0 || string(raw) == "null" {
		return append(b, def...)
	}
	return append(b, raw...)
}

// appendResponseObject appends the response object; done false: in progress, no output, no
// usage (response.created, response.in_progress).
func appendResponseObject(b []byte, g *job, done bool) []byte {
	e := g.p.echo
	b = append(b, `{"id":`...)
	b = appendJSONString(b, g.id)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, g.created, 10)
	b = append(b, `,"status":`...)
	switch {
	case !done:
		b = append(b, `"in_progress","background":false,"error":null,"incomplete_details":null`...)
	case g.res.finish == finishLength:
		b = append(b, `"incomplete","background":false,"error":null,"incomplete_details":{"reason":"max_output_tokens"}`...)
	default:
		b = append(b, `"completed","background":false,"error":null,"incomplete_details":null`...)
	}
	b = append(b, `,"instructions":`...)
	if e.instructions != nil {
		b = appendJSONString(b, *e.instructions)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"max_output_tokens":`...)
	if e.maxOutputTokens != nil {
		b = strconv.AppendInt(b, int64(*e.maxOutputTokens), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"model":`...)
	b = appendJSONString(b, g.p.model)
	b = append(b, `,"output":[`...)
	if done {
		b = appendMessageItem(b, g, true)
	}
	b = append(b, `],"parallel_tool_calls":`...)
	b = strconv.AppendBool(b, e.parallelToolCalls)
	b = append(b, `,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":`...)
	b = appendFloatOr(b, e.temperature, 1)
	b = append(b, `,"text":{"format":{"type":"text"}},"tool_choice":`...)
	b = appendRawOr(b, e.toolChoice, `"auto"`)
	b = append(b, `,"tools":`...)
	b = appendRawOr(b, e.tools, "[]")
	b = append(b, `,"top_p":`...)
	b = appendFloatOr(b, e.topP, 1)
	b = append(b, `,"truncation":`...)
	b = appendJSONString(b, e.truncation)
	b = append(b, `,"usage":`...)
	if done {
		r := &g.res
		b = append(b, `{"input_tokens":`...)
		b = strconv.AppendInt(b, int64(r.promptTokens), 10)
		b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(r.cached), 10)
		b = append(b, `},"output_tokens":`...)
		b = strconv.AppendInt(b, int64(r.completion), 10)
		b = append(b, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
		b = strconv.AppendInt(b, int64(r.promptTokens+r.completion), 10)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"user":`...)
	if e.user != nil {
		b = appendJSONString(b, *e.user)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"metadata":`...)
	b = appendRawOr(b, e.metadata, "{}")
	return append(b, '}')
}

// open writes response.created, response.in_progress, response.output_item.added and
// response.content_part.added: the response and its (empty) message exist at admission.
func (responsesEncoding) open(g *job) bool {
	for _, typ := range [...]string{"response.created", "response.in_progress"} {
		b := appendEventStart(g.buf[:0], g, typ)
		b = append(b, `,"response":`...)
		b = appendResponseObject(b, g, false)
		if !g.send(append(b, "}\n\n"...), false) {
			return false
		}
	}
	b := appendEventStart(g.buf[:0], g, "response.output_item.added")
	b = append(b, `,"output_index":0,"item":`...)
	b = appendMessageItem(b, g, false)
	if !g.send(append(b, "}\n\n"...), false) {
		return false
	}
	b = appendEventStart(g.buf[:0], g, "response.content_part.added")
	b = append(b, `,"item_id":`...)
	b = appendJSONString(b, g.itemID())
	b = append(b, `,"output_index":0,"content_index":0,"part":`...)
	b = appendOutputText(b, "")
	return g.send(append(b, "}\n\n"...), false)
}

func (responsesEncoding) appendDelta(b []byte, g *job, text string) []byte {
	b = append(b, g.head...)
	b = appendJSONString(b, text)
	b = append(b, `,"logprobs":[],"sequence_number":`...)
	b = strconv.AppendInt(b, int64(g.seq), 10)
	g.seq++
	return append(b, "}\n\n"...)
}

// close writes response.output_text.done, response.content_part.done,
// response.output_item.done and the terminal response.completed (or response.incomplete).
func (responsesEncoding) close(g *job) bool {
	text := g.outText()
	b := appendEventStart(g.buf[:0], g, "response.output_text.done")
	b = append(b, `,"item_id":`...)
	b = appendJSONString(b, g.itemID())
	b = append(b, `,"output_index":0,"content_index":0,"text":`...)
	b = appendJSONString(b, text)
	b = append(b, `,"logprobs":[]}`+"\n\n"...)
	if !g.send(b, false) {
		return false
	}
	b = appendEventStart(g.buf[:0], g, "response.content_part.done")
	b = append(b, `,"item_id":`...)
	b = appendJSONString(b, g.itemID())
	b = append(b, `,"output_index":0,"content_index":0,"part":`...)
	b = appendOutputText(b, text)
	if !g.send(append(b, "}\n\n"...), false) {
		return false
	}
	b = appendEventStart(g.buf[:0], g, "response.output_item.done")
	b = append(b, `,"output_index":0,"item":`...)
	b = appendMessageItem(b, g, true)
	b = append(b, "}\n\n"...)
	if g.p.fault.DropDone {
		return g.send(b, true)
	}
	if !g.send(b, false) {
		return false
	}
	b = appendEventStart(g.buf[:0], g, "response."+responseStatus(&g.res))
	b = append(b, `,"response":`...)
	b = appendResponseObject(b, g, true)
	return g.send(append(b, "}\n\n"...), true)
}

func (responsesEncoding) appendWhole(b []byte, g *job) []byte {
	return append(appendResponseObject(b, g, true), '\n')
}

func (responsesEncoding) writeError(w http.ResponseWriter, status int, msg, param, code string) {
	writeError(w, status, msg, param, code)
}
