package llmsim

import (
	"net/http"
	"strconv"
)

// encoding is one API's wire format for a generation (serveGeneration): its ids, its
// streamed events and its whole body. Streamed events are written through job.send or
// job.delta so that the fault counters (reset-after, stall-after) see every one.
type encoding interface {
	// newID returns a fresh response id ("chatcmpl-…", "resp_…", "msg_…").
	newID(in *instance) string
	// makeHead precomputes g.head, the fixed part of the response's delta events.
	makeHead(g *job)
	// open writes the events a stream starts with before any token (possibly none); false
	// ends the stream.
	open(g *job) bool
	// appendDelta appends one streamed event carrying text, the next piece of the output.
	appendDelta(b []byte, g *job, text string) []byte
	// close writes the events that end a stream, the terminal one left out under the
	// drop-done fault; false ends the stream early.
	close(g *job) bool
	// appendWhole appends the non-streamed response body.
	appendWhole(b []byte, g *job) []byte
	// writeError answers with an error in the API's shape.
	writeError(w http.ResponseWriter, status int, msg, param, code string)
}

// errorWriter answers with an error body in one API's shape: OpenAI's (writeError) or
// Anthropic's (writeAnthropicError). param names the request field at fault ("" when none);
// code is a machine-readable reason.
type errorWriter func(w http.ResponseWriter, status int, msg, param, code string)

// chatEncoding is /v1/chat/completions (and /power/v1/decode/execute): chat.completion
// objects, or chat.completion.chunk events ended by `data: [DONE]`.
type chatEncoding struct{}

// completionEncoding is /v1/completions: text_completion objects and events.
type completionEncoding struct{}

var (
	chatEnc       encoding = chatEncoding{}
	completionEnc encoding = completionEncoding{}
)

// openAIFinish names a finish for chat and completions.
func openAIFinish(r *genResult) string {
	if r.finish == finishLength {
		return "length"
	}
	return "stop"
}

func (chatEncoding) newID(in *instance) string {
	return "chatcmpl-" + in.cfg.WorkerID + "-" + strconv.FormatUint(in.seq.Add(1), 10)
}

func (completionEncoding) newID(in *instance) string {
	return "cmpl-" + in.cfg.WorkerID + "-" + strconv.FormatUint(in.seq.Add(1), 10)
}

// appendOpenAIHead appends `{"id":…,"object":…,"created":…,"model":…,"choices":[`.
func appendOpenAIHead(b []byte, id, object string, created int64, model string) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, model)
	return append(b, `,"choices":[`...)
}

func (chatEncoding) makeHead(g *job) {
	obj := "chat.completion"
	if g.p.stream {
		obj = "chat.completion.chunk"
	}
	g.head = appendOpenAIHead(g.head[:0], g.id, obj, g.created, g.p.model)
}

func (completionEncoding) makeHead(g *job) {
	g.head = appendOpenAIHead(g.head[:0], g.id, "text_completion", g.created, g.p.model)
}

func (chatEncoding) open(*job) bool       { return true }
func (completionEncoding) open(*job) bool { return true }

func (chatEncoding) appendDelta(b []byte, g *job, text string) []byte {
	b = append(b, "data: "...)
	b = append(b, g.head...)
	if g.deltas == 0 {
		b = append(b, `{"index":0,"delta":{"role":"assistant","content":`...)
	} else {
		b = append(b, `{"index":0,"delta":{"content":`...)
	}
	b = appendJSONString(b, text)
	return append(b, "},\"logprobs\":null,\"finish_reason\":null}]}\n\n"...)
}

func (completionEncoding) appendDelta(b []byte, g *job, text string) []byte {
	b = append(b, "data: "...)
	b = append(b, g.head...)
	b = append(b, `{"index":0,"text":`...)
	b = appendJSONString(b, text)
	return append(b, ",\"logprobs\":null,\"finish_reason\":null}]}\n\n"...)
}

func appendUsage(b []byte, r *genResult) []byte {
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(r.promptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(r.completion), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(r.promptTokens+r.completion), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(r.cached), 10)
	return append(b, "}}"...)
}

func (chatEncoding) close(g *job) bool {
	return closeOpenAI(g, `{"index":0,"delta":{},"logprobs":null,"finish_reason":`)
}

func (completionEncoding) close(g *job) bool {
	return closeOpenAI(g, `{"index":0,"text":"","logprobs":null,"finish_reason":`)
}

// closeOpenAI writes the finish_reason chunk, the usage chunk (include_usage) and [DONE]
// (unless drop-done): produced at the same instant, so written as separate events but
// flushed together.
func closeOpenAI(g *job, finishChoice string) bool {
	b := append(g.buf[:0], "data: "...)
	b = append(b, g.head...)
	b = append(b, finishChoice...)
	b = appendJSONString(b, openAIFinish(&g.res))
	b = append(b, "}]}\n\n"...)
	if g.p.includeUsage {
		if !g.send(b, false) {
			return false
		}
		b = append(g.buf[:0], "data: "...)
		b = append(b, g.head...)
		b = append(b, "],"...)
		b = appendUsage(b, &g.res)
		b = append(b, "}\n\n"...)
	}
	if !g.p.fault.DropDone {
		if !g.send(b, false) {
			return false
		}
		b = append(g.buf[:0], "data: [DONE]\n\n"...)
	}
	return g.send(b, true)
}

func (chatEncoding) appendWhole(b []byte, g *job) []byte {
	b = append(b, g.head...)
	b = append(b, `{"index":0,"message":{"role":"assistant","content":`...)
	b = appendJSONString(b, g.outText())
	b = append(b, `},"logprobs":null,"finish_reason":`...)
	b = appendJSONString(b, openAIFinish(&g.res))
	b = append(b, "}],"...)
	b = appendUsage(b, &g.res)
	return append(b, "}\n"...)
}

func (completionEncoding) appendWhole(b []byte, g *job) []byte {
	b = append(b, g.head...)
	b = append(b, `{"index":0,"text":`...)
	b = appendJSONString(b, g.outText())
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	b = appendJSONString(b, openAIFinish(&g.res))
	b = append(b, "}],"...)
	b = appendUsage(b, &g.res)
	return append(b, "}\n"...)
}

func (chatEncoding) writeError(w http.ResponseWriter, status int, msg, param, code string) {
	writeError(w, status, msg, param, code)
}

func (completionEncoding) writeError(w http.ResponseWriter, status int, msg, param, code string) {
	writeError(w, status, msg, param, code)
}
