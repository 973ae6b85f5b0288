package gateway_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/metrics"
)

// startGatewayConfig runs a gateway from a whole TOML configuration and returns the base URL
// of its entrypoint "web".
func startGatewayConfig(t *testing.T, toml string) string {
	t.Helper()
	return "http://" + runGateway(t, "mw.toml", toml).Addr("web")
}

// countingUpstream answers 200 with the request's Authorization (or "-") in X-Saw-Auth, or
// the status in fail while it is not 0; hits counts the requests it received.
type countingUpstream struct {
	*upstream
	hits atomic.Int32
	fail atomic.Int32
}

func serveCounting(t *testing.T) *countingUpstream {
	cu := &countingUpstream{}
	cu.upstream = serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		if strings.HasPrefix(head, "GET /power/v1/observation ") {
			// A model target's servers are polled for worker observations: not a request.
			_, err := io.WriteString(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
			return err == nil
		}
		cu.hits.Add(1)
		if st := cu.fail.Load(); st != 0 {
			_, err := fmt.Fprintf(c, "HTTP/1.1 %d Failing\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", st)
			return err == nil
		}
		auth := "-"
		for _, l := range strings.Split(head, "\r\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "Authorization") {
				auth = strings.TrimSpace(v)
			}
		}
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Saw-Auth: %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", auth)
		return err == nil
	})
	return cu
}

var mwClient = &http.Client{Timeout: 10 * time.Second}

// get sends a GET and returns its answer, body read, failing the test when it gets none; on
// the test's goroutine only (tryGet elsewhere).
func get(t *testing.T, url string, hdr ...string) *http.Response {
	t.Helper()
	resp, err := tryGet(url, hdr...)
	require.NoError(t, err)
	return resp
}

