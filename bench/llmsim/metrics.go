package llmsim

import (
	"net/http"
	"strconv"
)

// handleMetrics serves GET /metrics in the Prometheus text format with vLLM's gauge and
// counter names (vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:gpu_cache_usage_perc and vllm:kv_cache_usage_perc as a 0..1 fraction,
// vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total in tokens,
// vllm:prompt_tokens_total, vllm:generation_tokens_total, vllm:request_success_total), each
// labelled model_name, plus llmsim_* counters of the stats endpoint.
func (in *instance) handleMetrics(w http.ResponseWriter, r *http.Request) {
	st := in.stats()
	used, hits, queries := in.cache.usage()
	usage := 0.0
	if in.cfg.Blocks > 0 {
		usage = float64(used) / float64(in.cfg.Blocks)
	}
	model := "llmsim"
	if len(in.cfg.Models) > 0 {
		model = in.cfg.Models[0]
	}
	lbl := `{model_name=` + strconv.Quote(model) + `}`
	b := make([]byte, 0, 2048)
	metric := func(name, typ, help string, v float64) {
		b = append(b, "# HELP "...)
		b = append(b, name...)
		b = append(b, ' ')
		b = append(b, help...)
		b = append(b, "\n# TYPE "...)
		b = append(b, name...)
		b = append(b, ' ')
		b = append(b, typ...)
		b = append(b, '\n')
		b = append(b, name...)
		b = append(b, lbl...)
		b = append(b, ' ')
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
		b = append(b, '\n')
	}
	metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", float64(st.Running))
	metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", float64(st.Waiting))
	metric("vllm:gpu_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage)
	metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage)
	metric("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", float64(queries))
	metric("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", float64(hits))
	metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(st.PromptTokens))
	metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", float64(st.CompletionTokens))
	metric("vllm:request_success_total", "counter", "Count of successfully processed requests.", float64(st.Completed))
	metric("llmsim_requests_total", "counter", "Inference requests received.", float64(st.Requests))
	metric("llmsim_aborted_total", "counter", "Requests stopped because the client left or an abort.", float64(st.Aborted))
	metric("llmsim_rejected_total", "counter", "Requests refused by a full waiting queue.", float64(st.Rejected))
	metric("llmsim_full_misses_total", "counter", "Requests whose prompt had no cached block.", float64(st.FullMisses))
	metric("llmsim_open_connections", "gauge", "Client connections open.", float64(st.OpenConnections))
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}
