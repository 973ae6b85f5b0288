package harness

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// UpstreamOptions configure the built-in basic upstream, the stand-in for
// llmsim when it is not installed. Durations of zero mean no delay.
type UpstreamOptions struct {
	TTFT   time.Duration // delay before the first token
	ITL    time.Duration // delay between tokens
	Tokens int           // tokens per completion (default 16)
}

// defaultUpstreamTokens is the completion length of the basic upstream.
const defaultUpstreamTokens = 16

// Upstream is a minimal OpenAI-compatible upstream: POST
// /v1/chat/completions answers a chat.completion JSON body, or, when the
// request body holds "stream":true, an SSE stream of chat.completion.chunk
// events (role chunk, Tokens content chunks, a finish chunk and
// "data: [DONE]"); GET /health answers 200. It serves HTTP/1.1 keep-alive
// with fasthttp.
type Upstream struct {
	srv *fasthttp.Server
	ln  net.Listener
}

// StartUpstream serves the basic upstream on ln until Close.
func StartUpstream(ln net.Listener, o UpstreamOptions) *Upstream {
	if o.Tokens <= 0 {
		o.Tokens = defaultUpstreamTokens
	}
	u := &Upstream{ln: ln}
	u.srv = &fasthttp.Server{
		Handler:                       func(ctx *fasthttp.RequestCtx) { serveUpstream(ctx, &o) },
		Name:                          "sluice-bench-upstream",
		NoDefaultDate:                 true,
		DisableHeaderNamesNormalizing: true,
	}
	go func() { _ = u.srv.Serve(ln) }()
	return u
}

// Addr is the upstream's listen address.
func (u *Upstream) Addr() string { return u.ln.Addr().String() }

// Close stops the upstream and closes its connections.
func (u *Upstream) Close() error { return u.srv.Shutdown() }

var (
	streamTrue  = []byte(`"stream":true`)
	streamTrue2 = []byte(`"stream": true`)
)

func serveUpstream(ctx *fasthttp.RequestCtx, o *UpstreamOptions) {
	switch string(ctx.Path()) {
	case "/health", "/api/version":
		ctx.SetBodyString(`{"status":"ok"}`)
		return
	case "/v1/chat/completions":
	default:
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetBodyString(`{"error":{"message":"not found","type":"invalid_request_error","param":null,"code":"not_found"}}`)
		return
	}
	body := ctx.PostBody()
	if !bytes.Contains(body, streamTrue) && !bytes.Contains(body, streamTrue2) {
		if d := o.TTFT + time.Duration(o.Tokens-1)*o.ITL; d > 0 {
			time.Sleep(d)
		}
		b := make([]byte, 0, 256+6*o.Tokens)
		b = append(b, `{"id":"chatcmpl-bench","object":"chat.completion","created":0,"model":"llmsim","choices":[{"index":0,"message":{"role":"assistant","content":"`...)
		for i := 0; i < o.Tokens; i++ {
			b = append(b, "tok "...)
		}
		b = append(b, `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":`...)
		b = strconv.AppendInt(b, int64(o.Tokens), 10)
		b = append(b, `,"total_tokens":`...)
		b = strconv.AppendInt(b, int64(o.Tokens+8), 10)
		b = append(b, "}}"...)
		ctx.SetContentType("application/json")
		ctx.SetBody(b)
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	opts := *o
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		const pre = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"llmsim","choices":[{"index":0,"delta":`
		if opts.TTFT > 0 {
			time.Sleep(opts.TTFT)
		}
		_, _ = w.WriteString(pre + `{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n")
		for i := 0; i < opts.Tokens; i++ {
			if i > 0 && opts.ITL > 0 {
				time.Sleep(opts.ITL)
			}
			_, _ = w.WriteString(pre + `{"content":"tok "},"finish_reason":null}]}` + "\n\n")
			if err := w.Flush(); err != nil {
				return
			}
		}
		_, _ = w.WriteString(pre + `{},"finish_reason":"stop"}]}` + "\n\n" + "data: [DONE]\n\n")
		_ = w.Flush()
	})
}
