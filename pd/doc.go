// Package pd is prefill/decode disaggregated serving: the gateway side of the worker
// protocol's exchange, in which one request's prefill and decode run on two workers and the
// prefill's state moves between them. A model alias with scheduling phase = "decode" sends
// each request through Target.Serve, which the model router calls for each target in turn:
//
//  1. pair selection (select.go): a prefill and a decode worker of the target's service,
//     distinct, both eligible for the target (deployment generation, execution config
//     digest, state transfer, readiness, capacity: core/workers). The decode worker is the
//     least loaded, ties broken by rendezvous (highest random weight) ranking of the
//     request's key and the worker_id, so that every gateway replica chooses alike without
//     shared state; the prefill worker likewise, or, with prompt_cache_affinity, the one
//     prefix affinity chooses by the model router's rules (affinity.Index.Choose: the
//     longest hint of the conversation among those within one request of the least load,
//     else rendezvous hashing of the conversation key; affinity.go). Each worker is counted as running the request in the same step
//     as it is judged to have room (workers.Group.Take), so that requests choosing at once
//     never send a worker more than its max_active by the gateway's own count: one that
//     finds the worker taken meanwhile chooses among the rest;
//  2. orchestration (serve.go): POST /power/v1/decode/prepare (reserve the target state;
//     coalesced into decode/prepare:batch calls, batch.go), POST /power/v1/prefill/execute
//     (run the prefill, publish the source state), POST /power/v1/decode/execute, whose
//     response becomes the request's upstream response (pipeline.RequestCtx.Adopt), streamed
//     to the client by the relay. The target and source states are opaque JSON copied byte
//     for byte from one answer into the next call; they are never interpreted, kept past the
//     request or logged;
//  3. deadlines and abort: execution_timeout_ms bounds the whole exchange, stream included
//     (the client gets upstream_timeout, as a 504 or, once the stream began, as its SSE error
//     event: pipeline.RequestCtx.Expire); each leg has its own deadline within it; when any
//     leg fails, the deadline passes or the
//     client leaves, both workers get POST /power/v1/abort at once, bounded by abortTimeout,
//     so no worker waits for a partner that will not come;
//  4. failure handling: a retryable failure before any response byte (a connect failure, a
//     5xx, 408, 409 or 429 answer) leaves the failing worker out of the request and tries
//     another pair of the same target, at most maxPairTries pairs (a refused connect also
//     ejects the worker by passive health, so other requests leave it out a while); then
//     the router falls back to its next target priority; when a worker of the pairs tried
//     answered 429, the request gets 429 model_at_capacity (ErrWorkersBusy: the model is
//     busy, not broken) rather than a 502. Once the decode response has begun
//     nothing is replayed: a failure mid-stream ends an SSE stream with the gateway's error
//     event;
//  5. the prompt cache key (pcache.go): a caller's prompt_cache_key never reaches a worker;
//     the prefill gets aster-gw-pcache-v1:<hex>, a keyed hash of the caller's identity, the
//     model, the endpoint and the caller's key.
//
// The protocol is the one docs/llmsim.md describes, which bench/llmsim simulates.
package pd
