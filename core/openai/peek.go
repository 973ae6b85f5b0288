package openai

import (
	"strconv"
	"unicode/utf8"

	"github.com/sluice-gw/sluice/internal/steps"
)

// Span is the byte range [Start, End) of a value in the body Peek read. The zero Span is
// absent: a present value is never empty.
type Span struct{ Start, End int }

// Len returns the length of the value in bytes (0 when absent).
func (s Span) Len() int { return s.End - s.Start }

// Present reports whether the value was in the body.
func (s Span) Present() bool { return s.End > s.Start }

// Of returns the value's bytes in body (nil when absent).
func (s Span) Of(body []byte) []byte {
	if !s.Present() {
		return nil
	}
	return body[s.Start:s.End:s.End]
}

// Request is what Peek reads from a body. Byte slices alias the body when the JSON string had
// no escapes, and the Request's own buffer otherwise, so they are valid while both are
// unchanged; reuse a Request (keep it in the pooled request context) and Peek allocates
// nothing once its buffer has grown to the decoded strings it needs.
type Request struct {
	Endpoint Endpoint

	// Model is the "model" string, escapes decoded: the alias routing looks up.
	Model []byte
	// ModelSpan is the "model" string token in the body, quotes included (what RewriteModel
	// replaces).
	ModelSpan Span

	// Stream is "stream" (false when absent or null).
	Stream bool
	// IncludeUsage is "stream_options"."include_usage" (false when absent or null).
	IncludeUsage bool

	// Output caps in tokens, 0 when absent or null (a present value is at least 1, but for
	// max_tokens on completions, where 0 with "echo" asks for the prompt's log probabilities
	// and no generated token): "max_tokens" (chat, completions, messages),
	// "max_completion_tokens" (chat) and "max_output_tokens" (responses). OutputCap picks the
	// one the endpoint honours.
	MaxTokens           int64
	MaxCompletionTokens int64
	MaxOutputTokens     int64

	// Prompt is the value that carries the conversation, for prefix fingerprinting:
	// "messages" (chat, messages: an array), "input" (responses: a string or an array of
	// items; embeddings: a string or an array), "prompt" (completions: a string or an array).
	Prompt Span
	// System is the text that precedes Prompt in the model's prompt: "system" (messages: a
	// string or an array of text blocks) or "instructions" (responses: a string). Chat and
	// completions carry it inside Prompt.
	System Span

	// PromptCacheKey is "prompt_cache_key" (chat, responses), escapes decoded; nil when absent.
	PromptCacheKey []byte
	// User is "user" (chat, completions, embeddings, responses), escapes decoded; nil when
	// absent.
	User []byte

	scratch []byte // decoded strings that had escapes
	// Where Model, PromptCacheKey and User are, in the body or in scratch (Rebase).
	model, cacheKey, user strRef
}

// OutputCap returns the output cap in tokens the endpoint honours, 0 when none (or 0 given):
// max_completion_tokens before max_tokens on chat (OpenAI deprecated the latter for it),
// max_output_tokens on responses, max_tokens elsewhere.
func (r *Request) OutputCap() int64 {
	switch {
	case r.Endpoint == Responses:
		return r.MaxOutputTokens
	case r.MaxCompletionTokens > 0:
		return r.MaxCompletionTokens
	}
	return r.MaxTokens
}

// param is a top-level parameter Peek reads.
type param uint8

const (
	pNone param = iota
	pModel
	pStream
	pStreamOptions
	pMaxTokens
	pMaxCompletionTokens
	pMaxOutputTokens
	pMessages
	pInput
	pPrompt
	pInstructions
	pSystem
	pPromptCacheKey
	pUser
	pTemperature
	pTopP
	pTopK
	pN
	pPresencePenalty
	pFrequencyPenalty
	numParams
)

