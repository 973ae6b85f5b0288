package config

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// This file holds the service keys of the model lifecycle: traffic mirroring
// ([services.<name>.mirror]), revisions (services.<name>.revisions) and their progressive
// rollout ([services.<name>.rollout]), scaling and cold-start buffering
// ([services.<name>.scaling]). Their runtime is in core/lifecycle.

// Defaults and bounds of [services.<name>.mirror].
const (
	DefaultMirrorQueueSize     = 64
	DefaultMirrorMaxConcurrent = 8
	DefaultMirrorTimeout       = 2 * time.Minute
	DefaultMirrorMaxBytes      = 64 << 20
	MaxMirrorQueueSize         = 1 << 16
	MaxMirrorMaxConcurrent     = 1024
	MinMirrorMaxBytes          = 64 << 10
	MaxMirrorMaxBytes          = 1 << 40
)

// Mirror is [services.<name>.mirror]: a copy of a share of the service's requests, body
// included, goes to another service (a shadow) fire-and-forget. The shadow's answers are read
// and discarded; the caller only ever gets the primary's.
type Mirror struct {
	// Service names the shadow, a [services.<name>] table other than this one; required.
	Service string `toml:"service"`
	// Percentage is the share of requests copied, 0..100 (fractions allowed), exact over
	// every window of 100/gcd requests: 10 copies one request in ten, evenly spaced.
	// Default 0 (none).
	Percentage float64 `toml:"percentage"`
	// Model, when set, replaces the "model" of an OpenAI request body sent to the shadow (a
	// candidate model sees the real traffic of the model it would replace). Default: the
	// body goes as the primary got it.
	Model string `toml:"model"`
	// QueueSize bounds the copies waiting for a sender; a copy arriving when it is full is
	// dropped (counted). Default 64, range 1..65536.
	QueueSize int `toml:"queue_size"`
	// MaxConcurrent bounds the copies in flight to the shadow at once. Default 8, range
	// 1..1024.
	MaxConcurrent int `toml:"max_concurrent"`
	// MaxBytes bounds the bytes of the copies held at once, queued and in flight (each copy's
	// head and body): a copy that would take them over it is dropped (counted), so memory for
	// shadow traffic stays bounded however large the bodies are. Default 64 MiB, range 64
	// KiB..1 TiB.
	MaxBytes int64 `toml:"max_bytes"`
	// Timeout bounds one copy's exchange with the shadow, head and body. Default 2m.
	Timeout time.Duration `toml:"timeout"`
	// LogSummary logs one line per shadow answer: the shadow, backend, status, latency to
	// the head, total latency and body length, never content. Default false.
	LogSummary bool `toml:"log_summary"`
}

func (m *Mirror) setDefaults() {
	m.QueueSize = DefaultMirrorQueueSize
	m.MaxConcurrent = DefaultMirrorMaxConcurrent
	m.Timeout = DefaultMirrorTimeout
	m.MaxBytes = DefaultMirrorMaxBytes
}

