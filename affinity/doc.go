// Package affinity steers requests that share a prompt prefix to the backend that most
// likely still holds that prefix in its KV cache, so that it skips the prefill of the shared
// part. It is a hint, never a residency guarantee: a backend evicts, restarts, or is reached
// by other gateways, and only the backend decides what it reuses.
//
// The numbers below are the rules of a model's scheduling.prefix_affinity (chat completions
// first): how much of a request is hashed and where it is marked, how long and how many
// hints are kept, and when a hint may outweigh balance. They are fixed, not configured: every
// gateway replica must fingerprint and rank alike.
//
// # Fingerprints
//
// Fingerprint normalises the fields of a request that reach the model's prompt into one
// canonical JSON stream: on chat completions "prompt_cache_key", "tools", "functions" and
// "messages"; on the Responses API "prompt_cache_key", "tools", "instructions",
// "previous_response_id", "conversation" and "input"; on the Messages API "tools", "system"
// and "messages". Key order, white space, the spelling of strings and numbers (1.0 and 1e0 are
// one number; 1, which the Python engines render otherwise, is another), and the fields that
// do not reach the prompt (model, temperature, max_tokens, stream, metadata, user, …) do not
// change it; a string content and a list of one text part are one content.
// It hashes at most MaxScanBytes (256 KiB) of that stream and places checkpoints at every
// CheckpointEvery (4 KiB) and at every message end, none below MinPrefixBytes (1 KiB), at
// most MaxCheckpoints (128); each is the XXH64 of the stream before it. The conversation key
// is the hash at the end of the first user message: the same on every turn of a
// conversation, different for conversations that only share a system prompt.
//
// # Index
//
// An Index maps checkpoint hashes to the targets that served them: entries live DefaultTTL
// (5 minutes) after they were last learned, at most DefaultMaxEntries (4,096) of them, the
// least recently learned going first (per set of 16, with one-second resolution: a hint is
// renewed at most once a second, and a new one never displaces one learned within the last
// second). Every key mixes in the request's Domain (route, environment, credential issuance
// generation, model alias, endpoint), so that no domain sees another's hints. Lookup gives
// each candidate target the longest prefix learned for it; Learn records a response; Forget
// drops a target's hints when it reports a full cache miss; ForgetTarget drops all of a
// target's hints when it restarted, which Epochs notices from the epochs workers report.
//
// # Selection
//
// Select, a pure function, applies the rules of prefix affinity: a match counts only when it
// covers at least half of the scanned request; only targets at most LoadBand (1) operation
// above the least loaded are eligible; the longest match wins, then the lower load, then the
// most recently learned. Without a valid match it ranks the targets within a load bound (the
// band, or 1.25× the mean load if wider) by rendezvous hashing of the conversation key, so
// that gateway replicas without shared state send a conversation to the same backend. The
// conversation key and RendezvousWeight are fixed functions: every replica must run the same
// canonical form. SelectPrint adds two rules for a request's Print: a hint that ends before
// the conversation key does (a system prompt or tools that conversations share) is not
// followed, so that it does not pull every new conversation to the backends that served
// earlier ones; nor is one that ends before the previous turn (another replica served the
// turns since, so the hint is out of date). And it places a conversation's opening request
// within the load band alone, since its later turns stay where it opens.
//
// A request flows as: openai.Peek, Fingerprint, Epochs.See for each candidate target,
// Index.Choose over them with their loads (Index.Lookup, then SelectPrint), then Index.Learn
// after the response (preceded by Index.Forget when the backend reported no cached prompt
// tokens for a request a hint sent there: it computed the prompt, and holds it now).
//
// # Units
//
// Prefix lengths (Checkpoint.Prefix, Candidate.Prefix, Choice.Prefix, Print.Scanned) are
// bytes of the canonical stream: a routing measure, not a count of cached tokens nor of body
// bytes, and not an estimate of time saved. Loads are operations (requests in flight).
// Times are nanoseconds on the index's clock.
//
// # What is stored
//
// The index stores 64-bit keys (checkpoint hashes mixed with the domain's scope and a
// per-process random seed), targets, times and ranks: never prompt text, never the caller's
// cache key, which reaches the index only as part of hashed bytes. A Print holds the
// canonical stream, prompt text included, until its next use; it is the caller's per-request
// memory and is not logged.
//
// # Cost
//
// Fingerprinting a 256 KiB chat request runs at about 1.5 GB/s (165 µs) and allocates nothing
// once its Print is warm (BenchmarkFingerprintChat256KiB). In a full index, a lookup and a
// learn of 128 checkpoints take about 2.5 µs for a follow-up turn (BenchmarkIndexLookupLearnHit)
// and 3 µs for a new conversation that displaces 128 entries (BenchmarkIndexLookupLearnMiss),
// without allocating. Follow-up turns on two cores run 1.7 times as many per second as on one
// (BenchmarkIndexParallelFollowUp); new conversations, which take the index's exclusive lock,
// do not scale (BenchmarkIndexParallelNew).
package affinity
