package gateway_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// rawAdmin sends head to the admin API as written (the request-target is not cleaned) and
// returns the answer; head is true for a HEAD request, whose answer has no body.
func rawAdmin(t *testing.T, addr, head string, isHead bool) *response {
	t.Helper()
	c := dial(t, addr)
	send(t, c, head)
	return readResponse(t, bufio.NewReader(c), isHead)
}

// requireJSONError requires resp to be an admin error in JSON with status and code; a HEAD
// answer carries the error's header without its body.
func requireJSONError(t *testing.T, resp *response, isHead bool, status int, code, what string) {
	t.Helper()
	require.Equal(t, status, resp.status, "%s: %s", what, resp.body)
	require.Equal(t, "application/json", resp.headers["content-type"], what)
	if isHead {
		require.Empty(t, resp.body, what)
		return
	}
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	require.NoError(t, json.Unmarshal(resp.body, &e), "%s: %s", what, resp.body)
	require.Equal(t, code, e.Error.Code, what)
	require.NotEmpty(t, e.Error.Message, what)
}

// Every answer of the admin listener is JSON (the metrics pages' Prometheus text aside),
// the fallbacks of net/http's ServeMux included: a path not in clean form gets 404 not_found
// (the mux would redirect to the clean path with an HTML 307, which an API client with a
// token should not follow), as does a path with a trailing slash; a method a path does not
// take gets 405 with Allow, HEAD and OPTIONS included.
func TestAdminAnswersEveryRequestInJSON(t *testing.T) {
	g, admin, _ := runAdmin(t, adminTOML(""))
	addr := g.AdminAddr()
	for _, c := range []struct {
		method, target string
		status         int
		code           string
	}{
		{"GET", "//api/gateway/health", 404, "not_found"},
		{"GET", "/api/gateway/../gateway/health", 404, "not_found"},
		{"GET", "/api/gateway/./health", 404, "not_found"},
		{"GET", "/api//gateway/health", 404, "not_found"},
		{"GET", "/api/gateway/health/", 404, "not_found"},
		{"GET", "/api/gateway/health/..", 404, "not_found"},
		{"GET", "//metrics", 404, "not_found"},
		{"GET", "/metrics/", 404, "not_found"},
		{"HEAD", "//api/gateway/health", 404, "not_found"},
		{"HEAD", "/api/gateway/nope", 404, "not_found"},
		{"POST", "//api/gateway/reload", 404, "not_found"},
		{"POST", "/api/gateway/reload/", 404, "not_found"},
		{"DELETE", "/api/gateway/../gateway/config", 404, "not_found"},
		{"OPTIONS", "/api/gateway/health", 405, "method_not_allowed"},
		{"OPTIONS", "//api/gateway/health", 404, "not_found"},
		{"OPTIONS", "/api/gateway/nope", 404, "not_found"},
		{"HEAD", "/api/gateway/reload", 405, "method_not_allowed"},
	} {
		what := c.method + " " + c.target
		head := c.method + " " + c.target + " HTTP/1.1\r\nHost: " + addr + "\r\n"
		if c.method == "POST" {
			head += "Content-Type: application/json\r\nContent-Length: 0\r\n"
		}
		resp := rawAdmin(t, addr, head+"\r\n", c.method == "HEAD")
		requireJSONError(t, resp, c.method == "HEAD", c.status, c.code, what)
		require.Empty(t, resp.headers["location"], "%s: no redirect", what)
	}
	require.Equal(t, float64(1), generation(t, admin), "no unclean path reloaded")

	resp := rawAdmin(t, addr, "HEAD /api/gateway/health HTTP/1.1\r\nHost: "+addr+"\r\n\r\n", true)
	require.Equal(t, 200, resp.status)
	require.Equal(t, "application/json", resp.headers["content-type"])
	a := adminDo(t, "GET", admin+"/metrics", nil)
	require.Equal(t, 200, a.status)
	require.Contains(t, a.header.Get("Content-Type"), "text/plain")
}

// A 401 of the admin API names the scheme it wants (RFC 9110 §11.6.1: a 401 carries
// WWW-Authenticate; RFC 6750 §3: the Bearer challenge, with error="invalid_token" when the
// token sent is wrong and no error when none was sent) and keeps its JSON error body.
func TestAdminUnauthorizedChallengesForTheBearerToken(t *testing.T) {
	t.Setenv("SLUICE_TEST_ADMIN_TOKEN", "s3cret")
	_, admin, _ := runAdmin(t, adminTOML(`token_env = "SLUICE_TEST_ADMIN_TOKEN"`))
	for _, c := range []struct{ auth, challenge string }{
		{"", `Bearer realm="sluice-admin"`},
		{"Basic dXNlcjpzM2NyZXQ=", `Bearer realm="sluice-admin"`},
		{"Bearer ", `Bearer realm="sluice-admin"`},
		{"Bearer wrong", `Bearer realm="sluice-admin", error="invalid_token"`},
	} {
		for _, path := range []string{"/metrics", "/api/gateway/health", "/api/gateway/nope"} {
			hdr := map[string]string{}
			if c.auth != "" {
				hdr["Authorization"] = c.auth
			}
			a := adminDo(t, "GET", admin+path, hdr)
			requireAdminError(t, a, http.StatusUnauthorized, "unauthorized")
			require.Equal(t, []string{c.challenge}, a.header.Values("WWW-Authenticate"), "Authorization %q, %s", c.auth, path)
		}
	}
	a := adminDo(t, "GET", admin+"/api/gateway/health", map[string]string{"Authorization": "Bearer s3cret"})
	require.Equal(t, 200, a.status, a.body)
	require.Empty(t, a.header.Values("WWW-Authenticate"))
}
