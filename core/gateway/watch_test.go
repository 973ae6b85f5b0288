package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/gateway"
)

const watchEvents = 20

// watchUpstream serves /stream as an SSE stream of watchEvents events, a millisecond apart,
// and anything else as a short JSON body.
func watchUpstream(t *testing.T) *upstream {
	return serveUpstream(t, func(c net.Conn, _ *bufio.Reader, head string, _ []byte) bool {
		if !strings.HasPrefix(head, "GET /stream ") {
			_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
			return err == nil
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return false
		}
		for i := range watchEvents {
			ev := fmt.Sprintf("data: {\"i\":%d}\n\n", i)
			if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev); err != nil {
				return false
			}
			time.Sleep(time.Millisecond) // pacing only: streams are in flight across reloads
		}
		_, err := io.WriteString(c, "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
		return err == nil
	})
}

// watchConfig is a valid configuration whose generation n shows in a response field, or an
// invalid one (a syntax error, or a router naming no service) for bad = 1 or 2.
func watchConfig(engine, up string, n, bad int) string {
	svc := "up"
	if bad == 2 {
		svc = "missing"
	}
	doc := fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %q
[admin]
address = ""
[providers.file]
watch = true
debounce = "10ms"
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[routers.api]
rule = "PathPrefix(`+"`/`"+`)"
service = %q
middlewares = ["gen"]
[middlewares.gen]
type = "headers"
response_set = { "X-Gen" = "%d" }
`, engine, up, svc, n)
	if bad == 1 {
		doc += "[routers.broken\n"
	}
	return doc
}

// checkStream reads one SSE response through the gateway and reports whether every event and
// the final [DONE] arrived in order.
func checkStream(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	for i := 0; i <= watchEvents; i++ {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		want := fmt.Sprintf("data: {\"i\":%d}\n", i)
		if i == watchEvents {
			want = "data: [DONE]\n"
		}
		if line != want {
			return fmt.Errorf("event %d: got %q", i, line)
		}
		if _, err := r.ReadString('\n'); err != nil {
			return err
		}
	}
	if rest, _ := io.ReadAll(r); len(rest) > 0 {
		return fmt.Errorf("bytes after [DONE]: %q", rest)
	}
	return nil
}

// Many reloads from file changes, some of them invalid, while streams and plain requests run:
// every response arrives whole, each stream on the configuration it started with; invalid
// files are refused and the running configuration stays.
func TestFileWatchReloadsUnderLoadLoseNothing(t *testing.T) {
	const reloads = 40
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			up := watchUpstream(t)
			dir := t.TempDir()
			path := filepath.Join(dir, "sluice.toml")
			require.NoError(t, os.WriteFile(path, []byte(watchConfig(engine, up.addr(), 0, 0)), 0o644))
			cfg, err := config.Load(path)
			require.NoError(t, err)
			g, err := gateway.New(cfg, path, nil)
			require.NoError(t, err)
			require.NoError(t, g.Start())
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = g.Drain(ctx)
			})
			base := "http://" + g.Addr("web")
			client := &http.Client{Timeout: 10 * time.Second}

			var sent, ok atomic.Int64
			var failures sync.Map
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						sent.Add(1)
						var err error
						if w < 4 {
							err = checkStream(client, base+"/stream")
						} else {
							var resp *http.Response
							if resp, err = client.Get(base + "/json"); err == nil {
								b, _ := io.ReadAll(resp.Body)
								resp.Body.Close()
								if resp.StatusCode != 200 || string(b) != `{"ok":true}` || resp.Header.Get("X-Gen") == "" {
									err = fmt.Errorf("status %d body %q gen %q", resp.StatusCode, b, resp.Header.Get("X-Gen"))
								}
							}
						}
						if err != nil {
							failures.Store(sent.Load(), err.Error())
							continue
						}
						ok.Add(1)
					}
				}()
			}

			wantOK, wantFailed := uint64(0), uint64(0)
			lastGood := 0
			for i := 1; i <= reloads; i++ {
				bad := 0
				if i%5 == 0 {
					bad = 1 + i/5%2
				}
				body := []byte(watchConfig(engine, up.addr(), i, bad))
				if i%2 == 0 {
					require.NoError(t, os.WriteFile(path, body, 0o644))
				} else { // as editors and deployments do: a new file renamed over the old
					tmp := filepath.Join(dir, ".sluice.toml.tmp")
					require.NoError(t, os.WriteFile(tmp, body, 0o644))
					require.NoError(t, os.Rename(tmp, path))
				}
				if bad == 0 {
					wantOK, lastGood = wantOK+1, i
				} else {
					wantFailed++
				}
				require.Eventually(t, func() bool {
					okN, failedN := g.Reloads()
					return okN == wantOK && failedN == wantFailed
				}, 10*time.Second, time.Millisecond, "reload %d after its file change", i)
			}
			close(stop)
			wg.Wait()

			failures.Range(func(k, v any) bool {
				t.Errorf("request %v: %v", k, v)
				return true
			})
			require.Equal(t, sent.Load(), ok.Load(), "every response arrived whole")
			require.Greater(t, ok.Load(), int64(reloads), "traffic ran across the reloads")
			resp := get(t, base+"/json")
			require.Equal(t, fmt.Sprint(lastGood), resp.Header.Get("X-Gen"), "the last valid file is in force")
		})
	}
}
