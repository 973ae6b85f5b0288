// Package pipeline is the request pipeline both ingress engines run: it owns a request's life
// between "the engine parsed it" and "its response went out" — the request ID, routing, the
// router's request stages, backend choice (with exclusions and passive health), the upstream
// exchange with its retry rules (only before the first response byte, never resending a
// request an upstream may have acted on unless it is idempotent), the response stages, the
// relay of the body through core/relay, and the completion stages (access log, and later
// health feedback, affinity learning, token accounting).
//
// Engines talk to it through a few calls: Entrypoint.Begin (or Entrypoint.Reject for a request
// refused before routing), then RequestCtx.WriteResponse with a Downstream (engines that
// write raw bytes) or the reply accessors and RequestCtx.WriteBody (fasthttp, which writes the
// head and frames bodies itself), then RequestCtx.Finish. The engine calls RequestCtx.Cancel when its client
// leaves; that one signal aborts the upstream exchange and every wait of the request.
//
// A feature is a stage: a type implementing RequestStage, ResponseStage and/or
// CompletionStage, compiled into a router's Chain (see stage.go and docs/architecture.md).
package pipeline
