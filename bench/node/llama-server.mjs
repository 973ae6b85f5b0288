#!/usr/bin/env node
// llama-server.mjs: a small OpenAI-compatible HTTP server around node-llama-cpp, the real
// inference engine behind sluice's end-to-end tests (issue 2, "a real inference engine").
//
// Usage:
//   node llama-server.mjs --model PATH --listen HOST:PORT
//        [--model-name NAME] [--parallel N] [--ctx-size TOKENS] [--default-max-tokens TOKENS]
//        [--threads N]
//
// Endpoints (OpenAI Chat Completions API shapes):
//   POST /v1/chat/completions  stream and non-stream; stream_options.include_usage; max_tokens
//                              (or max_completion_tokens); temperature, top_p, seed.
//   GET  /v1/models            the one loaded model.
//   GET  /health               {"status":"ok"} once the model is loaded.
//
// Behaviour:
// - The model is loaded once at start; "listening on HOST:PORT" is printed on stdout when the
//   server accepts requests (a test waits for that line or for /health).
// - CPU only, prebuilt binary only: getLlama({gpu: false, build: "never"}); one thread by default
//   (two threads on a 2-core machine run 2-5x slower, see shared/fixtures/README.md).
// - Concurrency: one llama context with --parallel sequences (default 1). A request takes a free
//   sequence or waits in a FIFO queue for one; so with the default, requests are served one at a
//   time, in arrival order. A client that disconnects while queued leaves the queue.
// - Streaming: text/event-stream, one `data: {chat.completion.chunk}` event written per generated
//   token (node writes each event to the socket at once; Nagle is off), then a final chunk with
//   finish_reason, then (with stream_options.include_usage) a usage chunk with empty choices, then
//   `data: [DONE]`. As OpenAI does, with include_usage every chunk carries "usage": null but the last.
// - Cancellation: a client that disconnects (before or during generation) aborts generation at
//   the next token; the sequence is then released for the next request.
// - Errors: bad input gets an OpenAI-style JSON error {"error":{"message","type","param","code"}}
//   with 400 (413 for a body over 1 MiB, 404/405 for unknown paths and methods).
// - A slow reader: node buffers the (bounded, max_tokens) output; generation does not wait.
// - SIGTERM/SIGINT end the process at once (status 143/130 once the model is loaded).
import http from "node:http";
import path from "node:path";
import crypto from "node:crypto";
import { parseArgs } from "node:util";