// validateLifecycle checks the lifecycle keys of service name.
func (c *Config) validateLifecycle(e *errs, name string, s *Service) {
	c.validateRevisions(e, name, s)
	c.validateScaling(e, name, s)
	if m := s.Mirror; m != nil {
		mp := []string{"services", name, "mirror"}
		at := func(key string) Position { return c.ValuePos(append(append([]string(nil), mp...), key)...) }
		switch _, ok := c.Services[m.Service]; {
		case m.Service == "" && c.missing(append(mp, "service")...):
			e.add(c.Pos(mp...), "services.%s.mirror.service is required (the name of the shadow's [services.<name>] table)", name)
		case m.Service == name:
			e.add(at("service"), "services.%s.mirror.service: a service cannot mirror to itself", name)
		case !ok && m.Service != "":
			e.add(at("service"), "services.%s.mirror.service: no service named %q%s", name, c.shown(m.Service, append(mp, "service")...), didYouMean(m.Service, sortedNames(c.Services)))
		}
		if !(m.Percentage >= 0 && m.Percentage <= 100) {
			e.add(at("percentage"), "services.%s.mirror.percentage %v: want 0..100", name, m.Percentage)
		}
		if m.QueueSize < 1 || m.QueueSize > MaxMirrorQueueSize {
			e.add(at("queue_size"), "services.%s.mirror.queue_size %d: want 1..%d", name, m.QueueSize, MaxMirrorQueueSize)
		}
		if m.MaxConcurrent < 1 || m.MaxConcurrent > MaxMirrorMaxConcurrent {
			e.add(at("max_concurrent"), "services.%s.mirror.max_concurrent %d: want 1..%d", name, m.MaxConcurrent, MaxMirrorMaxConcurrent)
		}
		if m.MaxBytes < MinMirrorMaxBytes || m.MaxBytes > MaxMirrorMaxBytes {
			e.add(at("max_bytes"), "services.%s.mirror.max_bytes %d: want %d..%d", name, m.MaxBytes, int64(MinMirrorMaxBytes), int64(MaxMirrorMaxBytes))
		}
	}
}

// Revision is an element of services.<name>.revisions: one version of the service, with its
// own servers and share of the traffic. A service with revisions lists no servers in its
// load_balancer (whose other keys, strategy and timeouts, apply to every revision).
type Revision struct {
	// Name names the revision in rollout, metrics and the admin API; required, unique in the
	// service, a name as for tables.
	Name string `toml:"name"`
	// TrafficPercent is the revision's share of the service's requests, 0..100; the shares
	// of a service's revisions add up to 100. Exact and evenly spread over every window of
	// 100 requests (smooth weighted round-robin over the revisions). Default 0.
	TrafficPercent float64 `toml:"traffic_percent"`
	// Servers are the revision's upstreams, as load_balancer.servers; at least one.
	Servers []Server `toml:"servers"`
}

// Defaults and bounds of [services.<name>.rollout].
const (
	DefaultRolloutStepPercent       = 10
	DefaultRolloutStepIntervalSecs  = 60
	DefaultRolloutErrorRate         = 0.05
	DefaultRolloutMinSamples        = 20
	MinRolloutStepIntervalSecs      = 0.01
	MaxRolloutStepIntervalSecs      = 86400
	MaxRolloutLatencyThresholdMs    = 3_600_000
	MaxRolloutMinSamples            = 1_000_000
	revisionSharesTolerancePercents = 1e-9
)

// Rollout is [services.<name>.rollout]: the traffic of the service moves from one revision to
// another step by step while the new one's errors and latencies in the current step stay
// within the thresholds, and goes back to the old one at once when one is crossed.
type Rollout struct {
	// From is the revision traffic moves away from (and back to on a rollback); required.
	From string `toml:"from"`
	// To is the revision traffic moves to; required, not From. Its traffic_percent is where
	// the rollout starts.
	To string `toml:"to"`
	// StepPercent is how many percent of the traffic move from From to To at each step,
	// 0 < step <= 100. Default 10.
	StepPercent float64 `toml:"step_percent"`
	// StepIntervalSecs is the least time a step lasts, in seconds (fractions allowed),
	// 0.01..86400. Default 60.
	StepIntervalSecs float64 `toml:"step_interval_secs"`
	// ErrorRateThreshold is the share of To's requests in a step that may fail (5xx,
	// gateway errors, upstream failures, timeouts) before the rollout rolls back, 0..1.
	// Default 0.05.
	ErrorRateThreshold float64 `toml:"error_rate_threshold"`
	// LatencyThresholdMs bounds the p99 of To's request latency in a step (from the complete
	// request to the end of the response), in milliseconds; 0 (the default) does not check.
	LatencyThresholdMs int64 `toml:"latency_threshold_ms"`
	// TTFTP99ThresholdMs bounds the p99 of To's time to first token in a step (streamed
	// responses), in milliseconds; 0 (the default) does not check.
	TTFTP99ThresholdMs int64 `toml:"ttft_p99_threshold_ms"`
	// ITLP99ThresholdMs bounds the p99 of To's inter-token latency in a step (streamed
	// responses), in milliseconds; 0 (the default) does not check.
	ITLP99ThresholdMs int64 `toml:"itl_p99_threshold_ms"`
	// MinSamples is how many of To's requests a step needs before it is judged: a step
	// with fewer waits (it neither advances nor rolls back), 1..1000000. Default 20.
	MinSamples int `toml:"min_samples"`
}

