package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/testenv"
)

// The official OpenAI SDKs (Node and Go) use a model router with a consumer's API key as they
// would use OpenAI: chat completions (streamed with include_usage and not), completions,
// embeddings (base64, the Node SDK's default, and floats), the model list (exactly the aliases
// the key may use) and the Responses API; and each refusal (a wrong key, an endpoint or model
// the key is not granted, an unknown model, a pool at capacity) reaches them as the SDK's own
// typed error with the gateway's status, error body and Retry-After.
func TestOpenAISDKsThroughModelRouter(t *testing.T) {
	testenv.NodeDir(t)
	sim := startSimulator(t)
	granted := []string{"chat-model", "narrow-model"} // team-c's aliases
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			gw := startModelGateway(t, engine, sim)
			base := gw + "/v1"

			t.Run("apis", func(t *testing.T) {
				testenv.RunOpenAINodeCheck(t, base, "chat-model", testenv.NodeAPIKey(teamCKey))
				node := testenv.RunOpenAINodeAPIsCheck(t, base, "chat-model", testenv.NodeAPIKey(teamCKey),
					testenv.NodeChecks("completions", "embeddings", "models", "responses"), testenv.NodeExpectModels(granted...))
				require.Equal(t, "base64", node.Embeddings.DefaultEncoding)
				require.ElementsMatch(t, granted, node.Models.IDs)

				key := option.WithAPIKey(teamCKey)
				testenv.RunOpenAIGoCheck(t, base, "chat-model", key)
				goRes := testenv.RunOpenAIGoAPIsCheck(t, base, "chat-model", granted, key)
				require.ElementsMatch(t, granted, goRes.Models)
				testenv.RunOpenAIGoResponsesCheck(t, base, "chat-model", key)

				// The key refused below for other endpoints is a valid key for chat.
				testenv.RunOpenAIGoCheck(t, base, "chat-model", option.WithAPIKey(chatOnlyKey))
			})

			// sdkErrors has both SDKs send one request to endpoint with key and checks that
			// each threw its typed error for status, with the error body's type and code and
			// the answer's Retry-After ("": none).
			sdkErrors := func(t *testing.T, key, model, endpoint string, status int, class, typ, code, retryAfter string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				res, err := testenv.OpenAINodeErrorCheck(ctx, base, model, 2, testenv.NodeAPIKey(key), testenv.NodeEndpoint(endpoint))
				require.NoError(t, err)
				t.Logf("node %s: %s %d %s %s retry-after %q: %s", endpoint, res.Class, res.Status, res.Type, res.Code, res.RetryAfter, res.Message)
				require.Equal(t, class, res.Class, "the Node SDK's error class")
				require.Equal(t, status, res.Status)
				require.Equal(t, typ, res.Type)
				require.Equal(t, code, res.Code)
				require.Equal(t, retryAfter, res.RetryAfter)

				apiErr, err := testenv.OpenAIGoError(ctx, base, model, endpoint, option.WithAPIKey(key))
				require.NoError(t, err)
				t.Logf("go %s: %d %s %s retry-after %q: %s", endpoint, apiErr.StatusCode, apiErr.Type, apiErr.Code, apiErr.Response.Header.Get("Retry-After"), apiErr.Message)
				require.Equal(t, status, apiErr.StatusCode)
				require.Equal(t, typ, apiErr.Type)
				require.Equal(t, code, apiErr.Code)
				require.NotEmpty(t, apiErr.Message)
				require.Equal(t, retryAfter, apiErr.Response.Header.Get("Retry-After"))
			}

			t.Run("wrong key", func(t *testing.T) {
				sdkErrors(t, "sk-not-a-key-0123456789", "chat-model", "chat", 401, "AuthenticationError", "invalid_request_error", "invalid_api_key", "")
			})
			t.Run("endpoint not granted", func(t *testing.T) {
				sdkErrors(t, chatOnlyKey, "chat-model", "embeddings", 403, "PermissionDeniedError", "permission_error", "endpoint_not_granted", "")
				sdkErrors(t, chatOnlyKey, "chat-model", "models", 403, "PermissionDeniedError", "permission_error", "endpoint_not_granted", "")
			})
			t.Run("unknown model", func(t *testing.T) {
				sdkErrors(t, teamCKey, "no-such-model", "chat", 404, "NotFoundError", "invalid_request_error", "model_not_found", "")
				// An alias the key may not use is answered as one that does not exist.
				sdkErrors(t, teamCKey, "secret-model", "responses", 404, "NotFoundError", "invalid_request_error", "model_not_found", "")
			})
			t.Run("pool at capacity", func(t *testing.T) {
				hold := holdSlot(t, gw, teamCKey, "narrow-model")
				sdkErrors(t, teamCKey, "narrow-model", "chat", 429, "RateLimitError", "rate_limit_error", "model_at_capacity", "1")
				sdkErrors(t, teamCKey, "narrow-model", "embeddings", 429, "RateLimitError", "rate_limit_error", "model_at_capacity", "1")
				require.NoError(t, hold.Close())
			})
		})
	}
}

