package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// OpenAI-compatible endpoints a model router serves and a consumer's grants name.
const (
	EndpointChatCompletions = "/v1/chat/completions"
	EndpointCompletions     = "/v1/completions"
	EndpointEmbeddings      = "/v1/embeddings"
	EndpointModels          = "/v1/models"
	EndpointResponses       = "/v1/responses"
	EndpointMessages        = "/v1/messages"
)

// Endpoints lists the endpoints of a model router.
var Endpoints = []string{EndpointChatCompletions, EndpointCompletions, EndpointEmbeddings, EndpointModels, EndpointResponses, EndpointMessages}

// Scheduling phases of a model ([models.<alias>.scheduling] phase).
const (
	// PhaseAggregated: one worker serves the whole request.
	PhaseAggregated = "aggregated"
	// PhaseDecode: prefill and decode on two workers (disaggregated serving).
	PhaseDecode = "decode"
)

// Defaults of the model gateway's keys.
const (
	DefaultTargetWeight    = 1
	DefaultQueueTimeoutMs  = 30_000
	DefaultConsumerEnv     = "default"
	DefaultAPIKeyHeader    = "Authorization"
	MaxMaxConcurrent       = 1 << 20
	MaxQueueTimeoutMs      = 10 * 60 * 1000
	sha256HexLen           = 64
	maxAPIKeyHeaderNameLen = 128
)

// Model is one model alias callers may ask for, [models.<alias>]: where its requests go and
// how they are admitted.
type Model struct {
	// Name is the alias (the table name), what callers send as "model".
	Name string `toml:"-"`
	// ModelID is an optional stable identifier of the alias (for example a UUID), shown in
	// /v1/models as the model's metadata; the alias stays what callers send.
	ModelID string `toml:"model_id"`
	// Targets are where the alias's requests go, [models.<alias>.targets.<id>]; at least one.
	Targets map[string]*Target `toml:"targets"`
	// Scheduling holds admission and scheduling, [models.<alias>.scheduling].
	Scheduling Scheduling `toml:"scheduling"`
}

// Target is one place a model's requests go, [models.<alias>.targets.<id>].
type Target struct {
	// Name is the target's id (the table name).
	Name string `toml:"-"`
	// Service is the [services.<name>] whose servers run the model; required.
	Service string `toml:"service"`
	// UpstreamModel is the model name the upstream expects; the request's "model" is rewritten
	// to it. Default: the alias.
	UpstreamModel string `toml:"upstream_model"`
	// Priority orders targets: 0 (the default) is tried first; a target of the next priority
	// is used only when every server of the targets before it failed before answering.
	Priority int `toml:"priority"`
	// Weight shares requests among the targets of one priority, 1..1000000. Default 1.
	Weight int `toml:"weight"`
	// DeploymentGeneration, when set (> 0), sends requests only to workers whose observation
	// reports this deployment generation; servers without observations are left out. 0 (the
	// default): any.
	DeploymentGeneration int `toml:"deployment_generation"`
	// ExecutionConfigDigest, when set, sends requests only to workers whose observation
	// reports this execution config digest; servers without observations are left out. ""
	// (the default): any.
	ExecutionConfigDigest string `toml:"execution_config_digest"`
}

// Scheduling is [models.<alias>.scheduling].
type Scheduling struct {
	// Phase is "aggregated" (the default) or "decode" (prefill/decode on two workers).
	Phase string `toml:"phase"`
	// MaxConcurrentRequests bounds the alias's requests in flight; 0 (the default) is no
	// bound.
	MaxConcurrentRequests int `toml:"max_concurrent_requests"`
	// MaxQueuedRequests bounds the requests waiting for a slot (first come, first served);
	// 0 (the default): a request over MaxConcurrentRequests is refused at once.
	MaxQueuedRequests int `toml:"max_queued_requests"`
	// QueueTimeoutMs is the longest a request waits in the queue, in ms. Default 30000.
	QueueTimeoutMs int `toml:"queue_timeout_ms"`
	// PrefixAffinity routes a conversation request (chat completions, Responses, Messages)
	// to the server of the chosen target most likely to hold its prefix in its KV cache,
	// within a load band of one request (package affinity).
	PrefixAffinity bool `toml:"prefix_affinity"`
	// PrefixAffinityHeaders adds X-Sluice-Prefix-Matched-Bytes and
	// X-Sluice-Prefix-Estimated-Ms to the responses prefix affinity routed. Default false.
	PrefixAffinityHeaders bool `toml:"prefix_affinity_headers"`
	// PrefixPrefillUsPerToken is the prefill cost of one prompt token on the alias's servers,
	// in µs: prefix_estimated_ms is the matched prefix's tokens (about 4 bytes each) times it.
	// Default 100; 1..100000.
	PrefixPrefillUsPerToken int `toml:"prefix_prefill_us_per_token"`
	// PromptCacheAffinity applies cache affinity to prefill worker choice (phase "decode").
	PromptCacheAffinity bool `toml:"prompt_cache_affinity"`
	// DistributedServing configures phase "decode".
	DistributedServing *DistributedServing `toml:"distributed_serving"`
}