var paramNames = [numParams]string{
	pModel:               "model",
	pStream:              "stream",
	pStreamOptions:       "stream_options",
	pMaxTokens:           "max_tokens",
	pMaxCompletionTokens: "max_completion_tokens",
	pMaxOutputTokens:     "max_output_tokens",
	pMessages:            "messages",
	pInput:               "input",
	pPrompt:              "prompt",
	pInstructions:        "instructions",
	pSystem:              "system",
	pPromptCacheKey:      "prompt_cache_key",
	pUser:                "user",
	pTemperature:         "temperature",
	pTopP:                "top_p",
	pTopK:                "top_k",
	pN:                   "n",
	pPresencePenalty:     "presence_penalty",
	pFrequencyPenalty:    "frequency_penalty",
}

func lookupParam(name []byte) param {
	switch string(name) {
	case "model":
		return pModel
	case "stream":
		return pStream
	case "stream_options":
		return pStreamOptions
	case "max_tokens":
		return pMaxTokens
	case "max_completion_tokens":
		return pMaxCompletionTokens
	case "max_output_tokens":
		return pMaxOutputTokens
	case "messages":
		return pMessages
	case "input":
		return pInput
	case "prompt":
		return pPrompt
	case "instructions":
		return pInstructions
	case "system":
		return pSystem
	case "prompt_cache_key":
		return pPromptCacheKey
	case "user":
		return pUser
	case "temperature":
		return pTemperature
	case "top_p":
		return pTopP
	case "top_k":
		return pTopK
	case "n":
		return pN
	case "presence_penalty":
		return pPresencePenalty
	case "frequency_penalty":
		return pFrequencyPenalty
	}
	return pNone
}

func bits(ps ...param) (m uint32) {
	for _, p := range ps {
		m |= 1 << p
	}
	return m
}

// endpointParams are the parameters each endpoint's API defines among those Peek reads; other
// keys are skipped (validated as JSON only), whatever their name.
var endpointParams = [...]uint32{
	ChatCompletions: bits(pModel, pStream, pStreamOptions, pMaxTokens, pMaxCompletionTokens,
		pMessages, pTemperature, pTopP, pN, pPresencePenalty, pFrequencyPenalty,
		pPromptCacheKey, pUser),
	Completions: bits(pModel, pStream, pStreamOptions, pMaxTokens, pPrompt, pTemperature, pTopP,
		pN, pPresencePenalty, pFrequencyPenalty, pUser),
	Embeddings: bits(pModel, pStream, pInput, pUser),
	Responses: bits(pModel, pStream, pStreamOptions, pMaxOutputTokens, pInput, pInstructions,
		pTemperature, pTopP, pPromptCacheKey, pUser),
	Messages: bits(pModel, pStream, pMaxTokens, pMessages, pSystem, pTemperature, pTopP, pTopK),
}

// strRef locates a decoded string: in the body, or in Request.scratch when it had escapes
// (located by offsets because scratch may move while it grows).
type strRef struct {
	lo, hi           int
	set, fromScratch bool
}

func (s strRef) bytes(body, scratch []byte) []byte {
	switch {
	case !s.set:
		return nil
	case s.fromScratch:
		return scratch[s.lo:s.hi:s.hi]
	}
	return body[s.lo:s.hi:s.hi]
}

// peeker is the state of one Peek.
type peeker struct {
	scanner
	r               *Request
	ep              Endpoint
	seen            uint32 // parameters met, to refuse duplicates
	model, cacheKey strRef
	user            strRef
	maxTokensSet    bool // max_tokens present and not null
	streamOptions   bool // stream_options present and not null

	// Decoded keys, and a message's role and type, when they have escapes (here rather than
	// in the functions' frames so that they are zeroed once per Peek).
	keyBuf, roleBuf, typeBuf nameBuf
}

