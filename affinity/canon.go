package affinity

import (
	"bytes"
	"math"
	"math/bits"
	"slices"
	"strconv"

	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/internal/steps"
)

// segment is a top-level member of a request that reaches the model's prompt. The canonical
// stream writes them in this order, whatever their order in the body: the explicit cache key
// first (so that requests with different keys share no checkpoint), then what a chat
// template renders before the conversation (tool definitions, the system prompt, server-side
// conversation state), then the conversation itself.
type segment uint8

const (
	segCacheKey     segment = iota // "prompt_cache_key" (chat, responses)
	segTools                       // "tools" (all three endpoints)
	segFunctions                   // "functions" (chat, deprecated tool definitions)
	segSystem                      // "system" (messages), "instructions" (responses)
	segPrevious                    // "previous_response_id" (responses)
	segConversation                // "conversation" (responses)
	segPrompt                      // "messages" (chat, messages), "input" (responses)
	numSegments
)

// segmentOf returns the segment the top-level key name is on endpoint ep, or numSegments.
func segmentOf(ep openai.Endpoint, name []byte) segment {
	switch string(name) {
	case "prompt_cache_key":
		if ep != openai.Messages {
			return segCacheKey
		}
	case "tools":
		return segTools
	case "functions":
		if ep == openai.ChatCompletions {
			return segFunctions
		}
	case "system":
		if ep == openai.Messages {
			return segSystem
		}
	case "instructions":
		if ep == openai.Responses {
			return segSystem
		}
	case "previous_response_id":
		if ep == openai.Responses {
			return segPrevious
		}
	case "conversation":
		if ep == openai.Responses {
			return segConversation
		}
	case "messages":
		if ep != openai.Responses {
			return segPrompt
		}
	case "input":
		if ep == openai.Responses {
			return segPrompt
		}
	}
	return numSegments
}

// objKind says which normalisation rules apply to an object's members.
type objKind uint8

const (
	objGeneric objKind = iota // every member, keys sorted
	objMessage                // a message or Responses input item
	objPart                   // a content part (block)
	objTool                   // a tool definition
)

// member is one member of an object being written: its key in canonical form (without
// quotes), located in the body when the key had no escapes and in canon.keys otherwise, and
// the index of its value.
type member struct {
	lo, hi int
	inKeys bool
	vs     int
}

// canon writes the canonical stream of one request. It lives in a Print so that its buffers
// are reused from one request to the next.
type canon struct {
	d       []byte
	ep      openai.Endpoint
	out     []byte // the canonical stream, at most limit bytes
	limit   int
	keys    []byte   // canonical keys that had escapes in the body
	members []member // members of the objects being written, innermost last
	num     []byte   // a number being rewritten
	budget  int      // bytes the objects' member scans may still read (walkBudget)

	bounds  []int // canonical offsets where a message (or the system prompt) ends
	convEnd int   // canonical offset where the first user message ends, -1 until met
	turnEnd int   // canonical offset where the message before the last assistant message ends, 0 until met
	user    bool  // the message being written has role "user"
	asst    bool  // the message being written has role "assistant"
}

func (c *canon) reset(ep openai.Endpoint, body []byte, limit int) {
	c.d, c.ep, c.limit, c.budget = body, ep, limit, walkBudget(len(body))
	c.out, c.keys, c.members, c.bounds = c.out[:0], c.keys[:0], c.members[:0], c.bounds[:0]
	c.convEnd, c.turnEnd = -1, 0
}

// put appends b unless the stream would grow past its limit; then it appends what fits and
// returns false.
func (c *canon) put(b []byte) bool {
	var full bool
	c.out, full = appendCapped(c.out, b, c.limit)
	return !full
}

func (c *canon) puts(s string) bool {
	if len(s) > c.limit-len(c.out) {
		c.out = append(c.out, s[:max(c.limit-len(c.out), 0)]...)
		return false
	}
	c.out = append(c.out, s...)
	return true
}

func (c *canon) putByte(b byte) bool {
	if len(c.out) >= c.limit {
		return false
	}
	c.out = append(c.out, b)
	return true
}