// DistributedServing is [models.<alias>.scheduling.distributed_serving]: how the gateway
// runs the worker protocol's prefill/decode exchange (docs/config.md).
type DistributedServing struct {
	// APIKeyEnv names the environment variable holding the bearer key of the workers'
	// /power/v1 endpoints; required. The variable must be set (and not empty) when the
	// configuration is activated; the key itself never appears in a configuration.
	APIKeyEnv string `toml:"api_key_env"`
	// ExecutionTimeoutMs bounds a whole prefill/decode exchange, in ms, from the first call
	// to the end of the decode stream. Default 30000, range 1..600000.
	ExecutionTimeoutMs int `toml:"execution_timeout_ms"`
	// PrepareBatchSize is the most decode/prepare calls to one decode worker that are
	// coalesced into one decode/prepare:batch call while another call to it is in flight.
	// Default 32; 1 sends every prepare on its own. Range 1..1024 (the protocol's bound).
	PrepareBatchSize int `toml:"prepare_batch_size"`
	// APIKey is the value read from APIKeyEnv at load (not a TOML key; never print it).
	APIKey string `toml:"-"`
}

// Bounds and defaults of [models.<alias>.scheduling.distributed_serving].
const (
	DefaultExecutionTimeoutMs = 30_000
	MaxExecutionTimeoutMs     = 10 * 60 * 1000
	DefaultPrepareBatchSize   = 32
	MaxPrepareBatchSize       = 1024
)

// Consumer is one caller of the model gateway, [consumers.<name>]: its credentials and what it
// may use.
type Consumer struct {
	// Name is the table name; it labels the caller in logs and metrics.
	Name string `toml:"-"`
	// APIKeySHA256 lists the hex SHA-256 digests of the caller's API keys (never the keys).
	APIKeySHA256 []string `toml:"api_key_sha256"`
	// APIKeyEnv names an environment variable that holds one API key of the caller.
	APIKeyEnv string `toml:"api_key_env"`
	// Environment scopes the caller (for example "prod"). Default "default".
	Environment string `toml:"environment"`
	// Generation is the credential issuance generation (scopes cache-affinity hints).
	Generation int `toml:"generation"`
	// Grants says what the caller may use, [consumers.<name>.grants].
	Grants Grants `toml:"grants"`
	// KeyDigests are the SHA-256 digests of every key of the caller, from APIKeySHA256 and
	// APIKeyEnv, filled at load (not a TOML key).
	KeyDigests [][sha256.Size]byte `toml:"-"`
}

// Grants is [consumers.<name>.grants].
type Grants struct {
	// Models lists the aliases the caller may use; "*" grants every alias.
	Models []string `toml:"models"`
	// Endpoints lists the endpoints the caller may call (Endpoints); "*" grants all.
	Endpoints []string `toml:"endpoints"`
}

func (t *Target) setDefaults() { t.Weight = DefaultTargetWeight }

func (m *Model) setDefaults() { m.Scheduling.setDefaults() }

func (s *Scheduling) setDefaults() {
	s.Phase = PhaseAggregated
	s.QueueTimeoutMs = DefaultQueueTimeoutMs
	s.PrefixPrefillUsPerToken = DefaultPrefixPrefillUsPerToken
}

// DefaultPrefixPrefillUsPerToken is the default prefill cost per prompt token, in µs: the
// order of a mid-sized model's prefill on one accelerator (10,000 tokens a second).
const DefaultPrefixPrefillUsPerToken = 100

// MaxPrefixPrefillUsPerToken bounds scheduling.prefix_prefill_us_per_token (0.1 s a token).
const MaxPrefixPrefillUsPerToken = 100_000

func (c *Consumer) setDefaults() { c.Environment = DefaultConsumerEnv }