// SIGTERM/SIGINT: abort running generations and exit at once (a killed generation needs no
// cleanup). Registered before node-llama-cpp is loaded. Measured: once a model is loaded the
// process still ends by the signal itself (status 143 for SIGTERM) without this handler running;
// callers should treat 143 as a normal stop.
const inFlight = new Set();
let server = null;
function shutdown(sig) {
    process.stderr.write(`llama-server: ${sig}, exiting\n`);
    for (const a of inFlight) a.abort(new Error("server shutting down"));
    server?.close();
    process.exit(0);
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
const { getLlama, LlamaChat, LlamaLogLevel } = await import("node-llama-cpp");

const MAX_BODY_BYTES = 1 << 20;

function usage(msg) {
    process.stderr.write(`llama-server: ${msg}\n` +
        "usage: node llama-server.mjs --model PATH --listen HOST:PORT [--model-name NAME] " +
        "[--parallel N] [--ctx-size TOKENS] [--default-max-tokens TOKENS] [--threads N]\n");
    process.exit(2);
}

function positiveInt(name, s) {
    const n = Number(s);
    if (!Number.isInteger(n) || n < 1) usage(`--${name} must be a positive integer, got ${JSON.stringify(s)}`);
    return n;
}

let args;
try {
    args = parseArgs({
        options: {
            model: { type: "string" },
            listen: { type: "string" },
            "model-name": { type: "string" },
            parallel: { type: "string", default: "1" },
            "ctx-size": { type: "string", default: "2048" },
            "default-max-tokens": { type: "string", default: "256" },
            threads: { type: "string", default: "1" },
        },
        strict: true,
    }).values;
} catch (e) {
    usage(e.message);
}
if (!args.model) usage("--model is required");
if (!args.listen) usage("--listen is required");
const listenMatch = /^(.*):(\d+)$/.exec(args.listen);
if (!listenMatch) usage(`--listen must be HOST:PORT, got ${JSON.stringify(args.listen)}`);
const listenHost = listenMatch[1].replace(/^\[(.*)\]$/, "$1") || "127.0.0.1";
const listenPort = Number(listenMatch[2]);
const parallel = positiveInt("parallel", args.parallel);
const ctxSize = positiveInt("ctx-size", args["ctx-size"]);
const defaultMaxTokens = positiveInt("default-max-tokens", args["default-max-tokens"]);
const threads = positiveInt("threads", args.threads);
const modelName = args["model-name"] || path.basename(args.model).replace(/\.gguf$/i, "");

// ---- engine -------------------------------------------------------------------------------

const llama = await getLlama({ gpu: false, build: "never", maxThreads: threads, logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: args.model, gpuLayers: 0 });
const context = await model.createContext({ sequences: parallel, contextSize: ctxSize, threads });
const created = Math.floor(Date.now() / 1000);

/** Free sequences and the FIFO of waiters ({resolve, reject}) for one. */
const freeSequences = [];
for (let i = 0; i < parallel; i++) freeSequences.push(context.getSequence());
const waiters = [];

/** acquireSequence resolves with a free sequence; rejects with signal.reason when aborted first. */
function acquireSequence(signal) {
    if (signal.aborted) return Promise.reject(signal.reason);
    if (freeSequences.length > 0) return Promise.resolve(freeSequences.pop());
    return new Promise((resolve, reject) => {
        const w = { resolve, reject };
        waiters.push(w);
        signal.addEventListener("abort", () => {
            const i = waiters.indexOf(w);
            if (i >= 0) {
                waiters.splice(i, 1);
                reject(signal.reason);
            }
        }, { once: true });
    });
}

function releaseSequence(seq) {
    const w = waiters.shift();
    if (w) w.resolve(seq);
    else freeSequences.push(seq);
}

// ---- request validation -------------------------------------------------------------------

class APIError extends Error {
    constructor(status, message, param = null, code = null, type = "invalid_request_error") {
        super(message);
        this.status = status;
        this.param = param;
        this.code = code;
        this.type = type;
    }
}

const bad = (message, param = null, code = null) => new APIError(400, message, param, code);

/** messageText returns the text of an OpenAI message content: a string or an array of parts. */
function messageText(content, i) {
    if (typeof content === "string") return content;
    if (content == null) return "";
    if (!Array.isArray(content)) throw bad(`messages[${i}].content must be a string or an array of content parts`, `messages[${i}].content`);
    let s = "";
    content.forEach((part, j) => {
        if (part === null || typeof part !== "object" || typeof part.type !== "string")
            throw bad(`messages[${i}].content[${j}] must be an object with a type`, `messages[${i}].content[${j}]`);
        if (part.type !== "text") throw bad(`messages[${i}].content[${j}].type ${JSON.stringify(part.type)} is not supported (text only)`, `messages[${i}].content[${j}].type`);
        if (typeof part.text !== "string") throw bad(`messages[${i}].content[${j}].text must be a string`, `messages[${i}].content[${j}].text`);
        s += part.text;
    });
    return s;
}

function optionalNumber(body, key, min, max) {
    const v = body[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max)
        throw bad(`${key} must be a number between ${min} and ${max}`, key);
    return v;
}

function optionalInt(body, key, min) {
    const v = body[key];
    if (v === undefined || v === null) return undefined;
    if (!Number.isInteger(v) || v < min) throw bad(`${key} must be an integer >= ${min}`, key);
    return v;
}

/** parseChatRequest validates an OpenAI chat completion body; throws APIError(400). */
function parseChatRequest(raw) {
    let body;
    try {
        body = JSON.parse(raw);
    } catch (e) {
        throw bad(`request body is not valid JSON: ${e.message}`);
    }
    if (body === null || typeof body !== "object" || Array.isArray(body)) throw bad("request body must be a JSON object");
    if (typeof body.model !== "string" || body.model === "") throw bad("model is required (a non-empty string)", "model");
    if (!Array.isArray(body.messages) || body.messages.length === 0) throw bad("messages must be a non-empty array", "messages");
    const history = [];
    body.messages.forEach((m, i) => {
        if (m === null || typeof m !== "object" || Array.isArray(m)) throw bad(`messages[${i}] must be an object`, `messages[${i}]`);
        const text = messageText(m.content, i);
        switch (m.role) {
            case "system":
            case "developer":
                history.push({ type: "system", text });
                break;
            case "user":
            case "tool":
                history.push({ type: "user", text });
                break;
            case "assistant":
                history.push({ type: "model", response: text === "" ? [] : [text] });
                break;
            default:
                throw bad(`messages[${i}].role must be one of system, developer, user, assistant, tool`, `messages[${i}].role`);
        }
    });
    history.push({ type: "model", response: [] });
    if (body.stream !== undefined && body.stream !== null && typeof body.stream !== "boolean") throw bad("stream must be a boolean", "stream");
    const stream = body.stream === true;
    let includeUsage = false;
    if (body.stream_options !== undefined && body.stream_options !== null) {
        if (typeof body.stream_options !== "object" || Array.isArray(body.stream_options)) throw bad("stream_options must be an object", "stream_options");
        if (!stream) throw bad("stream_options is only allowed when stream is true", "stream_options");
        const iu = body.stream_options.include_usage;
        if (iu !== undefined && iu !== null && typeof iu !== "boolean") throw bad("stream_options.include_usage must be a boolean", "stream_options.include_usage");
        includeUsage = iu === true;
    }
    const maxTokens = optionalInt(body, "max_completion_tokens", 1) ?? optionalInt(body, "max_tokens", 1);
    const n = optionalInt(body, "n", 1);
    if (n !== undefined && n !== 1) throw bad("n other than 1 is not supported", "n");
    const temperature = optionalNumber(body, "temperature", 0, 2);
    const topP = optionalNumber(body, "top_p", 0, 1);
    const seed = optionalInt(body, "seed", 0);
    return { model: body.model, history, stream, includeUsage, maxTokens, temperature, topP, seed };
}

// ---- HTTP ---------------------------------------------------------------------------------

function sendJSON(res, status, obj) {
    const data = JSON.stringify(obj);
    res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) });
    res.end(data);
}