// Peek reads body, the JSON body of a request to endpoint ep, into r (which it resets), and
// validates what the endpoint's routing and the upstream's contract depend on. It returns nil,
// a *ValidationError (status 400) naming the parameter at fault, or ErrUnknownEndpoint.
//
// The whole body is checked to be well-formed JSON (RFC 8259, UTF-8) whose top level is an
// object; a malformed body is refused as such (CodeInvalidJSON, with the byte offset) even
// when something else is wrong with it too. Of the other faults the first met is reported,
// then the missing parameters. Peek does not decode into maps or structs: it walks the body
// once, skipping values it does not read, and allocates nothing on success once r's buffer
// has grown (errors allocate).
func Peek(ep Endpoint, body []byte, r *Request) error {
	if !ep.valid() {
		return ErrUnknownEndpoint
	}
	*r = Request{Endpoint: ep, scratch: r.scratch[:0]}
	p := peeker{scanner: scanner{data: body, synOff: -1}, r: r, ep: ep}
	p.object()
	r.model, r.cacheKey, r.user = p.model, p.cacheKey, p.user
	r.Rebase(body)
	return p.result()
}

// Rebase points Model, PromptCacheKey and User, where they alias the body Peek read, at the
// same bytes of body, a copy of that body (the spans hold for it as they are): a caller that
// overwrites the body it peeked, as a rewrite of "model" in place does, rebases r on a copy
// made before, or the slices read whatever the overwrite moved under them.
func (r *Request) Rebase(body []byte) {
	r.Model = r.model.bytes(body, r.scratch)
	r.PromptCacheKey = r.cacheKey.bytes(body, r.scratch)
	r.User = r.user.bytes(body, r.scratch)
}

// result returns the error of the walk: a syntax error first, then the first semantic
// error, then what is missing or inconsistent.
func (p *peeker) result() error {
	if p.synOff >= 0 {
		return syntaxError(p.synOff, p.synMsg)
	}
	if p.sem != nil {
		return p.sem
	}
	if p.seen&(1<<pModel) == 0 {
		return missing("model")
	}
	switch p.ep {
	case ChatCompletions, Messages:
		if p.seen&(1<<pMessages) == 0 {
			return missing("messages")
		}
	case Completions:
		if p.seen&(1<<pPrompt) == 0 {
			return missing("prompt")
		}
	case Embeddings:
		if p.seen&(1<<pInput) == 0 {
			return missing("input")
		}
	}
	if p.ep == Messages && !p.maxTokensSet {
		return missing("max_tokens")
	}
	if p.streamOptions && !p.r.Stream {
		return &ValidationError{Status: 400, Param: "stream_options", Code: CodeInvalidValue, Offset: -1,
			Message: "stream_options: only allowed when stream is true"}
	}
	return nil
}

func missing(param string) *ValidationError {
	return &ValidationError{Status: 400, Param: param, Code: CodeMissingParameter, Offset: -1,
		Message: param + ": missing required parameter"}
}

// object walks the top-level value.
func (p *peeker) object() {
	d := p.data
	if m := byteOrderMark(d); m != "" {
		p.syntax(0, m)
		return
	}
	i := skipWS(d, 0)
	if i >= len(d) {
		if len(d) == 0 {
			p.syntax(0, synEmpty)
		} else {
			p.syntax(len(d), synEOF)
		}
		return
	}
	if d[i] != '{' {
		end := p.skipValue(i, 0)
		if end < 0 {
			return
		}
		if end = skipWS(d, end); end < len(d) {
			p.syntax(end, synTrailing)
			return
		}
		p.fail(CodeInvalidType, "", "the request body must be a JSON object")
		return
	}
	i++
	for first := true; ; first = false {
		key, esc, vs, done := p.member(i, first)
		if vs < 0 {
			return
		}
		if done {
			i = vs
			break
		}
		if i = p.topMember(key, esc, vs); i < 0 {
			return
		}
	}
	if i = skipWS(d, i); i < len(d) {
		p.syntax(i, synTrailing)
	}
}