func (r *Rollout) setDefaults() {
	r.StepPercent = DefaultRolloutStepPercent
	r.StepIntervalSecs = DefaultRolloutStepIntervalSecs
	r.ErrorRateThreshold = DefaultRolloutErrorRate
	r.MinSamples = DefaultRolloutMinSamples
}

// StepInterval returns StepIntervalSecs as a duration.
func (r *Rollout) StepInterval() time.Duration {
	return time.Duration(r.StepIntervalSecs * float64(time.Second))
}

// DefaultLoadBalancer returns the load_balancer settings a service that writes none uses
// (a service with revisions): the defaults of every key, and no servers.
func DefaultLoadBalancer() *LoadBalancer {
	lb := &LoadBalancer{}
	lb.setDefaults()
	return lb
}

// validateRevisions checks services.<name>.revisions and [services.<name>.rollout].
func (c *Config) validateRevisions(e *errs, name string, s *Service) {
	path := []string{"services", name}
	if s.Rollout != nil && len(s.Revisions) == 0 {
		e.add(c.Pos(append(path, "rollout")...), "services.%s.rollout needs revisions: list them in services.%s.revisions = [{ name = \"v1\", traffic_percent = 100, servers = [...] }, ...]", name, name)
	}
	if len(s.Revisions) == 0 {
		return
	}
	if s.LoadBalancer != nil && len(s.LoadBalancer.Servers) > 0 {
		e.add(c.Pos(append(path, "load_balancer", "servers")...), "services.%s.load_balancer.servers: a service with revisions lists its servers in each revision", name)
	}
	seen := map[string]bool{}
	var total float64
	for i, r := range s.Revisions {
		rp := append(append([]string(nil), path...), "revisions", strconv.Itoa(i))
		at := func(key string) Position { return c.ValuePos(append(append([]string(nil), rp...), key)...) }
		switch {
		case r.Name == "" && c.missing(append(rp, "name")...):
			e.add(c.Pos(rp...), "services.%s.revisions[%d].name is required", name, i)
		case !validName(r.Name) && r.Name != "":
			e.add(at("name"), "services.%s.revisions[%d].name %q: names are 1..128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", name, i, r.Name)
		case seen[r.Name]:
			e.add(at("name"), "services.%s.revisions[%d].name %q is used twice", name, i, r.Name)
		}
		seen[r.Name] = true
		if !(r.TrafficPercent >= 0 && r.TrafficPercent <= 100) {
			e.add(at("traffic_percent"), "services.%s.revisions[%d].traffic_percent %v: want 0..100", name, i, r.TrafficPercent)
		}
		total += r.TrafficPercent
		if len(r.Servers) == 0 && !e.reported(at("servers")) {
			e.add(c.Pos(rp...), "services.%s.revisions[%d].servers: list at least one server, e.g. servers = [{ url = \"http://127.0.0.1:8000\" }]", name, i)
		}
		for j, srv := range r.Servers {
			sp := append(append([]string(nil), rp...), "servers", strconv.Itoa(j))
			if srv.URL == "" && c.missing(append(sp, "url")...) {
				e.add(c.Pos(sp...), "services.%s.revisions[%d].servers[%d].url is required", name, i, j)
			} else if msg := checkServerURL(srv.URL); msg != "" && srv.URL != "" {
				e.add(c.ValuePos(append(sp, "url")...), "services.%s.revisions[%d].servers[%d].url %q: %s", name, i, j, c.shownURL(srv.URL, append(sp, "url")...), c.MaskEnv(msg, append(sp, "url")...))
			}
			if srv.Weight < 1 || srv.Weight > MaxWeight {
				e.add(c.ValuePos(append(sp, "weight")...), "services.%s.revisions[%d].servers[%d].weight %d: want 1..%d", name, i, j, srv.Weight, MaxWeight)
			}
		}
	}
	if math.Abs(total-100) > revisionSharesTolerancePercents {
		e.add(c.ValuePos(append(path, "revisions")...), "services.%s.revisions: the traffic_percent of the revisions add up to %v, want 100", name, total)
	}
	r := s.Rollout
	if r == nil {
		return
	}
	rp := append(append([]string(nil), path...), "rollout")
	at := func(key string) Position { return c.ValuePos(append(append([]string(nil), rp...), key)...) }
	for _, k := range []struct{ key, v string }{{"from", r.From}, {"to", r.To}} {
		switch {
		case k.v == "" && c.missing(append(rp, k.key)...):
			e.add(c.Pos(rp...), "services.%s.rollout.%s is required (the name of a revision)", name, k.key)
		case !seen[k.v] && k.v != "":
			e.add(at(k.key), "services.%s.rollout.%s: no revision named %q%s", name, k.key, k.v, didYouMean(k.v, sortedNames(seen)))
		}
	}
	if r.From != "" && r.From == r.To {
		e.add(at("to"), "services.%s.rollout: from and to name the same revision %q", name, r.To)
	}
	if !(r.StepPercent > 0 && r.StepPercent <= 100) {
		e.add(at("step_percent"), "services.%s.rollout.step_percent %v: want more than 0, at most 100", name, r.StepPercent)
	}
	if !(r.StepIntervalSecs >= MinRolloutStepIntervalSecs && r.StepIntervalSecs <= MaxRolloutStepIntervalSecs) {
		e.add(at("step_interval_secs"), "services.%s.rollout.step_interval_secs %v: want %v..%v seconds", name, r.StepIntervalSecs, MinRolloutStepIntervalSecs, MaxRolloutStepIntervalSecs)
	}
	if !(r.ErrorRateThreshold >= 0 && r.ErrorRateThreshold <= 1) {
		e.add(at("error_rate_threshold"), "services.%s.rollout.error_rate_threshold %v: want a fraction from 0 to 1", name, r.ErrorRateThreshold)
	}
	for _, k := range []struct {
		key string
		v   int64
	}{{"latency_threshold_ms", r.LatencyThresholdMs}, {"ttft_p99_threshold_ms", r.TTFTP99ThresholdMs}, {"itl_p99_threshold_ms", r.ITLP99ThresholdMs}} {
		if k.v < 0 || k.v > MaxRolloutLatencyThresholdMs {
			e.add(at(k.key), "services.%s.rollout.%s %d: want 0 (not checked) to %d milliseconds", name, k.key, k.v, MaxRolloutLatencyThresholdMs)
		}
	}
	if r.MinSamples < 1 || r.MinSamples > MaxRolloutMinSamples {
		e.add(at("min_samples"), "services.%s.rollout.min_samples %d: want 1..%d", name, r.MinSamples, MaxRolloutMinSamples)
	}
}

