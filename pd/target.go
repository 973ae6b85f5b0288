package pd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-gw/sluice/core/metrics"
	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/core/workers"
	"github.com/sluice-gw/sluice/internal/loglimit"
)

// Options configure the disaggregated serving of one model alias, from
// [models.<alias>.scheduling] and its distributed_serving table.
type Options struct {
	// Alias is the model alias (it scopes prompt cache keys and labels metrics).
	Alias string
	// APIKey is the workers' bearer key (read from api_key_env at load; never logged).
	APIKey string
	// ExecutionTimeout bounds the whole exchange, decode stream included.
	ExecutionTimeout time.Duration
	// PrepareBatchSize bounds a decode/prepare:batch call; 1 sends each prepare alone.
	PrepareBatchSize int
	// PromptCacheAffinity prefers, among the prefill workers within one request of the least
	// load, the one likely to hold the longest prefix of the prompt in its cache.
	PromptCacheAffinity bool
}

// Target is one target of a phase "decode" alias: the prefill and decode workers of its
// service. It is immutable once built, but for the state of its batchers and prefix index.
type Target struct {
	name      string
	opts      Options
	service   *pipeline.Service
	workers   *workers.Group
	urls      []string // worker i's URL without a trailing slash
	bearer    string
	client    *http.Client
	batchers  []*batcher
	batchSize int
	keyer     *CacheKeyer
	affinity  *prefixIndex // nil without prompt_cache_affinity
	// retired is set by Close: a call that ends after it closes the connection it used.
	retired atomic.Bool

	prefillNeeds, decodeNeeds workers.Needs
	m                         *metrics.PD
	shortLog                  loglimit.Limit // "the gateway is short of resources" lines
}

// Metrics returns the target's metrics, for metrics.InForce.
func (t *Target) Metrics() *metrics.PD { return t.m }

// NewTarget returns target name of an alias served with o: the workers of service svc,
// observed by g (g's members are svc's backends, in order), bound to deployment generation
// gen (0: any) and execution config digest digest ("": any). g must not be nil: prefill and
// decode workers are told apart by their observed role.
func NewTarget(o Options, name string, svc *pipeline.Service, g *workers.Group, gen int64, digest string) *Target {
	t := &Target{
		name: name, opts: o, service: svc, workers: g, bearer: "Bearer " + o.APIKey,
		batchSize: max(o.PrepareBatchSize, 1), keyer: NewCacheKeyer(o.APIKey),
		prefillNeeds: WorkerNeeds(RolePrefill, gen, digest),
		decodeNeeds:  WorkerNeeds(RoleDecode, gen, digest),
		m:            metrics.ForPD(o.Alias, name),
	}
	for i := 0; i < g.Len(); i++ {
		t.urls = append(t.urls, strings.TrimSuffix(g.Member(i).URL, "/"))
		t.batchers = append(t.batchers, &batcher{t: t, worker: i})
	}
	t.client = &http.Client{Transport: &http.Transport{
		Proxy:               nil, // the workers are reached as the data path reaches them
		DialContext:         dialWorker,
		MaxIdleConnsPerHost: maxIdlePerWorker,
		IdleConnTimeout:     90 * time.Second,
	}}
	if o.PromptCacheAffinity {
		t.affinity = newPrefixIndex(nil, t.urls)
	}
	return t
}

// KeepHints makes t, the target that replaces old on a reload, use old's prompt prefix hints,
// so that a reload does not send every conversation back to rendezvous hashing (a cold
// prefill) at once. It does nothing unless both have prompt_cache_affinity. The hints name
// workers by worker_id, so they stay true when the target's workers change (a hint for a
// worker no longer among them is never chosen). The restart epochs the hints were learned in
// go with them, by worker URL: a worker that restarted while the reload was under way, or
// before it and after old's last request to it, has its hints dropped all the same. Call it
// before t serves.
func (t *Target) KeepHints(old *Target) {
	if t.affinity != nil && old != nil && old.affinity != nil {
		t.affinity = newPrefixIndex(old.affinity.idx, t.urls)
	}
}

// WorkerNeeds returns what a target bound to deployment generation gen (0: any) and
// execution config digest digest ("": any) asks of its workers of role (RolePrefill or
// RoleDecode): that role, and state transfer, since the two halves of a pair hand a
// prefill's state over.
func WorkerNeeds(role string, gen int64, digest string) workers.Needs {
	return workers.Needs{Role: role, Generation: gen, Digest: digest, StateTransfer: true}
}

// Judge says whether worker i may take its half of the target's requests now, as the pair
// choice judges it: a worker reporting role decode as a decode worker, any other as a prefill
// worker (so a worker of neither role is left out as workers.WrongRole).
func (t *Target) Judge(i int) workers.Reason {
	n := &t.prefillNeeds
	if t.workers.Member(i).Worker.Role() == RoleDecode {
		n = &t.decodeNeeds
	}
	r, _ := t.workers.Judge(i, n)
	return r
}

// dialWorker connects to a worker for a protocol call.
func dialWorker(ctx context.Context, network, addr string) (net.Conn, error) {
	if h := dialHook.Load(); h != nil {
		return (*h)(ctx, network, addr)
	}
	return workerDialer.DialContext(ctx, network, addr)
}

var workerDialer = &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}

// dialHook, when set (by tests), makes the workers' connections instead of workerDialer.
var dialHook atomic.Pointer[func(ctx context.Context, network, addr string) (net.Conn, error)]

const (
	// dialTimeout bounds a connect to a worker for a prepare, prefill or abort call.
	dialTimeout = 2 * time.Second
	// maxIdlePerWorker bounds the idle keep-alive connections kept to one worker for those
	// calls.
	maxIdlePerWorker = 64
)

// Name returns the target's id.
func (t *Target) Name() string { return t.name }

// Close releases the target's idle connections (when its configuration is retired). The calls
// of requests still in flight on the target (prepare, prefill, abort) go on; the connection
// each used is closed when it ends instead of kept idle.
func (t *Target) Close() {
	t.retired.Store(true)
	t.client.CloseIdleConnections()
}

// release closes the idle connections again once the target is retired: a call that ended
// after Close left its connection idle (the response is read to its end before this runs).
func (t *Target) release() {
	if t.retired.Load() {
		t.client.CloseIdleConnections()
	}
}

// Execution ids are a random per-process prefix and a counter: unique across gateway
// replicas and restarts, so one replica's abort never hits another's execution.
var (
	execPrefix  = newExecPrefix()
	execCounter atomic.Uint64
)

func newExecPrefix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "sluice-" + hex.EncodeToString(b[:]) + "-"
}

func newExecutionID() string {
	return execPrefix + strconv.FormatUint(execCounter.Add(1), 36)
}
