package metrics

import (
	"bytes"
	"io"
	"strings"

	vm "github.com/VictoriaMetrics/metrics"
)

// VictoriaMetrics/metrics writes a "# HELP <family>" line without text and a "# TYPE" line
// per family once metadata is on; it has no way to give a family its help text. So
// WritePrometheus lets it write the exposition and then fills in each HELP line from the
// tables below.
func init() { vm.ExposeMetadata(true) }

// Family describes one metric family the gateway defines.
type Family struct {
	Name string
	Type string // counter, gauge or histogram
	Help string
}

// Families lists every sluice_ metric family with its help text; docs/admin-api.md documents
// each (a test holds the two together).
var Families = []Family{
	{"sluice_requests_total", "counter", "Requests received by the entrypoint: complete request heads, and requests it refused before routing (malformed or over a limit)."},
	{"sluice_loop_requests_total", "counter", "Requests the entrypoint ran on the event loop of their client connection (upstream_io = \"loop\"): routed, sent upstream and answered there with no worker goroutine; a part of sluice_requests_total."},
	{"sluice_connections_shed_total", "counter", "Client connections the gateway closed to protect itself, by reason: header_timeout (request not complete within read_header_timeout, answered 408), client_stall (read nothing of a response for client_stall_timeout), pipeline_overflow (pipelined input past the limits), max_connections (over max_connections)."},
	{"sluice_gateway_errors_total", "counter", "Responses the gateway made itself instead of an upstream answer, by status (framing errors, limits, no route, failed stage, upstream failures; other: a stage's own status)."},
	{"sluice_open_connections", "gauge", "Open client connections of the entrypoint."},
	{"sluice_active_requests", "gauge", "Requests of the entrypoint in progress, from the complete request to the end of its response."},
	{"sluice_active_streams", "gauge", "Requests whose response is an SSE stream (text/event-stream) being relayed to the client."},
	{"sluice_active_websockets", "gauge", "WebSocket tunnels open through the router (the upstream accepted the upgrade), until either side closes."},
	{"sluice_websocket_client_bytes_total", "counter", "Bytes clients sent upstream through WebSocket tunnels (the bytes upstreams sent count in sluice_response_bytes_total)."},
	{"sluice_tls_certificate_reloads_total", "counter", "Reloads of a TLS entrypoint's certificates after their files changed, by result (failure: a file did not load and the certificates in use stayed)."},
	{"sluice_responses_total", "counter", "Responses sent to clients by the router, by status class (1xx to 5xx, other)."},
	{"sluice_request_duration_seconds", "histogram", "Time from the complete request to the end of its response, in seconds."},
	{"sluice_ttft_seconds", "histogram", "Streamed responses: time from the complete request to the first response body byte relayed (time to first token as the client sees it), in seconds."},
	{"sluice_inter_token_latency_seconds", "histogram", "Streamed responses: time between consecutive upstream body reads relayed (inter-token latency; tokens read together count once), in seconds."},
	{"sluice_response_bytes_total", "counter", "Response body bytes relayed from upstreams to clients."},
	{"sluice_upstream_errors_total", "counter", "Upstream failures by reason: dial, timeout (no response head in time, or a stream deadline or idle timeout), protocol, closed (before the response started) and stream (any other failure after it started)."},
	{"sluice_client_canceled_total", "counter", "Requests whose client left before the response was complete (the upstream exchange was aborted)."},
	{"sluice_upstream_connect_seconds", "histogram", "Time to open a new upstream connection (TCP connect, plus the TLS handshake for https backends), in seconds; reused connections are not observed."},
	{"sluice_upstream_active", "gauge", "Requests in flight to the backend."},
	{"sluice_backend_up", "gauge", "1 when the backend is eligible for balancing, 0 while it is out: an active health check failing, passive health ejecting it (connect failures, failed responses) or a Retry-After refusal running."},
	{"sluice_upstream_idle_connections", "gauge", "Idle keep-alive connections pooled for the backend."},
	{"sluice_log_dropped_total", "counter", "Lines of the gateway's own log lost because standard error fell behind by 1 MiB of lines (a pipe nobody reads): nothing that logs waits for it."},
	{"sluice_access_log_dropped_total", "counter", "Access log lines lost because their destination fell behind by 1 MiB of lines (a full disk, a pipe nobody reads): requests never wait for the access log."},
	{"sluice_config_reloads_total", "counter", "Configuration reloads by result: success (put in force) or failure (the running configuration stayed)."},
	{"sluice_config_last_reload_success_timestamp_seconds", "gauge", "Unix time of the last configuration put in force (at start or by a reload), in seconds."},
	{"sluice_model_active_requests", "gauge", "Requests of the model alias holding an admission slot (max_concurrent_requests bounds them)."},
	{"sluice_model_queued_requests", "gauge", "Requests of the model alias waiting in its admission queue."},
	{"sluice_model_rejected_total", "counter", "Requests the model alias's admission refused, by reason: queue_full (429) or queue_timeout (503)."},
	{"sluice_model_tokens_total", "counter", "Tokens of model responses by alias, target, consumer and kind: prompt, completion, and cached (prompt tokens the upstream served from its prefix cache), as the upstream's usage reported them."},
	{"sluice_worker_exclusions_total", "counter", "Servers of a model target's service left out of a request's choice, by the first rule they fail."},
	{"sluice_model_usage_missing_total", "counter", "Model responses that should have reported their token usage and did not (a stream cut before its usage chunk, a failed answer): counted apart, never as zero tokens."},
	{"sluice_model_queue_wait_seconds", "histogram", "Time requests of the model alias admitted after queueing waited for their slot, in seconds."},
	{"sluice_prefix_affinity_selections_total", "counter", "Requests prefix-cache affinity routed, by model alias and outcome: hit (a hint within the load band chose), miss (no hint), short (hints covering less than half of the request), busy (only backends above the load band had a hint), shared (the only hints covering half of the request end before its first user message: a prefix conversations share), behind (the only hints covering half of the request end before its previous turn: another gateway replica served the turns since); all but hit chose by rendezvous hashing of the conversation."},
	{"sluice_prefix_affinity_invalidations_total", "counter", "Prefix hints dropped because the backend a hint chose reported a full prefix-cache miss, by model alias."},
	{"sluice_prefix_affinity_matched_bytes_total", "counter", "Canonical bytes of requests' prompts that prefix-cache affinity sent to a backend its hint said held them (the hint's checkpoint, on outcome hit), by model alias; over sluice_prefix_affinity_scanned_bytes_total, the share of prompt bytes routed to their cache."},
	{"sluice_prefix_affinity_scanned_bytes_total", "counter", "Canonical bytes of the requests prefix-cache affinity fingerprinted (at most 256 KiB of each), by model alias."},
	{"sluice_prefix_affinity_index_entries", "gauge", "Checkpoint hashes held by the process's prefix-affinity index that have a live target (at most 4,096)."},
	{"sluice_prefix_affinity_evictions_total", "counter", "Live entries of the prefix-affinity index displaced by new ones because the index was full."},
	{"sluice_rate_limited_total", "counter", "Requests a rate-limit middleware refused with 429 because their key's token bucket was empty."},
	{"sluice_pd_phase_duration_seconds", "histogram", "Prefill/decode serving: duration of each phase of the exchange that succeeded (prepare, prefill, decode_head: from the decode call to its response head, decode: from the head to the end of the response), in seconds."},
	{"sluice_pd_phase_failures_total", "counter", "Prefill/decode serving: phases of the exchange a worker failed (prepare, prefill, decode_head); a call cut because the client left or execution_timeout_ms passed, or a worker the gateway could not connect for want of its own resources, is not counted."},
	{"sluice_pd_pair_retries_total", "counter", "Prefill/decode serving: requests sent to another worker pair of the target after a failure before any response byte."},
	{"sluice_pd_pairs_exhausted_total", "counter", "Prefill/decode serving: requests for which no pair of the target could serve (the next target, if any, took them)."},
	{"sluice_pd_aborts_total", "counter", "Prefill/decode serving: executions aborted on both workers, by reason: leg_failed, client_gone, timeout (execution_timeout_ms), stream_failed or gateway_resources (the gateway could not connect a worker for want of its own descriptors, memory or ports)."},
	{"sluice_pd_prepare_batch_size", "histogram", "Prefill/decode serving: decode/prepare reservations per call to a decode worker (1: a plain decode/prepare; more: one decode/prepare:batch call)."},
	{"sluice_health_checks_total", "counter", "Active health check probes of a backend, by result (ok or fail)."},
	{"sluice_backend_ejections_total", "counter", "Times a backend was taken out of rotation, by reason: active (its health checks failed) or passive (its requests failed)."},
	{"sluice_backend_ejections_refused_total", "counter", "Passive ejections not made because the backend was the last of its service in rotation (it kept serving)."},
	{"sluice_service_no_healthy_backend_total", "counter", "Times active health checks left a service without a healthy backend."},
	{"sluice_circuit_breaker_state", "gauge", "State of a circuit-breaker middleware's breaker over the backend: 0 closed (requests pass), 1 open (the backend is kept out), 2 half-open (one probe request at a time)."},
}