// Executors accepted by [services.<name>.scaling] executor.
const (
	// ExecutorExec starts and stops local processes ([services.<name>.scaling.exec]).
	ExecutorExec = "exec"
	// ExecutorKube scales a Kubernetes Deployment ([services.<name>.scaling.kube]).
	ExecutorKube = "kube"
)

// Defaults and bounds of [services.<name>.scaling].
const (
	DefaultScalingMaxReplicas      = 1
	DefaultScalingConcurrency      = 1
	DefaultScalingUtilization      = 0.7
	DefaultScalingScaleDownDelay   = 60 * time.Second
	DefaultScalingScaleToZeroAfter = 5 * time.Minute
	DefaultScalingBufferSize       = 100
	DefaultScalingBufferTimeout    = 60 * time.Second
	DefaultScalingKeepAlive        = 5 * time.Second
	DefaultScalingReadyPath        = "/health"
	DefaultScalingReadyInterval    = 50 * time.Millisecond
	DefaultScalingStartupTimeout   = 5 * time.Minute
	DefaultScalingStopTimeout      = 10 * time.Second
	MaxScalingReplicas             = 1024
	MaxScalingBufferSize           = 1 << 20
)

// Scaling is [services.<name>.scaling]: the service's replicas are started and stopped by an
// executor to follow its load, desired = ⌈(in_flight + queued) / (container_concurrency ×
// target_utilization)⌉ clamped to min_replicas..max_replicas; requests beyond the ready
// replicas' capacity (all of them, with none ready) wait in a bounded FIFO queue.
type Scaling struct {
	// MinReplicas is the least number of replicas kept running; 0 lets the service scale to
	// zero when idle. Default 0.
	MinReplicas int `toml:"min_replicas"`
	// MaxReplicas bounds the replicas, 1..1024 and at least MinReplicas. Default 1.
	MaxReplicas int `toml:"max_replicas"`
	// ContainerConcurrency is how many requests one replica serves at once, >= 1. Default 1.
	ContainerConcurrency int `toml:"container_concurrency"`
	// TargetUtilization is the share of ContainerConcurrency the formula aims at, 0 < u <= 1:
	// 0.7 starts a replica when the others are 70% busy. Default 0.7.
	TargetUtilization float64 `toml:"target_utilization"`
	// BufferEnabled queues the requests beyond the ready replicas' capacity (all of them
	// while none is ready: a cold start) instead of refusing them with 503. Default true.
	BufferEnabled bool `toml:"buffer_enabled"`
	// Executor starts and stops the replicas: "exec" (local processes) or "kube" (a
	// Kubernetes Deployment's scale subresource); required.
	Executor string `toml:"executor"`
	// ScaleDownDelay is how long the formula must ask for fewer replicas before they are
	// stopped (the largest number it asked for meanwhile is kept). Default 60s.
	ScaleDownDelay time.Duration `toml:"scale_down_delay"`
	// ScaleToZeroAfter is how long the service must be idle (nothing in flight or queued)
	// before its last replica is stopped, when MinReplicas is 0. Default 5m.
	ScaleToZeroAfter time.Duration `toml:"scale_to_zero_after"`
	// BufferSize bounds the queue; a request arriving when it is full gets 503 at once.
	// Default 100, range 1..1048576.
	BufferSize int `toml:"buffer_size"`
	// BufferTimeout bounds a request's wait in the queue, counted from its arrival (time
	// already waited counts); past it the request gets 504. Default 60s.
	BufferTimeout time.Duration `toml:"buffer_timeout"`
	// KeepAlive is the interval of the SSE comment lines a waiting streaming caller gets.
	// Default 5s.
	KeepAlive time.Duration `toml:"keepalive_interval"`
	// ReadyPath is the path probed on a starting replica: it is ready when GET answers 2xx.
	// Default "/health".
	ReadyPath string `toml:"ready_path"`
	// ReadyInterval is the time between two probes of a starting replica. Default 50ms.
	ReadyInterval time.Duration `toml:"ready_interval"`
	// StartupTimeout bounds a replica's start: one not ready by then is stopped. Default 5m.
	StartupTimeout time.Duration `toml:"startup_timeout"`
	// Exec is the exec executor's process template, [services.<name>.scaling.exec].
	Exec *ScalingExec `toml:"exec"`
	// Kube names the kube executor's Deployment and Service, [services.<name>.scaling.kube].
	Kube *ScalingKube `toml:"kube"`
}

