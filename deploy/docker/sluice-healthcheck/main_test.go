package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestHealthcheck(t *testing.T) {
	var gotAuth string
	var status int
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	url := srv.URL + "/api/gateway/health"

	for _, tc := range []struct {
		name   string
		status int
		body   string
		env    map[string]string
		args   []string
		code   int
		auth   string
	}{
		{name: "ok", status: 200, body: `{"status":"ok","generation":1}`, args: []string{url}, code: 0},
		{name: "url from the environment", status: 200, body: `{"status":"ok"}`, env: map[string]string{"SLUICE_HEALTH_URL": url}, code: 0},
		{name: "token", status: 200, body: `{"status":"ok"}`, env: map[string]string{"SLUICE_HEALTH_URL": url, "SLUICE_ADMIN_TOKEN": "s3cret"}, code: 0, auth: "Bearer s3cret"},
		{name: "refused", status: 401, body: `{"error":{}}`, args: []string{url}, code: 1},
		{name: "not ok", status: 200, body: `{"status":"draining"}`, args: []string{url}, code: 1},
		{name: "not json", status: 200, body: `ok`, args: []string{url}, code: 1},
		{name: "two arguments", args: []string{url, url}, code: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, gotAuth = tc.status, tc.body, ""
			var out, errOut bytes.Buffer
			code := run(tc.args, env(tc.env), &out, &errOut)
			require.Equal(t, tc.code, code, "stderr: %s", errOut.String())
			if tc.code == 0 {
				require.Equal(t, tc.auth, gotAuth)
			}
		})
	}

	t.Run("nothing listening", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		deadURL := dead.URL
		dead.Close()
		var out, errOut bytes.Buffer
		require.Equal(t, 1, run([]string{deadURL}, env(nil), &out, &errOut))
		require.Contains(t, errOut.String(), "sluice-healthcheck: ")
	})
}
