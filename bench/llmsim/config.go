// Package llmsim simulates a fleet of OpenAI-compatible LLM servers (vLLM/SGLang-like) and
// of the gateway's prefill/decode "Power" workers, with a timing model
// (TTFT, ITL, batch effect, admission queue), a block-based prefix KV cache per instance,
// fault injection and per-instance accounting, cheap enough to run thousands of concurrent
// streams on a laptop-class CPU. docs/llmsim.md documents flags, the fleet file, the fault
// header and the formulas.
package llmsim

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Role is a worker role in the Power protocol: "aggregated" serves whole
// requests (and every protocol call), "prefill" runs prefill/execute, "decode" runs
// decode/prepare and decode/execute.
type Role string

// The worker roles of the Power protocol.
const (
	RoleAggregated Role = "aggregated"
	RolePrefill    Role = "prefill"
	RoleDecode     Role = "decode"
)

// ParseRole returns the Role named s, or an error naming s when it is not one of
// aggregated, prefill, decode.
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case RoleAggregated, RolePrefill, RoleDecode:
		return Role(s), nil
	}
	return "", fmt.Errorf("llmsim: unknown role %q (want aggregated, prefill or decode)", s)
}

// Duration is a time.Duration that reads and writes as a Go duration string ("200ms",
// "1.5s") in TOML fleet files.
type Duration time.Duration