// request writes the canonical stream of the top-level object of the body. prompt and
// system, when they locate the values of those members (as openai.Peek found them), let the
// walk jump over them instead of scanning them twice. It returns a stop value or the index
// after the object.
func (c *canon) request(prompt, system openai.Span) int {
	d := c.d
	i := skipWS(d, 0)
	if i >= len(d) || d[i] != '{' {
		return stopMalformed
	}
	var seg [numSegments]int
	for s := range seg {
		seg[s] = -1
	}
	var name [32]byte
	end := -1
	i = skipWS(d, i+1)
	if i < len(d) && d[i] == '}' {
		end = i + 1
	}
	for end < 0 {
		if i >= len(d) || d[i] != '"' {
			return stopMalformed
		}
		ke, esc := stringEnd(d, i)
		if ke < 0 {
			return stopMalformed
		}
		key := d[i+1 : ke-1]
		if esc {
			// Names of interest are short ASCII words whose canonical form is themselves; a
			// key whose canonical form does not fit in name is none of them.
			k, e := canonString(name[:0], d, i, len(name))
			if e < 0 {
				if e == stopMalformed {
					return stopMalformed
				}
				k = nil
			} else {
				k = k[1 : len(k)-1]
			}
			key = k
		}
		i = skipWS(d, ke)
		if i >= len(d) || d[i] != ':' {
			return stopMalformed
		}
		vs := skipWS(d, i+1)
		var ve int
		switch {
		case spanAt(prompt, vs, len(d)):
			ve = prompt.End
		case spanAt(system, vs, len(d)):
			ve = system.End
		default:
			ve = skipValue(d, vs)
		}
		if ve < 0 {
			return stopMalformed
		}
		if s := segmentOf(c.ep, key); s < numSegments {
			seg[s] = vs // the last of duplicate members wins, as in encoding/json
		}
		i = skipWS(d, ve)
		switch {
		case i >= len(d):
			return stopMalformed
		case d[i] == ',':
			i = skipWS(d, i+1)
		case d[i] == '}':
			end = i + 1
		default:
			return stopMalformed
		}
	}

	if !c.putByte('{') {
		return stopFull
	}
	first := true
	for s, vs := range seg {
		if vs < 0 || d[vs] == 'n' || (segment(s) == segTools || segment(s) == segFunctions) && emptyArray(d, vs) {
			continue // null, and no tools, say nothing to the prompt
		}
		if !first && !c.putByte(',') {
			return stopFull
		}
		first = false
		if !c.putByte('"') || !c.puts(segmentName(c.ep, segment(s))) || !c.puts(`":`) {
			return stopFull
		}
		var r int
		switch segment(s) {
		case segTools, segFunctions:
			r = c.array(vs, 2, objTool)
		case segSystem:
			if r = c.content(vs, 2); r >= 0 {
				c.bounds = append(c.bounds, len(c.out))
			}
		case segPrompt:
			r = c.messages(vs, 2)
		default:
			r = c.value(vs, 2)
		}
		if r < 0 {
			return r
		}
	}
	if !c.putByte('}') {
		return stopFull
	}
	return end
}

// spanAt reports whether span s is a usable location of the value starting at vs.
func spanAt(s openai.Span, vs, n int) bool {
	return s.Present() && s.Start == vs && s.End <= n
}

// segmentName is the key segment s is written under: the endpoint's own name for it.
func segmentName(ep openai.Endpoint, s segment) string {
	switch s {
	case segCacheKey:
		return "prompt_cache_key"
	case segTools:
		return "tools"
	case segFunctions:
		return "functions"
	case segSystem:
		if ep == openai.Responses {
			return "instructions"
		}
		return "system"
	case segPrevious:
		return "previous_response_id"
	case segConversation:
		return "conversation"
	}
	if ep == openai.Responses {
		return "input"
	}
	return "messages"
}

func emptyArray(d []byte, vs int) bool {
	if d[vs] != '[' {
		return false
	}
	i := skipWS(d, vs+1)
	return i < len(d) && d[i] == ']'
}

// value writes the value at d[i] (not white space); lvl is the nesting level it has when it
// is an object or an array (the top-level object is level 1).
func (c *canon) value(i, lvl int) int {
	d := c.d
	if i >= len(d) {
		return stopMalformed
	}
	switch d[i] {
	case '"':
		return c.str(i)
	case '{':
		return c.object(i, lvl, objGeneric)
	case '[':
		return c.array(i, lvl, objGeneric)
	case 't':
		return c.literal(i, "true")
	case 'f':
		return c.literal(i, "false")
	case 'n':
		return c.literal(i, "null")
	}
	return c.number(i)
}

func (c *canon) str(i int) int {
	var e int
	c.out, e = canonString(c.out, c.d, i, c.limit)
	return e
}

func (c *canon) literal(i int, lit string) int {
	if !bytes.HasPrefix(c.d[i:], []byte(lit)) || !delimited(c.d, i+len(lit)) {
		return stopMalformed
	}
	if !c.puts(lit) {
		return stopFull
	}
	return i + len(lit)
}

