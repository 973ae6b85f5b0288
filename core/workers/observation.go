package workers

import (
	"errors"
	"time"

	json "github.com/goccy/go-json"
)

// ObservationPath is the worker protocol's observation endpoint, relative to a server's URL.
const ObservationPath = "/power/v1/observation"

// maxObservationBytes bounds an observation body; a worker's is a few hundred bytes.
const maxObservationBytes = 64 << 10

// Observation is one answer of GET /power/v1/observation: what a worker says of itself at
// ObservedAt.
type Observation struct {
	// WorkerID names the worker process; with Epoch it is the worker's identity.
	WorkerID string
	// Role is "aggregated", "prefill" or "decode".
	Role string
	// Ready: the worker accepts work of its role (false while it starts).
	Ready bool
	// Healthy: the worker considers itself able to serve.
	Healthy bool
	// Active is the number of sequences running, MaxActive its bound (0: none), Waiting the
	// number queued.
	Active, MaxActive, Waiting int64
	// StateTransfer: the worker can hand over or take a prefill's state (prefill/decode).
	StateTransfer bool
	// ExecutionConfigDigest identifies the worker's execution configuration ("" when the
	// worker reports none).
	ExecutionConfigDigest string
	// DeploymentGeneration is the deployment the worker belongs to.
	DeploymentGeneration int64
	// Epoch counts the worker's restarts.
	Epoch int64
	// ObservedAt is when the worker made the observation, by its clock (zero when absent
	// or unreadable). Freshness is judged by the gateway's clock, not by this.
	ObservedAt time.Time
}

// wire is the observation's JSON; pointers tell a missing field from a zero one.
type wire struct {
	WorkerID              *string `json:"worker_id"`
	Role                  *string `json:"role"`
	Ready                 *bool   `json:"ready"`
	Healthy               *bool   `json:"healthy"`
	Active                *int64  `json:"active"`
	MaxActive             int64   `json:"max_active"`
	Waiting               int64   `json:"waiting"`
	StateTransfer         bool    `json:"state_transfer"`
	ExecutionConfigDigest *string `json:"execution_config_digest"`
	DeploymentGeneration  int64   `json:"deployment_generation"`
	Epoch                 int64   `json:"epoch"`
	ObservedAt            string  `json:"observed_at"`
}

var errMalformed = errors.New("malformed observation: want a JSON object with worker_id, role, ready, healthy and active")

// ParseObservation decodes an observation body. worker_id (not empty), role, ready, healthy
// and active are required, since judging a worker needs them; the other fields default to
// zero. It returns an error naming the problem otherwise.
func ParseObservation(body []byte) (Observation, error) {
	var w wire
	if err := json.Unmarshal(body, &w); err != nil {
		return Observation{}, errMalformed
	}
	if w.WorkerID == nil || *w.WorkerID == "" || w.Role == nil || w.Ready == nil || w.Healthy == nil || w.Active == nil {
		return Observation{}, errMalformed
	}
	o := Observation{
		WorkerID: *w.WorkerID, Role: *w.Role, Ready: *w.Ready, Healthy: *w.Healthy,
		Active: *w.Active, MaxActive: w.MaxActive, Waiting: w.Waiting, StateTransfer: w.StateTransfer,
		DeploymentGeneration: w.DeploymentGeneration, Epoch: w.Epoch,
	}
	if w.ExecutionConfigDigest != nil {
		o.ExecutionConfigDigest = *w.ExecutionConfigDigest
	}
	if t, err := time.Parse(time.RFC3339Nano, w.ObservedAt); err == nil {
		o.ObservedAt = t
	}
	return o, nil
}
