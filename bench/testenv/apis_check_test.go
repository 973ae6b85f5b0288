package testenv

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
)

// fakeAPI is an OpenAI-compatible server for the checks' own tests: completions, embeddings,
// the model list and a chat endpoint that always refuses, behind one API key. Its faults
// make one thing wrong at a time.
type fakeAPI struct {
	key      string
	dropDone atomic.Bool // streams end without data: [DONE]
	zeros    atomic.Bool // embeddings are all zeros
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	jsonErr := func(status int, typ, code string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":"refused","type":%q,"param":null,"code":%q}}`, typ, code)
	}
	if r.Header.Get("Authorization") != "Bearer "+f.key {
		jsonErr(401, "invalid_request_error", "invalid_api_key")
		return
	}
	var req struct {
		Stream         bool   `json:"stream"`
		EncodingFormat string `json:"encoding_format"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	usage := `{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}`
	switch r.URL.Path {
	case "/v1/chat/completions":
		w.Header().Set("Retry-After", "7")
		jsonErr(429, "rate_limit_error", "busy")
	case "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"x"},{"id":"other","object":"model","created":0,"owned_by":"x"}]}`)
	case "/v1/completions":
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"ab","logprobs":null,"finish_reason":"length"}],"usage":%s}`, usage)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{
			`{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"a","logprobs":null,"finish_reason":null}]}`,
			`{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"b","logprobs":null,"finish_reason":"length"}]}`,
			`{"id":"c","object":"text_completion","created":1,"model":"m","choices":[],"usage":` + usage + `}`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
		if !f.dropDone.Load() {
			fmt.Fprint(w, "data: [DONE]\n\n")
		}
	case "/v1/embeddings":
		vec := []float32{0.5, -0.25, 1}
		if f.zeros.Load() {
			vec = []float32{0, 0, 0}
		}
		var emb []byte
		if req.EncodingFormat == "base64" {
			raw := make([]byte, 0, 4*len(vec))
			for _, v := range vec {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
			}
			emb, _ = json.Marshal(base64.StdEncoding.EncodeToString(raw))
		} else {
			emb, _ = json.Marshal(vec)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","model":"m","data":[{"object":"embedding","index":0,"embedding":%s},{"object":"embedding","index":1,"embedding":%s}],"usage":{"prompt_tokens":4,"total_tokens":4}}`, emb, emb)
	default:
		jsonErr(404, "invalid_request_error", "unknown_url")
	}
}

// The API checks pass a conforming server and fail, in both SDKs, when the key is not sent,
// a completions stream lacks `data: [DONE]`, models.list is not the expected list or an
// embedding is all zeros; the error helpers report the SDK's typed error with its
// Retry-After, and fail on a request that succeeds.
func TestAPIChecksAreStrict(t *testing.T) {
	NodeDir(t)
	f := &fakeAPI{key: "sk-good"}
	srv := httptest.NewServer(f)
	defer srv.Close()
	base := srv.URL + "/v1"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want := []string{"other", "m"}
	node := func(key string, ids ...string) error {
		_, err := OpenAINodeAPIsCheck(ctx, base, "m", NodeAPIKey(key), NodeChecks("completions", "embeddings", "models"), NodeExpectModels(ids...))
		return err
	}
	goCheck := func(key string, ids []string) error {
		_, err := OpenAIGoAPIsCheck(ctx, base, "m", ids, option.WithAPIKey(key))
		return err
	}

	require.NoError(t, node("sk-good", want...))
	res, err := OpenAIGoAPIsCheck(ctx, base, "m", want, option.WithAPIKey("sk-good"))
	require.NoError(t, err)
	require.Equal(t, []string{"m", "other"}, res.Models)
	require.Equal(t, 2, res.Embeddings)
	require.Equal(t, 3, res.Dims)

	for name, c := range map[string]struct {
		key    string
		ids    []string
		fault  *atomic.Bool
		substr string
	}{
		"wrong key":     {"sk-bad", want, nil, "401"},
		"no [DONE]":     {"sk-good", want, &f.dropDone, "[DONE]"},
		"other models":  {"sk-good", []string{"m"}, nil, "models"},
		"zero embedded": {"sk-good", want, &f.zeros, "zeros"},
	} {
		if c.fault != nil {
			c.fault.Store(true)
		}
		require.ErrorContains(t, goCheck(c.key, c.ids), c.substr, "openai-go: %s", name)
		require.ErrorContains(t, node(c.key, c.ids...), c.substr, "node: %s", name)
		if c.fault != nil {
			c.fault.Store(false)
		}
	}

	nres, err := OpenAINodeErrorCheck(ctx, base, "m", 2, NodeAPIKey("sk-good"))
	require.NoError(t, err)
	require.Equal(t, "RateLimitError", nres.Class)
	require.Equal(t, 429, nres.Status)
	require.Equal(t, "busy", nres.Code)
	require.Equal(t, "7", nres.RetryAfter)
	nres, err = OpenAINodeErrorCheck(ctx, base, "m", 2, NodeAPIKey("sk-bad"), NodeEndpoint("models"))
	require.NoError(t, err)
	require.Equal(t, "AuthenticationError", nres.Class)
	_, err = OpenAINodeErrorCheck(ctx, base, "m", 2, NodeAPIKey("sk-good"), NodeEndpoint("models"))
	require.ErrorContains(t, err, "the request succeeded")
	require.False(t, strings.Contains(err.Error(), "sk-good"), "the key stays out of messages: %v", err)

	gerr, err := OpenAIGoError(ctx, base, "m", "chat", option.WithAPIKey("sk-good"))
	require.NoError(t, err)
	require.Equal(t, 429, gerr.StatusCode)
	require.Equal(t, "busy", gerr.Code)
	require.Equal(t, "7", gerr.Response.Header.Get("Retry-After"))
	gerr, err = OpenAIGoError(ctx, base, "m", "embeddings", option.WithAPIKey("sk-bad"))
	require.NoError(t, err)
	require.Equal(t, 401, gerr.StatusCode)
	_, err = OpenAIGoError(ctx, base, "m", "models", option.WithAPIKey("sk-good"))
	require.ErrorContains(t, err, "the request succeeded")
}
