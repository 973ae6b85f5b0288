// Package pd will hold prefill/decode orchestration over the worker protocol
// (docs/llmsim.md describes it): decode prepare (batched), prefill execute, decode execute,
// abort, and rendezvous ranking of workers, as stages of the request pipeline. It is empty for
// now; bench/llmsim already simulates the worker side of the protocol for its tests.
package pd