// Requests the official SDKs build that OpenAI's API takes reach the upstream through a model
// router, not the router's 400: a completions request with max_tokens 0 and echo (the prompt
// scored, nothing generated, as vLLM serves it too), and one with a null prompt (nullable in
// the SDKs' types); a Responses input holding an item reference made by openai-go's
// ResponseInputItemParamOfItemReference, which has no type; a chat history holding the
// assistant's earlier answers as openai-go's ToParam puts them back, a refusal or audio
// without content; and a max_tokens a Python client wrote as a float (3.0), which vLLM
// reads as 3. The upstream answers each request with its body, so the answer is what it
// received. A body that starts with a byte order mark is refused with a message naming it.
func TestModelRouterPassesRequestsOpenAITakes(t *testing.T) {
	up := serveUpstream(t, echo)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			_, addr, _ := startConfigGateway(t, fmt.Sprintf(`
[entrypoints.web]
address = "127.0.0.1:0"
engine = %s
[admin]
address = "127.0.0.1:0"
[routers.openai]
rule = "PathPrefix(`+"`/v1`"+`)"
models = true
[services.up.load_balancer]
servers = [{ url = "http://%s" }]
[models.m.targets.t]
service = "up"
`, engineTOML(engine), up.addr()))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))

			t.Run("completions max_tokens 0", func(t *testing.T) {
				c, err := client.Completions.New(ctx, openai.CompletionNewParams{
					Model:     "m",
					Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("The sky is blue")},
					MaxTokens: openai.Int(0), Echo: openai.Bool(true), Logprobs: openai.Int(1),
				})
				require.NoError(t, err, "%s", sdkErrorBody(err))
				require.Contains(t, c.RawJSON(), `"max_tokens":0`, "the upstream got the request as sent")
			})
			t.Run("responses item reference", func(t *testing.T) {
				r, err := client.Responses.New(ctx, responses.ResponseNewParams{
					Model: "m",
					Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
						responses.ResponseInputItemParamOfMessage("Go on.", responses.EasyInputMessageRoleUser),
						responses.ResponseInputItemParamOfItemReference("msg_1"),
					}},
				})
				require.NoError(t, err, "%s", sdkErrorBody(err))
				require.Contains(t, r.RawJSON(), `{"id":"msg_1"}`, "the upstream got the item reference as sent")
			})
			t.Run("completions prompt null", func(t *testing.T) {
				c, err := client.Completions.New(ctx, openai.CompletionNewParams{
					Model: "m", Prompt: openai.CompletionNewParamsPromptUnion{OfString: param.Null[string]()},
				})
				require.NoError(t, err, "%s", sdkErrorBody(err))
				require.Contains(t, c.RawJSON(), `"prompt":null`, "the upstream got the request as sent")
			})
			t.Run("chat history with answers without content", func(t *testing.T) {
				refusal := openai.ChatCompletionMessage{Role: "assistant", Refusal: "I can't help with that."}
				audio := openai.ChatCompletionMessage{Role: "assistant", Audio: openai.ChatCompletionAudio{ID: "audio_1"}}
				c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
					Model: "m",
					Messages: []openai.ChatCompletionMessageParamUnion{
						openai.DeveloperMessage("Be brief."),
						openai.UserMessage("Help me."),
						refusal.ToParam(),
						openai.UserMessage("Say it."),
						audio.ToParam(),
						openai.UserMessage("Again."),
					},
				})
				require.NoError(t, err, "%s", sdkErrorBody(err))
				require.Contains(t, c.RawJSON(), `"refusal":"I can't help with that."`, "the upstream got the request as sent")
				require.Contains(t, c.RawJSON(), `"audio":{"id":"audio_1"}`, "the upstream got the request as sent")
			})
			t.Run("max_tokens written as a float", func(t *testing.T) {
				body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3.0,"n":1.0}`
				r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "sk-test", body)
				require.Equal(t, 200, r.status, r.raw)
				require.Equal(t, body, r.raw, "the upstream got the request as sent")
				r = call(t, "POST", "http://"+addr+"/v1/chat/completions", "sk-test", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3.5}`)
				require.Equal(t, 400, r.status, r.raw)
				require.Equal(t, "max_tokens: expected an integer", errField(r, "message"))
			})
			t.Run("byte order mark", func(t *testing.T) {
				r := call(t, "POST", "http://"+addr+"/v1/chat/completions", "sk-test", "\ufeff"+`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
				require.Equal(t, 400, r.status, r.raw)
				require.Equal(t, "invalid_json", errField(r, "code"))
				require.Equal(t, "invalid JSON at byte 0: the body starts with a UTF-8 byte order mark (EF BB BF), which JSON sent over a network must not have (RFC 8259, section 8.1)", errField(r, "message"))
			})
		})
	}
}

// sdkErrorBody is the error body of an openai-go API error (its Error method gives only the
// status), or err's text.
func sdkErrorBody(err error) string {
	var ae *openai.Error
	if errors.As(err, &ae) {
		return ae.RawJSON()
	}
	return fmt.Sprint(err)
}
