package scaling

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/lifecycle/scaling/kubetest"
)

// A kubeconfig's current context gives the API server and the token; the runner then reads
// and writes the scale subresource and counts the ready endpoints as the fake's controller
// makes them ready.
func TestKubeFromKubeconfigScalesAndWatches(t *testing.T) {
	api, err := kubetest.Start("ns", "dep", "svc", 50*time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(api.Close)
	kc := filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
current-context: test
contexts:
- name: other
  context: {cluster: nowhere, user: nobody}
- name: test
  context: {cluster: fake, user: gateway}
clusters:
- name: fake
  cluster: {server: "`+api.URL+`"}
users:
- name: gateway
  user: {token: "`+api.Token+`"}
`), 0o600))
	k := &Kube{Namespace: "ns", Deployment: "dep", Service: "svc", URL: "http://127.0.0.1:1"}
	require.NoError(t, k.Connect(KubeSource{Kubeconfig: kc}))
	require.Equal(t, api.URL, k.APIServer)
	require.Equal(t, api.Token, k.Token)

	ready := make(chan int, 16)
	r := newKubeRunner(k, func(n int) { ready <- n }, slog.Default())
	r.start()
	t.Cleanup(r.stop)
	require.Equal(t, 0, <-ready, "the list: nothing ready")
	r.setTarget(2)
	for n := range ready {
		if n == 2 {
			break
		}
	}
	replicas, readyNow := api.Replicas()
	require.Equal(t, 2, replicas)
	require.Equal(t, 2, readyNow)
}

// A wrong token is refused (401) and the scale is not written.
func TestKubeWrongTokenIsRefused(t *testing.T) {
	api, err := kubetest.Start("ns", "dep", "svc", time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(api.Close)
	k := &Kube{APIServer: api.URL, Token: "wrong", Namespace: "ns", Deployment: "dep", Service: "svc"}
	r := newKubeRunner(k, func(int) {}, slog.Default())
	t.Cleanup(r.stop)
	err = r.scale(1)
	require.ErrorContains(t, err, "401")
	scales, _ := api.Scales()
	require.Empty(t, scales)
}

// Outside a cluster, without api_server nor kubeconfig, Connect says so.
func TestKubeConnectOutsideACluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	k := &Kube{}
	require.ErrorContains(t, k.Connect(KubeSource{}), "not in a cluster")
}

// A kubeconfig cluster's server that is not an http(s) URL (its scheme left out) is refused
// by Connect, naming the cluster and the server, rather than failing every scale later.
func TestKubeconfigServerWithoutSchemeIsRefused(t *testing.T) {
	for _, server := range []string{"k8s.example:6443", "", "ftp://k8s.example", "https://"} {
		kc := filepath.Join(t.TempDir(), "config")
		require.NoError(t, os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
current-context: test
contexts:
- name: test
  context: {cluster: fake, user: gateway}
clusters:
- name: fake
  cluster: {server: "`+server+`"}
users:
- name: gateway
  user: {token: "t"}
`), 0o600))
		k := &Kube{Namespace: "ns", Deployment: "dep", Service: "svc", URL: "http://127.0.0.1:1"}
		require.EqualError(t, k.Connect(KubeSource{Kubeconfig: kc}),
			`scaling: kube: kubeconfig `+kc+`: cluster "fake": server "`+server+`": want an https:// or http:// URL such as "https://10.96.0.1:443"`, server)
	}
}

// An https API server whose scheme is written in capitals is https all the same: its ca_file
// is read (here it is missing, and Connect says so) rather than left unused.
func TestKubeConnectHTTPSSchemeInCapitals(t *testing.T) {
	k := &Kube{}
	missing := filepath.Join(t.TempDir(), "ca.pem")
	require.ErrorContains(t, k.Connect(KubeSource{APIServer: "HTTPS://127.0.0.1:1", TokenFile: os.DevNull, CAFile: missing}), "scaling: kube: ca_file: open "+missing)
}
