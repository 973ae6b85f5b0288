package affinity

import (
	"errors"
	"math"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/internal/steps"
)

// Fingerprint limits; lengths are in bytes of the canonical stream.
const (
	// MaxScanBytes is the most of a request's canonical stream that is hashed: a longer
	// conversation is fingerprinted by its first 256 KiB.
	MaxScanBytes = 256 << 10
	// CheckpointEvery is the spacing of the fixed checkpoints: one at every multiple of 4 KiB.
	CheckpointEvery = 4 << 10
	// MinPrefixBytes is the shortest prefix a checkpoint may mark: shorter shared prefixes
	// (a greeting, a one-line system prompt) are not worth a routing decision.
	MinPrefixBytes = 1 << 10
	// MaxCheckpoints is the most checkpoints one request has.
	MaxCheckpoints = 128
	// MaxDepth is the deepest nesting of objects and arrays (the body's top-level object is
	// level 1) Fingerprint walks. Tool schemas, the deepest part of real requests, nest a
	// dozen levels.
	MaxDepth = 64
)

// walkBudget is how many bytes the objects a walk writes may scan, in all, for a body of n
// bytes. To sort an object's keys the walk reads its members once to find them and once to
// write them, so every object around a byte reads it once more: nested 60 deep, a body would
// be read 60 times. The usual requests read a long value two or three times (a message, then
// its content part; a message, a tool call, its function's arguments), and what fits in
// MaxScanBytes of canonical stream at most 16 times (nesting, white space, members the stream
// drops). A body that needs more than four times its length plus that is not fingerprinted
// (ErrTooCostly), so that a walk reads at most about five times the body plus 4 MiB.
func walkBudget(n int) int { return 4*n + 16*MaxScanBytes }

// Errors of Fingerprint.
var (
	// ErrUnsupportedEndpoint: only chat completions, the Responses API and the Messages API
	// carry a conversation that prefix caches serve.
	ErrUnsupportedEndpoint = errors.New("affinity: endpoint has no conversation to fingerprint")
	// ErrMalformed: the body is not a JSON object, or a field that reaches the prompt is not
	// well-formed JSON or nests deeper than MaxDepth levels.
	ErrMalformed = errors.New("affinity: malformed request body")
	// ErrTooCostly: the objects the walk writes would scan more than four times the body's
	// length plus 4 MiB (deep nesting, or white space that the canonical stream drops): the
	// request is routed without affinity rather than read again at every level.
	ErrTooCostly = errors.New("affinity: request body too costly to fingerprint")
)

// Checkpoint marks a prefix of a request's canonical stream.
type Checkpoint struct {
	// Hash is the XXH64 (seed 0) of the first Prefix bytes of the canonical stream: two
	// requests share the prefix exactly when they share the hash (up to 64-bit collisions).
	Hash uint64
	// Prefix is the prefix length in bytes of the canonical stream (not tokens, not bytes of
	// the body).
	Prefix int
	// EndsMessage reports that the prefix ends with a message (or the system prompt).
	EndsMessage bool
}

// Print is the fingerprint of one request: its canonical stream and the checkpoints placed
// on it. Reuse a Print from one request to the next: once its buffers have grown,
// Fingerprint allocates nothing. A Print holds the request's prompt text in its canonical
// stream until the next Fingerprint; the index never stores it.
type Print struct {
	// Checkpoints are in ascending Prefix order, at most MaxCheckpoints, none shorter than
	// MinPrefixBytes.
	Checkpoints []Checkpoint
	// Scanned is the length in bytes of the canonical stream that was hashed (at most
	// MaxScanBytes): the "scanned request" a match must cover half of.
	Scanned int
	// Truncated reports that the canonical stream was longer than MaxScanBytes.
	Truncated bool
	// Conversation is the XXH64 of the canonical stream up to the end of the first user
	// message: the same for every turn of a conversation (later turns only append), and
	// different for conversations that start differently even under one system prompt. A
	// request without a user message in its scanned stream uses the whole scanned stream.
	Conversation uint64
	// ConversationPrefix is the length in canonical bytes of the prefix Conversation hashes:
	// what precedes it (tools, system prompt) is what conversations may share.
	ConversationPrefix int
	// TurnPrefix is the length in canonical bytes of the conversation up to its last
	// assistant message: the request of the previous turn, whose answer that message is
	// (0 when no message before it is an assistant's). A follow-up turn only appends that
	// answer and a new message, so a router that served the previous turn knows where a
	// prefix at least this long went.
	TurnPrefix int

	c      canon
	digest xxhash.Digest
}

// Canonical returns the canonical stream that was hashed (Scanned bytes), valid until the
// next Fingerprint with p.
func (p *Print) Canonical() []byte { return p.c.out[:p.Scanned] }

func (p *Print) clear() {
	p.Checkpoints, p.Scanned, p.Truncated, p.Conversation, p.ConversationPrefix, p.TurnPrefix = p.Checkpoints[:0], 0, false, 0, 0, 0
	p.c.out = p.c.out[:0]
}