// runtimeHelp gives the help text of the Go runtime and process families VictoriaMetrics/
// metrics writes on Linux and macOS.
var runtimeHelp = map[string]string{
	"go_gc_cpu_seconds_total":                       "CPU time spent by the garbage collector, in seconds.",
	"go_gc_duration_seconds":                        "Pause durations of the last garbage collections, in seconds.",
	"go_gc_mark_assist_cpu_seconds_total":           "CPU time goroutines spent assisting the garbage collector, in seconds.",
	"go_gc_pauses_seconds":                          "Distribution of stop-the-world garbage collection pauses, in seconds.",
	"go_gomaxprocs":                                 "GOMAXPROCS: the number of OS threads that can run Go code at once.",
	"go_goroutines":                                 "Number of goroutines.",
	"go_info":                                       "Go version the binary was built with.",
	"go_info_ext":                                   "Compiler, architecture, OS and GOROOT of the Go build.",
	"go_memlimit_bytes":                             "Go runtime soft memory limit (GOMEMLIMIT), in bytes.",
	"go_memstats_alloc_bytes":                       "Bytes of allocated heap objects.",
	"go_memstats_alloc_bytes_total":                 "Bytes allocated for heap objects since start.",
	"go_memstats_buck_hash_sys_bytes":               "Bytes of memory in profiling bucket hash tables.",
	"go_memstats_frees_total":                       "Heap objects freed since start.",
	"go_memstats_gc_cpu_fraction":                   "Fraction of the available CPU time used by the garbage collector since start.",
	"go_memstats_gc_sys_bytes":                      "Bytes of memory in garbage collection metadata.",
	"go_memstats_heap_alloc_bytes":                  "Bytes of allocated heap objects.",
	"go_memstats_heap_idle_bytes":                   "Bytes in idle (unused) heap spans.",
	"go_memstats_heap_inuse_bytes":                  "Bytes in in-use heap spans.",
	"go_memstats_heap_objects":                      "Number of allocated heap objects.",
	"go_memstats_heap_released_bytes":               "Bytes of physical memory returned to the OS.",
	"go_memstats_heap_sys_bytes":                    "Bytes of heap memory obtained from the OS.",
	"go_memstats_last_gc_time_seconds":              "Unix time of the last garbage collection, in seconds.",
	"go_memstats_lookups_total":                     "Pointer lookups performed by the runtime since start.",
	"go_memstats_mallocs_total":                     "Heap objects allocated since start.",
	"go_memstats_mcache_inuse_bytes":                "Bytes of allocated mcache structures.",
	"go_memstats_mcache_sys_bytes":                  "Bytes of memory obtained from the OS for mcache structures.",
	"go_memstats_mspan_inuse_bytes":                 "Bytes of allocated mspan structures.",
	"go_memstats_mspan_sys_bytes":                   "Bytes of memory obtained from the OS for mspan structures.",
	"go_memstats_next_gc_bytes":                     "Heap size target of the next garbage collection, in bytes.",
	"go_memstats_other_sys_bytes":                   "Bytes of memory in miscellaneous off-heap runtime allocations.",
	"go_memstats_stack_inuse_bytes":                 "Bytes in stack spans.",
	"go_memstats_stack_sys_bytes":                   "Bytes of stack memory obtained from the OS.",
	"go_memstats_sys_bytes":                         "Bytes of memory obtained from the OS in total.",
	"go_mutex_wait_seconds_total":                   "Time goroutines spent blocked on a sync.Mutex or sync.RWMutex, in seconds.",
	"go_scavenge_cpu_seconds_total":                 "CPU time spent returning memory to the OS, in seconds.",
	"go_sched_latencies_seconds":                    "Distribution of the time goroutines spent runnable before running, in seconds.",
	"go_threads":                                    "Number of OS threads created.",
	"process_cgroup_cpu_throttled_seconds_total":    "Time the process's cgroup was throttled by its CPU limit since start, in seconds.",
	"process_cpu_seconds_system_total":              "CPU time spent in the kernel, in seconds.",
	"process_cpu_seconds_total":                     "CPU time spent in user and kernel mode, in seconds.",
	"process_cpu_seconds_user_total":                "CPU time spent in user mode, in seconds.",
	"process_io_read_bytes_total":                   "Bytes read by read-like system calls.",
	"process_io_read_syscalls_total":                "Read-like system calls.",
	"process_io_storage_read_bytes_total":           "Bytes read from storage.",
	"process_io_storage_written_bytes_total":        "Bytes written to storage.",
	"process_io_write_syscalls_total":               "Write-like system calls.",
	"process_io_written_bytes_total":                "Bytes written by write-like system calls.",
	"process_major_pagefaults_total":                "Page faults that needed disk I/O.",
	"process_max_fds":                               "Limit on open file descriptors.",
	"process_minor_pagefaults_total":                "Page faults resolved without disk I/O.",
	"process_num_threads":                           "Number of OS threads of the process.",
	"process_open_fds":                              "Open file descriptors.",
	"process_pressure_cpu_stalled_seconds_total":    "Time all tasks of the cgroup were stalled waiting for CPU since start, in seconds.",
	"process_pressure_cpu_waiting_seconds_total":    "Time some task of the cgroup waited for CPU since start, in seconds.",
	"process_pressure_io_stalled_seconds_total":     "Time all tasks of the cgroup were stalled on I/O since start, in seconds.",
	"process_pressure_io_waiting_seconds_total":     "Time some task of the cgroup waited for I/O since start, in seconds.",
	"process_pressure_memory_stalled_seconds_total": "Time all tasks of the cgroup were stalled on memory since start, in seconds.",
	"process_pressure_memory_waiting_seconds_total": "Time some task of the cgroup waited for memory since start, in seconds.",
	"process_resident_memory_anon_bytes":            "Resident anonymous memory, in bytes.",
	"process_resident_memory_bytes":                 "Resident memory size, in bytes.",
	"process_resident_memory_file_bytes":            "Resident file-backed memory, in bytes.",
	"process_resident_memory_peak_bytes":            "Peak resident memory size, in bytes.",
	"process_resident_memory_shared_bytes":          "Resident shared memory, in bytes.",
	"process_start_time_seconds":                    "Unix time the process started, in seconds.",
	"process_virtual_memory_bytes":                  "Virtual memory size, in bytes.",
	"process_virtual_memory_max_bytes":              "Limit on the virtual memory size, in bytes.",
	"process_virtual_memory_peak_bytes":             "Peak virtual memory size, in bytes.",
}

