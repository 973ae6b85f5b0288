// Package kubetest is a fake Kubernetes API server on loopback for the kube executor's tests:
// one Deployment's scale subresource (autoscaling/v1 Scale, with resourceVersion optimistic
// concurrency: a write with a stale resourceVersion gets 409 Conflict) and the EndpointSlices
// of its Service (list, and watch as a stream of JSON events), driven by a controller that
// makes a new replica's endpoint ready after a delay, as a pod passing its readiness probe.
// Every call needs the bearer token.
package kubetest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Server is the fake API server.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:<port>.
	URL string
	// Token is the bearer token every call must carry.
	Token string

	ns, deployment, service string
	readyDelay              time.Duration

	mu          sync.Mutex
	replicas    int
	ready       int
	rv          int64 // the Deployment's resourceVersion
	sliceRV     int64
	scales      []int // replicas written, in order
	conflicts   int
	injectNext  int
	watchers    map[chan []byte]struct{}
	srv         *http.Server
	readyTimers []*time.Timer
}

// Start runs a fake API server for Deployment deployment and Service service in namespace
// ns, whose replicas become ready readyDelay after they are asked for.
func Start(ns, deployment, service string, readyDelay time.Duration) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), Token: "kubetest-token", ns: ns, deployment: deployment, service: service,
		readyDelay: readyDelay, rv: 100, sliceRV: 500, watchers: map[chan []byte]struct{}{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale", s.scale)
	mux.HandleFunc("GET /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", s.slices)
	s.srv = &http.Server{Handler: s.auth(mux), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server and its watches.
func (s *Server) Close() {
	s.mu.Lock()
	for _, t := range s.readyTimers {
		t.Stop()
	}
	for w := range s.watchers {
		close(w)
		delete(s.watchers, w)
	}
	s.mu.Unlock()
	_ = s.srv.Close()
}

// InjectConflicts makes the next n writes of the scale find that another client wrote first
// (the resourceVersion moves on and the write gets 409), as an HPA or kubectl racing the
// gateway would.
func (s *Server) InjectConflicts(n int) {
	s.mu.Lock()
	s.injectNext = n
	s.mu.Unlock()
}

// Scales returns the replicas written so far, in order, and how many writes got 409.
func (s *Server) Scales() ([]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.scales...), s.conflicts
}

// Replicas returns the Deployment's replicas and how many are ready.
func (s *Server) Replicas() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replicas, s.ready
}

func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+s.Token {
			status(w, 401, "Unauthorized", "Unauthorized")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// status writes a metav1.Status error.
func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": msg, "reason": reason, "code": code})
}

func (s *Server) scaleObject() map[string]any {
	return map[string]any{
		"apiVersion": "autoscaling/v1", "kind": "Scale",
		"metadata": map[string]any{"name": s.deployment, "namespace": s.ns, "resourceVersion": strconv.FormatInt(s.rv, 10)},
		"spec":     map[string]any{"replicas": s.replicas},
		"status":   map[string]any{"replicas": s.replicas, "selector": "app=" + s.deployment},
	}
}

func (s *Server) scale(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("ns") != s.ns || r.PathValue("name") != s.deployment {
		status(w, 404, "NotFound", fmt.Sprintf("deployments.apps %q not found", r.PathValue("name")))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case "GET":
		writeJSON(w, s.scaleObject())
	case "PUT":
		var in struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Spec struct {
				Replicas *int `json:"replicas"`
			} `json:"spec"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Spec.Replicas == nil || *in.Spec.Replicas < 0 {
			status(w, 400, "BadRequest", "want a Scale with spec.replicas")
			return
		}
		if s.injectNext > 0 {
			s.injectNext--
			s.rv++ // another writer got there first
		}
		if in.Metadata.ResourceVersion != strconv.FormatInt(s.rv, 10) {
			s.conflicts++
			status(w, 409, "Conflict", "Operation cannot be fulfilled on deployments.apps \""+s.deployment+"\": the object has been modified; please apply your changes to the latest version and try again")
			return
		}
		n := *in.Spec.Replicas
		s.rv++
		s.scales = append(s.scales, n)
		s.setReplicas(n)
		writeJSON(w, s.scaleObject())
	default:
		status(w, 405, "MethodNotAllowed", "method not allowed")
	}
}

// setReplicas is the controller: fewer replicas are not ready at once (their pods
// terminate); more become ready after readyDelay. s.mu is held.
func (s *Server) setReplicas(n int) {
	s.replicas = n
	if s.ready > n {
		s.ready = n
	}
	s.publish()
	if n > s.ready {
		s.readyTimers = append(s.readyTimers, time.AfterFunc(s.readyDelay, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.replicas > s.ready {
				s.ready = s.replicas
				s.publish()
			}
		}))
	}
}

func (s *Server) slice() map[string]any {
	var eps []any
	for i := 0; i < s.replicas; i++ {
		eps = append(eps, map[string]any{
			"addresses":  []string{fmt.Sprintf("10.0.0.%d", i+1)},
			"conditions": map[string]any{"ready": i < s.ready, "serving": i < s.ready, "terminating": false},
		})
	}
	return map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
		"metadata": map[string]any{"name": s.service + "-x7k2p", "namespace": s.ns, "resourceVersion": strconv.FormatInt(s.sliceRV, 10),
			"labels": map[string]string{"kubernetes.io/service-name": s.service}},
		"endpoints": eps,
		"ports":     []any{map[string]any{"name": "http", "port": 8000, "protocol": "TCP"}},
	}
}

// publish sends the slice to the watchers. s.mu is held.
func (s *Server) publish() {
	s.sliceRV++
	ev, _ := json.Marshal(map[string]any{"type": "MODIFIED", "object": s.slice()})
	for w := range s.watchers {
		select {
		case w <- ev:
		default: // a watcher that does not read loses events, as with a real watch cache
		}
	}
}

func (s *Server) slices(w http.ResponseWriter, r *http.Request) {
	sel := r.URL.Query().Get("labelSelector")
	matches := r.PathValue("ns") == s.ns && sel == "kubernetes.io/service-name="+s.service
	if r.URL.Query().Get("watch") != "true" {
		s.mu.Lock()
		items := []any{}
		if matches {
			items = append(items, s.slice())
		}
		list := map[string]any{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
			"metadata": map[string]any{"resourceVersion": strconv.FormatInt(s.sliceRV, 10)}, "items": items}
		s.mu.Unlock()
		writeJSON(w, list)
		return
	}
	ch := make(chan []byte, 64)
	s.mu.Lock()
	if matches {
		s.watchers[ch] = struct{}{}
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, ch)
		s.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	if fl != nil {
		fl.Flush()
	}
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			_, _ = w.Write(append(ev, '\n'))
			if fl != nil {
				fl.Flush()
			}
		case <-r.Context().Done():
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
