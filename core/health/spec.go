// Package health judges whether upstream servers should get traffic.
//
// Active checks (Checker) probe each server's health endpoint at an interval and flip its
// state after a number of consecutive results: an LLM engine's own readiness endpoint
// (vLLM's and SGLang's /health, llama.cpp's /health, which answers 503 while the model
// loads, Ollama's /api/version) or any path that answers an expected status. A Checker is
// the small API both the gateway's services and a replica lifecycle use: New, Start, Stop,
// and a callback or WaitHealthy for each target.
//
// Passive checks (Passive) judge servers by the outcomes of real requests, always on: by
// default 5 consecutive failures (5xx, timeouts, resets, a stream cut after its 200) eject a
// server for a backoff that doubles with each ejection, and 2 consecutive successes after it
// readmit it for good; an error rate over a window can eject too. The last server of a
// service in rotation is never ejected passively: it keeps serving and the refusal is
// counted and logged.
package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Kinds of active check: what the probe asks and what counts as ready.
const (
	// KindHTTP probes Path (default /health) and expects ExpectedStatus (any 2xx when 0).
	KindHTTP = "http"
	// KindVLLM probes vLLM's GET /health: 200 once the engine serves.
	KindVLLM = "vllm"
	// KindSGLang probes SGLang's GET /health: 200 once the engine serves.
	KindSGLang = "sglang"
	// KindLlamaCpp probes llama.cpp server's GET /health: 503 while the model loads, 200 when
	// ready.
	KindLlamaCpp = "llama.cpp"
	// KindOllama probes Ollama's GET /api/version: 200 once the server runs.
	KindOllama = "ollama"
)

// Kinds lists the kinds of active check.
var Kinds = []string{KindHTTP, KindVLLM, KindSGLang, KindLlamaCpp, KindOllama}

// DefaultPath returns the readiness path of a kind: /health, the path most servers answer,
// for KindHTTP.
func DefaultPath(kind string) string {
	switch kind {
	case KindHTTP, KindVLLM, KindSGLang, KindLlamaCpp:
		return "/health"
	case KindOllama:
		return "/api/version"
	}
	return ""
}

// Defaults of an active check.
const (
	DefaultInterval           = 10 * time.Second
	DefaultTimeout            = 2 * time.Second
	DefaultHealthyThreshold   = 2
	DefaultUnhealthyThreshold = 3
	// maxProbeBody bounds what is read of a probe's answer (the rest is dropped with the
	// connection).
	maxProbeBody = 64 << 10
)

// Spec says how to check a server actively.
type Spec struct {
	// Path is the request path of the probe, with an optional query ("/health").
	Path string
	// Interval is the time between two probes of a server.
	Interval time.Duration
	// Timeout bounds one probe, connect included.
	Timeout time.Duration
	// HealthyThreshold consecutive passed probes make a server healthy.
	HealthyThreshold int
	// UnhealthyThreshold consecutive failed probes make it unhealthy.
	UnhealthyThreshold int
	// ExpectedStatus is the status a passed probe answers; 0 accepts any 2xx.
	ExpectedStatus int
	// Host, when set, is sent as the probe's Host header instead of the server's host:port.
	Host string
}

// ErrStatus is wrapped by Probe's error when the server answered an unexpected status.
var ErrStatus = errors.New("unexpected status")

// Probe checks the server at base ("http://host:port" or "https://…") once with client and
// returns nil when it passed, or why it failed: a connect or read error, the timeout (which
// covers the answer's body, up to the 64 KiB read of it), or ErrStatus (a llama.cpp server
// loading its model answers 503).
func (s *Spec) Probe(ctx context.Context, client *http.Client, base string) error {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+s.Path, nil)
	if err != nil {
		return err
	}
	if s.Host != "" {
		req.Host = s.Host
	}
	req.Header.Set("User-Agent", "sluice-health-check")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	// The answer counts whole or not at all: a body that stalls past the timeout or is cut
	// fails the probe as a head would, whatever the status said.
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("status %d, reading the body: %w", resp.StatusCode, err)
	}
	ok := resp.StatusCode >= 200 && resp.StatusCode <= 299
	if s.ExpectedStatus != 0 {
		ok = resp.StatusCode == s.ExpectedStatus
	}
	if !ok {
		return fmt.Errorf("%w %d", ErrStatus, resp.StatusCode)
	}
	return nil
}

// NewClient returns an HTTP client for probes: its own connections (kept alive between
// probes), never the request path's pools, and no redirects followed (a redirect is a status
// like any other). tc, when not nil, verifies https servers (a private CA, a server name).
// Its idle connections stay open for the transport's idle timeout (90 s) unless closed with
// CloseIdleConnections, which whoever stops using the client calls.
func NewClient(tc *tls.Config) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 1
	t.Proxy = nil
	if tc != nil {
		t.TLSClientConfig = tc
	}
	return &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
