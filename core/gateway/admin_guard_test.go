package gateway_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

// adminGETs are every GET endpoint of the admin API.
var adminGETs = []string{
	"/api/gateway/health", "/api/gateway/routes", "/api/gateway/services", "/api/gateway/backends",
	"/api/gateway/models", "/api/gateway/workers", "/api/gateway/config", "/api/gateway/metrics", "/metrics",
}

// adminTOML is a valid configuration whose admin API listens on loopback; admin is added to
// its [admin] table.
func adminTOML(admin string) string {
	return "[entrypoints.web]\naddress = \"127.0.0.1:0\"\n" +
		"[routers.api]\nrule = \"PathPrefix(`/v1`)\"\nservice = \"up\"\n" +
		"[services.up.load_balancer]\nservers = [{ url = \"http://127.0.0.1:1\" }]\n" +
		"[admin]\naddress = \"127.0.0.1:0\"\n" + admin + "\n"
}

// runAdmin runs a gateway from toml, written to a file so that reload works, and returns
// it with the admin API's base URL and the config file.
func runAdmin(t *testing.T, toml string) (*gateway.Gateway, string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.toml")
	require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	g, err := gateway.New(cfg, path, nil)
	require.NoError(t, err)
	require.NoError(t, g.Start())
	t.Cleanup(func() { _ = g.Drain(t.Context()) })
	return g, "http://" + g.AdminAddr(), path
}

type adminAnswer struct {
	status int
	header http.Header
	body   string
}

// adminDo sends one request; hdr may set "Host" (sent as the Host header) and any other field.
func adminDo(t *testing.T, method, url string, hdr map[string]string) adminAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return adminAnswer{resp.StatusCode, resp.Header, string(b)}
}

// requireAdminError checks an OpenAI-style JSON error with the given code.
func requireAdminError(t *testing.T, a adminAnswer, status int, code string) {
	t.Helper()
	require.Equal(t, status, a.status, "%s", a.body)
	require.Equal(t, "application/json", a.header.Get("Content-Type"))
	var e struct {
		Error struct {
			Message string
			Type    string
			Param   *string
			Code    string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(a.body), &e), "%s", a.body)
	require.Equal(t, code, e.Error.Code, "%s", a.body)
	require.NotEmpty(t, e.Error.Message)
	require.NotEmpty(t, e.Error.Type)
}

func generation(t *testing.T, admin string) float64 {
	t.Helper()
	a := adminDo(t, "GET", admin+"/api/gateway/health", nil)
	require.Equal(t, 200, a.status, "%s", a.body)
	var h struct{ Generation float64 }
	require.NoError(t, json.Unmarshal([]byte(a.body), &h))
	return h.Generation
}

// TestAdminRefusesForeignHost: a page on attacker.example whose DNS name is pointed at
// 127.0.0.1 (DNS rebinding) reaches the loopback admin API as its own origin; its requests
// carry its own name in Host and must be refused, on every endpoint.
func TestAdminRefusesForeignHost(t *testing.T) {
	g, admin, _ := runAdmin(t, adminTOML(""))
	_, port, err := net.SplitHostPort(g.AdminAddr())
	require.NoError(t, err)
	hosts := []string{
		"attacker.example:" + port, "attacker.example", "ATTACKER.example:" + port,
		"localhost.attacker.example:" + port, "127.0.0.1.nip.io:" + port, "localhost:" + port + ".attacker.example",
		"[::2]:" + port, "10.11.12.13:" + port,
	}
	for _, host := range hosts {
		for _, path := range adminGETs {
			a := adminDo(t, "GET", admin+path, map[string]string{"Host": host})
			requireAdminError(t, a, 403, "host_not_allowed")
			require.NotContains(t, a.body, "PathPrefix", "GET %s with Host %s", path, host)
		}
		a := adminDo(t, "POST", admin+"/api/gateway/reload", map[string]string{"Host": host, "Content-Type": "application/json"})
		requireAdminError(t, a, 403, "host_not_allowed")
	}
	require.Equal(t, float64(1), generation(t, admin), "no refused reload ran")
}