// runtimeTypes corrects the type of families VictoriaMetrics/metrics declares as gauges though
// they only grow.
var runtimeTypes = map[string]string{
	"process_cpu_seconds_total":              "counter", // a gauge on macOS
	"process_io_read_bytes_total":            "counter",
	"process_io_read_syscalls_total":         "counter",
	"process_io_storage_read_bytes_total":    "counter",
	"process_io_storage_written_bytes_total": "counter",
	"process_io_write_syscalls_total":        "counter",
	"process_io_written_bytes_total":         "counter",
}

// runtimeDropped are families left out: counters named like histogram parts (_count), which
// Prometheus tooling flags, and of no use for a gateway (cgo calls, forced GCs; go_gomaxprocs
// tells the CPUs the runtime uses).
var runtimeDropped = map[string]bool{
	"go_cgo_calls_count": true,
	"go_cpu_count":       true,
	"go_gc_forced_count": true,
}

var helpText = func() map[string]string {
	m := make(map[string]string, len(Families)+len(runtimeHelp))
	for _, f := range Families {
		m[f.Name] = f.Help
	}
	for k, v := range runtimeHelp {
		m[k] = v
	}
	return m
}()

// WritePrometheus writes every metric to w in the Prometheus text format (version 0.0.4):
// the gateway's, the Go runtime's and the process's, each family once with its HELP and TYPE
// lines.
func WritePrometheus(w io.Writer) {
	var raw bytes.Buffer
	vm.WritePrometheus(&raw, false)
	vm.WriteGoMetrics(&raw)
	vm.WriteProcMetrics(&raw)
	vm.WriteFDMetrics(&raw)
	_, _ = w.Write(annotate(raw.Bytes()))
}

