package policy

import (
	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// Headers is the headers middleware: it removes and sets fields on the request before it goes
// upstream (OnRequest) and on the upstream's response before it goes to the client
// (OnResponse). A set field replaces every field of its name the other side sent. Fields set
// on the response appear on the gateway's own replies too (a 401 or 429 of a later stage),
// since they are added before the request goes on.
type Headers struct {
	reqSet, respSet       []pair
	reqRemove, respRemove [][]byte
}

type pair struct{ k, v []byte }

// NewHeaders compiles a headers middleware.
func NewHeaders(o config.HeadersOptions) *Headers {
	h := &Headers{}
	for _, p := range o.RequestSet {
		h.reqSet = append(h.reqSet, pair{[]byte(p.Name), []byte(p.Value)})
		h.reqRemove = append(h.reqRemove, []byte(p.Name))
	}
	for _, n := range o.RequestRemove {
		h.reqRemove = append(h.reqRemove, []byte(n))
	}
	for _, p := range o.ResponseSet {
		h.respSet = append(h.respSet, pair{[]byte(p.Name), []byte(p.Value)})
		h.respRemove = append(h.respRemove, []byte(p.Name))
	}
	for _, n := range o.ResponseRemove {
		h.respRemove = append(h.respRemove, []byte(n))
	}
	return h
}

// LoopSafe implements pipeline.LoopSafe: field edits return at once.
func (h *Headers) LoopSafe() bool { return true }

// OnRequest implements pipeline.RequestStage.
func (h *Headers) OnRequest(rc *pipeline.RequestCtx) error {
	for _, n := range h.reqRemove {
		rc.RemoveRequestHeader(n)
	}
	for _, p := range h.reqSet {
		rc.AddUpstreamHeader(p.k, p.v)
	}
	for _, p := range h.respSet {
		rc.AddResponseHeader(p.k, p.v)
	}
	return nil
}

// OnResponse implements pipeline.ResponseStage: the upstream's fields that are removed or
// replaced go.
func (h *Headers) OnResponse(rc *pipeline.RequestCtx) error {
	for _, n := range h.respRemove {
		rc.RemoveResponseHeader(n)
	}
	return nil
}
