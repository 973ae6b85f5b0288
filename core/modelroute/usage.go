package modelroute

import (
	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/openai"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/sse"
)

// maxUsageBodyBytes bounds the JSON answer kept to read its usage: chat and completion answers
// are a few KiB; a larger one (a big embeddings batch) is relayed without being counted.
const maxUsageBodyBytes = 256 << 10

// usageMode says how a response's usage is read.
type usageMode uint8

const (
	usageNone   usageMode = iota // not read (an endpoint whose usage shape is not read here)
	usageJSON                    // the "usage" of the whole JSON answer
	usageStream                  // the "usage" of the chunk the caller asked for with include_usage
)

// usageState reads one response's token usage as it is relayed (OpenAI's chat completions,
// completions and embeddings shapes).
type usageState struct {
	mode   usageMode
	want   bool // the response should report usage: a missing one is counted as such
	body   []byte
	over   bool
	sc     sse.Scanner
	usage  sse.Usage
	gotUse bool
}

func (u *usageState) reset() {
	u.mode, u.want, u.body, u.over, u.gotUse, u.usage = usageNone, false, u.body[:0], false, false, sse.Usage{}
	u.sc.Reset()
}

// OnEvent implements sse.Handler: the usage chunk of a stream.
func (u *usageState) OnEvent(ev sse.Event) {
	if us, ok := sse.ParseUsage(ev.Data); ok {
		u.usage, u.gotUse = us, true
	}
}

// OnResponse implements pipeline.ResponseStage: it decides whether and how the response's
// usage is read. Only successful answers of the OpenAI endpoints that report "usage" are.
func (s *Stage) OnResponse(rc *pipeline.RequestCtx) error {
	st, _ := rc.Get(&stateSlot).(*state)
	if st == nil || st.alias == nil {
		return nil
	}
	u := &st.use
	u.reset()
	if code := rc.UpstreamStatus(); code < 200 || code >= 300 {
		return nil
	}
	switch st.ep {
	case openai.ChatCompletions, openai.Completions:
		if st.peek.Stream {
			u.mode, u.want = usageStream, st.peek.IncludeUsage
		} else {
			u.mode, u.want = usageJSON, true
		}
	case openai.Embeddings:
		u.mode, u.want = usageJSON, true
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
		_ = u.sc.Feed(p, u) // an oversized event only stops the reading, not the relay
	case usageJSON:
		if len(u.body)+len(p) > maxUsageBodyBytes {
			u.over, u.body = true, u.body[:0]
			u.mode = usageNone
			return
		}
		u.body = append(u.body, p...)
	}
}

// account records the response's usage in the outcome and the metrics, or counts it missing.
func (st *state) account(rc *pipeline.RequestCtx, callerName string) {
	u := &st.use
	o := rc.Outcome()
	if u.mode == usageJSON {
		u.usage, u.gotUse = sse.ParseUsage(u.body)
	}
	if u.gotUse {
		o.Usage = pipeline.Usage{Prompt: u.usage.PromptTokens, Completion: u.usage.CompletionTokens, Cached: u.usage.CachedTokens}
		o.UsageKnown = true
		if st.target != nil {
			st.target.tokens(callerName).Add(u.usage.PromptTokens, u.usage.CompletionTokens, u.usage.CachedTokens)
		}
		return
	}
	if u.want || u.over {
		metrics.UsageMissing(st.alias.Name)
	}
}