// Fingerprint fills p (which it resets) with the fingerprint of body, the JSON body of a
// request to endpoint ep: chat completions ("messages", "tools", "functions",
// "prompt_cache_key"), the Responses API ("input", "instructions", "tools",
// "previous_response_id", "conversation", "prompt_cache_key") or the Messages API
// ("messages", "system", "tools"). prompt and system are the spans of the conversation and
// of the system prompt that openai.Peek found in body (openai.Request.Prompt and .System);
// they spare a second scan of those values and may be zero, in which case the members are
// found by name.
//
// The body should be one openai.Peek accepted: Fingerprint checks only the structure it
// walks. It returns ErrUnsupportedEndpoint for other endpoints, ErrMalformed for a body it
// cannot walk and ErrTooCostly for one that would cost more than a few times its length to
// walk; then p is empty.
//
// The canonical stream is JSON: {"prompt_cache_key":…,"tools":[…],"system":…,"messages":[…]}
// with the members the endpoint has, in that order, whatever their order in the body. Every
// object has its keys sorted and only the last of duplicate keys; strings are written in one
// spelling per text (raw UTF-8, only '"', '\\' and control characters escaped); numbers as
// Python's json module writes what it reads (an integer as its exact digits, any other number
// as its float64's repr: 1.0, 1e0 and 1.00 are "1.0", 1 is "1"), as the Python engines that
// render the prompt see them; white space is dropped. Fields that do not reach the prompt (model,
// temperature, max_tokens, stream, metadata, user, tool_choice, …) are not in it, nor are
// null members and empty arrays of messages and parts, "cache_control", and Responses item
// ids and statuses. A string content and a list of one text part are the same content.
//
// Checkpoints are placed at every multiple of CheckpointEvery and at the end of every message
// and of the system prompt, from MinPrefixBytes on. When there are more than MaxCheckpoints,
// every fixed one is kept (at most 64) and the message ends nearest the end of the stream
// fill the rest: a follow-up turn extends the whole previous conversation, so the longest
// shared prefixes are the ones worth marking.
func Fingerprint(ep openai.Endpoint, body []byte, prompt, system openai.Span, p *Print) error {
	p.clear()
	switch ep {
	case openai.ChatCompletions, openai.Responses, openai.Messages:
	default:
		return ErrUnsupportedEndpoint
	}
	c := &p.c
	c.reset(ep, body, MaxScanBytes)
	steps.Add(len(body)) // the scan of the top-level members, at most the body
	switch r := c.request(prompt, system); r {
	case stopFull:
		p.Truncated = true
	case stopCostly:
		p.clear()
		return ErrTooCostly
	default:
		if r < 0 {
			p.clear()
			return ErrMalformed
		}
	}
	p.Scanned = len(c.out)
	p.place()
	p.hash()
	return nil
}

// place fills p.Checkpoints with the prefix lengths of the checkpoints (hashes to come).
func (p *Print) place() {
	fixed := p.Scanned / CheckpointEvery
	steps.Add(fixed + len(p.c.bounds) + 1)
	// Message ends that are not also fixed checkpoints, and how many of them to keep.
	free := 0
	for _, b := range p.c.bounds {
		if b >= MinPrefixBytes && b%CheckpointEvery != 0 {
			free++
		}
	}
	skip := max(free-(MaxCheckpoints-fixed), 0) // the earliest ones go
	bounds := p.c.bounds
	for k, bi := 1, 0; ; {
		next, b := math.MaxInt, math.MaxInt
		if k <= fixed {
			next = k * CheckpointEvery
		}
		if bi < len(bounds) {
			b = bounds[bi]
		}
		switch {
		case next == math.MaxInt && b == math.MaxInt:
			return
		case next < b:
			p.Checkpoints = append(p.Checkpoints, Checkpoint{Prefix: next})
			k++
		case next == b:
			p.Checkpoints = append(p.Checkpoints, Checkpoint{Prefix: b, EndsMessage: true})
			k, bi = k+1, bi+1
		default:
			bi++
			switch {
			case b < MinPrefixBytes:
			case skip > 0:
				skip--
			default:
				p.Checkpoints = append(p.Checkpoints, Checkpoint{Prefix: b, EndsMessage: true})
			}
		}
	}
}

// hash computes the checkpoints' hashes and the conversation key in one pass over the
// canonical stream: each checkpoint's hash continues the digest of the previous one.
func (p *Print) hash() {
	out := p.c.out[:p.Scanned]
	steps.Add(len(out) + 1)
	conv := p.c.convEnd
	if conv < 0 {
		conv = p.Scanned
	}
	p.ConversationPrefix = conv
	p.TurnPrefix = p.c.turnEnd
	d := &p.digest
	d.Reset()
	at, convDone := 0, false
	for k := range p.Checkpoints {
		cp := &p.Checkpoints[k]
		if !convDone && conv <= cp.Prefix {
			d.Write(out[at:conv])
			at = conv
			p.Conversation, convDone = d.Sum64(), true
		}
		d.Write(out[at:cp.Prefix])
		at = cp.Prefix
		cp.Hash = d.Sum64()
	}
	if !convDone {
		d.Write(out[at:conv])
		p.Conversation = d.Sum64()
	}
}
