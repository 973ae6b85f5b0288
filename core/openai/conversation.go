package openai

import "strconv"

// at names a value inside the body for an error's param: list, list[idx], list[idx][sub-1],
// list[idx].field.
type at struct {
	list  string
	idx   int // -1: none
	sub   int // second index + 1; 0: none
	field string
}

func (a at) String() string {
	s := a.list
	if a.idx >= 0 {
		s += "[" + strconv.Itoa(a.idx) + "]"
	}
	if a.sub > 0 {
		s += "[" + strconv.Itoa(a.sub-1) + "]"
	}
	if a.field != "" {
		s += "." + a.field
	}
	return s
}

func (a at) dot(field string) at { a.field = field; return a }

// verr builds a 400 whose message is the param, ": " and what is wrong.
func verr(code, param, what string) *ValidationError {
	return &ValidationError{Status: 400, Param: param, Code: code, Message: param + ": " + what, Offset: -1}
}

// failAt records a semantic error at a; the path is built only here, on the error branch.
func (p *peeker) failAt(code string, a at, what string) {
	if p.sem == nil {
		p.sem = verr(code, a.String(), what)
	}
}

func (p *peeker) failErr(e *ValidationError) {
	if p.sem == nil {
		p.sem = e
	}
}

// messageList reads "messages" (chat, messages): a non-empty array of messages.
func (p *peeker) messageList(vs int) int {
	d := p.data
	if d[vs] != '[' {
		end := p.skipValue(vs, 1)
		p.fail(CodeInvalidType, "messages", "messages: expected an array of messages")
		return end
	}
	i := vs + 1
	for idx := 0; ; idx++ {
		v, done := p.element(i, idx == 0)
		if v < 0 {
			return -1
		}
		if done {
			if idx == 0 {
				p.fail(CodeEmptyArray, "messages", "messages: expected a non-empty array of messages")
			}
			return v
		}
		if i = p.message(v, at{list: "messages", idx: idx}); i < 0 {
			return -1
		}
	}
}

// responsesInput reads the Responses API "input": null, a string (one user message) or an
// array of input items.
func (p *peeker) responsesInput(vs int) int {
	d := p.data
	switch d[vs] {
	case 'n':
		return p.scanLiteral(vs)
	case '"':
		end, _ := p.scanString(vs)
		return end
	case '[':
	default:
		end := p.skipValue(vs, 1)
		p.fail(CodeInvalidType, "input", "input: expected a string or an array of input items")
		return end
	}
	i := vs + 1
	for idx := 0; ; idx++ {
		v, done := p.element(i, idx == 0)
		if v < 0 || done {
			return v
		}
		if i = p.message(v, at{list: "input", idx: idx}); i < 0 {
			return -1
		}
	}
}

// roleAllowed reports whether role is a role of the endpoint's messages: OpenAI chat's
// system, developer, user, assistant, tool and (deprecated) function; the Responses API's
// message items' user, assistant, system and developer; Anthropic's user and assistant
// (its system prompt is the top-level "system").
func roleAllowed(ep Endpoint, role []byte) bool {
	switch string(role) {
	case "user", "assistant":
		return true
	case "system", "developer":
		return ep != Messages
	case "tool", "function":
		return ep == ChatCompletions
	}
	return false
}

func roleChoices(ep Endpoint) string {
	switch ep {
	case Messages:
		return `expected "user" or "assistant"`
	case Responses:
		return `expected "user", "assistant", "system" or "developer"`
	}
	return `expected "system", "developer", "user", "assistant", "tool" or "function"`
}

func partWord(ep Endpoint) string {
	if ep == Messages {
		return "content blocks"
	}
	return "content parts"
}