// topMember reads the value at vs of the top-level member with key token key and returns the
// index after the value (-1 on a syntax error).
func (p *peeker) topMember(key []byte, escaped bool, vs int) int {
	name := keyName(key, escaped, &p.keyBuf)
	k := lookupParam(name)
	known := endpointParams[p.ep]
	if k == pNone {
		// A key that differs from a parameter's name only in case is refused: Go servers
		// (encoding/json) match struct fields case-insensitively, so one could read it as the
		// parameter while sluice did not, or read it instead of the one sluice did.
		if f := foldParam(name, known); f != pNone {
			p.fail(CodeAmbiguousParam, paramNames[f], paramNames[f]+": "+ambiguousKey(name, paramNames[f]))
		}
		return p.skipValue(vs, 1)
	}
	if known&(1<<k) == 0 {
		return p.skipValue(vs, 1)
	}
	if p.seen&(1<<k) != 0 {
		// Servers differ on which of two same-named members they read (most keep the last):
		// routing on one while the upstream reads the other would be a smuggling hole.
		p.fail(CodeDuplicateParam, paramNames[k], paramNames[k]+
			": named more than once; the body must name each parameter once")
	}
	p.seen |= 1 << k
	r := p.r
	switch k {
	case pModel:
		return p.modelValue(vs)
	case pStream:
		return p.boolean(vs, "stream", &r.Stream)
	case pStreamOptions:
		return p.streamOptionsValue(vs)
	case pMaxTokens:
		// OpenAI's completions take max_tokens 0: with echo, the prompt is scored (its log
		// probabilities) and nothing generated, which vLLM serves too.
		least := int64(1)
		if p.ep == Completions {
			least = 0
		}
		end := p.count(vs, "max_tokens", least, &r.MaxTokens)
		p.maxTokensSet = p.data[vs] != 'n'
		return end
	case pMaxCompletionTokens:
		return p.count(vs, "max_completion_tokens", 1, &r.MaxCompletionTokens)
	case pMaxOutputTokens:
		return p.count(vs, "max_output_tokens", 1, &r.MaxOutputTokens)
	case pN:
		var n int64
		return p.count(vs, "n", 1, &n)
	case pTopK:
		var n int64
		return p.count(vs, "top_k", 0, &n)
	case pTemperature:
		if p.ep == Messages {
			return p.number(vs, "temperature", 0, 1) // Anthropic's range
		}
		return p.number(vs, "temperature", 0, 2)
	case pTopP:
		return p.number(vs, "top_p", 0, 1)
	case pPresencePenalty:
		return p.number(vs, "presence_penalty", -2, 2)
	case pFrequencyPenalty:
		return p.number(vs, "frequency_penalty", -2, 2)
	case pMessages:
		end := p.messageList(vs)
		r.Prompt = Span{vs, max(end, vs)}
		return end
	case pInput:
		var end int
		if p.ep == Responses {
			end = p.responsesInput(vs)
		} else {
			end = p.textOrTokens(vs, "input", true)
		}
		if p.data[vs] != 'n' {
			r.Prompt = Span{vs, max(end, vs)}
		}
		return end
	case pPrompt:
		// OpenAI's API and the SDKs' types take a null prompt (it stands for
		// "<|endoftext|>", the start of a document): present, and nothing to fingerprint.
		if p.data[vs] == 'n' {
			return p.scanLiteral(vs)
		}
		end := p.textOrTokens(vs, "prompt", false)
		r.Prompt = Span{vs, max(end, vs)}
		return end
	case pInstructions:
		end := p.str(vs, "instructions", nil)
		if p.data[vs] == '"' {
			r.System = Span{vs, max(end, vs)}
		}
		return end
	case pSystem:
		end := p.systemValue(vs)
		if p.data[vs] != 'n' {
			r.System = Span{vs, max(end, vs)}
		}
		return end
	case pPromptCacheKey:
		return p.str(vs, "prompt_cache_key", &p.cacheKey)
	case pUser:
		return p.str(vs, "user", &p.user)
	}
	return p.skipValue(vs, 1)
}

// foldParam returns the parameter among known whose name key equals under encoding/json's
// case folding without being equal to it (ASCII case, and U+017F and U+212A, which fold to
// 's' and 'k'), or pNone.
func foldParam(key []byte, known uint32) param {
	if !mayFold(key) {
		return pNone
	}
	for k := pModel; k < numParams; k++ {
		if known&(1<<k) != 0 && foldEqual(key, paramNames[k]) {
			return k
		}
	}
	return pNone
}

