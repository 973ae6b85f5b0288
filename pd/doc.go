// Package pd will hold prefill/decode orchestration over the worker protocol (DESIGN.md §6,
// seed 000): decode prepare (batched), prefill execute, decode execute, abort, and rendezvous
// ranking of workers. It is empty until its issue is worked; bench/llmsim already simulates the
// worker side of the protocol for its tests.
package pd
