package scaling

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// Kube is the kube executor: the replicas are the pods of a Kubernetes Deployment. The scaler
// sets the Deployment's replicas through its scale subresource
// (/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale), writing with the resourceVersion
// it read so that a concurrent writer (kubectl, an HPA) is never overwritten: a 409 Conflict
// reads again and retries. It counts the ready replicas from the EndpointSlices of the
// Deployment's Service (label kubernetes.io/service-name), listed and then watched, and sends
// requests to the Service's address (URL), which the cluster balances over the ready pods.
//
// RBAC: the gateway's service account needs get, update and patch on deployments/scale, and
// get, list and watch on endpointslices (discovery.k8s.io) in Namespace (docs/config.md).
type Kube struct {
	// APIServer is the API server's base URL, e.g. "https://10.96.0.1:443".
	APIServer string
	// Token is the bearer token of the gateway's service account ("" sends none).
	Token string
	// TLS verifies the API server (and may carry a client certificate); nil for http.
	TLS *tls.Config
	// Namespace, Deployment and Service name the objects.
	Namespace, Deployment, Service string
	// URL is where requests go: the Service's address.
	URL string
}

// KubeSource says where a Kube's API server and credentials come from:
// [services.<name>.scaling.kube] (docs/config.md).
type KubeSource struct {
	APIServer, Kubeconfig, TokenFile, CAFile string
}

// In-cluster defaults (a pod's service account).
const (
	InClusterTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	InClusterCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// Connect fills k's API server and credentials from src: a kubeconfig file (its current
// context's cluster and user: server, certificate authority, token or client certificate),
// else APIServer with TokenFile and CAFile, else the in-cluster service account (the
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT environment variables and the files
// every pod gets).
func (k *Kube) Connect(src KubeSource) error {
	if src.Kubeconfig != "" {
		return k.fromKubeconfig(src.Kubeconfig)
	}
	k.APIServer = src.APIServer
	if k.APIServer == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return errors.New("scaling: kube: no api_server nor kubeconfig, and not in a cluster (KUBERNETES_SERVICE_HOST is not set)")
		}
		k.APIServer = "https://" + net.JoinHostPort(host, port)
	}
	tokenFile, caFile := src.TokenFile, src.CAFile
	if tokenFile == "" {
		tokenFile = InClusterTokenFile
	}
	if b, err := os.ReadFile(tokenFile); err == nil {
		k.Token = strings.TrimSpace(string(b))
	} else if src.TokenFile != "" {
		return fmt.Errorf("scaling: kube: token_file: %w", err)
	}
	if isHTTPS(k.APIServer) {
		if caFile == "" {
			caFile = InClusterCAFile
		}
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("scaling: kube: ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("scaling: kube: ca_file %s holds no PEM certificate", caFile)
		}
		k.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return nil
}