// tryGet is get returning the error that left the request without an answer, for goroutines
// other than the test's.
func tryGet(url string, hdr ...string) (*http.Response, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := mwClient.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// Traffic far above the rate for ten seconds gets burst + rate × time through: never more
// (+10%), and no less than the rate owed for the time the clients kept the limiter busy
// (rateLimitFloor), counted from the answers; refusals carry Retry-After and the RateLimit-*
// fields.
func TestRateLimitHoldsTheRate(t *testing.T) {
	up := serveCounting(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			base := startGatewayConfig(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["per-client"]
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[middlewares.per-client]
type = "rate-limit"
rate = 600    # 10 a second
burst = 5
[admin]
address = ""
`, engineTOML(engine), up.addr()))
			const rate, burst, interval = 10.0, 5, 100 * time.Millisecond
			// Four clients keep the bucket drained even when the machine is busy: a lone client
			// that stalls longer than a token's 100 ms lets tokens pass unused (the bucket holds
			// only its burst), which is the limiter working, not admitting less than its rate.
			// A rate a loaded machine's clients still send far above, so that what is measured
			// is the limiter, not how fast the clients could send.
			// Ten seconds on one engine, as an operator would judge a limiter; the others
			// share the same stage, so two seconds check their wiring.
			span := 2 * time.Second
			if engine == engines[0] {
				span = 10 * time.Second
			}
			var allowed, refused atomic.Int64
			var mu sync.Mutex
			var last429 *http.Response
			exchanges := make([][]exchange, 4) // each client's, in the order sent
			first := time.Now()
			var wg sync.WaitGroup
			for c := range exchanges {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Since(first) < span {
						sent := time.Since(first)
						resp, err := tryGet(base + "/v1/models")
						if err != nil {
							t.Error(err) // t.Error, not require: this is not the test's goroutine
							return
						}
						exchanges[c] = append(exchanges[c], exchange{sent, time.Since(first), resp.StatusCode == 429})
						switch resp.StatusCode {
						case 200:
							allowed.Add(1)
							if resp.Header.Get("RateLimit-Limit") != "5" || resp.Header.Get("RateLimit-Remaining") == "" {
								t.Errorf("RateLimit headers: %v", resp.Header)
							}
						case 429:
							refused.Add(1)
							mu.Lock()
							last429 = resp
							mu.Unlock()
						default:
							t.Errorf("status %d", resp.StatusCode)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(first)
			want := burst + rate*elapsed.Seconds()
			got := float64(allowed.Load())
			floor, idle := rateLimitFloor(exchanges, elapsed, rate, burst, interval)
			t.Logf("%d admitted, %d refused in %v; burst + rate × time = %.1f; at least %.1f owed (the clients all slow for %v)",
				allowed.Load(), refused.Load(), elapsed.Round(time.Millisecond), want, floor, idle.Round(time.Millisecond))
			require.Greater(t, refused.Load(), allowed.Load(), "the clients sent well above the rate")
			require.LessOrEqual(t, got, want*1.10, "never more than the rate (+10%%)")
			require.GreaterOrEqual(t, got, floor, "the rate, for as long as the clients kept the bucket drained")
			require.NotNil(t, last429)
			require.Equal(t, "1", last429.Header.Get("Retry-After"), "a token comes back every 100 ms: retry after a second at most")
			require.Equal(t, "5", last429.Header.Get("RateLimit-Limit"))
			require.Equal(t, "0", last429.Header.Get("RateLimit-Remaining"))
			require.Equal(t, "1", last429.Header.Get("RateLimit-Reset"))
		})
	}
}

// exchange is one request of a client to a rate-limited route: when it was sent and its
// answer read (since the run began), and whether it was refused.
type exchange struct {
	sent, answered time.Duration
	refused        bool
}

// rateLimitFloor returns the fewest admissions a limiter of rate tokens a second and burst
// owes the clients whose exchanges are given (each client's in the order sent; the run lasted
// end), and for how long the clients may have left it unused.
//
// The limiter is a GCRA: a theoretical arrival time (tat) that each admission moves one
// interval (1/rate) past max(tat, now); a request is refused when tat is more than
// (burst-1) intervals ahead of now. Counted from the first decision s0 up to a refusal at b,
// the n admissions then satisfy tat(b) = s0 + n·interval + w, where w is the time the bucket
// stood full (now past tat: tokens no request took), and tat(b) > b + (burst-1)·interval; so
// n > rate·(b - s0 - w) + burst - 1. Each decision happens between its request's sending and
// its answer, hence b is at least the last refusal's sending and s0 at most the first answer.
// The bucket can stand full only between two decisions more than an interval apart, and
// then every client is between two of its own decisions that far apart: within a window from
// one request's sending to the next one's answer (or before its first answer, or after its
// last sending) longer than an interval. w is at most the time every client was in such a
// window, less an interval for each stretch of it: the idle time returned. A machine too busy to run the clients thus lowers the
// floor by the time they stalled, while the limiter owes its full rate whenever they kept it
// busy. One token less, for decisions that read the clock and then wait for the bucket's lock.
func rateLimitFloor(exchanges [][]exchange, end time.Duration, rate float64, burst int, interval time.Duration) (float64, time.Duration) {
	s0, b := end, time.Duration(-1)
	var slow [][][2]time.Duration // each client's windows longer than an interval, in order
	for _, ex := range exchanges {
		var ws [][2]time.Duration
		add := func(from, to time.Duration) {
			if to-from <= interval {
				return
			}
			if n := len(ws); n > 0 && from <= ws[n-1][1] {
				ws[n-1][1] = max(ws[n-1][1], to)
				return
			}
			ws = append(ws, [2]time.Duration{from, to})
		}
		if len(ex) == 0 {
			ws = append(ws, [2]time.Duration{0, end})
		} else {
			add(0, ex[0].answered)
			s0 = min(s0, ex[0].answered)
			for i := 1; i < len(ex); i++ {
				add(ex[i-1].sent, ex[i].answered)
			}
			add(ex[len(ex)-1].sent, end)
		}
		for _, e := range ex {
			if e.refused {
				b = max(b, e.sent)
			}
		}
		slow = append(slow, ws)
	}
	if b < 0 {
		return 0, end // no refusal: nothing says the bucket was ever drained
	}
	// The time every client was in a slow window: the intersection of the clients' unions.
	idle := slow[0]
	for _, ws := range slow[1:] {
		var both [][2]time.Duration
		for _, x := range idle {
			for _, y := range ws {
				if from, to := max(x[0], y[0]), min(x[1], y[1]); from < to {
					both = append(both, [2]time.Duration{from, to})
				}
			}
		}
		idle = both
	}
	// A gap of g between decisions leaves the bucket full for at most g - interval, and lies
	// within one stretch of the idle time: a stretch of length L holds at most L - interval.
	sort.Slice(idle, func(i, j int) bool { return idle[i][0] < idle[j][0] })
	var w time.Duration
	for i := 0; i < len(idle); {
		from, to := idle[i][0], idle[i][1]
		for i++; i < len(idle) && idle[i][0] <= to; i++ {
			to = max(to, idle[i][1])
		}
		if from, to = max(from, s0), min(to, b); to-from > interval {
			w += to - from - interval
		}
	}
	return rate*(b-s0-w).Seconds() + float64(burst-1) - 1, w
}

// breakerState reads sluice_circuit_breaker_state for a backend from the metrics.
func breakerState(t *testing.T, mw, backend string) int {
	t.Helper()
	var b bytes.Buffer
	metrics.WritePrometheus(&b)
	re := regexp.MustCompile(`(?m)^sluice_circuit_breaker_state\{middleware="` + regexp.QuoteMeta(mw) + `",service="[^"]*",backend="` + regexp.QuoteMeta(backend) + `"\} (\d)$`)
	m := re.FindStringSubmatch(b.String())
	require.NotNil(t, m, "no breaker gauge for %s in\n%s", backend, b.String())
	n, _ := strconv.Atoi(m[1])
	return n
}

// A backend that fails failure_threshold times in a row is left out: requests go to the
// healthy one and none reach it during the cooldown; a service whose every backend is open is
// answered 503 circuit_open with Retry-After.
func TestBreakerKeepsAFailingBackendOut(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			bad, good, lone := serveCounting(t), serveCounting(t), serveCounting(t)
			bad.fail.Store(500)
			lone.fail.Store(503)
			base := startGatewayConfig(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[routers.pair]
rule = "PathPrefix(`+"`/pair`"+`)"
service = "pair"
middlewares = ["cb"]
[routers.lone]
rule = "PathPrefix(`+"`/lone`"+`)"
service = "lone"
middlewares = ["cb"]
[services.pair.load_balancer]
servers = [{ url = "http://%s" }, { url = "http://%s" }]
[services.lone.load_balancer]
servers = [{ url = "http://%s" }]
[middlewares.cb]
type = "circuit-breaker"
failure_threshold = 2
cooldown_secs = 30
[admin]
address = ""
`, engineTOML(engine), bad.addr(), good.addr(), lone.addr()))
			badURL, loneURL := "http://"+bad.addr(), "http://"+lone.addr()
			require.Equal(t, 0, breakerState(t, "cb", badURL))
			for bad.hits.Load() < 2 {
				get(t, base+"/pair")
			}
			waitFor(t, func() bool { return breakerState(t, "cb", badURL) == 1 })
			hits := bad.hits.Load()
			for range 20 {
				require.Equal(t, 200, get(t, base+"/pair").StatusCode)
			}
			require.Equal(t, hits, bad.hits.Load(), "no request reached the open backend")

			require.Equal(t, 503, get(t, base+"/lone").StatusCode, "the upstream's own 503")
			require.Equal(t, 503, get(t, base+"/lone").StatusCode)
			waitFor(t, func() bool { return breakerState(t, "cb", loneURL) == 1 })
			resp := get(t, base+"/lone")
			require.Equal(t, 503, resp.StatusCode)
			ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			require.NoError(t, err)
			require.True(t, ra >= 25 && ra <= 30, "Retry-After %d: the rest of the 30 s cooldown", ra)
			require.Equal(t, int32(2), lone.hits.Load(), "the refusal came from the gateway")
		})
	}
}

// After the cooldown one probe at a time goes through; success_threshold successful probes
// close the breaker.
func TestBreakerHalfOpensAndCloses(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := serveCounting(t)
			up.fail.Store(502)
			base := startGatewayConfig(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = "up"
middlewares = ["cb"]
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[middlewares.cb]
type = "circuit-breaker"
failure_threshold = 1
cooldown_secs = 0.2
success_threshold = 2
[admin]
address = ""
`, engineTOML(engine), up.addr()))
			url := "http://" + up.addr()
			require.Equal(t, 502, get(t, base+"/").StatusCode)
			waitFor(t, func() bool { return breakerState(t, "cb", url) != 0 })
			up.fail.Store(0) // the backend recovers

			// Requests are refused (503 circuit_open) until the cooldown ends, then probe.
			var statuses []int
			waitFor(t, func() bool {
				statuses = append(statuses, get(t, base+"/").StatusCode)
				return breakerState(t, "cb", url) == 0
			})
			ok := 0
			for _, st := range statuses {
				require.Contains(t, []int{200, 503}, st)
				if st == 200 {
					ok++
				}
			}
			require.GreaterOrEqual(t, ok, 2, "two successful probes closed it: %v", statuses)
			require.Equal(t, int32(1+ok), up.hits.Load(), "every request the gateway let through was a probe or came after the closing")
			for range 5 {
				require.Equal(t, 200, get(t, base+"/").StatusCode)
			}
		})
	}
}

