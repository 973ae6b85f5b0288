#!/usr/bin/env node
// openai-error-check.mjs: sends one request through the official OpenAI Node SDK and reports
// how the SDK failed: a gateway that refuses the request (a prompt over its body limit, a bad
// API key, an endpoint or model the key is not granted, a pool at capacity) must reach the
// caller as the SDK's typed API error carrying the gateway's status, error body and headers,
// not as a connection error.
//
// Usage:
//   node openai-error-check.mjs --base-url http://127.0.0.1:PORT/v1 --model NAME
//        [--endpoint chat|completions|embeddings|responses|models] [--prompt-bytes N]
//        [--api-key KEY] [--timeout-ms MS]
//
// The request is a chat completion by default; --endpoint picks another API (models is
// models.list, which sends no model). The prompt is N bytes long (default 2). Retries are off,
// so a refusal the SDK would retry (429, 5xx) shows as it came.
// It prints one JSON line on stdout:
//   {"ok":true,"class":"RateLimitError","status":429,"type":"rate_limit_error","code":"model_at_capacity","retry_after":"1","message":...}
// when the SDK threw an API error with an HTTP status (exit 0), and
//   {"ok":false,"class":"APIConnectionError","error":...}
// when it threw anything else or the request succeeded (exit 1). Bad flags exit 2.
// class is the most specific of the SDK's error classes the error is an instance of
// (AuthenticationError for 401, PermissionDeniedError 403, NotFoundError 404, RateLimitError
// 429, …; APIError for a status without its own class).
// The API key defaults to env OPENAI_API_KEY, else "sk-test".
import { parseArgs } from "node:util";
import OpenAI from "openai";

const endpoints = ["chat", "completions", "embeddings", "responses", "models"];
let args;
try {
    args = parseArgs({
        options: {
            "base-url": { type: "string" },
            model: { type: "string" },
            endpoint: { type: "string", default: "chat" },
            "prompt-bytes": { type: "string", default: "2" },
            "api-key": { type: "string" },
            "timeout-ms": { type: "string", default: "30000" },
        },
        strict: true,
    }).values;
} catch (e) {
    process.stderr.write(`openai-error-check: ${e.message}\n`);
    process.exit(2);
}
const promptBytes = Number(args["prompt-bytes"]);
if (!args["base-url"] || !args.model || !Number.isInteger(promptBytes) || promptBytes < 1 || !endpoints.includes(args.endpoint)) {
    process.stderr.write(`usage: node openai-error-check.mjs --base-url URL --model NAME [--endpoint ${endpoints.join("|")}] [--prompt-bytes N] [--api-key KEY] [--timeout-ms MS]\n`);
    process.exit(2);
}

const client = new OpenAI({
    baseURL: args["base-url"],
    apiKey: args["api-key"] ?? process.env.OPENAI_API_KEY ?? "sk-test",
    maxRetries: 0, // a connection error or a retryable refusal must show, not be retried away
    timeout: Number(args["timeout-ms"]),
});

const model = args.model;
const prompt = "a".repeat(promptBytes);
const requests = {
    chat: () => client.chat.completions.create({ model, messages: [{ role: "user", content: prompt }], max_tokens: 1 }),
    completions: () => client.completions.create({ model, prompt, max_tokens: 1 }),
    embeddings: () => client.embeddings.create({ model, input: prompt }),
    responses: () => client.responses.create({ model, input: prompt, max_output_tokens: 1 }),
    models: async () => {
        for await (const m of client.models.list()) void m;
    },
};

// Subclasses before the classes they extend, so the first match is the most specific.
const classes = [
    "BadRequestError", "AuthenticationError", "PermissionDeniedError", "NotFoundError", "ConflictError",
    "UnprocessableEntityError", "RateLimitError", "InternalServerError", "APIConnectionTimeoutError",
    "APIConnectionError", "APIUserAbortError", "APIError",
];
function sdkClass(e) {
    for (const name of classes) {
        if (typeof OpenAI[name] === "function" && e instanceof OpenAI[name]) return name;
    }
    return e?.constructor?.name ?? "Error";
}

const result = { ok: false, base_url: args["base-url"], endpoint: args.endpoint };
try {
    await requests[args.endpoint]();
    result.error = "the request succeeded";
} catch (e) {
    result.class = sdkClass(e);
    if (e instanceof OpenAI.APIError && typeof e.status === "number" && !(e instanceof OpenAI.APIConnectionError)) {
        result.ok = true;
        result.status = e.status;
        result.type = e.type ?? null;
        result.code = e.code ?? null;
        result.message = e.message;
        // The SDK's headers are a Headers object (a plain object before SDK v5).
        const h = e.headers;
        result.retry_after = (typeof h?.get === "function" ? h.get("retry-after") : h?.["retry-after"]) ?? null;
    } else {
        // undici nests the socket error (ECONNRESET, EPIPE) under "fetch failed".
        let msg = `${result.class}: ${e?.message}`;
        for (let c = e?.cause, i = 0; c && i < 4; c = c.cause, i++) {
            msg += ` <- ${c.code ? c.code + " " : ""}${c.message ?? c}`;
        }
        result.error = msg;
    }
}
process.stdout.write(JSON.stringify(result) + "\n");
process.exit(result.ok ? 0 : 1);
