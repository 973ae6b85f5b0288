package testenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// LlamaModel is the model id that llama-server.mjs reports for the fixture (its file name
// without .gguf) in GET /v1/models. The server answers any requested model name with the one
// model it has loaded and echoes the requested name in responses.
const LlamaModel = "tiny-random-llama"

// FixtureModelFile is the file name of the fixture model in the fixtures directory.
const FixtureModelFile = "tiny-random-llama.gguf"

// nodeStamp is written by bench/node/install.sh (make node-deps) after a successful install:
// the hex sha256 of bench/node/package-lock.json.
const nodeStamp = ".sluice-lock.sha256"

// NodeBenchDir returns the absolute path of bench/node (package.json, the .mjs scripts).
func NodeBenchDir() string { return filepath.Join(RepoRoot(), "bench", "node") }

// nodeModules checks that node is on PATH and that bench/node/node_modules holds the install of
// the current package-lock.json, and returns the node_modules path.
func nodeModules() (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("testenv: node is not on PATH (Node >= 20 is needed, see README): %v", err)
	}
	return nodePackages(NodeBenchDir())
}

// nodePackages checks that dir/node_modules holds the install of dir/package-lock.json that
// install.sh made, and returns the node_modules path.
func nodePackages(dir string) (string, error) {
	const hint = "run `make node-deps` (installs bench/node/package-lock.json into bench/node/node_modules)"
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return "", fmt.Errorf("testenv: %v", err)
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	mods := filepath.Join(dir, "node_modules")
	stamp, err := os.ReadFile(filepath.Join(mods, nodeStamp))
	if err != nil {
		return "", fmt.Errorf("testenv: Node packages not installed (%v): %s", err, hint)
	}
	if strings.TrimSpace(string(stamp)) != want {
		return "", fmt.Errorf("testenv: %s is out of date with package-lock.json: %s", mods, hint)
	}
	for _, pkg := range []string{"openai", "node-llama-cpp", "@node-llama-cpp/linux-x64"} {
		if _, err := os.Stat(filepath.Join(mods, pkg, "package.json")); err != nil {
			return "", fmt.Errorf("testenv: Node package %s missing (%v): %s", pkg, err, hint)
		}
	}
	return mods, nil
}

// NodeDir returns the absolute path of the installed node_modules (bench/node/node_modules).
// It fails t (never skips) when node is not on PATH or the packages are missing or stale
// against bench/node/package-lock.json, with the message "run `make node-deps`".
func NodeDir(t testing.TB) string {
	t.Helper()
	mods, err := nodeModules()
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

// FixturesDir returns the directory of the shared test fixtures: env SLUICE_FIXTURES when set,
// else ../shared/fixtures beside the repository root. It fails t when the fixture model is not
// there.
func FixturesDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SLUICE_FIXTURES")
	if dir == "" {
		dir = filepath.Join(filepath.Dir(RepoRoot()), "shared", "fixtures")
	}
	if _, err := os.Stat(filepath.Join(dir, FixtureModelFile)); err != nil {
		t.Fatalf("testenv: fixture model not found (%v); set SLUICE_FIXTURES to the folder holding %s (default ../shared/fixtures from the repository root)", err, FixtureModelFile)
	}
	return dir
}

// LlamaServerOptions tune StartLlamaServerWith; zero values take llama-server.mjs's defaults.
type LlamaServerOptions struct {
	// Parallel is the number of llama sequences (concurrent generations); default 1, so requests
	// are served one at a time in arrival order.
	Parallel int
	// CtxSize is the context size per sequence in tokens; default 2048.
	CtxSize int
	// DefaultMaxTokens is the completion length when a request has no max_tokens; default 256.
	DefaultMaxTokens int
	// ModelName overrides the model id reported by /v1/models; default LlamaModel.
	ModelName string
}

// LlamaServer is a running bench/node/llama-server.mjs.
type LlamaServer struct {
	// Origin is "http://127.0.0.1:PORT": what a sluice service's `servers = [{ url = ... }]` takes.
	Origin string
	// BaseURL is Origin + "/v1": what OpenAI clients take as their base URL.
	BaseURL string
	// Model is the model id of /v1/models.
	Model string
	// Proc is the node process.
	Proc *Process
}

var listeningRE = regexp.MustCompile(`listening on (\S+)`)

// StartLlamaServer starts bench/node/llama-server.mjs serving the fixture model on a free
// loopback port (the server binds port 0 and prints the address it got) with one thread and one
// sequence, waits until GET /health answers, and returns the server's origin
// "http://127.0.0.1:PORT" (append "/v1" for an OpenAI client's base URL). The server is killed in
// t.Cleanup. Fails t when Node packages or the fixture are missing, or the server does not come
// up within 60 s.
func StartLlamaServer(t testing.TB) (baseURL string) {
	t.Helper()
	return StartLlamaServerWith(t, LlamaServerOptions{}).Origin
}