// On a model router an open backend sends the request to the next target, as a failed
// connect does.
func TestBreakerOnAModelRouterFallsBack(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			bad, good := serveCounting(t), serveCounting(t)
			bad.fail.Store(500)
			base := startGatewayConfig(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
middlewares = ["cb"]
[middlewares.cb]
type = "circuit-breaker"
failure_threshold = 1
[services.primary.load_balancer]
servers = [{ url = "http://%s" }]
[services.backup.load_balancer]
servers = [{ url = "http://%s" }]
[models.m.targets.first]
service = "primary"
[models.m.targets.second]
service = "backup"
priority = 1
[admin]
address = ""
`, engineTOML(engine), bad.addr(), good.addr()))
			post := func() int {
				resp, err := mwClient.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(fmt.Sprintf(chatBody, "m")))
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			require.Equal(t, 500, post(), "the first target's answer")
			waitFor(t, func() bool { return breakerState(t, "cb", "http://"+bad.addr()) == 1 })
			for range 5 {
				require.Equal(t, 200, post())
			}
			require.Equal(t, int32(1), bad.hits.Load())
			require.Equal(t, int32(5), good.hits.Load())
		})
	}
}

const jwtSecret = "gateway-test-secret-0123456789abcdef"

func hs256(t *testing.T, key []byte, exp time.Time, extra ...any) string {
	t.Helper()
	c := jwt.MapClaims{"sub": "team-a", "exp": exp.Unix()}
	for i := 0; i+1 < len(extra); i += 2 {
		c[extra[i].(string)] = extra[i+1]
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(key)
	require.NoError(t, err)
	return tok
}

func TestJWTAuthenticatesOnBothEngines(t *testing.T) {
	t.Setenv("SLUICE_TEST_JWT_SECRET", jwtSecret)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	der, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	require.NoError(t, err)
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	keyFile := filepath.Join(t.TempDir(), "jwt.pem")
	require.NoError(t, os.WriteFile(keyFile, pemBytes, 0o600))
	up := serveCounting(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			base := startGatewayConfig(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[routers.hmac]
rule = "PathPrefix(`+"`/hmac`"+`)"
service = "up"
middlewares = ["jwt-auth"]
[routers.forward]
rule = "PathPrefix(`+"`/forward`"+`)"
service = "up"
middlewares = ["jwt-auth"]
forward_credentials = true
[routers.rsa]
rule = "PathPrefix(`+"`/rsa`"+`)"
service = "up"
middlewares = ["jwt-rsa"]
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[middlewares.jwt-auth]
type = "jwt"
value = "${SLUICE_TEST_JWT_SECRET}"
[middlewares.jwt-rsa]
type = "jwt"
public_key_file = %q
[admin]
address = ""
`, engineTOML(engine), up.addr(), keyFile))
			now := time.Now()
			bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
			valid := hs256(t, []byte(jwtSecret), now.Add(time.Hour))

			resp := get(t, base+"/hmac", bearer(valid)...)
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "-", resp.Header.Get("X-Saw-Auth"), "the token stays at the gateway")
			resp = get(t, base+"/forward", bearer(valid)...)
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "Bearer "+valid, resp.Header.Get("X-Saw-Auth"), "forward_credentials")

			require.Equal(t, 200, get(t, base+"/hmac", bearer(hs256(t, []byte(jwtSecret), now.Add(-10*time.Second)))...).StatusCode,
				"expired 10 s ago: within the default 30 s leeway")

			hits := up.hits.Load()
			for name, tc := range map[string]struct {
				path string
				hdr  []string
				desc string
			}{
				"expired beyond the leeway": {"/hmac", bearer(hs256(t, []byte(jwtSecret), now.Add(-2*time.Minute))), "expired"},
				"wrong key":                 {"/hmac", bearer(hs256(t, []byte("another-secret-0123456789abcdef!!"), now.Add(time.Hour))), "signature"},
				"alg none": {"/hmac", bearer(func() string {
					tok, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "x", "exp": now.Add(time.Hour).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
					require.NoError(t, err)
					return tok
				}()), "signature"},
				"HS256 signed with the RS256 public key": {"/rsa", bearer(hs256(t, pemBytes, now.Add(time.Hour))), "signature"},
				"missing token":                          {"/hmac", nil, ""},
			} {
				resp := get(t, base+tc.path, tc.hdr...)
				require.Equal(t, 401, resp.StatusCode, name)
				ch := resp.Header.Get("WWW-Authenticate")
				if tc.desc == "" {
					require.Equal(t, `Bearer realm="sluice"`, ch, name)
					continue
				}
				require.Contains(t, ch, `error="invalid_token"`, name)
				require.Contains(t, ch, tc.desc, name)
			}
			require.Equal(t, hits, up.hits.Load(), "no refused request reached the upstream")

			rs, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "x", "exp": now.Add(time.Hour).Unix()}).SignedString(rsaKey)
			require.NoError(t, err)
			require.Equal(t, 200, get(t, base+"/rsa", bearer(rs)...).StatusCode)
		})
	}
}

