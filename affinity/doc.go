// Package affinity will hold prefix-cache affinity routing: prefix fingerprints of normalised
// chat JSON at 4 KiB and message-boundary checkpoints, the sharded TTL/LRU prefix index, and
// prompt-cache-key scoping. It is empty for now; backend choice is a step of the request
// pipeline (core/pipeline), which picks through core/balancer with the request's exclusions,
// and that is where affinity selection plugs in.
package affinity