// TestAdminAnswersLoopbackNamesAndItsOwnAddress: what an operator types — a loopback name
// with any port, or the listener's address with or without its port — is answered, while
// names that only look like them are not.
func TestAdminAnswersLoopbackNamesAndItsOwnAddress(t *testing.T) {
	g, admin, _ := runAdmin(t, adminTOML(""))
	bound := g.AdminAddr()
	boundHost, _, err := net.SplitHostPort(bound)
	require.NoError(t, err)
	for _, host := range []string{bound, boundHost, "localhost", "LocalHost:1", "localhost:" + strings.Split(bound, ":")[1], "127.0.0.1", "127.0.0.2:80", "127.255.255.254:9090", "[::1]", "[::1]:9090"} {
		for _, path := range adminGETs {
			a := adminDo(t, "GET", admin+path, map[string]string{"Host": host})
			require.Equal(t, 200, a.status, "GET %s with Host %s: %s", path, host, a.body)
		}
	}
	for _, host := range []string{"localhost.attacker.example", "127.0.0.1.attacker.example", "[::1].attacker.example", "localhostx"} {
		requireAdminError(t, adminDo(t, "GET", admin+"/api/gateway/health", map[string]string{"Host": host}), 403, "host_not_allowed")
	}
}

// TestAdminAnswersAllowedHosts: an operator who reaches the admin API by a DNS name or
// through a reverse proxy lists that name in [admin] allowed_hosts.
func TestAdminAnswersAllowedHosts(t *testing.T) {
	_, admin, _ := runAdmin(t, adminTOML(`allowed_hosts = ["Sluice-Admin.example", "10.20.30.40", "[2001:db8::7]"]`))
	for _, host := range []string{"sluice-admin.example", "SLUICE-ADMIN.EXAMPLE:8443", "10.20.30.40:9090", "10.20.30.40", "[2001:db8::7]:443"} {
		a := adminDo(t, "GET", admin+"/api/gateway/routes", map[string]string{"Host": host})
		require.Equal(t, 200, a.status, "Host %s: %s", host, a.body)
	}
	for _, host := range []string{"admin.example", "sluice-admin.example.attacker.example", "10.20.30.41"} {
		requireAdminError(t, adminDo(t, "GET", admin+"/api/gateway/routes", map[string]string{"Host": host}), 403, "host_not_allowed")
	}
}

// TestAdminOnNonLoopbackIPAnswersThatIP: an admin API bound to a specific address answers
// that address, with its port or none, and no other name for it.
func TestAdminOnNonLoopbackIPAnswersThatIP(t *testing.T) {
	ip := nonLoopbackIPv4(t)
	toml := strings.Replace(adminTOML(""), "[admin]\naddress = \"127.0.0.1:0\"", "[admin]\naddress = \""+ip+":0\"", 1)
	g, admin, _ := runAdmin(t, toml)
	_, port, err := net.SplitHostPort(g.AdminAddr())
	require.NoError(t, err)
	for _, host := range []string{ip + ":" + port, ip, "localhost"} {
		a := adminDo(t, "GET", admin+"/api/gateway/health", map[string]string{"Host": host})
		require.Equal(t, 200, a.status, "Host %s: %s", host, a.body)
	}
	for _, host := range []string{ip + ":1", "attacker.example:" + port} {
		requireAdminError(t, adminDo(t, "GET", admin+"/api/gateway/health", map[string]string{"Host": host}), 403, "host_not_allowed")
	}
}

func nonLoopbackIPv4(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address on this machine")
	return ""
}

// TestAdminReloadRefusesSimpleContentType: a page of any site can make a browser POST with
// Content-Type text/plain (or a form type) without asking first (no CORS preflight), so a
// state-changing request with such a type is a possible CSRF and is refused.
func TestAdminReloadRefusesSimpleContentType(t *testing.T) {
	_, admin, _ := runAdmin(t, adminTOML(""))
	for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx", "application/json-patch+json"} {
		hdr := map[string]string{}
		if ct != "" {
			hdr["Content-Type"] = ct
		}
		a := adminDo(t, "POST", admin+"/api/gateway/reload", hdr)
		requireAdminError(t, a, 415, "unsupported_media_type")
		require.Contains(t, a.body, "application/json", "the error names the expected type")
	}
	require.Equal(t, float64(1), generation(t, admin), "no refused reload ran")
}

