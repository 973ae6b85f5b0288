package openai

// Endpoint is one of the inference APIs Peek reads. The zero value is no endpoint.
type Endpoint uint8

// The endpoints, by request path.
const (
	ChatCompletions Endpoint = iota + 1 // POST /v1/chat/completions
	Completions                         // POST /v1/completions
	Embeddings                          // POST /v1/embeddings
	Responses                           // POST /v1/responses (OpenAI Responses API)
	Messages                            // POST /v1/messages (Anthropic Messages API)
)

var endpointPaths = [...]string{
	ChatCompletions: "/v1/chat/completions",
	Completions:     "/v1/completions",
	Embeddings:      "/v1/embeddings",
	Responses:       "/v1/responses",
	Messages:        "/v1/messages",
}

func (e Endpoint) valid() bool { return e >= ChatCompletions && e <= Messages }

// Path returns the request path of e ("/v1/chat/completions"), or "" for an invalid value.
func (e Endpoint) Path() string {
	if !e.valid() {
		return ""
	}
	return endpointPaths[e]
}

// String returns the request path of e.
func (e Endpoint) String() string { return e.Path() }

// AnthropicErrors reports whether errors on e are written in Anthropic's shape
// ({"type":"error","error":{"type","message"}}) rather than OpenAI's.
func (e Endpoint) AnthropicErrors() bool { return e == Messages }

// AnthropicPath reports whether path belongs to Anthropic's Messages API: /v1/messages and the
// paths under it (/v1/messages/count_tokens, /v1/messages/batches), whose clients read errors
// in Anthropic's shape, also the gateway's 401 or 404 on an endpoint it does not serve.
func AnthropicPath(path []byte) bool {
	const p = "/v1/messages"
	return len(path) >= len(p) && string(path[:len(p)]) == p && (len(path) == len(p) || path[len(p)] == '/')
}

// EndpointForPath returns the endpoint served at path, compared byte for byte (no query, no
// trailing slash, case-sensitive), and false for any other path.
func EndpointForPath(path []byte) (Endpoint, bool) {
	switch string(path) {
	case "/v1/chat/completions":
		return ChatCompletions, true
	case "/v1/completions":
		return Completions, true
	case "/v1/embeddings":
		return Embeddings, true
	case "/v1/responses":
		return Responses, true
	case "/v1/messages":
		return Messages, true
	}
	return 0, false
}
