// Package workers observes the servers of the services that model targets use, through the
// worker protocol's GET /power/v1/observation, and judges at each backend choice which of
// them may take a request.
//
// One Group per observed service polls every server of the service (one goroutine per
// group; each round polls the servers concurrently and is bounded by the poll interval) and
// publishes each server's latest state behind an atomic pointer, which the request path
// reads without locks or allocation. A server that answers 404 does not speak the worker
// protocol (vLLM, SGLang, llama.cpp, Ollama): it is a plain server, judged by health alone,
// and its load is the gateway's own in-flight count to it.
//
// At a choice, Group.Exclude leaves out of a balancer.Choice, in this order, the workers
// whose identity changed since the observation before, or whose observation is older than
// the TTL; those unhealthy, of another role, not ready, or at capacity; those lacking the
// target's deployment generation or execution config digest (servers without an observation
// too, when the target binds either). Among the rest it keeps the least loaded, so that the
// service's balancer only breaks ties. The server chosen is counted by Group.Take, which
// judges it again on the very count the request joins, so that requests choosing at once
// cannot all take a worker's last free sequence.
package workers
