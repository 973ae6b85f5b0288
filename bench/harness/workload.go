package harness

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// Workload names accepted by Options.Workload.
const (
	WorkloadJSON      = "json"           // small non-streaming chat completion
	WorkloadSSE       = "sse"            // streamed chat completion (pacing is the upstream's)
	WorkloadMultiTurn = "chat-multiturn" // streamed conversations growing turn by turn
	WorkloadMixed     = "mixed"          // 50% json, 40% sse, 10% chat-multiturn turns
)

// Workloads lists the accepted workload names.
var Workloads = []string{WorkloadJSON, WorkloadSSE, WorkloadMultiTurn, WorkloadMixed}

// defaultTurns is the number of turns of a chat-multiturn conversation before
// a new one starts.
const defaultTurns = 6

// systemPrompt is the shared prefix of every chat-multiturn conversation
// (about 1 KiB), so that prefix caches and affinity have something to match.
var systemPrompt = func() string {
	s := "You are a careful assistant for a benchmark. "
	for len(s) < 1024 {
		s += "Answer briefly, cite nothing, and keep every reply under fifty words. "
	}
	return s
}()

// assistantReply stands in for the model's answer when a conversation grows;
// the harness does not keep response text.
const assistantReply = "Here is a short answer to your question, kept brief on purpose for the benchmark run."

// maxReplyBytes bounds Options.ReplyBytes.
const maxReplyBytes = 64 << 10

// replyOf returns an assistant reply of n bytes (assistantReply when n is 0): plain words,
// nothing to escape in JSON.
func replyOf(n int) string {
	if n <= 0 {
		return assistantReply
	}
	s := assistantReply
	for len(s) < n {
		s += " It goes on with more detail so that the answer has the length of a real one."
	}
	return s[:n]
}

// requestGen builds the requests of one worker. Requests for json and sse are
// built once; chat-multiturn bodies are rebuilt per turn into a reused buffer.
type requestGen struct {
	kind      string
	head      string // "POST path HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
	model     string
	maxTokens int
	turns     int
	reply     string
	echo      bool   // the conversation grows by lastReply, the reply last received
	lastReply []byte // JSON string content, escapes kept
	rng       *rand.Rand

	jsonReq, sseReq []byte

	conv     []byte // messages after the system prompt: `,{"role":...}` …
	turn     int
	convID   int
	body     []byte
	multiReq []byte
}

func newRequestGen(o *Options, hostport string, seed uint64) (*requestGen, error) {
	head := "POST " + o.Path + " HTTP/1.1\r\nHost: " + hostport + "\r\nContent-Type: application/json\r\n"
	for _, h := range o.Headers {
		name, value, ok := headerField(h)
		if !ok {
			return nil, refuse("header", h, `want "Name: value" on one line`)
		}
		head += name + ": " + value + "\r\n"
	}
	g := &requestGen{
		kind:      o.Workload,
		head:      head,
		model:     o.Model,
		maxTokens: o.MaxTokens,
		turns:     o.Turns,
		reply:     replyOf(o.ReplyBytes),
		echo:      o.EchoReplies,
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
	if g.turns <= 0 {
		g.turns = defaultTurns
	}
	switch g.kind {
	case WorkloadJSON, WorkloadSSE, WorkloadMultiTurn, WorkloadMixed:
	default:
		return nil, refuse("workload", g.kind, "want one of %s", strings.Join(Workloads, ", "))
	}
	user := `[{"role":"user","content":"Say hello in five words."}]`
	g.jsonReq = g.build(nil, g.chatBody(nil, user, false), false)
	g.sseReq = g.build(nil, g.chatBody(nil, user, true), true)
	g.convID = int(seed % 1_000_000)
	return g, nil
}

// headerField splits an extra request header, "Name: value", into its name and its trimmed
// value; ok is false unless h is one such field on one line.
func headerField(h string) (name, value string, ok bool) {
	name, value, ok = strings.Cut(h, ":")
	if !ok || strings.TrimSpace(name) == "" || strings.ContainsAny(h, "\r\n") || strings.ContainsAny(name, " \t") {
		return "", "", false
	}
	return name, strings.TrimSpace(value), true
}

// chatBody appends an OpenAI chat completion request body to dst.
func (g *requestGen) chatBody(dst []byte, messages string, stream bool) []byte {
	dst = append(dst, `{"model":`...)
	dst = strconv.AppendQuote(dst, g.model)
	dst = append(dst, `,"messages":`...)
	dst = append(dst, messages...)
	if g.maxTokens > 0 {
		dst = append(dst, `,"max_tokens":`...)
		dst = strconv.AppendInt(dst, int64(g.maxTokens), 10)
	}
	if stream {
		dst = append(dst, `,"stream":true}`...)
	} else {
		dst = append(dst, `,"stream":false}`...)
	}
	return dst
}

// build appends the full HTTP/1.1 request with body to dst.
func (g *requestGen) build(dst, body []byte, stream bool) []byte {
	dst = append(dst, g.head...)
	if stream {
		dst = append(dst, "Accept: text/event-stream\r\n"...)
	} else {
		dst = append(dst, "Accept: application/json\r\n"...)
	}
	dst = append(dst, "Content-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, body...)
}

// next returns the next request and whether it asks for a stream. The
// returned slice is valid until the next call.
func (g *requestGen) next() ([]byte, bool) {
	switch g.kind {
	case WorkloadJSON:
		return g.jsonReq, false
	case WorkloadSSE:
		return g.sseReq, true
	case WorkloadMultiTurn:
		return g.nextTurn(), true
	}
	switch r := g.rng.IntN(10); {
	case r < 5:
		return g.jsonReq, false
	case r < 9:
		return g.sseReq, true
	default:
		return g.nextTurn(), true
	}
}

// nextTurn grows the worker's conversation by one user turn (after the
// previous turn's assistant reply) and builds its request; after g.turns
// turns a new conversation starts from the shared system prompt.
func (g *requestGen) nextTurn() []byte {
	if g.turn >= g.turns {
		g.turn = 0
		g.conv = g.conv[:0]
		g.convID++
	}
	if g.turn > 0 {
		g.conv = append(g.conv, `,{"role":"assistant","content":"`...)
		if g.echo {
			g.conv = append(g.conv, g.lastReply...)
		} else {
			g.conv = append(g.conv, g.reply...)
		}
		g.conv = append(g.conv, `"}`...)
	}
	g.conv = append(g.conv, `,{"role":"user","content":"Conversation `...)
	g.conv = strconv.AppendInt(g.conv, int64(g.convID), 10)
	g.conv = append(g.conv, `, turn `...)
	g.conv = strconv.AppendInt(g.conv, int64(g.turn+1), 10)
	g.conv = append(g.conv, `: tell me one more fact about topic `...)
	g.conv = strconv.AppendInt(g.conv, int64(g.rng.IntN(1000)), 10)
	g.conv = append(g.conv, `."}`...)
	g.turn++

	b := g.body[:0]
	b = append(b, `{"model":`...)
	b = strconv.AppendQuote(b, g.model)
	b = append(b, `,"messages":[{"role":"system","content":"`...)
	b = append(b, systemPrompt...)
	b = append(b, `"}`...)
	b = append(b, g.conv...)
	b = append(b, ']')
	if g.maxTokens > 0 {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, int64(g.maxTokens), 10)
	}
	b = append(b, `,"stream":true}`...)
	g.body = b
	g.multiReq = g.build(g.multiReq[:0], b, true)
	return g.multiReq
}