// ScalingKube is [services.<name>.scaling.kube]: the Deployment whose replicas the gateway
// sets through the scale subresource, the Service whose EndpointSlices say how many are ready,
// the address requests go to, and how to reach the API server.
type ScalingKube struct {
	// Namespace of the Deployment and the Service. Default "default".
	Namespace string `toml:"namespace"`
	// Deployment is the Deployment's name; required.
	Deployment string `toml:"deployment"`
	// Service is the name of the Service in front of the Deployment's pods; required.
	Service string `toml:"service"`
	// URL is where requests go, the Service's address: "http://llm.default.svc:8000";
	// required, as a server url.
	URL string `toml:"url"`
	// APIServer is the API server's URL, "https://host[:port]" with an optional path (http
	// too; user info for basic authentication; no query or fragment). Default: in a pod, the cluster's (from
	// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT).
	APIServer string `toml:"api_server"`
	// Kubeconfig, when set, is a kubeconfig file whose current context gives the API server
	// and the credentials (token or client certificate); the other connection keys are not
	// used then.
	Kubeconfig string `toml:"kubeconfig"`
	// TokenFile holds the bearer token. Default: the pod's service account token.
	TokenFile string `toml:"token_file"`
	// CAFile is the PEM bundle that verifies an https API server. Default: the pod's service
	// account CA.
	CAFile string `toml:"ca_file"`
}