// kubeconfig is the part of a kubeconfig file the gateway reads.
type kubeconfig struct {
	CurrentContext string `yaml:"current-context"`
	Contexts       []struct {
		Name    string `yaml:"name"`
		Context struct {
			Cluster, User, Namespace string
		} `yaml:"context"`
	} `yaml:"contexts"`
	Clusters []struct {
		Name    string `yaml:"name"`
		Cluster struct {
			Server                   string `yaml:"server"`
			CertificateAuthority     string `yaml:"certificate-authority"`
			CertificateAuthorityData string `yaml:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `yaml:"insecure-skip-tls-verify"`
		} `yaml:"cluster"`
	} `yaml:"clusters"`
	Users []struct {
		Name string `yaml:"name"`
		User struct {
			Token                 string `yaml:"token"`
			TokenFile             string `yaml:"tokenFile"`
			ClientCertificateData string `yaml:"client-certificate-data"`
			ClientKeyData         string `yaml:"client-key-data"`
		} `yaml:"user"`
	} `yaml:"users"`
}

// isHTTPS reports whether the URL s has the https scheme, in any case ("HTTPS://" too, as
// the configuration's check and the HTTP client take it).
func isHTTPS(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "https"
}

func (k *Kube) fromKubeconfig(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("scaling: kube: kubeconfig: %w", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		return fmt.Errorf("scaling: kube: kubeconfig %s: %w", path, err)
	}
	var clusterName, userName string
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext {
			clusterName, userName = c.Context.Cluster, c.Context.User
		}
	}
	if clusterName == "" {
		return fmt.Errorf("scaling: kube: kubeconfig %s: no context %q", path, kc.CurrentContext)
	}
	found := false
	for _, c := range kc.Clusters {
		if c.Name != clusterName {
			continue
		}
		found = true
		k.APIServer = c.Cluster.Server
		if u, err := url.Parse(k.APIServer); err != nil || u.Scheme != "https" && u.Scheme != "http" || u.Hostname() == "" {
			// The scaler would otherwise fail every request it makes, once a second.
			return fmt.Errorf("scaling: kube: kubeconfig %s: cluster %q: server %q: want an https:// or http:// URL such as \"https://10.96.0.1:443\"", path, clusterName, k.APIServer)
		}
		if isHTTPS(k.APIServer) {
			k.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
			var pem []byte
			switch {
			case c.Cluster.CertificateAuthorityData != "":
				if pem, err = base64.StdEncoding.DecodeString(c.Cluster.CertificateAuthorityData); err != nil {
					return fmt.Errorf("scaling: kube: kubeconfig: certificate-authority-data: %w", err)
				}
			case c.Cluster.CertificateAuthority != "":
				if pem, err = os.ReadFile(c.Cluster.CertificateAuthority); err != nil {
					return fmt.Errorf("scaling: kube: kubeconfig: certificate-authority: %w", err)
				}
			}
			if pem != nil {
				pool := x509.NewCertPool()
				pool.AppendCertsFromPEM(pem)
				k.TLS.RootCAs = pool
			}
			k.TLS.InsecureSkipVerify = c.Cluster.InsecureSkipTLSVerify
		}
	}
	if !found {
		return fmt.Errorf("scaling: kube: kubeconfig %s: no cluster %q", path, clusterName)
	}
	for _, u := range kc.Users {
		if u.Name != userName {
			continue
		}
		k.Token = u.User.Token
		if u.User.TokenFile != "" {
			b, err := os.ReadFile(u.User.TokenFile)
			if err != nil {
				return fmt.Errorf("scaling: kube: kubeconfig: tokenFile: %w", err)
			}
			k.Token = strings.TrimSpace(string(b))
		}
		if u.User.ClientCertificateData != "" && k.TLS != nil {
			cert, _ := base64.StdEncoding.DecodeString(u.User.ClientCertificateData)
			key, _ := base64.StdEncoding.DecodeString(u.User.ClientKeyData)
			pair, err := tls.X509KeyPair(cert, key)
			if err != nil {
				return fmt.Errorf("scaling: kube: kubeconfig: client certificate: %w", err)
			}
			k.TLS.Certificates = []tls.Certificate{pair}
		}
	}
	return nil
}

// maxConflictRetries bounds the read-modify-write attempts of one scale.
const maxConflictRetries = 8

// kubeRunner drives one Kube for a scaler: a writer goroutine that brings the Deployment's
// replicas to the latest target (coalescing targets set meanwhile), and a watcher of the
// Service's EndpointSlices that reports the ready replicas.
type kubeRunner struct {
	k      *Kube
	client *http.Client // bounded requests
	watchc *http.Client // the watch stream: no overall timeout
	ready  func(n int)
	log    *slog.Logger
	mask   func(string) string // Options.Mask: what the log shows of a text

	mu     sync.Mutex
	target int
	wake   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the writer and the watcher
}

// shown is s as the runner logs it (Options.Mask).
func (r *kubeRunner) shown(s string) string {
	if r.mask == nil {
		return s
	}
	return r.mask(s)
}

func newKubeRunner(k *Kube, ready func(int), log *slog.Logger) *kubeRunner {
	tr := &http.Transport{TLSClientConfig: k.TLS, ForceAttemptHTTP2: false}
	ctx, cancel := context.WithCancel(context.Background())
	return &kubeRunner{
		k: k, ready: ready, log: log, target: -1,
		client: &http.Client{Transport: tr, Timeout: 10 * time.Second},
		watchc: &http.Client{Transport: tr},
		wake:   make(chan struct{}, 1), ctx: ctx, cancel: cancel,
	}
}

func (r *kubeRunner) start() {
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		r.writer()
	}()
	go func() {
		defer r.wg.Done()
		r.watcher()
	}()
}

// stop cancels the runner's calls to the API server and ends its goroutines; it does not
// wait (the watcher reports to the scaler, whose lock the caller may hold): wait does.
func (r *kubeRunner) stop() { r.cancel() }

// wait returns once the goroutines of a stopped runner have returned, with the connections
// its calls kept to the API server closed: its transport keeps idle connections without a time
// limit, so they would otherwise stay open for as long as the API server keeps them.
func (r *kubeRunner) wait() {
	r.wg.Wait()
	r.client.CloseIdleConnections()
}

// setTarget asks for n replicas; the writer applies the latest ask.
func (r *kubeRunner) setTarget(n int) {
	r.mu.Lock()
	changed := r.target != n
	r.target = n
	r.mu.Unlock()
	if changed {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

func (r *kubeRunner) writer() {
	applied := -1
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.wake:
		}
		r.mu.Lock()
		n := r.target
		r.mu.Unlock()
		if n == applied || n < 0 {
			continue
		}
		if err := r.scale(n); err != nil {
			r.log.Warn("scaling: kube: scale failed", "deployment", r.shown(r.k.Deployment), "replicas", n, "error", r.shown(err.Error()))
			// Tried again on the next change of the target, or after a pause.
			go func() {
				select {
				case <-time.After(restartBackoff):
					select {
					case r.wake <- struct{}{}:
					default:
					}
				case <-r.ctx.Done():
				}
			}()
			continue
		}
		applied = n
	}
}

// scaleObject is the autoscaling/v1 Scale object.
type scaleObject struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		Replicas int `json:"replicas"`
	} `json:"spec"`
	Status map[string]any `json:"status,omitempty"`
}

func (r *kubeRunner) scalePath() string {
	return fmt.Sprintf("%s/apis/apps/v1/namespaces/%s/deployments/%s/scale", strings.TrimSuffix(r.k.APIServer, "/"), url.PathEscape(r.k.Namespace), url.PathEscape(r.k.Deployment))
}

// scale sets the Deployment's replicas to n: GET the scale subresource, PUT it back with n and
// the resourceVersion read; a 409 Conflict (someone wrote in between) starts over.
func (r *kubeRunner) scale(n int) error {
	for attempt := 0; attempt < maxConflictRetries; attempt++ {
		var s scaleObject
		if err := r.do("GET", r.scalePath(), nil, &s); err != nil {
			return err
		}
		if s.Spec.Replicas == n {
			return nil
		}
		s.Spec.Replicas = n
		s.Status = nil
		body, _ := json.Marshal(s)
		err := r.do("PUT", r.scalePath(), body, nil)
		if errors.Is(err, errConflict) {
			continue
		}
		if err == nil {
			r.log.Info("scaling: kube: scaled", "deployment", r.shown(r.k.Deployment), "replicas", n)
		}
		return err
	}
	return fmt.Errorf("scale %s: %d conflicts in a row", r.k.Deployment, maxConflictRetries)
}

var errConflict = errors.New("409 Conflict")

func (r *kubeRunner) do(method, u string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(r.ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	r.auth(req)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusConflict:
		return errConflict
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, bytes.TrimSpace(raw))
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

func (r *kubeRunner) auth(req *http.Request) {
	req.Header.Set("Accept", "application/json")
	if r.k.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.k.Token)
	}
}

// endpointSlice is the part of a discovery.k8s.io/v1 EndpointSlice the gateway reads.
type endpointSlice struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Endpoints []struct {
		Addresses  []string `json:"addresses"`
		Conditions struct {
			Ready *bool `json:"ready"`
		} `json:"conditions"`
	} `json:"endpoints"`
}

// readyIn counts the ready endpoints of a slice (a nil ready condition counts as ready, as
// the API documents).
func (s *endpointSlice) readyIn() int {
	n := 0
	for _, e := range s.Endpoints {
		if e.Conditions.Ready == nil || *e.Conditions.Ready {
			n++
		}
	}
	return n
}

func (r *kubeRunner) slicesPath(watch bool, rv string) string {
	q := url.Values{"labelSelector": {"kubernetes.io/service-name=" + r.k.Service}}
	if watch {
		q.Set("watch", "true")
		q.Set("allowWatchBookmarks", "true")
		if rv != "" {
			q.Set("resourceVersion", rv)
		}
	}
	return fmt.Sprintf("%s/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices?%s", strings.TrimSuffix(r.k.APIServer, "/"), url.PathEscape(r.k.Namespace), q.Encode())
}

// watcher lists the Service's EndpointSlices, reports the ready replicas, and watches for
// changes; a broken watch lists again after a pause.
func (r *kubeRunner) watcher() {
	for r.ctx.Err() == nil {
		if err := r.listAndWatch(); err != nil && r.ctx.Err() == nil {
			r.log.Warn("scaling: kube: endpointslices", "service", r.shown(r.k.Service), "error", r.shown(err.Error()))
			select {
			case <-time.After(restartBackoff):
			case <-r.ctx.Done():
			}
		}
	}
}

func (r *kubeRunner) listAndWatch() error {
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []endpointSlice `json:"items"`
	}
	if err := r.do("GET", r.slicesPath(false, ""), nil, &list); err != nil {
		return err
	}
	counts := map[string]int{}
	for i := range list.Items {
		counts[list.Items[i].Metadata.Name] = list.Items[i].readyIn()
	}
	r.report(counts)
	req, err := http.NewRequestWithContext(r.ctx, "GET", r.slicesPath(true, list.Metadata.ResourceVersion), nil)
	if err != nil {
		return err
	}
	r.auth(req)
	resp, err := r.watchc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("watch: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		var ev struct {
			Type   string        `json:"type"`
			Object endpointSlice `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("watch event: %w", err)
		}
		switch ev.Type {
		case "ADDED", "MODIFIED":
			counts[ev.Object.Metadata.Name] = ev.Object.readyIn()
		case "DELETED":
			delete(counts, ev.Object.Metadata.Name)
		case "BOOKMARK":
			continue
		case "ERROR":
			return errors.New("watch: the API server ended the watch with an error (list again)")
		}
		r.report(counts)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("watch: closed by the API server")
}

func (r *kubeRunner) report(counts map[string]int) {
	n := 0
	for _, c := range counts {
		n += c
	}
	r.ready(n)
}