// StartLlamaServerWith is StartLlamaServer with options, returning the whole LlamaServer.
func StartLlamaServerWith(t testing.TB, o LlamaServerOptions) *LlamaServer {
	t.Helper()
	NodeDir(t)
	model := filepath.Join(FixturesDir(t), FixtureModelFile)
	args := []string{filepath.Join(NodeBenchDir(), "llama-server.mjs"), "--model", model, "--listen", "127.0.0.1:0"}
	name := LlamaModel
	if o.ModelName != "" {
		name = o.ModelName
		args = append(args, "--model-name", o.ModelName)
	}
	if o.Parallel > 0 {
		args = append(args, "--parallel", fmt.Sprint(o.Parallel))
	}
	if o.CtxSize > 0 {
		args = append(args, "--ctx-size", fmt.Sprint(o.CtxSize))
	}
	if o.DefaultMaxTokens > 0 {
		args = append(args, "--default-max-tokens", fmt.Sprint(o.DefaultMaxTokens))
	}
	cmd := exec.Command("node", args...)
	cmd.Dir = NodeBenchDir()
	p := StartProcessCmd(t, cmd)
	out := p.WaitOutput(t, "listening on ", 60*time.Second)
	m := listeningRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("testenv: llama-server printed no address; output:\n%s", out)
	}
	origin := "http://" + m[1]
	p.WaitHTTP(t, origin+"/health", 30*time.Second)
	return &LlamaServer{Origin: origin, BaseURL: origin + "/v1", Model: name, Proc: p}
}

// NodeCheckResult is the JSON line that bench/node/openai-check.mjs prints.
type NodeCheckResult struct {
	OK        bool   `json:"ok"`
	BaseURL   string `json:"base_url"`
	Model     string `json:"model"`
	Error     string `json:"error,omitempty"`
	NonStream *struct {
		MS           float64         `json:"ms"`
		ContentChars int             `json:"content_chars"`
		FinishReason string          `json:"finish_reason"`
		Usage        json.RawMessage `json:"usage"`
	} `json:"non_stream,omitempty"`
	Stream *struct {
		MS            float64         `json:"ms"`
		TTFTMS        float64         `json:"ttft_ms"`
		Chunks        int             `json:"chunks"`
		ContentChunks int             `json:"content_chunks"`
		ContentChars  int             `json:"content_chars"`
		FinishReason  string          `json:"finish_reason"`
		Usage         json.RawMessage `json:"usage"`
	} `json:"stream,omitempty"`
}

// NodeOption is an optional flag of the Node check scripts, or an environment variable of
// the node process (flag empty).
type NodeOption struct{ flag, value string }

// NodeExtraCA makes node trust the certificate authorities in the PEM file caFile besides its
// own (NODE_EXTRA_CA_CERTS), for a base URL on https whose certificate a test CA signed.
func NodeExtraCA(caFile string) NodeOption { return NodeOption{"", "NODE_EXTRA_CA_CERTS=" + caFile} }

// nodeEnv returns the environment variables among opts.
func nodeEnv(opts []NodeOption) []string {
	var env []string
	for _, o := range opts {
		if o.flag == "" {
			env = append(env, o.value)
		}
	}
	return env
}

// NodeAPIKey makes the script's SDK client send key (default: env OPENAI_API_KEY, else
// "sk-test"), as a gateway's consumer would.
func NodeAPIKey(key string) NodeOption { return NodeOption{"--api-key", key} }

// NodeChecks selects the checks of openai-apis-check.mjs, run in that order: "embeddings",
// "responses", "completions", "models" (default: embeddings and responses).
func NodeChecks(checks ...string) NodeOption {
	return NodeOption{"--checks", strings.Join(checks, ",")}
}

// NodeExpectModels makes openai-apis-check.mjs's "models" check want exactly these ids from
// models.list, in any order.
func NodeExpectModels(ids ...string) NodeOption {
	return NodeOption{"--expect-models", strings.Join(ids, ",")}
}

// NodeEndpoint makes openai-error-check.mjs send its request to another API: "chat" (the
// default), "completions", "embeddings", "responses" or "models" (models.list).
func NodeEndpoint(endpoint string) NodeOption { return NodeOption{"--endpoint", endpoint} }

func appendNodeOptions(args []string, opts []NodeOption) []string {
	for _, o := range opts {
		if o.flag != "" {
			args = append(args, o.flag, o.value)
		}
	}
	return args
}