// number writes a number as Python's json module reads and writes it, since the engines
// that render a request into a prompt (vLLM, SGLang) are Python: their chat templates render
// the tools (tojson, or Python's str) from the values Python decoded. An integer (a literal
// without fraction or exponent) is a Python int: its exact digits, -0 as 0. Any other
// literal is a float: its float64 as repr writes it, the shortest digits that read back as
// it, with ".0" when they have no point, in exponent form (1e+16, 1e-05) below 1e-4 or from
// 1e16 on, and an out-of-range one as Infinity or -Infinity. So 1.0, 1.00 and 1e0 are one
// number, and 1 another: the engine renders "1.0" and "1", different tokens, and a prefix
// cached for one is not the other's.
func (c *canon) number(i int) int {
	e := numberEnd(c.d, i)
	if e < 0 || !delimited(c.d, e) {
		return stopMalformed
	}
	lit := c.d[i:e]
	integer := true
	for _, b := range lit {
		if b == '.' || b == 'e' || b == 'E' {
			integer = false
			break
		}
	}
	if integer {
		if len(lit) == 2 && lit[0] == '-' && lit[1] == '0' {
			lit = lit[1:]
		}
		if !c.put(lit) {
			return stopFull
		}
		return e
	}
	f, _ := strconv.ParseFloat(string(lit), 64) // out of range: ±Inf, as Python reads it
	switch a := math.Abs(f); {
	case math.IsInf(f, 1):
		c.num = append(c.num[:0], "Infinity"...)
	case math.IsInf(f, -1):
		c.num = append(c.num[:0], "-Infinity"...)
	case a != 0 && (a < 1e-4 || a >= 1e16):
		c.num = strconv.AppendFloat(c.num[:0], f, 'e', -1, 64)
	default:
		c.num = strconv.AppendFloat(c.num[:0], f, 'f', -1, 64)
		if bytes.IndexByte(c.num, '.') < 0 {
			c.num = append(c.num, ".0"...)
		}
	}
	if !c.put(c.num) {
		return stopFull
	}
	return e
}

// delimited reports whether a scalar ending at i is followed by what may follow a value.
func delimited(d []byte, i int) bool {
	return i >= len(d) || isWS(d[i]) || d[i] == ',' || d[i] == '}' || d[i] == ']'
}

// array writes the array at d[i] == '['; objects among its elements are written as kind.
func (c *canon) array(i, lvl int, kind objKind) int { return c.list(i, lvl, kind, false) }

// list writes the array at d[i] == '[' (any other value as it is); with msgs, each element is
// a message: where it ends is a message boundary, and the end of the first user message is
// the conversation's key.
func (c *canon) list(i, lvl int, kind objKind, msgs bool) int {
	e := c.listBody(i, lvl, kind, msgs)
	steps.Add(span(c.d, i, e)) // separators and white space; the elements count their own
	return e
}

// span is the bytes a walk from i that ended at e (a stop value: somewhere up to the end of
// d) may have looked at, for the step count (internal/steps).
func span(d []byte, i, e int) int {
	if e < 0 {
		return len(d) - i
	}
	return e - i
}

func (c *canon) listBody(i, lvl int, kind objKind, msgs bool) int {
	d := c.d
	if d[i] != '[' {
		return c.value(i, lvl)
	}
	if lvl > MaxDepth {
		return stopDepth
	}
	if !c.putByte('[') {
		return stopFull
	}
	i = skipWS(d, i+1)
	if i < len(d) && d[i] == ']' {
		if !c.putByte(']') {
			return stopFull
		}
		return i + 1
	}
	for n := 0; ; n++ {
		if n > 0 && !c.putByte(',') {
			return stopFull
		}
		if msgs {
			c.user, c.asst = false, false
		}
		e := c.element(i, lvl+1, kind)
		if e < 0 {
			return e
		}
		if msgs {
			if c.asst && len(c.bounds) > 0 {
				c.turnEnd = c.bounds[len(c.bounds)-1]
			}
			c.bounds = append(c.bounds, len(c.out))
			if c.user && c.convEnd < 0 {
				c.convEnd = len(c.out)
			}
		}
		i = skipWS(d, e)
		switch {
		case i >= len(d):
			return stopMalformed
		case d[i] == ',':
			i = skipWS(d, i+1)
		case d[i] == ']':
			if !c.putByte(']') {
				return stopFull
			}
			return i + 1
		default:
			return stopMalformed
		}
	}
}

func (c *canon) element(i, lvl int, kind objKind) int {
	if i < len(c.d) && c.d[i] == '{' {
		return c.object(i, lvl, kind)
	}
	return c.value(i, lvl)
}