// message reads one element of "messages" (or one Responses input item) at d[v], which the
// caller found in an array at level 2. A message is an object with a string "role" among the
// endpoint's roles and a "content" that is a string or an array of content parts (objects
// with a string "type"); on chat, an assistant message with tool_calls, function_call, refusal
// or audio (any of them not null) may have a null or absent content, and a function message a
// null one. A Responses item whose "type" is not "message" (a function call, a tool output, a
// reasoning item), or that has an "id" but neither type nor role (an item reference), is only
// checked to be an object; a null type is an absent one. Duplicate role, content or type
// members are refused, as on the top level.
func (p *peeker) message(v int, a at) int {
	d := p.data
	if d[v] != '{' {
		end := p.skipValue(v, 2)
		if p.ep == Responses {
			p.failAt(CodeInvalidType, a, "expected an object (an input item)")
		} else {
			p.failAt(CodeInvalidType, a, "expected an object (a message)")
		}
		return end
	}
	var (
		role, typ         []byte
		roleKind, content valueKind // kindInvalid: absent
		typeKind          valueKind
		toolCalls         bool // chat: non-null tool_calls or function_call
		answered          bool // chat: a non-null refusal or audio, the assistant's answer without text
		hasID             bool // a Responses item with a string "id"
		partsErr          *ValidationError
		seen              uint8
		dup               string
		folded            string // a member sluice reads, named in another case
		foldedKey         string
	)
	i := v + 1
	for first := true; ; first = false {
		key, esc, mv, done := p.member(i, first)
		if mv < 0 {
			return -1
		}
		if done {
			i = mv
			break
		}
		name := keyName(key, esc, &p.keyBuf) // valid until the next key is read
		var bit uint8
		switch string(name) {
		case "role":
			bit = 1
			roleKind = kindAt(d, mv)
			i, role = p.smallString(mv, roleKind, &p.roleBuf)
		case "content":
			bit = 2
			content = kindAt(d, mv)
			if content == kindArray {
				i, partsErr = p.parts(mv, 4, a.dot("content"), false)
			} else {
				i = p.skipValue(mv, 3)
			}
		case "tool_calls", "function_call":
			toolCalls = toolCalls || d[mv] != 'n'
			i = p.skipValue(mv, 3)
		case "refusal", "audio":
			answered = answered || d[mv] != 'n'
			i = p.skipValue(mv, 3)
		case "id":
			hasID = p.ep == Responses && d[mv] == '"'
			i = p.skipValue(mv, 3)
		case "type":
			if p.ep != Responses {
				i = p.skipValue(mv, 3)
				break
			}
			bit = 4
			typeKind = kindAt(d, mv)
			i, typ = p.smallString(mv, typeKind, &p.typeBuf)
		default:
			if f := p.foldedMember(name); f != "" && folded == "" {
				folded, foldedKey = f, string(name)
			}
			i = p.skipValue(mv, 3)
		}
		if i < 0 {
			return -1
		}
		if seen&bit != 0 && dup == "" {
			dup = memberNames[bit]
		}
		seen |= bit
	}

	switch {
	case dup != "":
		p.failAt(CodeDuplicateParam, a.dot(dup), "named more than once; a message must name each member once")
		return i
	case folded != "":
		p.failAt(CodeAmbiguousParam, a.dot(folded), ambiguousKey([]byte(foldedKey), folded))
		return i
	case typeKind == kindInvalid || typeKind == kindNull:
		// No type: a message, or an item reference ({"id": ...}), whose type OpenAI's API
		// lets it leave out or give as null, and which the SDKs build without one
		// (openai-go's ResponseInputItemParamOfItemReference). An item with neither role nor
		// type that has an id is taken for a reference, and only checked to be an object.
		if roleKind == kindInvalid && hasID {
			return i
		}
	case typeKind != kindString:
		p.failAt(CodeInvalidType, a.dot("type"), "expected a string")
		return i
	case string(typ) != "message":
		return i
	}
	switch {
	case roleKind == kindInvalid:
		p.failAt(CodeMissingParameter, a.dot("role"), "missing required parameter")
		return i
	case roleKind != kindString:
		p.failAt(CodeInvalidType, a.dot("role"), "expected a string")
		return i
	case !roleAllowed(p.ep, role):
		p.failAt(CodeInvalidValue, a.dot("role"), roleChoices(p.ep))
		return i
	}
	if partsErr != nil {
		p.failErr(partsErr)
		return i
	}
	chat := p.ep == ChatCompletions
	assistant := string(role) == "assistant"
	// A chat assistant message stands without text when it carries the answer otherwise:
	// tool calls, a refusal, or audio (an earlier audio answer, by id). openai-go's
	// ChatCompletionMessage.ToParam builds such messages, with content left out.
	textless := chat && assistant && (toolCalls || answered)
	switch content {
	case kindString, kindArray:
	case kindInvalid:
		if !textless {
			p.failAt(CodeMissingParameter, a.dot("content"), "missing required parameter")
		}
	case kindNull:
		switch {
		case textless || chat && string(role) == "function":
		case chat && assistant:
			p.failAt(CodeInvalidType, a.dot("content"), "null is allowed only in an assistant message with tool_calls, function_call, refusal or audio")
		default:
			p.failAt(CodeInvalidType, a.dot("content"), "expected a string or an array of "+partWord(p.ep))
		}
	default:
		p.failAt(CodeInvalidType, a.dot("content"), "expected a string or an array of "+partWord(p.ep))
	}
	return i
}

