package modelroute

import (
	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/sse"
)

// usageMode says how a response's usage is read.
type usageMode uint8

const (
	usageNone   usageMode = iota // not read (an error answer)
	usageJSON                    // the top-level "usage" of the JSON answer, read as it goes by
	usageStream                  // the "usage" of the chunk the caller asked for with include_usage
)

// usageState reads one response's token usage as it is relayed, in the shape of its endpoint
// (OpenAI chat completions, completions and embeddings; the Responses API; the Messages API).
type usageState struct {
	mode   usageMode
	ep     openai.Endpoint
	want   bool // the response should report usage: a missing one is counted as such
	rd     sse.UsageReader
	sc     sse.Scanner
	usage  pipeline.Usage
	gotUse bool
	// cachedKnown: the usage counted cached prompt tokens ("cached_tokens" of OpenAI's
	// shapes), so that usage.Cached == 0 means none came from the cache.
	cachedKnown bool
}

func (u *usageState) reset() {
	u.mode, u.want, u.gotUse, u.usage = usageNone, false, false, pipeline.Usage{}
	u.rd.Reset()
	u.cachedKnown = false
	u.sc.Reset()
	// An event over the scanner's bound (a tool call's arguments, an inline image) is passed
	// over, not the end of the reading: the usage comes in a small event after it.
	u.sc.SkipOversized = true
}

// OnEvent implements sse.Handler: the events of a stream that carry usage. OpenAI's chat and
// completions put it in the last chunk (include_usage); the Responses API in
// "response.completed" (or "response.incomplete") under "response"; the Messages API its
// input in "message_start" under "message" and its output, cumulative, in "message_delta".
func (u *usageState) OnEvent(ev sse.Event) {
	switch u.ep {
	case openai.Responses:
		if us, ok := sse.ParseMemberUsage(ev.Data, "response"); ok {
			u.usage, u.gotUse, u.cachedKnown = fromUsage(u.ep, us), true, us.CachedKnown
		}
	case openai.Messages:
		if us, ok := sse.ParseMemberUsage(ev.Data, "message"); ok {
			start := fromUsage(u.ep, us)
			u.usage.Prompt, u.usage.Cached = start.Prompt, start.Cached
			u.usage.Completion = max(u.usage.Completion, start.Completion)
		} else if us, ok := sse.ParseUsage(ev.Data); ok {
			u.usage.Completion, u.gotUse = us.OutputTokens, true
		}
	default:
		if us, ok := sse.ParseUsage(ev.Data); ok {
			u.usage, u.gotUse, u.cachedKnown = fromUsage(u.ep, us), true, us.CachedKnown
		}
	}
}

// fromUsage reads a usage object in the shape of endpoint ep. Anthropic's input_tokens leave
// out the prompt tokens read from the cache (cache_read_input_tokens), so the prompt is their
// sum there; the Responses API's input_tokens include the cached ones, as OpenAI's
// prompt_tokens do.
func fromUsage(ep openai.Endpoint, us sse.Usage) pipeline.Usage {
	switch ep {
	case openai.Responses:
		return pipeline.Usage{Prompt: us.InputTokens, Completion: us.OutputTokens, Cached: us.CachedTokens}
	case openai.Messages:
		return pipeline.Usage{Prompt: us.InputTokens + us.CacheReadInputTokens, Completion: us.OutputTokens, Cached: us.CacheReadInputTokens}
	}
	return pipeline.Usage{Prompt: us.PromptTokens, Completion: us.CompletionTokens, Cached: us.CachedTokens}
}

// OnResponse implements pipeline.ResponseStage: it decides whether and how the response's
// usage is read (successful answers only).
func (s *Stage) OnResponse(rc *pipeline.RequestCtx) error {
	st, _ := rc.Get(&stateSlot).(*state)
	if st == nil || st.alias == nil {
		return nil
	}
	st.prefixResponse(rc)
	u := &st.use
	u.reset()
	if code := rc.UpstreamStatus(); code < 200 || code >= 300 {
		return nil
	}
	u.ep = st.ep
	switch {
	case st.ep == openai.Embeddings || !st.peek.Stream:
		u.mode, u.want = usageJSON, true
	case st.ep == openai.ChatCompletions || st.ep == openai.Completions:
		u.mode, u.want = usageStream, st.peek.IncludeUsage
	default: // Responses and Messages streams always report usage
		u.mode, u.want = usageStream, true
	}
	return nil
}

// OnBody implements pipeline.BodyStage.
func (s *Stage) OnBody(rc *pipeline.RequestCtx, p []byte) {
	st, _ := rc.Get(&stateSlot).(*state)
	if st == nil {
		return
	}
	u := &st.use
	switch u.mode {
	case usageStream:
		_ = u.sc.Feed(p, u) // never fails: oversized events are skipped
	case usageJSON:
		// Only the usage object is kept: the answer may be megabytes (an embeddings batch),
		// and its usage comes last.
		u.rd.Feed(p)
	}
}

// account records the response's usage in the outcome and the metrics, or counts it missing.
func (st *state) account(rc *pipeline.RequestCtx, callerName string) {
	u := &st.use
	o := rc.Outcome()
	if u.mode == usageJSON {
		var us sse.Usage
		if us, u.gotUse = u.rd.Usage(); u.gotUse {
			u.usage, u.cachedKnown = fromUsage(u.ep, us), us.CachedKnown && u.ep != openai.Messages
		}
	}
	if u.gotUse {
		o.Usage, o.UsageKnown = u.usage, true
		if st.target != nil {
			st.target.tokens(callerName).Add(u.usage.Prompt, u.usage.Completion, u.usage.Cached)
		}
		return
	}
	if u.want {
		st.alias.m.UsageMissing()
	}
}
