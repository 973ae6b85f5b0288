package gateway_test

import (
	"bufio"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// The admin API answers an asterisk-form request-target as the gateway's entrypoints do:
// OPTIONS * asks about the server and gets 200 without content; any other method with "*" is
// a malformed request (RFC 9112 §3.2.4), 400 with the same error, before the bearer token is
// asked for, as the entrypoint's parser refuses it before any middleware runs.
func TestAdminAnswersAsteriskFormAsTheEntrypoint(t *testing.T) {
	t.Setenv("SLUICE_TEST_ADMIN_TOKEN", "s3cret")
	for name, admin := range map[string]string{"open": "", "token": `token_env = "SLUICE_TEST_ADMIN_TOKEN"`} {
		t.Run(name, func(t *testing.T) { asteriskFormAnswers(t, adminTOML(admin)) })
	}
}

// asteriskFormAnswers runs a gateway from toml and compares its admin API's answers to
// asterisk-form requests with its entrypoint's.
func asteriskFormAnswers(t *testing.T, toml string) {
	g, _, _ := runAdmin(t, toml)
	type errorBody struct {
		Error struct{ Message, Type, Code string }
	}
	answer := func(addr, head string) (*response, errorBody) {
		t.Helper()
		c := dial(t, addr)
		send(t, c, head)
		resp := readResponse(t, bufio.NewReader(c), false)
		var e errorBody
		if resp.status != 200 {
			require.NoError(t, json.Unmarshal(resp.body, &e), "%q: %s", head, resp.body)
		}
		return resp, e
	}
	for _, head := range []string{
		"GET * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"DELETE * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"POST * HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
	} {
		entry, entryErr := answer(g.Addr("web"), head)
		admin, adminErr := answer(g.AdminAddr(), head)
		require.Equal(t, 400, entry.status, "%q to the entrypoint", head)
		require.Equal(t, entry.status, admin.status, "%q to the admin API: %s", head, admin.body)
		require.Equal(t, entryErr, adminErr, "%q: the same error", head)
		require.Contains(t, adminErr.Error.Message, "asterisk-form")
	}
	for _, addr := range []string{g.Addr("web"), g.AdminAddr()} {
		resp, _ := answer(addr, "OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		require.Equal(t, 200, resp.status, "OPTIONS * to %s: %s", addr, resp.body)
		require.Equal(t, "0", resp.headers["content-length"], addr)
		require.Empty(t, resp.body, addr)
	}
}