// validateModels checks [models], [consumers] and the model routers.
func (c *Config) validateModels(e *errs, lookup func(string) (string, bool)) {
	for _, name := range sortedNames(c.Models) {
		c.validateModel(e, name, c.Models[name], lookup)
	}
	owner := map[[sha256.Size]byte]string{}
	for _, name := range sortedNames(c.Consumers) {
		cs := c.Consumers[name]
		c.validateConsumer(e, name, cs, lookup)
		for _, d := range cs.KeyDigests {
			// One key, one caller: a key listed twice would silently move a tenant's access
			// to whichever consumer happened to be compiled last.
			if other, ok := owner[d]; ok && other != name {
				e.add(c.Pos("consumers", name), "consumers.%s: one of its keys is also a key of consumers.%s (each key must identify one consumer)", name, other)
			}
			owner[d] = name
		}
	}
}

func (c *Config) validateModel(e *errs, name string, m *Model, lookup func(string) (string, bool)) {
	path := []string{"models", name}
	if !validName(name) {
		e.add(c.Pos(path...), "model alias %q: aliases are 1..128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", name)
	}
	if len(m.Targets) == 0 {
		e.add(c.Pos(path...), "models.%s: a model needs at least one target ([models.%s.targets.<id>] with a service)", name, name)
	}
	for _, id := range sortedNames(m.Targets) {
		t := m.Targets[id]
		tp := append(append([]string(nil), path...), "targets", id)
		switch {
		case t.Service == "" && c.missing(append(tp, "service")...):
			e.add(c.Pos(tp...), "models.%s.targets.%s.service is required (the name of a [services.<name>] table)", name, id)
		case t.Service != "":
			if _, ok := c.Services[t.Service]; !ok {
				e.add(c.ValuePos(append(tp, "service")...), "models.%s.targets.%s.service: no service named %q%s", name, id, c.shown(t.Service, append(tp, "service")...), didYouMean(t.Service, sortedNames(c.Services)))
			}
		}
		if t.UpstreamModel == "" {
			t.UpstreamModel = name
		}
		if t.Priority < 0 {
			e.add(c.ValuePos(append(tp, "priority")...), "models.%s.targets.%s.priority %d: want 0 (first) or more", name, id, t.Priority)
		}
		if t.Weight < 1 || t.Weight > MaxWeight {
			e.add(c.ValuePos(append(tp, "weight")...), "models.%s.targets.%s.weight %d: want 1..%d", name, id, t.Weight, MaxWeight)
		}
		if t.DeploymentGeneration < 0 {
			e.add(c.ValuePos(append(tp, "deployment_generation")...), "models.%s.targets.%s.deployment_generation %d: want 0 (any) or more", name, id, t.DeploymentGeneration)
		}
		c.validateTargetBinding(e, name, id, t)
	}
	c.validateScheduling(e, name, &m.Scheduling, lookup)
	if m.Scheduling.Phase == PhaseDecode {
		c.validateDistributedTargets(e, name, m)
	}
}

func (c *Config) validateScheduling(e *errs, name string, s *Scheduling, lookup func(string) (string, bool)) {
	sp := []string{"models", name, "scheduling"}
	at := func(key string) Position { return c.ValuePos(append(append([]string(nil), sp...), key)...) }
	switch s.Phase {
	case PhaseAggregated:
		if s.DistributedServing != nil {
			e.add(c.Pos(append(sp, "distributed_serving")...), "models.%s.scheduling.distributed_serving is only for phase = %q", name, PhaseDecode)
		}
	case PhaseDecode:
		c.validateDistributed(e, name, s, lookup)
	default:
		e.add(at("phase"), "models.%s.scheduling.phase %q: want %q or %q%s", name, s.Phase, PhaseAggregated, PhaseDecode, meant(s.Phase, []string{PhaseAggregated, PhaseDecode}))
	}
	if s.MaxConcurrentRequests < 0 || s.MaxConcurrentRequests > MaxMaxConcurrent {
		e.add(at("max_concurrent_requests"), "models.%s.scheduling.max_concurrent_requests %d: want 0 (no bound) to %d", name, s.MaxConcurrentRequests, MaxMaxConcurrent)
	}
	if s.MaxQueuedRequests < 0 || s.MaxQueuedRequests > MaxMaxConcurrent {
		e.add(at("max_queued_requests"), "models.%s.scheduling.max_queued_requests %d: want 0 (no queue) to %d", name, s.MaxQueuedRequests, MaxMaxConcurrent)
	}
	if s.MaxQueuedRequests > 0 && s.MaxConcurrentRequests == 0 {
		e.add(at("max_queued_requests"), "models.%s.scheduling.max_queued_requests needs max_concurrent_requests (a queue forms only behind a bound)", name)
	}
	if s.QueueTimeoutMs < 1 || s.QueueTimeoutMs > MaxQueueTimeoutMs {
		e.add(at("queue_timeout_ms"), "models.%s.scheduling.queue_timeout_ms %d: want 1..%d (ms)", name, s.QueueTimeoutMs, MaxQueueTimeoutMs)
	}
	if s.PrefixPrefillUsPerToken < 1 || s.PrefixPrefillUsPerToken > MaxPrefixPrefillUsPerToken {
		e.add(at("prefix_prefill_us_per_token"), "models.%s.scheduling.prefix_prefill_us_per_token %d: want 1..%d (µs)", name, s.PrefixPrefillUsPerToken, MaxPrefixPrefillUsPerToken)
	}
	if s.PrefixAffinityHeaders && !s.PrefixAffinity {
		e.add(at("prefix_affinity_headers"), "models.%s.scheduling.prefix_affinity_headers needs prefix_affinity = true", name)
	}
	if s.PrefixAffinity && s.Phase == PhaseDecode {
		e.add(at("prefix_affinity"), "models.%s.scheduling.prefix_affinity chooses among the servers of aggregated targets: with phase = %q use prompt_cache_affinity", name, PhaseDecode)
	}
	if s.PromptCacheAffinity && s.Phase != PhaseDecode {
		e.add(at("prompt_cache_affinity"), "models.%s.scheduling.prompt_cache_affinity chooses prefill workers: it needs phase = %q (use prefix_affinity for phase %q)", name, PhaseDecode, PhaseAggregated)
	}
}