function sendError(res, err) {
    if (res.headersSent) {
        res.destroy();
        return;
    }
    const status = err instanceof APIError ? err.status : 500;
    const type = err instanceof APIError ? err.type : "server_error";
    sendJSON(res, status, { error: { message: err.message, type, param: err.param ?? null, code: err.code ?? null } });
}

function readBody(req) {
    return new Promise((resolve, reject) => {
        const chunks = [];
        let size = 0;
        req.on("data", (c) => {
            size += c.length;
            if (size > MAX_BODY_BYTES) {
                reject(new APIError(413, `request body over ${MAX_BODY_BYTES} bytes`, null, "request_too_large"));
                req.destroy();
                return;
            }
            chunks.push(c);
        });
        req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
        req.on("error", reject);
    });
}

async function chatCompletions(req, res) {
    const chatReq = parseChatRequest(await readBody(req));
    const abort = new AbortController();
    inFlight.add(abort);
    // The client went away (before or during generation): stop generating at the next token.
    res.on("close", () => {
        if (!res.writableFinished) abort.abort(new Error("client disconnected"));
    });
    let seq;
    try {
        seq = await acquireSequence(abort.signal);
    } catch {
        inFlight.delete(abort);
        return; // disconnected while queued
    }
    const chat = new LlamaChat({ contextSequence: seq, autoDisposeSequence: false });
    try {
        const promptTokens = chat.chatWrapper.generateContextState({ chatHistory: chatReq.history })
            .contextText.tokenize(model.tokenizer).length;
        const room = seq.contextSize - promptTokens;
        if (room < 1)
            throw bad(`the prompt is ${promptTokens} tokens; this model's context is ${seq.contextSize} tokens`, "messages", "context_length_exceeded");
        if (chatReq.maxTokens !== undefined && chatReq.maxTokens > room)
            throw bad(`max_tokens ${chatReq.maxTokens} plus the prompt's ${promptTokens} tokens exceed the context of ${seq.contextSize} tokens`, "max_tokens", "context_length_exceeded");
        const maxTokens = chatReq.maxTokens ?? Math.min(defaultMaxTokens, room);
        const id = "chatcmpl-" + crypto.randomBytes(12).toString("hex");
        const now = Math.floor(Date.now() / 1000);
        let completionTokens = 0;
        const usage = () => ({ prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens });
        const chunk = (delta, finishReason) => {
            const c = {
                id, object: "chat.completion.chunk", created: now, model: chatReq.model, system_fingerprint: null,
                choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
            };
            if (chatReq.includeUsage) c.usage = null;
            return "data: " + JSON.stringify(c) + "\n\n";
        };
        if (chatReq.stream) {
            res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no" });
            res.write(chunk({ role: "assistant", content: "" }, null));
        }
        let text = "";
        const result = await chat.generateResponse(chatReq.history, {
            maxTokens,
            temperature: chatReq.temperature,
            topP: chatReq.topP,
            seed: chatReq.seed,
            signal: abort.signal,
            stopOnAbortSignal: true,
            onToken: (tokens) => { completionTokens += tokens.length; },
            onTextChunk: (t) => {
                if (t === "") return;
                text += t;
                if (chatReq.stream && !abort.signal.aborted) res.write(chunk({ content: t }, null));
            },
        });
        if (abort.signal.aborted) return;
        const finishReason = result.metadata.stopReason === "maxTokens" ? "length" : "stop";
        if (chatReq.stream) {
            res.write(chunk({}, finishReason));
            if (chatReq.includeUsage) {
                res.write("data: " + JSON.stringify({
                    id, object: "chat.completion.chunk", created: now, model: chatReq.model, system_fingerprint: null,
                    choices: [], usage: usage(),
                }) + "\n\n");
            }
            res.end("data: [DONE]\n\n");
        } else {
            sendJSON(res, 200, {
                id, object: "chat.completion", created: now, model: chatReq.model, system_fingerprint: null,
                choices: [{ index: 0, message: { role: "assistant", content: text, refusal: null }, logprobs: null, finish_reason: finishReason }],
                usage: usage(),
            });
        }
    } finally {
        chat.dispose({ disposeSequence: false });
        releaseSequence(seq);
        inFlight.delete(abort);
    }
}