func (k *ScalingKube) setDefaults() { k.Namespace = "default" }

// ScalingExec is [services.<name>.scaling.exec]: the command of a replica. Each replica gets a
// free loopback port, written into the command where it says {port}; the replica listens
// there and is the server http://127.0.0.1:{port} of the service.
type ScalingExec struct {
	// Command is the program and its arguments, at least the program; "{port}" in any
	// element is replaced by the replica's port (at least one element must use it).
	Command []string `toml:"command" secrets:"args"`
	// Env lists extra environment variables of the process, "NAME=value" ({port} replaced).
	Env []string `toml:"env" secrets:"args"`
	// StopTimeout is how long a stopped replica has between SIGTERM and SIGKILL. Default 10s.
	StopTimeout time.Duration `toml:"stop_timeout"`
}

func (s *Scaling) setDefaults() {
	s.MaxReplicas = DefaultScalingMaxReplicas
	s.ContainerConcurrency = DefaultScalingConcurrency
	s.TargetUtilization = DefaultScalingUtilization
	s.BufferEnabled = true
	s.ScaleDownDelay = DefaultScalingScaleDownDelay
	s.ScaleToZeroAfter = DefaultScalingScaleToZeroAfter
	s.BufferSize = DefaultScalingBufferSize
	s.BufferTimeout = DefaultScalingBufferTimeout
	s.KeepAlive = DefaultScalingKeepAlive
	s.ReadyPath = DefaultScalingReadyPath
	s.ReadyInterval = DefaultScalingReadyInterval
	s.StartupTimeout = DefaultScalingStartupTimeout
}

func (x *ScalingExec) setDefaults() { x.StopTimeout = DefaultScalingStopTimeout }