// UnmarshalText parses a Go duration string; a negative duration is an error.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err // time: invalid duration "…": whoever reads the value names the key or flag
	}
	if v < 0 {
		return fmt.Errorf("negative duration %q", b)
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// InstanceConfig is one simulated server. Zero-valued fields of a fleet file's [[instance]]
// entries take the fleet's [defaults]; DefaultInstance gives the built-in defaults.
type InstanceConfig struct {
	// Listen is the TCP address to serve on ("127.0.0.1:8000"; port 0 picks a free port).
	Listen string `toml:"listen"`
	// Models lists the model ids served (GET /v1/models). Empty: any model name is accepted
	// and /v1/models lists "llmsim".
	Models []string `toml:"models"`
	// Role is the Power protocol role (default aggregated).
	Role Role `toml:"role"`
	// WorkerID identifies the worker in observations and handles (default "llmsim-<port>").
	WorkerID string `toml:"worker_id"`
	// Generation is the deployment generation reported by /power/v1/observation.
	Generation int64 `toml:"generation"`
	// Digest is the execution config digest reported by /power/v1/observation ("" = none).
	Digest string `toml:"digest"`

	// TTFT is the fixed prefill overhead: TTFT = TTFT + PerUncachedToken × uncached prompt
	// tokens (plus any time spent in the waiting queue).
	TTFT Duration `toml:"ttft"`
	// PerUncachedToken is the prefill cost of one prompt token not found in the KV cache.
	PerUncachedToken Duration `toml:"per_uncached_token"`
	// ITL is the inter-token latency of a sequence running alone.
	ITL Duration `toml:"itl"`
	// ITLPerRunning is added to ITL for every other running sequence (batch effect):
	// ITL(r) = ITL + ITLPerRunning × (r − 1).
	ITLPerRunning Duration `toml:"itl_per_running"`
	// Tokens is the output length in tokens when the request does not cap it lower.
	Tokens int `toml:"tokens"`
	// MaxRunning is the batch capacity: sequences prefilling or decoding at once.
	MaxRunning int `toml:"max_running"`
	// MaxWaiting bounds the FIFO waiting queue; a request arriving when it is full is
	// rejected with QueueFullStatus.
	MaxWaiting int `toml:"max_waiting"`
	// QueueFullStatus is the status of a rejection by a full queue: 429 (default, with
	// Retry-After: 1) or 503.
	QueueFullStatus int `toml:"queue_full_status"`

	// BlockSize is the KV cache block size in tokens.
	BlockSize int `toml:"block_size"`
	// Blocks is the number of KV cache blocks of the instance (LRU beyond it).
	Blocks int `toml:"blocks"`

	// KVTransfer is the fixed cost of receiving a prefill's KV state on decode/execute.
	KVTransfer Duration `toml:"kv_transfer"`
	// KVTransferPerToken is the per-prompt-token cost of receiving KV state on decode/execute.
	KVTransferPerToken Duration `toml:"kv_transfer_per_token"`
	// PrepareTTL is how long a decode/prepare reservation stays valid.
	PrepareTTL Duration `toml:"prepare_ttl"`

	// StartupDelay keeps the instance not ready (/health 503, inference 503, observation
	// ready=false) for this long after it starts or restarts.
	StartupDelay Duration `toml:"startup_delay"`
	// FaultRate is the probability (0..1) that a request gets Fault applied as if it had
	// sent it in x-llmsim-fault (drawn from the seeded generator).
	FaultRate float64 `toml:"fault_rate"`
	// Fault is the fault spec applied at FaultRate (same grammar as x-llmsim-fault).
	Fault string `toml:"fault"`
	// CrashEvery, when set, crashes the instance (listener and connections closed, cache and
	// reservations lost, epoch+1) every CrashEvery; it comes back after CrashDowntime. In a
	// fleet the instances crash in turn, spread evenly over the period.
	CrashEvery Duration `toml:"crash_every"`
	// CrashDowntime is how long a crashed instance stays down.
	CrashDowntime Duration `toml:"crash_downtime"`
	// EmbeddingDims is the length of the vectors /v1/embeddings returns when the request has
	// no "dimensions".
	EmbeddingDims int `toml:"embedding_dims"`
	// MaxModelLen is the context window in tokens (vLLM's --max-model-len), 0 for none. A
	// generation request whose prompt leaves no room for one output token, or whose prompt
	// plus requested output cap exceeds it, is refused at once with a 400
	// context_length_exceeded; so is an embeddings input longer than it.
	MaxModelLen int `toml:"max_model_len"`
}

// Config is a fleet: either explicit Instance entries, or Instances copies of Defaults on
// consecutive ports from BasePort (Roles cycled over them), or a single instance on
// Defaults.Listen.
type Config struct {
	// Seed makes every output deterministic (same seed, same request → same tokens).
	Seed uint64 `toml:"seed"`
	// Host is the address fleet instances listen on with BasePort (default 127.0.0.1).
	Host string `toml:"host"`
	// BasePort is the first port of a fleet; 0 with Instances > 1 gives each a free port.
	BasePort int `toml:"base_port"`
	// Instances is the fleet size when Instance is empty (default 1).
	Instances int `toml:"instances"`
	// Roles are cycled over the instances when Instance is empty.
	Roles []Role `toml:"roles"`
	// APIKey, when set, is the bearer key the /power/v1 endpoints require.
	APIKey string `toml:"api_key"`
	// Defaults is the template of every instance.
	Defaults InstanceConfig `toml:"defaults"`
	// Instance lists instances explicitly (fleet file [[instance]] tables, merged over
	// Defaults by LoadFile).
	Instance []InstanceConfig `toml:"instance"`
}

// Built-in defaults (documented in docs/llmsim.md).
const (
	DefaultListen           = "127.0.0.1:8000"
	defaultTTFT             = 200 * time.Millisecond
	defaultPerUncachedToken = 100 * time.Microsecond
	defaultITL              = 30 * time.Millisecond
	defaultITLPerRunning    = 100 * time.Microsecond
	defaultTokens           = 64
	defaultMaxRunning       = 256
	defaultMaxWaiting       = 1024
	defaultBlockSize        = 16
	defaultBlocks           = 8192
	defaultKVTransfer       = 5 * time.Millisecond
	defaultKVTransferPerTok = 10 * time.Microsecond
	defaultPrepareTTL       = 30 * time.Second
	defaultCrashDowntime    = 2 * time.Second
	defaultEmbeddingDims    = 64
	defaultMaxModelLen      = 131072
	maxRequestBodyBytes     = 32 << 20
	defaultQueueFullStatus  = 429
	defaultHost             = "127.0.0.1"
)

// MaxOutputTokens is the most output tokens per response an instance may be configured with
// (InstanceConfig.Tokens, --tokens); Start refuses more. A command that sets Tokens from its
// own flag checks the flag against it before anything starts.
const MaxOutputTokens = 1 << 20

// DefaultInstance returns the built-in instance defaults: listen 127.0.0.1:8000, role
// aggregated, TTFT 200ms + 100µs per uncached token, ITL 30ms + 100µs per other running
// sequence, 64 output tokens, 256 running, 1,024 waiting (429 beyond), 16-token blocks ×
// 8,192, KV transfer 5ms + 10µs per token, prepare TTL 30s, a context window of 131,072
// tokens.
func DefaultInstance() InstanceConfig {
	return InstanceConfig{
		Listen:             DefaultListen,
		Role:               RoleAggregated,
		TTFT:               Duration(defaultTTFT),
		PerUncachedToken:   Duration(defaultPerUncachedToken),
		ITL:                Duration(defaultITL),
		ITLPerRunning:      Duration(defaultITLPerRunning),
		Tokens:             defaultTokens,
		MaxRunning:         defaultMaxRunning,
		MaxWaiting:         defaultMaxWaiting,
		QueueFullStatus:    defaultQueueFullStatus,
		BlockSize:          defaultBlockSize,
		Blocks:             defaultBlocks,
		KVTransfer:         Duration(defaultKVTransfer),
		KVTransferPerToken: Duration(defaultKVTransferPerTok),
		PrepareTTL:         Duration(defaultPrepareTTL),
		CrashDowntime:      Duration(defaultCrashDowntime),
		EmbeddingDims:      defaultEmbeddingDims,
		MaxModelLen:        defaultMaxModelLen,
	}
}

// DefaultConfig returns a one-instance fleet of DefaultInstance on 127.0.0.1:8000, seed 1.
func DefaultConfig() Config {
	return Config{Seed: 1, Host: defaultHost, Instances: 1, Defaults: DefaultInstance()}
}

// resolve expands c into one validated InstanceConfig per instance.
// MaxInstances bounds a fleet's size (each instance is a listener and its goroutines).
const MaxInstances = 4096

func (c Config) resolve() ([]InstanceConfig, error) {
	n := max(c.Instances, 1)
	if len(c.Instance) > 0 {
		n = len(c.Instance)
	}
	switch {
	case c.Instances < 0 || n > MaxInstances:
		return nil, fmt.Errorf("llmsim: instances %d: want 1..%d", c.Instances, MaxInstances)
	case c.BasePort < 0 || c.BasePort > 65535:
		return nil, fmt.Errorf("llmsim: base_port %d: want a TCP port (0: free ports)", c.BasePort)
	case len(c.Instance) == 0 && c.BasePort > 0 && c.BasePort+n-1 > 65535:
		return nil, fmt.Errorf("llmsim: base_port %d + %d instances runs past port 65535", c.BasePort, n)
	}
	var out []InstanceConfig
	if len(c.Instance) > 0 {
		out = append(out, c.Instance...)
	} else {
		n := max(c.Instances, 1)
		host := c.Host
		if host == "" {
			host = defaultHost
		}
		for i := range n {
			ic := c.Defaults
			ic.Models = append([]string(nil), c.Defaults.Models...)
			if n > 1 || c.BasePort > 0 {
				port := 0
				if c.BasePort > 0 {
					port = c.BasePort + i
				}
				ic.Listen = net.JoinHostPort(host, strconv.Itoa(port))
			}
			if len(c.Roles) > 0 {
				ic.Role = c.Roles[i%len(c.Roles)]
			}
			out = append(out, ic)
		}
	}
	for i := range out {
		ic := &out[i]
		if ic.Listen == "" {
			ic.Listen = DefaultListen
		}
		if ic.Role == "" {
			ic.Role = RoleAggregated
		}
		if err := ic.validate(); err != nil {
			return nil, fmt.Errorf("llmsim: instance %d (%s): %w", i, ic.Listen, err)
		}
	}
	return out, nil
}

func (ic *InstanceConfig) validate() error {
	if _, err := ParseRole(string(ic.Role)); err != nil {
		return err
	}
	switch {
	case ic.Tokens < 0 || ic.Tokens > MaxOutputTokens:
		return fmt.Errorf("tokens %d out of range [0, %d]", ic.Tokens, MaxOutputTokens)
	case ic.MaxRunning < 1:
		return fmt.Errorf("max_running %d: must be at least 1", ic.MaxRunning)
	case ic.MaxWaiting < 0:
		return fmt.Errorf("max_waiting %d: must not be negative", ic.MaxWaiting)
	case ic.QueueFullStatus != 429 && ic.QueueFullStatus != 503:
		return fmt.Errorf("queue_full_status %d: must be 429 or 503", ic.QueueFullStatus)
	case ic.BlockSize < 1:
		return fmt.Errorf("block_size %d: must be at least 1 token", ic.BlockSize)
	case ic.Blocks < 0:
		return fmt.Errorf("blocks %d: must not be negative", ic.Blocks)
	case ic.FaultRate < 0 || ic.FaultRate > 1:
		return fmt.Errorf("fault_rate %v: must be within [0, 1]", ic.FaultRate)
	case ic.EmbeddingDims < 1 || ic.EmbeddingDims > 65536:
		return fmt.Errorf("embedding_dims %d out of range [1, 65536]", ic.EmbeddingDims)
	case ic.MaxModelLen < 0:
		return fmt.Errorf("max_model_len %d: must not be negative (0: no context window)", ic.MaxModelLen)
	}
	if ic.Fault != "" {
		if _, err := ParseFault(ic.Fault); err != nil {
			return err
		}
	} else if ic.FaultRate > 0 {
		return errors.New("fault_rate set without fault")
	}
	return nil
}