async function handle(req, res) {
    const url = new URL(req.url, "http://localhost");
    const route = (method, p) => url.pathname === p && (req.method === method || (method === "GET" && req.method === "HEAD"));
    if (route("POST", "/v1/chat/completions")) return chatCompletions(req, res);
    if (route("GET", "/v1/models"))
        return sendJSON(res, 200, { object: "list", data: [{ id: modelName, object: "model", created, owned_by: "node-llama-cpp" }] });
    if (route("GET", "/health")) return sendJSON(res, 200, { status: "ok" });
    if (["/v1/chat/completions", "/v1/models", "/health"].includes(url.pathname))
        throw new APIError(405, `method ${req.method} is not allowed on ${url.pathname}`, null, "method_not_allowed");
    throw new APIError(404, `no route for ${req.method} ${url.pathname}`, null, "not_found");
}

server = http.createServer({ noDelay: true, keepAlive: true }, (req, res) => {
    handle(req, res).catch((err) => {
        if (!(err instanceof APIError)) process.stderr.write(`llama-server: ${err.stack || err}\n`);
        sendError(res, err);
    });
});
server.on("clientError", (err, socket) => {
    if (socket.writable) socket.end("HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    else socket.destroy();
});


server.listen(listenPort, listenHost, () => {
    const a = server.address();
    const host = a.family === "IPv6" ? `[${a.address}]` : a.address;
    process.stdout.write(`listening on ${host}:${a.port}\n`);
});
