package pd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"

	"github.com/sluice-gw/sluice/core/pipeline"
	"github.com/sluice-gw/sluice/pool"
)

// Worker protocol paths, relative to a worker's URL (docs/llmsim.md, "Worker protocol").
const (
	pathPrepare      = "/power/v1/decode/prepare"
	pathPrepareBatch = "/power/v1/decode/prepare:batch"
	pathPrefill      = "/power/v1/prefill/execute"
	pathDecode       = "/power/v1/decode/execute"
	pathAbort        = "/power/v1/abort"
)

// maxAnswerBytes bounds the answer of a prepare, prefill or abort call; the states they carry
// are small handles, and a batch of 1024 of them stays well below.
const maxAnswerBytes = 4 << 20

// legError is a failed call of the protocol: an answer with another status than 200 (status
// and body kept), or no answer (err).
type legError struct {
	leg    string
	status int
	body   []byte
	err    error
}

func (e *legError) Error() string {
	if e.err != nil {
		return "pd: " + e.leg + ": " + e.err.Error()
	}
	return "pd: " + e.leg + ": status " + strconv.Itoa(e.status)
}

func (e *legError) Unwrap() error { return e.err }

// retryable reports whether another worker pair may take the request after err: the worker
// did not act on it for good (no answer, a deadline, 408, 409 for a refused state, 429 or a
// 5xx). Another 4xx is the request's fault and would fail on any pair.
func retryable(err error) bool {
	var le *legError
	if !errors.As(err, &le) {
		return false
	}
	switch s := le.status; {
	case s == 0:
		return true
	case s == 408 || s == 409 || s == 429 || s >= 500:
		return true
	}
	return false
}

// busy reports whether err is a worker's 429: it has no room for the request now.
func busy(err error) bool {
	var le *legError
	return errors.As(err, &le) && le.status == 429
}

// isDial reports whether err is a failed connect: nothing was sent.
func isDial(err error) bool {
	var op *net.OpError
	return errors.Is(err, pool.ErrDial) || errors.As(err, &op) && op.Op == "dial"
}

// answerFor returns what the client gets when err ends the request: the worker's own 4xx
// answer when it is a JSON error, else a gateway error.
func answerFor(rc *pipeline.RequestCtx, err error) error {
	var le *legError
	if !errors.As(err, &le) {
		return pipeline.ErrInternal
	}
	switch {
	case le.status == 401 || le.status == 403:
		// The workers refused the gateway, not the caller: a 401 would tell the client its own
		// key is wrong.
		return errWorkerAuth
	case le.status >= 400 && le.status < 500 && len(le.body) > 0 && le.body[0] == '{':
		return rc.Reply(le.status, "application/json", le.body)
	case le.status == 0 && errors.Is(le.err, context.DeadlineExceeded):
		return errExecutionTimeout
	case le.status == 0:
		return pipeline.ErrUpstreamDial
	}
	return errWorkerFailed
}

var (
	errExecutionTimeout = &pipeline.GatewayError{Status: 504, Type: pipeline.UpstreamError, Code: "upstream_timeout",
		Message: "the prefill/decode exchange did not complete within execution_timeout_ms"}
	errWorkerAuth = &pipeline.GatewayError{Status: 502, Type: pipeline.UpstreamError, Code: "upstream_error",
		Message: "the prefill/decode workers refused the gateway's key (distributed_serving.api_key_env)"}
	errWorkerFailed = &pipeline.GatewayError{Status: 502, Type: pipeline.UpstreamError, Code: "upstream_error",
		Message: "the prefill/decode workers failed the request"}
	// ErrWorkersBusy answers a request no pair served when a worker tried refused it with 429
	// (it had no room): the answer of a model at capacity.
	ErrWorkersBusy = &pipeline.GatewayError{Status: 429, Type: pipeline.RateLimit, Code: "model_at_capacity",
		Message: "the prefill/decode workers of the model had no room for the request (429); retry shortly", RetryAfter: 1}
	// ErrEndpoint answers a request to another endpoint than chat completions: the decode
	// stream is chat completion chunks.
	ErrEndpoint = &pipeline.GatewayError{Status: 400, Type: pipeline.InvalidRequest, Code: "unsupported_endpoint",
		Message: "this model is served by prefill/decode workers, which serve /v1/chat/completions only"}
)

// post sends body to path of worker i and returns the answer of a 200; anything else is a
// *legError. ctx bounds the call.
func (t *Target) post(ctx context.Context, i int, leg, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.urls[i]+path, bytes.NewReader(body))
	if err != nil {
		return nil, &legError{leg: leg, err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", t.bearer)
	defer t.release() // after the answer is read and closed: its connection is idle then
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, &legError{leg: leg, err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	switch {
	case err != nil:
		return nil, &legError{leg: leg, err: err}
	case len(b) > maxAnswerBytes:
		return nil, &legError{leg: leg, err: errors.New("answer over 4 MiB")}
	case resp.StatusCode != http.StatusOK:
		return nil, &legError{leg: leg, status: resp.StatusCode, body: b}
	}
	return b, nil
}

// appendJSONString appends s as a JSON string. Execution ids and derived keys are ASCII
// letters, digits and punctuation, so only quotes and backslashes need escaping.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			dst = append(dst, '\\', c)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