// messages writes the conversation: an array of messages (or Responses input items), noting
// where each ends and where the first user message ends. A Responses "input" string is one
// user message, written as {"role":"user","content":"…"} would be.
func (c *canon) messages(i, lvl int) int {
	d := c.d
	if d[i] == '"' && c.ep == openai.Responses {
		if !c.puts(`[{"content":[{"text":`) {
			return stopFull
		}
		e := c.str(i)
		if e < 0 {
			return e
		}
		if !c.puts(`,"type":"text"}],"role":"user"}`) {
			return stopFull
		}
		c.bounds = append(c.bounds, len(c.out))
		c.convEnd = len(c.out)
		if !c.putByte(']') {
			return stopFull
		}
		return e
	}
	return c.list(i, lvl, objMessage, true)
}

// content writes a message's content: a string is one text part, so that "hi" and
// [{"type":"text","text":"hi"}] are one content; an array is a list of parts; anything else
// is written as it is.
func (c *canon) content(i, lvl int) int {
	switch c.d[i] {
	case '"':
		if !c.puts(`[{"text":`) {
			return stopFull
		}
		e := c.str(i)
		if e < 0 {
			return e
		}
		if !c.puts(`,"type":"text"}]`) {
			return stopFull
		}
		return e
	case '[':
		return c.array(i, lvl, objPart)
	}
	return c.value(i, lvl)
}

// collect appends the members of the object at d[i] == '{' to c.members and returns the
// index after the object.
func (c *canon) collect(i int) int {
	d := c.d
	i = skipWS(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(d) || d[i] != '"' {
			return stopMalformed
		}
		ke, esc := stringEnd(d, i)
		if ke < 0 {
			return stopMalformed
		}
		m := member{lo: i + 1, hi: ke - 1}
		if esc {
			lo := len(c.keys)
			var e int
			if c.keys, e = canonString(c.keys, d, i, math.MaxInt); e < 0 {
				return stopMalformed
			}
			m = member{lo: lo + 1, hi: len(c.keys) - 1, inKeys: true}
		}
		i = skipWS(d, ke)
		if i >= len(d) || d[i] != ':' {
			return stopMalformed
		}
		m.vs = skipWS(d, i+1)
		ve := skipValue(d, m.vs)
		if ve < 0 {
			return stopMalformed
		}
		c.members = append(c.members, m)
		i = skipWS(d, ve)
		switch {
		case i >= len(d):
			return stopMalformed
		case d[i] == ',':
			i = skipWS(d, i+1)
		case d[i] == '}':
			return i + 1
		default:
			return stopMalformed
		}
	}
}

func (c *canon) key(m *member) []byte {
	if m.inKeys {
		return c.keys[m.lo:m.hi]
	}
	return c.d[m.lo:m.hi]
}

// sortMembers orders c.members[base:] by canonical key, stably (so that of duplicate keys
// the last in the body stays last). Any total order of canonical keys would do; byte order
// is the simplest.
func (c *canon) sortMembers(base int) {
	ms := c.members[base:]
	if len(ms) <= 12 {
		steps.Add(len(ms)*(len(ms)-1)/2 + 1) // the insertion sort's comparisons, at most
		for k := 1; k < len(ms); k++ {
			for j := k; j > 0 && bytes.Compare(c.key(&ms[j-1]), c.key(&ms[j])) > 0; j-- {
				ms[j-1], ms[j] = ms[j], ms[j-1]
			}
		}
		return
	}
	steps.Add(len(ms) * bits.Len(uint(len(ms))) * bits.Len(uint(len(ms)))) // SortStableFunc's n·log²n
	slices.SortStableFunc(ms, func(a, b member) int { return bytes.Compare(c.key(&a), c.key(&b)) })
}

// find returns the index in c.members[base:top] of the member named name (the last one of
// duplicates), or -1.
func (c *canon) find(base, top int, name string) int {
	steps.Add(top - base + 1)
	for k := top - 1; k >= base; k-- {
		if string(c.key(&c.members[k])) == name {
			return k
		}
	}
	return -1
}

// isString reports whether the value at d[vs] is a string whose text is one of names
// (ASCII words without characters that need escapes).
func (c *canon) isString(vs int, names ...string) bool {
	d := c.d
	if d[vs] != '"' {
		return false
	}
	e, esc := stringEnd(d, vs)
	if e < 0 {
		return false
	}
	text := d[vs+1 : e-1]
	var buf [32]byte
	if esc {
		k, ke := canonString(buf[:0], d, vs, len(buf))
		if ke < 0 {
			return false
		}
		text = k[1 : len(k)-1]
	}
	for _, n := range names {
		if string(text) == n {
			return true
		}
	}
	return false
}