// OpenAINodeCheck runs `node bench/node/openai-check.mjs --base-url baseURL --model model`
// (the official OpenAI Node SDK: one non-streaming and one streaming chat completion with
// stream_options.include_usage; content, finish_reason, `data: [DONE]` and usage checked) and
// returns its parsed result. baseURL is an OpenAI base URL such as "http://127.0.0.1:8080/v1";
// opts may give the API key. The error is non-nil when the check failed (then it holds the
// script's output), the Node packages are missing, or ctx ended first.
func OpenAINodeCheck(ctx context.Context, baseURL, model string, opts ...NodeOption) (NodeCheckResult, error) {
	var res NodeCheckResult
	err := runNodeCheck(withNodeEnv(ctx, nodeEnv(opts)), "openai-check.mjs", &res, &res.OK, &res.Error,
		appendNodeOptions([]string{"--base-url", baseURL, "--model", model}, opts)...)
	return res, err
}

// runNode runs node with args in bench/node and returns its output. When ctx ends, node and
// every process it started are killed, and runNode returns within waitDelay.
func runNode(ctx context.Context, args ...string) (stdout, stderr *bytes.Buffer, err error) {
	stdout, stderr = new(bytes.Buffer), new(bytes.Buffer)
	cmd := exec.CommandContext(ctx, "node", args...)
	if env, _ := ctx.Value(nodeEnvKey{}).([]string); len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Dir = NodeBenchDir()
	cmd.Stdout, cmd.Stderr = stdout, stderr
	bound(cmd)
	return stdout, stderr, cmd.Run()
}

// nodeEnvKey carries the node process's extra environment variables (NodeExtraCA) through
// the context to runNode.
type nodeEnvKey struct{}

func withNodeEnv(ctx context.Context, env []string) context.Context {
	if len(env) == 0 {
		return ctx
	}
	return context.WithValue(ctx, nodeEnvKey{}, env)
}

// RunOpenAINodeCheck is OpenAINodeCheck with a 60 s deadline that fails t on any failure and
// logs the result line on success.
func RunOpenAINodeCheck(t testing.TB, baseURL, model string, opts ...NodeOption) NodeCheckResult {
	t.Helper()
	NodeDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := OpenAINodeCheck(ctx, baseURL, model, opts...)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after 60 s: %w", err)
		}
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	t.Logf("openai node check: %s", b)
	return res
}

// NodeAPIsCheckResult is the JSON line that bench/node/openai-apis-check.mjs prints.
type NodeAPIsCheckResult struct {
	OK         bool   `json:"ok"`
	BaseURL    string `json:"base_url"`
	Model      string `json:"model"`
	Error      string `json:"error,omitempty"`
	Embeddings *struct {
		Count           int       `json:"count"`
		Dims            int       `json:"dims"`
		DefaultEncoding string    `json:"default_encoding"`
		First           []float64 `json:"first"`
	} `json:"embeddings,omitempty"`
	Completions *struct {
		NonStream struct {
			MS           float64         `json:"ms"`
			TextChars    int             `json:"text_chars"`
			FinishReason string          `json:"finish_reason"`
			Usage        json.RawMessage `json:"usage"`
		} `json:"non_stream"`
		Stream struct {
			MS           float64         `json:"ms"`
			Chunks       int             `json:"chunks"`
			TextChars    int             `json:"text_chars"`
			FinishReason string          `json:"finish_reason"`
			Usage        json.RawMessage `json:"usage"`
		} `json:"stream"`
	} `json:"completions,omitempty"`
	Models *struct {
		IDs []string `json:"ids"`
	} `json:"models,omitempty"`
	Responses *struct {
		NonStream struct {
			MS    float64         `json:"ms"`
			ID    string          `json:"id"`
			Text  string          `json:"text"`
			Usage json.RawMessage `json:"usage"`
		} `json:"non_stream"`
		Stream struct {
			MS     float64         `json:"ms"`
			TTFTMS float64         `json:"ttft_ms"`
			Events int             `json:"events"`
			Deltas int             `json:"deltas"`
			Usage  json.RawMessage `json:"usage"`
		} `json:"stream"`
		Helper struct {
			Text string `json:"text"`
		} `json:"helper"`
	} `json:"responses,omitempty"`
}

