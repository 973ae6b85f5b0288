package ingress_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/ingress"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// TestPipelinedResponsesKeepTheirOrder: a client pipelines a request the event loop serves
// (a large response, left partly in the loop's outbound buffer for a client that reads
// slowly) and one a worker serves (a body too large for the loop path). The worker's response
// must wait for every byte of the one before it: written straight to the socket while the
// loop still buffers bytes of the first, it would land inside that body.
func TestPipelinedResponsesKeepTheirOrder(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, "second")
			return
		}
		_, _ = w.Write(big)
	}))
	t.Cleanup(up.Close)
	for _, ce := range contractEngines {
		t.Run(ce.name, func(t *testing.T) {
			// A small send buffer: what the socket does not take stays in the gateway.
			small := contractEngine{ce.name, func(set ingress.Settings, res pipeline.Resolver) ingress.Transport {
				set.SendBufferBytes = 4 << 10
				return ce.make(set, res)
			}}
			tr := startTransport(t, small, strings.TrimPrefix(up.URL, "http://"))
			post := strings.Repeat("p", 64<<10)
			for range 5 {
				c := dialClient(t, tr.Addr())
				require.NoError(t, c.(*net.TCPConn).SetReadBuffer(16<<10))
				_, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n"+
					"POST /second HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(post))+"\r\n\r\n"+post)
				require.NoError(t, err)
				br := bufio.NewReaderSize(&slowReader{c}, 3000)
				resp, err := http.ReadResponse(br, nil)
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				require.True(t, bytes.Equal(big, body), "the first body came whole and alone")
				resp, err = http.ReadResponse(br, nil)
				require.NoError(t, err)
				body, err = io.ReadAll(resp.Body)
				require.NoError(t, err)
				require.Equal(t, "second", string(body))
				c.Close()
			}
		})
	}
}

// slowReader reads at most 512 bytes at a time, with a pause before each read, as a client
// on a slow link does.
type slowReader struct{ c net.Conn }

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(time.Millisecond) // pacing the reader, not waiting for an event
	return s.c.Read(p[:min(len(p), 3000)])
}