// object writes the object at d[i] == '{' with the rules of kind.
//
// Every object has its members in canonical key order, and of duplicate keys only the last
// (encoding/json keeps the last). Messages and content parts also drop what does not reach
// the prompt: null members ("content": null beside tool calls, "refusal": null), empty
// arrays ("tool_calls": []), Anthropic's "cache_control", and on Responses items the item's
// own "id" and "status" and a "type" of "message" (an item without type is a message); an
// item reference keeps its "id", the item it stands for, and drops a "type" of
// "item_reference" (a reference may leave it out). A
// text part ("text", "input_text" or "output_text" with a string "text") is written as
// {"text":…,"type":"text"} and nothing else: its text is what the model reads.
func (c *canon) object(i, lvl int, kind objKind) int {
	if lvl > MaxDepth {
		return stopDepth
	}
	base := len(c.members)
	end := c.collect(i)
	// collect scans the whole object to find where its members' values end: the work that
	// every object around a byte repeats (fuzz/affinityCost), and that the budget bounds.
	n := span(c.d, i, end)
	steps.Add(n)
	if c.budget -= n; c.budget < 0 && end >= 0 {
		end = stopCostly
	}
	if end >= 0 {
		c.sortMembers(base)
		var r int
		if kind == objPart {
			r = c.part(base, lvl)
		} else {
			r = c.writeMembers(base, lvl, kind)
		}
		if r < 0 {
			end = r
		}
	}
	c.members = c.members[:base]
	return end
}

// part writes the content part whose members are c.members[base:].
func (c *canon) part(base, lvl int) int {
	top := len(c.members)
	t, x := c.find(base, top, "type"), c.find(base, top, "text")
	if t >= 0 && x >= 0 && c.d[c.members[x].vs] == '"' &&
		c.isString(c.members[t].vs, "text", "input_text", "output_text") {
		if !c.puts(`{"text":`) {
			return stopFull
		}
		if e := c.str(c.members[x].vs); e < 0 {
			return e
		}
		if !c.puts(`,"type":"text"}`) {
			return stopFull
		}
		return 0
	}
	return c.writeMembers(base, lvl, objPart)
}

// reference reports whether the Responses input item whose members are c.members[base:] is
// an item reference, as openai.Peek tells one: a string "id", no role, and a type that is
// absent, null or "item_reference".
func (c *canon) reference(base int) bool {
	top := len(c.members)
	id := c.find(base, top, "id")
	if id < 0 || c.d[c.members[id].vs] != '"' {
		return false
	}
	if r := c.find(base, top, "role"); r >= 0 && c.d[c.members[r].vs] != 'n' {
		return false
	}
	t := c.find(base, top, "type")
	return t < 0 || c.d[c.members[t].vs] == 'n' || c.isString(c.members[t].vs, "item_reference")
}

// writeMembers writes the object whose members are c.members[base:], sorted, with the rules
// of kind (see object). It returns a stop value or 0.
func (c *canon) writeMembers(base, lvl int, kind objKind) int {
	d := c.d
	if !c.putByte('{') {
		return stopFull
	}
	first := true
	ref := kind == objMessage && c.ep == openai.Responses && c.reference(base)
	for k := base; k < len(c.members); k++ {
		m := c.members[k]
		key := c.key(&m)
		if k+1 < len(c.members) && bytes.Equal(key, c.key(&c.members[k+1])) {
			continue // a later duplicate wins
		}
		content := false
		if kind != objGeneric {
			switch {
			case string(key) == "cache_control":
				continue
			case kind == objTool:
			case d[m.vs] == 'n' || emptyArray(d, m.vs):
				continue
			case string(key) == "content":
				content = true
			case kind != objMessage:
			case ref && string(key) == "id":
				// The id of a reference names the item the server puts in the prompt.
			case c.ep == openai.Responses && (string(key) == "id" || string(key) == "status"):
				continue
			case string(key) == "type" && (c.isString(m.vs, "message") || ref && c.isString(m.vs, "item_reference")):
				continue
			case string(key) == "role" && c.isString(m.vs, "user"):
				c.user = true
			case string(key) == "role" && c.isString(m.vs, "assistant"):
				c.asst = true
			}
		}
		if !first && !c.putByte(',') {
			return stopFull
		}
		first = false
		if !c.putByte('"') || !c.put(key) || !c.puts(`":`) {
			return stopFull
		}
		var r int
		if content {
			r = c.content(m.vs, lvl+1)
		} else {
			r = c.value(m.vs, lvl+1)
		}
		if r < 0 {
			return r
		}
	}
	if !c.putByte('}') {
		return stopFull
	}
	return 0
}