// foldedName returns the one of names (lowercase ASCII, each different from key) that key
// equals under encoding/json's case folding, or "". It guards the members sluice reads inside
// a parameter (a message's role, a part's type) as foldParam guards the parameters.
func foldedName(key []byte, names ...string) string {
	if !mayFold(key) {
		return ""
	}
	for _, n := range names {
		if foldEqual(key, n) {
			return n
		}
	}
	return ""
}

// mayFold reports whether key has a byte that case folding could change: every name sluice
// reads is lowercase ASCII, so a key without one matches a name only by equality.
func mayFold(key []byte) bool {
	for _, c := range key {
		if 'A' <= c && c <= 'Z' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// ambiguousKey says why a key that folds to name is refused.
func ambiguousKey(key []byte, name string) string {
	return "the key " + strconv.Quote(string(key)) + " differs from " + strconv.Quote(name) +
		" only in case, and some servers would read it as " + strconv.Quote(name)
}

// foldEqual reports whether key folds to name, a lowercase ASCII name.
func foldEqual(key []byte, name string) bool {
	steps.Add(len(key) + 1)
	j := 0
	for i := 0; i < len(key); j++ {
		c := key[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			i++
		} else {
			r, n := utf8.DecodeRune(key[i:])
			i += n
			switch r {
			case '\u017f': // LATIN SMALL LETTER LONG S
				c = 's'
			case '\u212a': // KELVIN SIGN
				c = 'k'
			default:
				return false
			}
		}
		if j >= len(name) || name[j] != c {
			return false
		}
	}
	return j == len(name)
}

// modelValue reads "model": a non-empty string without control characters or lone
// surrogates (a model id has neither, and servers would read them differently).
func (p *peeker) modelValue(vs int) int {
	d := p.data
	if d[vs] != '"' {
		end := p.skipValue(vs, 1)
		p.fail(CodeInvalidType, "model", "model: expected a non-empty string")
		return end
	}
	end, esc := p.scanString(vs)
	if end < 0 {
		return -1
	}
	if end-vs == 2 {
		p.fail(CodeInvalidValue, "model", "model: expected a non-empty string")
	}
	if p.model.set {
		return end // a duplicate, refused already
	}
	p.r.ModelSpan = Span{vs, end}
	if !esc {
		p.model = strRef{lo: vs + 1, hi: end - 1, set: true}
		return end
	}
	var lone bool
	p.model, lone = p.decode(vs, end)
	if lone {
		p.fail(CodeInvalidValue, "model", `model: contains a \u escape of a lone UTF-16 surrogate`)
		return end
	}
	for _, c := range p.r.scratch[p.model.lo:p.model.hi] {
		if c < 0x20 || c == 0x7f {
			p.fail(CodeInvalidValue, "model", "model: must not contain control characters")
			break
		}
	}
	return end
}

// decode appends the text of the escaped string token d[vs:end] to the scratch buffer;
// lone reports a \u escape of a lone surrogate (decoded as U+FFFD).
func (p *peeker) decode(vs, end int) (ref strRef, lone bool) {
	lo := len(p.r.scratch)
	p.r.scratch, lone = unescape(p.r.scratch, p.data[vs:end])
	return strRef{lo: lo, hi: len(p.r.scratch), set: true, fromScratch: true}, lone
}

// str reads an optional string parameter into ref (nil: validate only). Lone surrogates are
// kept as U+FFFD, as encoding/json decodes them.
func (p *peeker) str(vs int, name string, ref *strRef) int {
	d := p.data
	switch d[vs] {
	case 'n':
		return p.scanLiteral(vs)
	case '"':
		end, esc := p.scanString(vs)
		if end < 0 || ref == nil || ref.set {
			return end
		}
		if !esc {
			*ref = strRef{lo: vs + 1, hi: end - 1, set: true}
		} else {
			*ref, _ = p.decode(vs, end)
		}
		return end
	}
	end := p.skipValue(vs, 1)
	p.fail(CodeInvalidType, name, name+": expected a string")
	return end
}

// boolean reads an optional boolean parameter (null: false).
func (p *peeker) boolean(vs int, name string, dst *bool) int {
	switch p.data[vs] {
	case 't':
		*dst = true
		return p.scanLiteral(vs)
	case 'f':
		*dst = false
		return p.scanLiteral(vs)
	case 'n':
		return p.scanLiteral(vs)
	}
	end := p.skipValue(vs, 1)
	p.fail(CodeInvalidType, name, name+": expected a boolean")
	return end
}

// count reads an optional integer parameter of at least min (null: absent, *dst unchanged).
// A number written with a fraction or an exponent is the integer it equals (see intValue).
func (p *peeker) count(vs int, name string, min int64, dst *int64) int {
	d := p.data
	switch kindAt(d, vs) {
	case kindNull:
		return p.scanLiteral(vs)
	case kindNumber:
		end, integer := p.scanNumber(vs)
		if end < 0 {
			return -1
		}
		switch n, v := intValue(d[vs:end], integer); {
		case v == intFraction:
			p.fail(CodeInvalidType, name, name+": expected an integer")
		case v == intAbove:
			p.fail(CodeAboveMaxInteger, name, name+": must be at most 9223372036854775807")
		case v == intBelow || n < min:
			p.fail(CodeBelowMinInteger, name, name+": must be at least "+strconv.FormatInt(min, 10))
		default:
			*dst = n
		}
		return end
	}
	end := p.skipValue(vs, 1)
	p.fail(CodeInvalidType, name, name+": expected an integer")
	return end
}

// number reads an optional number parameter within [lo, hi] (null: absent).
func (p *peeker) number(vs int, name string, lo, hi float64) int {
	d := p.data
	switch kindAt(d, vs) {
	case kindNull:
		return p.scanLiteral(vs)
	case kindNumber:
		end, _ := p.scanNumber(vs)
		if end < 0 {
			return -1
		}
		switch f := parseFloat(d[vs:end]); {
		case f < lo:
			p.fail(CodeBelowMinDecimal, name, rangeMessage(name, lo, hi))
		case f > hi:
			p.fail(CodeAboveMaxDecimal, name, rangeMessage(name, lo, hi))
		}
		return end
	}
	end := p.skipValue(vs, 1)
	p.fail(CodeInvalidType, name, name+": expected a number")
	return end
}

func rangeMessage(name string, lo, hi float64) string {
	return name + ": expected a number between " + strconv.FormatFloat(lo, 'g', -1, 64) +
		" and " + strconv.FormatFloat(hi, 'g', -1, 64)
}

// streamOptionsValue reads "stream_options": null or an object whose "include_usage" is a
// boolean.
func (p *peeker) streamOptionsValue(vs int) int {
	d := p.data
	switch d[vs] {
	case 'n':
		return p.scanLiteral(vs)
	case '{':
	default:
		end := p.skipValue(vs, 1)
		p.fail(CodeInvalidType, "stream_options", "stream_options: expected an object")
		return end
	}
	p.streamOptions = true
	seen := false
	i := vs + 1
	for first := true; ; first = false {
		key, esc, v, done := p.member(i, first)
		if v < 0 || done {
			return v
		}
		name := keyName(key, esc, &p.keyBuf)
		if foldedName(name, "include_usage") != "" {
			p.fail(CodeAmbiguousParam, "stream_options.include_usage",
				"stream_options.include_usage: "+ambiguousKey(name, "include_usage"))
		}
		if string(name) == "include_usage" {
			if seen {
				p.fail(CodeDuplicateParam, "stream_options.include_usage",
					"stream_options.include_usage: named more than once; the body must name each parameter once")
			}
			seen = true
			i = p.boolean(v, "stream_options.include_usage", &p.r.IncludeUsage)
		} else {
			i = p.skipValue(v, 2)
		}
		if i < 0 {
			return -1
		}
	}
}
