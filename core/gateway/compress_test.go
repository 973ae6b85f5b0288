package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// compressConfig is a gateway on engine with a compress middleware in front of upstream.
func compressConfig(engine, upstream string) string {
	return fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = ""
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["zip"]
[middlewares.zip]
type = "compress"
min_size = 1024
`, engineTOML(engine), upstream)
}

// rawClient leaves Accept-Encoding and decoding to the test.
var rawClient = &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 10 * time.Second}

func decode(t *testing.T, enc string, r io.Reader) io.Reader {
	t.Helper()
	switch enc {
	case "gzip":
		zr, err := gzip.NewReader(r)
		require.NoError(t, err)
		return zr
	case "zstd":
		zr, err := zstd.NewReader(r)
		require.NoError(t, err)
		t.Cleanup(zr.Close)
		return zr
	case "br":
		return brotli.NewReader(r)
	}
	return r
}

// Bodies are coded by what the client accepts and the configured preference, and decode to
// the upstream's bytes; short ones and event streams go as they are.
func TestCompressByAcceptEncoding(t *testing.T) {
	big := bytes.Repeat([]byte(`{"token":"hello"},`), 400) // 7.2 KB of JSON
	longETag := `"` + strings.Repeat("e", 298) + `"`
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				var err error
				switch {
				case strings.HasPrefix(head, "GET /small"):
					_, err = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				case strings.HasPrefix(head, "GET /chunked"):
					_, err = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(big), big)
				case strings.HasPrefix(head, "GET /longetag"):
					_, err = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nETag: %s\r\nContent-Length: %d\r\n\r\n%s", longETag, len(big), big)
				case strings.HasPrefix(head, "GET /png"):
					_, err = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n%s", len(big), big)
				default:
					_, err = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nETag: \"v1\"\r\nContent-Length: %d\r\n\r\n%s", len(big), big)
				}
				return err == nil
			})
			base := startGatewayConfig(t, compressConfig(engine, up.addr()))
			for _, c := range []struct{ path, accept, want string }{
				{"/big", "gzip", "gzip"},
				{"/big", "gzip, deflate, br, zstd", "zstd"},
				{"/big", "gzip;q=1, br;q=0.9, zstd;q=0.5", "gzip"},
				{"/big", "br", "br"},
				{"/big", "*", "zstd"},
				{"/big", "zstd;q=0, *;q=0.1", "br"},
				{"/big", "identity", ""},
				{"/big", "", ""},
				{"/chunked", "gzip", "gzip"},
				{"/longetag", "gzip", "gzip"},
				{"/small", "gzip", ""},
				{"/png", "gzip", ""},
			} {
				req, err := http.NewRequest("GET", base+c.path, nil)
				require.NoError(t, err)
				if c.accept != "" {
					req.Header.Set("Accept-Encoding", c.accept)
				}
				resp, err := rawClient.Do(req)
				require.NoError(t, err)
				got := resp.Header.Get("Content-Encoding")
				require.Equal(t, c.want, got, "%s with Accept-Encoding %q", c.path, c.accept)
				body, err := io.ReadAll(decode(t, got, resp.Body))
				require.NoError(t, err)
				resp.Body.Close()
				switch c.path {
				case "/small":
					require.Equal(t, "{}", string(body))
				default:
					require.Equal(t, big, body, "%s %q decodes to the upstream's bytes", c.path, c.accept)
				}
				if c.path != "/png" {
					require.Contains(t, resp.Header.Values("Vary"), "Accept-Encoding")
				}
				if c.want != "" {
					require.Empty(t, resp.Header.Get("Content-Length"), "the coded length is not the upstream's")
					switch c.path {
					case "/big":
						require.Equal(t, `W/"v1"`, resp.Header.Get("ETag"), "a strong validator is weakened")
					case "/longetag":
						require.Equal(t, "W/"+longETag, resp.Header.Get("ETag"), "a long strong validator is weakened too")
					}
				}
			}
		})
	}
}

// A streamed response whose client accepts gzip still arrives event by event: the upstream
// sends the next event only once the client has read the previous one, so a gateway that held
// events back (to compress them together) would stall this test.
func TestCompressNeverHoldsAnEventStream(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			const events = 20
			read := make(chan struct{})
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
					return false
				}
				for i := range events {
					ev := fmt.Sprintf("data: {\"i\":%d,\"pad\":%q}\n\n", i, strings.Repeat("x", 100))
					if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev); err != nil {
						return false
					}
					select {
					case <-read:
					case <-time.After(10 * time.Second):
						return false
					}
				}
				_, err := io.WriteString(c, "0\r\n\r\n")
				return err == nil
			})
			base := startGatewayConfig(t, compressConfig(engine, up.addr()))
			req, err := http.NewRequest("GET", base+"/v1/chat/completions", nil)
			require.NoError(t, err)
			req.Header.Set("Accept-Encoding", "gzip, br, zstd")
			resp, err := rawClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Empty(t, resp.Header.Get("Content-Encoding"), "an event stream is never coded")
			br := bufio.NewReader(resp.Body)
			for i := range events {
				line, err := br.ReadString('\n')
				require.NoError(t, err)
				require.True(t, strings.HasPrefix(line, fmt.Sprintf(`data: {"i":%d,`, i)), line)
				blank, err := br.ReadString('\n')
				require.NoError(t, err)
				require.Equal(t, "\n", blank)
				read <- struct{}{}
			}
			_, err = br.ReadByte()
			require.ErrorIs(t, err, io.EOF)
		})
	}
}

// A coded body of unknown length that arrives piece by piece (NDJSON, as Ollama streams) is
// flushed at each piece: the client decodes each line before the upstream sends the next.
func TestCompressFlushesEachPiece(t *testing.T) {
	for _, engine := range engines {
		for _, enc := range []string{"gzip", "zstd", "br"} {
			t.Run(engine+"/"+enc, func(t *testing.T) {
				const lines = 10
				read := make(chan struct{})
				up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
						return false
					}
					for i := range lines {
						l := fmt.Sprintf("{\"message\":{\"content\":\"token %d\"},\"done\":false}\n", i)
						if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(l), l); err != nil {
							return false
						}
						select {
						case <-read:
						case <-time.After(10 * time.Second):
							return false
						}
					}
					_, err := io.WriteString(c, "0\r\n\r\n")
					return err == nil
				})
				base := startGatewayConfig(t, compressConfig(engine, up.addr()))
				req, err := http.NewRequest("POST", base+"/api/chat", strings.NewReader(`{}`))
				require.NoError(t, err)
				req.Header.Set("Accept-Encoding", enc)
				resp, err := rawClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				require.Equal(t, enc, resp.Header.Get("Content-Encoding"))
				br := bufio.NewReader(decode(t, enc, resp.Body))
				for i := range lines {
					line, err := br.ReadString('\n')
					require.NoError(t, err)
					require.Contains(t, line, fmt.Sprintf(`"token %d"`, i))
					read <- struct{}{}
				}
				rest, err := io.ReadAll(br)
				require.NoError(t, err)
				require.Empty(t, rest)
			})
		}
	}
}

// A router may list two compress middlewares (one per family of content types, say, with
// their own codings); where both would code a response, the first codes it and the second
// leaves it be: the client gets one Content-Encoding and a body coded once. A body coded once
// but labelled twice ("gzip, gzip") is one that curl and browsers fail to decode.
func TestCompressTwiceOnOneRouterCodesOnce(t *testing.T) {
	big := bytes.Repeat([]byte(`{"token":"hello"},`), 400)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, _ string, _ []byte) bool {
				_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(big), big)
				return err == nil
			})
			cfg := strings.Replace(compressConfig(engine, up.addr()), `middlewares = ["zip"]`, `middlewares = ["zip", "zip-json"]`, 1) + `
[middlewares.zip-json]
type = "compress"
encodings = ["gzip"]
content_types = ["application/json"]
`
			base := startGatewayConfig(t, cfg)
			for _, accept := range []string{"gzip", "gzip, zstd"} {
				req, err := http.NewRequest("GET", base+"/v1/models", nil)
				require.NoError(t, err)
				req.Header.Set("Accept-Encoding", accept)
				resp, err := rawClient.Do(req)
				require.NoError(t, err)
				codings := resp.Header.Values("Content-Encoding")
				require.Len(t, codings, 1, "Accept-Encoding %q: one coding, applied once: %q", accept, codings)
				body, err := io.ReadAll(decode(t, codings[0], resp.Body))
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, big, body, "Accept-Encoding %q", accept)
			}
		})
	}
}

// compressFieldsUpstream answers GET and HEAD alike (no body for HEAD) by path: /big a
// 7.2 KB JSON body with a strong ETag and Accept-Ranges, /empty an empty JSON body,
// /nocontent 204, /notmodified 304 with the ETag, /no-transform and /no-transform-2nd the big
// body marked no-transform (on its only Cache-Control line, or its second).
func compressFieldsUpstream(t *testing.T, big []byte) *upstream {
	return serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		method, rest, _ := strings.Cut(head, " ")
		path, _, _ := strings.Cut(rest, " ")
		body := big
		var resp string
		switch path {
		case "/empty":
			body = nil
			resp = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n"
		case "/nocontent":
			body = nil
			resp = "HTTP/1.1 204 No Content\r\nContent-Type: application/json\r\n\r\n"
		case "/notmodified":
			body = nil
			resp = "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n"
		case "/no-transform":
			resp = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: no-transform\r\nContent-Length: %d\r\n\r\n", len(big))
		case "/no-transform-2nd":
			resp = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: public, max-age=60\r\nCache-Control: No-Transform\r\nContent-Length: %d\r\n\r\n", len(big))
		case "/no-transform-quoted":
			resp = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: private=\"x, no-transform\"\r\nContent-Length: %d\r\n\r\n", len(big))
		default:
			resp = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nETag: \"v1\"\r\nAccept-Ranges: bytes\r\nContent-Length: %d\r\n\r\n", len(big))
		}
		if method != "HEAD" {
			resp += string(body)
		}
		_, err := io.WriteString(c, resp)
		return err == nil
	})
}

// A response without content is never coded, whatever min_size says: an empty 200 (coded, it
// would grow to a coding's header and trailer), a 204, a 304. The 304 carries the Vary the
// 200 would (RFC 9110 §15.4.5).
func TestCompressLeavesAnswersWithoutContent(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := compressFieldsUpstream(t, nil)
			cfg := strings.Replace(compressConfig(engine, up.addr()), "min_size = 1024", "min_size = 0", 1)
			base := startGatewayConfig(t, cfg)
			c := dial(t, strings.TrimPrefix(base, "http://"))
			r := bufio.NewReader(c)
			for _, c2 := range []struct {
				path   string
				status int
			}{{"/empty", 200}, {"/nocontent", 204}, {"/notmodified", 304}} {
				send(t, c, "GET "+c2.path+" HTTP/1.1\r\nHost: gw\r\nAccept-Encoding: gzip, br, zstd\r\nIf-None-Match: W/\"v1\"\r\n\r\n")
				resp := readResponse(t, r, false)
				require.Equal(t, c2.status, resp.status, c2.path)
				require.Empty(t, resp.all("Content-Encoding"), "%s: nothing to code", c2.path)
				require.Empty(t, resp.body, c2.path)
				require.Empty(t, resp.all("Transfer-Encoding"), c2.path)
				if c2.status == 200 {
					require.Equal(t, "0", resp.headers["content-length"], c2.path)
				}
				if c2.status != 204 {
					require.Contains(t, resp.all("Vary"), "Accept-Encoding", "%s: the answer depends on Accept-Encoding", c2.path)
				}
			}
		})
	}
}

// A response to HEAD carries the fields the GET's would (RFC 9110 §9.3.2), so that a cache
// keying on Vary, or freshening a stored GET with a HEAD (RFC 9111 §4.3.5), sees the same
// ones: Vary, the coding, the weakened validator, no Accept-Ranges and no length (the coded
// GET has none).
func TestCompressHeadCarriesTheGETsFields(t *testing.T) {
	big := bytes.Repeat([]byte(`{"token":"hello"},`), 400)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := compressFieldsUpstream(t, big)
			base := startGatewayConfig(t, compressConfig(engine, up.addr()))
			c := dial(t, strings.TrimPrefix(base, "http://"))
			r := bufio.NewReader(c)
			fields := func(method, accept string) *response {
				send(t, c, method+" /big HTTP/1.1\r\nHost: gw\r\nAccept-Encoding: "+accept+"\r\n\r\n")
				return readResponse(t, r, method == "HEAD")
			}
			for _, accept := range []string{"gzip", "identity"} {
				get, head := fields("GET", accept), fields("HEAD", accept)
				require.Equal(t, 200, head.status)
				for _, name := range []string{"Vary", "Content-Encoding", "ETag", "Accept-Ranges"} {
					require.Equal(t, get.all(name), head.all(name), "Accept-Encoding %s: %s", accept, name)
				}
				require.Contains(t, head.all("Vary"), "Accept-Encoding", accept)
				if accept == "gzip" {
					require.Equal(t, "gzip", head.headers["content-encoding"])
					require.Equal(t, `W/"v1"`, head.headers["etag"])
					require.Empty(t, head.all("Content-Length"), "the coded GET has no length: the HEAD announces none")
				} else {
					require.Equal(t, []string{strconv.Itoa(len(big))}, head.all("Content-Length"))
				}
			}
			// The connection is still in step: the HEAD answers had no body.
			require.Equal(t, 200, fields("GET", "br").status)
		})
	}
}

// Accept-Encoding is a list that may come on several field lines, which mean one line of their
// values joined by commas (RFC 9110 §5.3): each line counts.
func TestCompressReadsEveryAcceptEncodingLine(t *testing.T) {
	big := bytes.Repeat([]byte(`{"token":"hello"},`), 400)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := compressFieldsUpstream(t, big)
			base := startGatewayConfig(t, compressConfig(engine, up.addr()))
			for _, c := range []struct {
				lines []string
				want  string
			}{
				{[]string{"identity", "gzip"}, "gzip"},
				{[]string{"gzip;q=0.5", "br"}, "br"},
				{[]string{"br;q=0.2, gzip;q=0.1", "zstd;q=0", "*;q=0.1"}, "br"},
				{[]string{"gzip", "gzip;q=0"}, "gzip"},
			} {
				req, err := http.NewRequest("GET", base+"/big", nil)
				require.NoError(t, err)
				for _, l := range c.lines {
					req.Header.Add("Accept-Encoding", l)
				}
				resp, err := rawClient.Do(req)
				require.NoError(t, err)
				body, err := io.ReadAll(decode(t, resp.Header.Get("Content-Encoding"), resp.Body))
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, c.want, resp.Header.Get("Content-Encoding"), "Accept-Encoding lines %q", c.lines)
				require.Equal(t, big, body)
			}
		})
	}
}

// A response marked no-transform is never coded by the gateway (RFC 9110 §7.7), on whichever
// Cache-Control line the directive is, and a client that asks for no-transform (RFC 9111
// §5.2.1.6) gets the body as the upstream sent it; a quoted value that merely contains the
// word is no directive.
func TestCompressHonoursNoTransform(t *testing.T) {
	big := bytes.Repeat([]byte(`{"token":"hello"},`), 400)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := compressFieldsUpstream(t, big)
			base := startGatewayConfig(t, compressConfig(engine, up.addr()))
			for _, c := range []struct {
				path, cacheControl, want string
			}{
				{"/no-transform", "", ""},
				{"/no-transform-2nd", "", ""},
				{"/big", "no-transform", ""},
				{"/big", "max-age=0, NO-TRANSFORM", ""},
				{"/big", "max-age=0", "gzip"},
				{"/no-transform-quoted", "", "gzip"},
			} {
				req, err := http.NewRequest("GET", base+c.path, nil)
				require.NoError(t, err)
				req.Header.Set("Accept-Encoding", "gzip")
				if c.cacheControl != "" {
					req.Header.Set("Cache-Control", c.cacheControl)
				}
				resp, err := rawClient.Do(req)
				require.NoError(t, err)
				body, err := io.ReadAll(decode(t, resp.Header.Get("Content-Encoding"), resp.Body))
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, c.want, resp.Header.Get("Content-Encoding"), "%s with Cache-Control %q", c.path, c.cacheControl)
				require.Equal(t, big, body)
				if c.want == "" {
					require.Equal(t, strconv.Itoa(len(big)), resp.Header.Get("Content-Length"), "%s: passed as it came", c.path)
				}
			}
		})
	}
}

// varyMembers returns the members of every Vary line of resp, in lower case.
func varyMembers(resp *response) []string {
	var ms []string
	for _, v := range resp.all("Vary") {
		for _, m := range strings.Split(v, ",") {
			if m = strings.TrimSpace(m); m != "" {
				ms = append(ms, strings.ToLower(m))
			}
		}
	}
	return ms
}

// A coded 200's validator is weak (W/"v1" for the upstream's "v1"), and so is the 304 that
// revalidates it: the client's If-None-Match W/"v1" goes upstream as it came, the upstream
// matches it weakly (RFC 9110 §13.1.2) and answers 304 with "v1", which the gateway weakens as
// it would the 200, so that a cache holding the coded 200 finds it named (RFC 9111 §4.3.4). A
// client the 200 would not be coded for gets the strong validator on both. Vary names
// Accept-Encoding once, however the upstream already lists it (any line, any case, within a
// list), and not at all next to the upstream's Vary: *; a Vary of the upstream's that its
// Connection names is not the client's, and lists nothing for it.
func TestCompressValidatorsAndVary(t *testing.T) {
	big := bytes.Repeat([]byte(`{"token":"hello"},`), 400)
	varies := map[string]string{
		"/big":        "",
		"/vary-lower": "Vary: accept-encoding\r\n",
		"/vary-list":  "Vary: Origin, ACCEPT-ENCODING\r\n",
		"/vary-lines": "Vary: Origin\r\nVary: Accept-Encoding\r\n",
		"/vary-other": "Vary: Origin\r\n",
		"/vary-star":  "Vary: *\r\n",
		// The upstream's Vary is hop-by-hop here, and does not reach the client.
		"/vary-hop": "Connection: Vary\r\nVary: Accept-Encoding\r\n",
	}
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				_, rest, _ := strings.Cut(head, " ")
				path, _, _ := strings.Cut(rest, " ")
				vary := varies[path]
				// Weak comparison, as RFC 9110 §13.1.2 has If-None-Match compare.
				for _, line := range strings.Split(head, "\r\n") {
					name, v, _ := strings.Cut(line, ":")
					if !strings.EqualFold(name, "If-None-Match") {
						continue
					}
					for _, tag := range strings.Split(v, ",") {
						if strings.TrimPrefix(strings.TrimSpace(tag), "W/") == `"v1"` {
							_, err := io.WriteString(c, "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n"+vary+"\r\n")
							return err == nil
						}
					}
				}
				_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nETag: \"v1\"\r\n%sContent-Length: %d\r\n\r\n%s", vary, len(big), big)
				return err == nil
			})
			base := startGatewayConfig(t, compressConfig(engine, up.addr()))
			c := dial(t, strings.TrimPrefix(base, "http://"))
			r := bufio.NewReader(c)
			get := func(path, accept, inm string) *response {
				req := "GET " + path + " HTTP/1.1\r\nHost: gw\r\nAccept-Encoding: " + accept + "\r\n"
				if inm != "" {
					req += "If-None-Match: " + inm + "\r\n"
				}
				send(t, c, req+"\r\n")
				return readResponse(t, r, false)
			}
			for path, vary := range varies {
				for _, accept := range []string{"gzip", "identity"} {
					full := get(path, accept, "")
					require.Equal(t, 200, full.status)
					etag := full.headers["etag"]
					if accept == "gzip" {
						require.Equal(t, "gzip", full.headers["content-encoding"], path)
						require.Equal(t, `W/"v1"`, etag, "%s: the coded 200's validator is weak", path)
					} else {
						require.Equal(t, `"v1"`, etag, "%s: the uncoded 200 keeps the strong validator", path)
					}
					revalidated := get(path, accept, etag)
					require.Equal(t, 304, revalidated.status, "%s %s: If-None-Match %s", path, accept, etag)
					require.Empty(t, revalidated.body)
					require.Equal(t, []string{etag}, revalidated.all("ETag"), "%s %s: the 304 names the 200's validator", path, accept)
					for _, resp := range []*response{full, revalidated} {
						ms := varyMembers(resp)
						want := 1
						if vary == "Vary: *\r\n" {
							want = 0
							require.Contains(t, ms, "*")
						}
						n := 0
						for _, m := range ms {
							if m == "accept-encoding" {
								n++
							}
						}
						require.Equal(t, want, n, "%s %s %d: Vary %q", path, accept, resp.status, resp.all("Vary"))
						if strings.Contains(vary, "Origin") {
							require.Contains(t, ms, "origin", "%s: the upstream's Vary stays", path)
						}
					}
				}
			}
		})
	}
}

// Answers without content stay so through the compress middleware for GET and HEAD alike:
// no body, no chunked framing, and no Content-Length on a 204 or a 304 (RFC 9110 §8.6: the
// upstream's, of the uncoded 200, would name a length the coded 200 does not have); a HEAD's
// 200 announces the GET's length only when the GET is not coded.
func TestCompressBodilessAnswers(t *testing.T) {
	big := bytes.Repeat([]byte(`{"token":"hello"},`), 400)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
				method, rest, _ := strings.Cut(head, " ")
				path, _, _ := strings.Cut(rest, " ")
				var resp string
				switch path {
				case "/nocontent":
					resp = "HTTP/1.1 204 No Content\r\nContent-Type: application/json\r\nETag: \"v1\"\r\n\r\n"
				case "/notmodified":
					resp = fmt.Sprintf("HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(big))
				default:
					resp = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nETag: \"v1\"\r\nContent-Length: %d\r\n\r\n", len(big))
					if method != "HEAD" {
						resp += string(big)
					}
				}
				_, err := io.WriteString(c, resp)
				return err == nil
			})
			base := startGatewayConfig(t, compressConfig(engine, up.addr()))
			c := dial(t, strings.TrimPrefix(base, "http://"))
			r := bufio.NewReader(c)
			for _, method := range []string{"GET", "HEAD"} {
				for _, accept := range []string{"gzip", "identity"} {
					for _, cs := range []struct {
						path   string
						status int
					}{{"/nocontent", 204}, {"/notmodified", 304}, {"/big", 200}} {
						what := method + " " + cs.path + " " + accept
						send(t, c, method+" "+cs.path+" HTTP/1.1\r\nHost: gw\r\nAccept-Encoding: "+accept+"\r\n\r\n")
						resp := readResponse(t, r, method == "HEAD" || cs.status != 200)
						require.Equal(t, cs.status, resp.status, what)
						if method == "HEAD" || cs.status != 200 {
							require.Empty(t, resp.all("Transfer-Encoding"), what)
						}
						if cs.status != 200 {
							require.Empty(t, resp.all("Content-Length"), what)
							require.Empty(t, resp.all("Content-Encoding"), what)
						}
						if cs.status == 200 && method == "HEAD" {
							if accept == "gzip" {
								require.Empty(t, resp.all("Content-Length"), what)
							} else {
								require.Equal(t, []string{strconv.Itoa(len(big))}, resp.all("Content-Length"), what)
							}
						}
					}
				}
			}
			// In step: no answer above had a body the test did not read.
			send(t, c, "GET /big HTTP/1.1\r\nHost: gw\r\nAccept-Encoding: identity\r\n\r\n")
			resp := readResponse(t, r, false)
			require.Equal(t, 200, resp.status)
			require.Equal(t, big, resp.body)
		})
	}
}