func (c *Config) validateConsumer(e *errs, name string, cs *Consumer, lookup func(string) (string, bool)) {
	path := []string{"consumers", name}
	if !validName(name) {
		e.add(c.Pos(path...), "consumer name %q: names are 1..128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", name)
	}
	for i, h := range cs.APIKeySHA256 {
		ip := append(append([]string(nil), path...), "api_key_sha256", strconv.Itoa(i))
		d, err := hex.DecodeString(strings.ToLower(h))
		if len(h) != sha256HexLen || err != nil {
			e.add(c.ValuePos(ip...), "consumers.%s.api_key_sha256[%d]: want 64 hex digits (the SHA-256 of the key, e.g. printf %%s \"$KEY\" | sha256sum), not a key", name, i)
			continue
		}
		cs.KeyDigests = append(cs.KeyDigests, [sha256.Size]byte(d))
	}
	if cs.APIKeyEnv != "" {
		if v, ok := lookup(cs.APIKeyEnv); !ok || v == "" {
			e.add(c.ValuePos(append(path, "api_key_env")...), "consumers.%s.api_key_env: environment variable %s is not set (or empty)", name, cs.APIKeyEnv)
		} else {
			cs.KeyDigests = append(cs.KeyDigests, sha256.Sum256([]byte(v)))
		}
	}
	if len(cs.APIKeySHA256) == 0 && cs.APIKeyEnv == "" {
		e.add(c.Pos(path...), "consumers.%s: a consumer needs a credential: api_key_sha256 = [\"<hex sha256 of the key>\"] or api_key_env = \"NAME\"", name)
	}
	if cs.Generation < 0 {
		e.add(c.ValuePos(append(path, "generation")...), "consumers.%s.generation %d: want 0 or more", name, cs.Generation)
	}
	for i, m := range cs.Grants.Models {
		ip := append(append([]string(nil), path...), "grants", "models", strconv.Itoa(i))
		if _, ok := c.Models[m]; !ok && m != "*" {
			e.add(c.ValuePos(ip...), "consumers.%s.grants.models: no model alias %q%s", name, m, didYouMean(m, sortedNames(c.Models)))
		}
	}
	for i, ep := range cs.Grants.Endpoints {
		ip := append(append([]string(nil), path...), "grants", "endpoints", strconv.Itoa(i))
		if !oneOf(ep, Endpoints) && ep != "*" {
			e.add(c.ValuePos(ip...), "consumers.%s.grants.endpoints: %q is not a model endpoint (want \"*\" or one of %s)%s", name, ep, quoteAll(Endpoints), nearestEndpoint(ep))
		}
	}
}

// nearestEndpoint returns " (did you mean "/v1/…"?)" for the model endpoint that ep most
// likely means, a misspelling of one or one without its "/v1" ("/chat/completions",
// "v1/models"), or "".
func nearestEndpoint(ep string) string {
	m := nearestValue(ep, Endpoints)
	for _, pre := range []string{"/v1", "/v1/", "/"} {
		if m == "" && oneOf(pre+ep, Endpoints) {
			m = pre + ep
		}
	}
	if m == "" {
		return ""
	}
	return " (did you mean " + strconv.Quote(m) + "?)"
}