// block is one metric family of an exposition.
type block struct {
	name, typ string
	samples   []byte
}

// annotate rewrites an exposition written with metadata on: each family gets its help text
// and corrected type, dropped families go, and a family written in several parts (one per
// registered set) is written once.
func annotate(raw []byte) []byte {
	size := len(raw)
	var order []*block
	byName := map[string]*block{}
	var cur *block
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if name, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
			if i := bytes.IndexByte(name, ' '); i >= 0 {
				name = name[:i]
			}
			cur = byName[string(name)]
			if cur == nil {
				cur = &block{name: string(name)}
				byName[cur.name] = cur
				order = append(order, cur)
			}
			continue
		}
		if rest, ok := bytes.CutPrefix(line, []byte("# TYPE ")); ok {
			if cur != nil && cur.typ == "" {
				if _, typ, ok := bytes.Cut(rest, []byte(" ")); ok {
					cur.typ = string(typ)
				}
			}
			continue
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if cur == nil {
			// Samples before any metadata (none are written so): kept, without metadata.
			cur = &block{}
			order = append(order, cur)
		}
		cur.samples = append(cur.samples, line...)
		cur.samples = append(cur.samples, '\n')
	}
	out := make([]byte, 0, size+128*len(order))
	for _, b := range order {
		if runtimeDropped[b.name] {
			continue
		}
		if b.name != "" {
			typ := b.typ
			if t := runtimeTypes[b.name]; t != "" {
				typ = t
			}
			if typ == "" {
				typ = "untyped"
			}
			out = append(out, "# HELP "...)
			out = append(out, b.name...)
			if h := helpText[b.name]; h != "" {
				out = append(out, ' ')
				out = append(out, helpEscaper.Replace(h)...)
			}
			out = append(out, "\n# TYPE "...)
			out = append(out, b.name...)
			out = append(out, ' ')
			out = append(out, typ...)
			out = append(out, '\n')
		}
		out = append(out, b.samples...)
	}
	return out
}

// helpEscaper escapes a help text as the text format wants (backslash and newline).
var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