// OpenAINodeAPIsCheck runs `node bench/node/openai-apis-check.mjs --base-url baseURL --model
// model` with the official OpenAI Node SDK. Its checks (NodeChecks; default embeddings and
// responses): "embeddings" (the SDK's default base64 request decoded by the SDK, compared
// with the float encoding: same non-zero numbers), "responses" (responses.create streamed
// and not, and the responses.stream helper: same text, event order and sequence numbers,
// usage), "completions" (completions.create streamed with include_usage and not: text,
// finish_reason, `data: [DONE]`, usage) and "models" (models.list; with NodeExpectModels,
// exactly those ids). opts may also give the API key. The error is non-nil when a check
// failed (then it holds the script's output), the Node packages are missing, or ctx ended
// first.
func OpenAINodeAPIsCheck(ctx context.Context, baseURL, model string, opts ...NodeOption) (NodeAPIsCheckResult, error) {
	var res NodeAPIsCheckResult
	err := runNodeCheck(ctx, "openai-apis-check.mjs", &res, &res.OK, &res.Error,
		appendNodeOptions([]string{"--base-url", baseURL, "--model", model}, opts)...)
	return res, err
}

// RunOpenAINodeAPIsCheck is OpenAINodeAPIsCheck with a 60 s deadline that fails t on any
// failure and logs the result line on success.
func RunOpenAINodeAPIsCheck(t testing.TB, baseURL, model string, opts ...NodeOption) NodeAPIsCheckResult {
	t.Helper()
	NodeDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := OpenAINodeAPIsCheck(ctx, baseURL, model, opts...)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after 60 s: %w", err)
		}
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	t.Logf("openai node apis check: %s", b)
	return res
}

// NodeErrorCheckResult is the JSON line that bench/node/openai-error-check.mjs prints.
type NodeErrorCheckResult struct {
	OK       bool   `json:"ok"`
	BaseURL  string `json:"base_url"`
	Endpoint string `json:"endpoint"`
	Error    string `json:"error,omitempty"`
	// Class is the most specific SDK error class the error is an instance of: "APIError" or
	// one of its typed subclasses ("AuthenticationError", "PermissionDeniedError",
	// "NotFoundError", "RateLimitError", …) for an HTTP answer, "APIConnectionError" when no
	// answer was read.
	Class   string `json:"class"`
	Status  int    `json:"status"`
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// RetryAfter is the Retry-After header of the answer as the SDK's error holds it ("": none).
	RetryAfter string `json:"retry_after"`
}

// OpenAINodeErrorCheck runs `node bench/node/openai-error-check.mjs --base-url baseURL --model
// model --prompt-bytes promptBytes`: one request through the official OpenAI Node SDK, without
// retries, whose prompt is promptBytes long, expected to fail with an HTTP answer. It is a chat
// completion unless opts pick another API (NodeEndpoint); opts may give the API key. The error
// is nil when the SDK threw an API error with a status (res then holds its class, status,
// type, code and Retry-After); it is non-nil when the SDK failed otherwise (a connection
// error: res.Class and res.Error say which), the request succeeded, the Node packages are
// missing, or ctx ended first.
func OpenAINodeErrorCheck(ctx context.Context, baseURL, model string, promptBytes int, opts ...NodeOption) (NodeErrorCheckResult, error) {
	var res NodeErrorCheckResult
	err := runNodeCheck(ctx, "openai-error-check.mjs", &res, &res.OK, &res.Error,
		appendNodeOptions([]string{"--base-url", baseURL, "--model", model, "--prompt-bytes", fmt.Sprint(promptBytes)}, opts)...)
	return res, err
}

// redactKey returns args with the value of --api-key hidden, for error messages.
func redactKey(args []string) []string {
	out := append([]string(nil), args...)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == "--api-key" {
			out[i+1] = "[redacted]"
		}
	}
	return out
}

// runNodeCheck runs `node bench/node/SCRIPT ARGS…`, whose last stdout line is a JSON result
// with "ok" and "error", decodes that line into res (ok and msg point into it) and returns
// an error holding the script's output and base URL when it failed.
func runNodeCheck(ctx context.Context, script string, res any, ok *bool, msg *string, args ...string) error {
	if _, err := nodeModules(); err != nil {
		return err
	}
	stdout, stderr, runErr := runNode(ctx, append([]string{filepath.Join(NodeBenchDir(), script)}, args...)...)
	args = redactKey(args)
	line := strings.TrimSpace(stdout.String())
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	jsonErr := json.Unmarshal([]byte(line), res)
	switch {
	case runErr != nil:
		return fmt.Errorf("%s %s: %v\nstdout: %s\nstderr: %s", script, strings.Join(args, " "), runErr, stdout.String(), stderr.String())
	case jsonErr != nil:
		return fmt.Errorf("%s %s: bad result line %q: %v\nstderr: %s", script, strings.Join(args, " "), line, jsonErr, stderr.String())
	case !*ok:
		return fmt.Errorf("%s %s: %s", script, strings.Join(args, " "), *msg)
	}
	return nil
}
