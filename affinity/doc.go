// Package affinity will hold prefix-cache affinity routing (DESIGN.md §2, seed 000): prefix
// fingerprints of normalised chat JSON at 4 KiB and message-boundary checkpoints, the sharded
// TTL/LRU prefix index, and prompt-cache-key scoping. It is empty until its issue is worked;
// the proxy core (core/proxy, core/runtime) picks backends through core/balancer today, which
// is where affinity selection will plug in.
package affinity