// validateAPIKeyOptions checks the keys of an api-key middleware: header, optional.
func (c *Config) validateAPIKeyOptions(e *errs, name string, m *Middleware) {
	for _, k := range sortedNames(m.Options) {
		kp := []string{"middlewares", name, k}
		if k != "header" {
			e.add(c.Pos(kp...), "middlewares.%s: unknown key %q for an api-key middleware (known keys: header)", name, k)
			continue
		}
		h, ok := m.Options[k].(string)
		if !ok || h == "" || len(h) > maxAPIKeyHeaderNameLen || strings.IndexFunc(h, notTokenChar) >= 0 {
			e.add(c.ValuePos(kp...), "middlewares.%s.header: want a header field name such as \"X-Api-Key\"", name)
		}
	}
}

// notTokenChar reports a rune that cannot be in a header field name (RFC 9110 §5.6.2).
func notTokenChar(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

// APIKeyHeader returns the header an api-key middleware reads the key from ("" for the
// default: Authorization: Bearer, or X-Api-Key).
func (m *Middleware) APIKeyHeader() string {
	h, _ := m.Options["header"].(string)
	return h
}

// validateDistributed checks [models.<alias>.scheduling.distributed_serving] of a phase
// "decode" alias and reads its key from the environment, so that a configuration whose
// credential is missing is refused before it is activated.
func (c *Config) validateDistributed(e *errs, name string, s *Scheduling, lookup func(string) (string, bool)) {
	sp := []string{"models", name, "scheduling", "distributed_serving"}
	d := s.DistributedServing
	if d == nil {
		e.add(c.ValuePos("models", name, "scheduling", "phase"), "models.%s.scheduling.phase = %q needs [models.%s.scheduling.distributed_serving] with api_key_env (the workers' key)", name, PhaseDecode, name)
		return
	}
	at := func(key string) Position { return c.ValuePos(append(append([]string(nil), sp...), key)...) }
	switch n := d.APIKeyEnv; {
	case n == "" && c.missing(append(sp, "api_key_env")...):
		e.add(c.Pos(sp...), "models.%s.scheduling.distributed_serving.api_key_env is required (the name of the environment variable holding the workers' key)", name)
	case !isEnvName(n):
		e.add(at("api_key_env"), "models.%s.scheduling.distributed_serving.api_key_env %q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*); it names the variable, never holds the key", name, c.shown(n, append(sp, "api_key_env")...))
	default:
		if v, ok := lookup(n); !ok || v == "" {
			e.add(at("api_key_env"), "models.%s.scheduling.distributed_serving.api_key_env: environment variable %s is not set or empty (it must hold the workers' bearer key)", name, n)
		} else {
			d.APIKey = v
		}
	}
	if d.ExecutionTimeoutMs < 1 || d.ExecutionTimeoutMs > MaxExecutionTimeoutMs {
		e.add(at("execution_timeout_ms"), "models.%s.scheduling.distributed_serving.execution_timeout_ms %d: want 1..%d (ms)", name, d.ExecutionTimeoutMs, MaxExecutionTimeoutMs)
	}
	if d.PrepareBatchSize < 1 || d.PrepareBatchSize > MaxPrepareBatchSize {
		e.add(at("prepare_batch_size"), "models.%s.scheduling.distributed_serving.prepare_batch_size %d: want 1 (no batching) to %d", name, d.PrepareBatchSize, MaxPrepareBatchSize)
	}
}

// validateDistributedTargets refuses a phase "decode" target whose service's servers are not
// observed: prefill and decode workers are told apart by their observed role.
func (c *Config) validateDistributedTargets(e *errs, name string, m *Model) {
	for _, id := range sortedNames(m.Targets) {
		t := m.Targets[id]
		if svc := c.Services[t.Service]; svc != nil && !svc.Workers.Observe {
			e.add(c.ValuePos("models", name, "targets", id, "service"), "models.%s.targets.%s: phase = %q needs worker observations (roles prefill and decode), but services.%s.workers.observe is false", name, id, PhaseDecode, t.Service)
		}
	}
}

func (d *DistributedServing) setDefaults() {
	d.ExecutionTimeoutMs = DefaultExecutionTimeoutMs
	d.PrepareBatchSize = DefaultPrepareBatchSize
}