// foldedMember returns the message member sluice reads (role and content; tool_calls,
// function_call, refusal and audio in chat, type in a Responses input item) that key names in
// another case, or "": a Go upstream (encoding/json) would read it as that member, while
// sluice validated another or none.
func (p *peeker) foldedMember(key []byte) string {
	switch p.ep {
	case ChatCompletions:
		return foldedName(key, "role", "content", "tool_calls", "function_call", "refusal", "audio")
	case Responses:
		return foldedName(key, "role", "content", "type")
	}
	return foldedName(key, "role", "content")
}

// memberNames names a message's members by their bit in message's seen set.
var memberNames = [...]string{1: "role", 2: "content", 4: "type"}

// smallString reads the value at d[v] of kind k, and when it is a string returns its text,
// decoded into buf when it has escapes (a string too long for buf is returned undecoded with
// its quotes, which matches no role or type).
func (p *peeker) smallString(v int, k valueKind, buf *nameBuf) (end int, text []byte) {
	if k != kindString {
		return p.skipValue(v, 3), nil
	}
	end, esc := p.scanString(v)
	if end < 0 {
		return -1, nil
	}
	return end, keyName(p.data[v:end], esc, buf)
}

// parts reads an array of content parts (blocks) at d[v], at nesting level level: each an
// object with a string "type". allowEmpty accepts []. Its error is returned rather than
// recorded: a caller may find that the array is not one to check after all.
func (p *peeker) parts(v, level int, a at, allowEmpty bool) (end int, err *ValidationError) {
	d := p.data
	i := v + 1
	for k := 0; ; k++ {
		e, done := p.element(i, k == 0)
		if e < 0 {
			return -1, nil
		}
		if done {
			if k == 0 && !allowEmpty && err == nil {
				err = verr(CodeEmptyArray, a.String(), "expected a non-empty array of "+partWord(p.ep))
			}
			return e, err
		}
		if d[e] != '{' {
			if i = p.skipValue(e, level); i < 0 {
				return -1, nil
			}
			if err == nil {
				ps := a.String() + "[" + strconv.Itoa(k) + "]"
				err = verr(CodeInvalidType, ps, "expected an object (a content part)")
			}
			continue
		}
		typ, badType := false, false
		i = e + 1
		for first := true; ; first = false {
			key, esc, mv, done := p.member(i, first)
			if mv < 0 {
				return -1, nil
			}
			if done {
				i = mv
				break
			}
			name := keyName(key, esc, &p.keyBuf)
			if string(name) == "type" {
				typ = true
				badType = badType || d[mv] != '"'
			} else if err == nil && foldedName(name, "type") != "" {
				ps := a.String() + "[" + strconv.Itoa(k) + "].type"
				err = verr(CodeAmbiguousParam, ps, ambiguousKey(name, "type"))
			}
			if i = p.skipValue(mv, level+1); i < 0 {
				return -1, nil
			}
		}
		if err == nil && (!typ || badType) {
			ps := a.String() + "[" + strconv.Itoa(k) + "].type"
			if !typ {
				err = verr(CodeMissingParameter, ps, "missing required parameter")
			} else {
				err = verr(CodeInvalidType, ps, "expected a string")
			}
		}
	}
}