// validateScaling checks [services.<name>.scaling].
func (c *Config) validateScaling(e *errs, name string, s *Service) {
	sc := s.Scaling
	if sc == nil {
		return
	}
	sp := []string{"services", name, "scaling"}
	at := func(key ...string) Position { return c.ValuePos(append(append([]string(nil), sp...), key...)...) }
	if len(s.Revisions) > 0 {
		e.add(c.Pos(sp...), "services.%s.scaling: a service with revisions cannot scale (scale each revision's own service instead)", name)
	}
	if s.LoadBalancer != nil && len(s.LoadBalancer.Servers) > 0 {
		e.add(c.Pos("services", name, "load_balancer", "servers"), "services.%s.load_balancer.servers: the replicas of a scaled service are its servers; remove the list", name)
	}
	if sc.MinReplicas < 0 || sc.MinReplicas > MaxScalingReplicas {
		e.add(at("min_replicas"), "services.%s.scaling.min_replicas %d: want 0..%d", name, sc.MinReplicas, MaxScalingReplicas)
	}
	if sc.MaxReplicas < 1 || sc.MaxReplicas > MaxScalingReplicas {
		e.add(at("max_replicas"), "services.%s.scaling.max_replicas %d: want 1..%d", name, sc.MaxReplicas, MaxScalingReplicas)
	} else if sc.MaxReplicas < sc.MinReplicas {
		e.add(at("max_replicas"), "services.%s.scaling.max_replicas %d: want at least min_replicas (%d)", name, sc.MaxReplicas, sc.MinReplicas)
	}
	if sc.ContainerConcurrency < 1 {
		e.add(at("container_concurrency"), "services.%s.scaling.container_concurrency %d: want 1 or more requests", name, sc.ContainerConcurrency)
	}
	if !(sc.TargetUtilization > 0 && sc.TargetUtilization <= 1) {
		e.add(at("target_utilization"), "services.%s.scaling.target_utilization %v: want more than 0, at most 1", name, sc.TargetUtilization)
	}
	if sc.BufferSize < 1 || sc.BufferSize > MaxScalingBufferSize {
		e.add(at("buffer_size"), "services.%s.scaling.buffer_size %d: want 1..%d", name, sc.BufferSize, MaxScalingBufferSize)
	}
	if sc.ReadyPath == "" || sc.ReadyPath[0] != '/' {
		e.add(at("ready_path"), "services.%s.scaling.ready_path %q: want a path starting with /", name, sc.ReadyPath)
	}
	switch sc.Executor {
	case ExecutorExec:
		if sc.Exec == nil {
			e.add(c.Pos(sp...), "services.%s.scaling: executor \"exec\" needs [services.%s.scaling.exec] with command = [\"program\", \"--port\", \"{port}\"]", name, name)
			break
		}
		if len(sc.Exec.Command) == 0 || sc.Exec.Command[0] == "" {
			e.add(c.Pos(append(sp, "exec")...), "services.%s.scaling.exec.command: want the program and its arguments, e.g. [\"llmsim\", \"--listen\", \"127.0.0.1:{port}\"]", name)
		} else if !usesPort(sc.Exec.Command) {
			e.add(at("exec", "command"), "services.%s.scaling.exec.command: no element uses {port}, the port the replica must listen on", name)
		}
	case ExecutorKube:
		k := sc.Kube
		if k == nil {
			e.add(c.Pos(sp...), "services.%s.scaling: executor \"kube\" needs [services.%s.scaling.kube] with deployment, service and url", name, name)
			break
		}
		kp := append(append([]string(nil), sp...), "kube")
		for _, req := range []struct{ key, v string }{{"deployment", k.Deployment}, {"service", k.Service}, {"url", k.URL}} {
			if req.v == "" && c.missing(append(kp, req.key)...) {
				e.add(c.Pos(kp...), "services.%s.scaling.kube.%s is required", name, req.key)
			}
		}
		if k.URL != "" {
			if msg := checkServerURL(k.URL); msg != "" {
				e.add(at("kube", "url"), "services.%s.scaling.kube.url %q: %s", name, c.shownURL(k.URL, append(kp, "url")...), c.MaskEnv(msg, append(kp, "url")...))
			}
		}
		if k.APIServer != "" {
			if msg := checkAPIServerURL(k.APIServer); msg != "" {
				e.add(at("kube", "api_server"), "services.%s.scaling.kube.api_server %q: %s", name, c.shownURL(k.APIServer, append(kp, "api_server")...), c.MaskEnv(msg, append(kp, "api_server")...))
			}
		}
	case "":
		if c.missing(append(sp, "executor")...) {
			e.add(c.Pos(sp...), "services.%s.scaling.executor is required (\"exec\" or \"kube\")", name)
		}
	default:
		e.add(at("executor"), "services.%s.scaling.executor %q: want \"exec\" or \"kube\"%s", name, sc.Executor, meant(sc.Executor, []string{ExecutorExec, ExecutorKube}))
	}
}

func usesPort(args []string) bool {
	for _, a := range args {
		if strings.Contains(a, "{port}") {
			return true
		}
	}
	return false
}