// TestAdminReloadRefusesForeignOrigin: a browser names the page that sent a POST in Origin;
// a page of another host must not reload the gateway.
func TestAdminReloadRefusesForeignOrigin(t *testing.T) {
	_, admin, _ := runAdmin(t, adminTOML(""))
	for _, origin := range []string{"http://attacker.example", "https://attacker.example:9090", "null", "http://localhost.attacker.example", "file://", "chrome-extension://abc"} {
		a := adminDo(t, "POST", admin+"/api/gateway/reload", map[string]string{"Origin": origin, "Content-Type": "application/json"})
		requireAdminError(t, a, 403, "origin_not_allowed")
	}
	require.Equal(t, float64(1), generation(t, admin), "no refused reload ran")
}

// TestAdminReloadWithJSONAndNoOriginWorks: curl and scripts send no Origin; with
// Content-Type application/json they reload, as does a page of the admin API's own origin.
func TestAdminReloadWithJSONAndNoOriginWorks(t *testing.T) {
	g, admin, _ := runAdmin(t, adminTOML(""))
	for i, hdr := range []map[string]string{
		{"Content-Type": "application/json"},
		{"Content-Type": "Application/JSON; charset=utf-8"},
		{"Content-Type": "application/json", "Origin": "http://" + g.AdminAddr()},
		{"Content-Type": "application/json", "Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"},
		{"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"},
		{"Content-Type": "application/json", "Sec-Fetch-Site": "none"},
	} {
		a := adminDo(t, "POST", admin+"/api/gateway/reload", hdr)
		require.Equal(t, 200, a.status, "%v: %s", hdr, a.body)
		require.Equal(t, float64(i+2), generation(t, admin))
	}
	// The same reload as a simple request is the CSRF case.
	requireAdminError(t, adminDo(t, "POST", admin+"/api/gateway/reload", map[string]string{"Content-Type": "text/plain"}), 415, "unsupported_media_type")
}

// TestAdminRefusesCrossSiteFetch: browsers mark a request sent by a page of another site
// with Sec-Fetch-Site: cross-site; such a request must not change state.
func TestAdminRefusesCrossSiteFetch(t *testing.T) {
	_, admin, _ := runAdmin(t, adminTOML(""))
	a := adminDo(t, "POST", admin+"/api/gateway/reload", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"})
	requireAdminError(t, a, 403, "cross_site_request")
	require.Equal(t, float64(1), generation(t, admin), "no refused reload ran")
}

// TestAdminWrongMethodAnswers405: a known path asked with a method it does not take answers
// 405 with Allow, in JSON like every other admin error (net/http's ServeMux answers a
// plain-text 405, which the admin API used to turn into a 404).
func TestAdminWrongMethodAnswers405(t *testing.T) {
	_, admin, _ := runAdmin(t, adminTOML(""))
	for _, c := range []struct{ method, path, allow string }{
		{"POST", "/api/gateway/health", "GET, HEAD"},
		{"DELETE", "/metrics", "GET, HEAD"},
		{"PUT", "/api/gateway/config", "GET, HEAD"},
		{"GET", "/api/gateway/reload", "POST"},
		{"OPTIONS", "/api/gateway/reload", "POST"},
	} {
		a := adminDo(t, c.method, admin+c.path, map[string]string{"Content-Type": "application/json"})
		requireAdminError(t, a, 405, "method_not_allowed")
		require.Equal(t, c.allow, a.header.Get("Allow"), "%s %s", c.method, c.path)
	}
	requireAdminError(t, adminDo(t, "GET", admin+"/api/gateway/nope", nil), 404, "not_found")
}