// systemValue reads Anthropic's "system": null, a string, or an array of content blocks.
func (p *peeker) systemValue(vs int) int {
	d := p.data
	switch d[vs] {
	case 'n':
		return p.scanLiteral(vs)
	case '"':
		end, _ := p.scanString(vs)
		return end
	case '[':
		end, err := p.parts(vs, 2, at{list: "system", idx: -1}, true)
		if err != nil {
			p.failErr(err)
		}
		return end
	}
	end := p.skipValue(vs, 1)
	p.fail(CodeInvalidType, "system", "system: expected a string or an array of content blocks")
	return end
}

// maxEmbeddingInputs is OpenAI's limit on the inputs of one embeddings request.
const maxEmbeddingInputs = 2048

// textOrTokens reads completions' "prompt" or embeddings' "input": a string, or a non-empty
// array whose elements are all strings, all token ids (integers ≥ 0) or all non-empty arrays
// of token ids. Embeddings (OpenAI's rules) also refuse empty strings and more than 2048
// inputs.
func (p *peeker) textOrTokens(vs int, name string, embeddings bool) int {
	d := p.data
	switch d[vs] {
	case '"':
		end, _ := p.scanString(vs)
		if end >= 0 && embeddings && end-vs == 2 {
			p.fail(CodeInvalidValue, name, name+": expected a non-empty string")
		}
		return end
	case '[':
	default:
		end := p.skipValue(vs, 1)
		p.fail(CodeInvalidType, name, name+
			": expected a string, an array of strings, an array of token ids or an array of token id arrays")
		return end
	}
	var kind0 valueKind
	i := vs + 1
	for k := 0; ; k++ {
		e, done := p.element(i, k == 0)
		if e < 0 {
			return -1
		}
		if done {
			switch {
			case k == 0:
				p.fail(CodeEmptyArray, name, name+": expected a non-empty array")
			case embeddings && k > maxEmbeddingInputs:
				p.fail(CodeInvalidValue, name, name+": at most 2048 inputs")
			}
			return e
		}
		a := at{list: name, idx: k}
		kind := kindAt(d, e)
		if k == 0 {
			kind0 = kind
		}
		switch {
		case kind != kindString && kind != kindNumber && kind != kindArray:
			i = p.skipValue(e, 2)
			p.failAt(CodeInvalidType, a, "expected a string, a token id or an array of token ids")
		case kind != kind0:
			i = p.skipValue(e, 2)
			p.failAt(CodeInvalidType, a, "expected "+kindWord(kind0)+", as "+name+"[0]")
		case kind == kindString:
			i, _ = p.scanString(e)
			if i >= 0 && embeddings && i-e == 2 {
				p.failAt(CodeInvalidValue, a, "expected a non-empty string")
			}
		case kind == kindNumber:
			i = p.tokenID(e, a)
		default:
			i = p.tokenArray(e, a)
		}
		if i < 0 {
			return -1
		}
	}
}

func kindWord(k valueKind) string {
	switch k {
	case kindString:
		return "a string"
	case kindNumber:
		return "a token id"
	}
	return "an array of token ids"
}

// tokenID reads a token id at d[v]: an integer ≥ 0 (2.0 is 2, as for count).
func (p *peeker) tokenID(v int, a at) int {
	d := p.data
	if kindAt(d, v) != kindNumber {
		end := p.skipValue(v, 3)
		p.failAt(CodeInvalidType, a, "expected a token id (an integer ≥ 0)")
		return end
	}
	end, integer := p.scanNumber(v)
	if end < 0 {
		return -1
	}
	if n, r := intValue(d[v:end], integer); r != intOK || n < 0 {
		p.failAt(CodeInvalidValue, a, "expected a token id (an integer ≥ 0)")
	}
	return end
}

// tokenArray reads a non-empty array of token ids at d[v] (level 3).
func (p *peeker) tokenArray(v int, a at) int {
	i := v + 1
	for k := 0; ; k++ {
		e, done := p.element(i, k == 0)
		if e < 0 {
			return -1
		}
		if done {
			if k == 0 {
				p.failAt(CodeEmptyArray, a, "expected a non-empty array of token ids")
			}
			return e
		}
		a.sub = k + 1
		if i = p.tokenID(e, a); i < 0 {
			return -1
		}
	}
}