// A router's middlewares run in the order it lists them: with jwt first, a request without a
// token is refused before it spends a rate-limit token; with the rate limit first, it spends
// one.
func TestMiddlewaresRunInConfiguredOrder(t *testing.T) {
	t.Setenv("SLUICE_TEST_JWT_SECRET", jwtSecret)
	up := serveCounting(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			base := startGatewayConfig(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[routers.auth-first]
rule = "PathPrefix(`+"`/a`"+`)"
service = "up"
middlewares = ["jwt-auth", "limit-a", "cb"]
[routers.limit-first]
rule = "PathPrefix(`+"`/b`"+`)"
service = "up"
middlewares = ["limit-b", "jwt-auth"]
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[middlewares.jwt-auth]
type = "jwt"
value = "${SLUICE_TEST_JWT_SECRET}"
[middlewares.limit-a]
type = "rate-limit"
rate = 0.1
burst = 1
[middlewares.limit-b]
type = "rate-limit"
rate = 0.1
burst = 1
[middlewares.cb]
type = "circuit-breaker"
[admin]
address = ""
`, engineTOML(engine), up.addr()))
			tok := []string{"Authorization", "Bearer " + hs256(t, []byte(jwtSecret), time.Now().Add(time.Hour))}
			require.Equal(t, 401, get(t, base+"/a").StatusCode)
			require.Equal(t, 200, get(t, base+"/a", tok...).StatusCode, "the refused request spent no token")
			require.Equal(t, 429, get(t, base+"/a", tok...).StatusCode)

			require.Equal(t, 401, get(t, base+"/b").StatusCode)
			require.Equal(t, 429, get(t, base+"/b", tok...).StatusCode, "the rate limit ran first")
		})
	}
}
