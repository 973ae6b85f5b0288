#!/usr/bin/env node
// openai-check.mjs: runs the official OpenAI Node SDK (npm `openai@6`) against an
// OpenAI-compatible base URL (sluice, llmsim or llama-server.mjs) - issue 2, "real clients".
//
// Usage:
//   node openai-check.mjs --base-url http://127.0.0.1:PORT/v1 --model NAME
//        [--api-key KEY] [--max-tokens TOKENS] [--timeout-ms MS]
//
// It runs one non-streaming and one streaming chat completion (stream_options.include_usage)
// and checks: the content is non-empty, finish_reason is set, the stream ended normally (no error
// from the SDK, and a `data: [DONE]` event on the wire), usage is present with
// completion_tokens > 0 and total = prompt + completion.
// On success it prints one JSON line {"ok":true,...} on stdout and exits 0; on any failure it
// prints {"ok":false,"error":...} on stdout, the error on stderr, and exits 1. Bad flags exit 2.
// The API key defaults to env OPENAI_API_KEY, else "sk-test" (the SDK requires one).
import { parseArgs } from "node:util";
import OpenAI from "openai";

let args;
try {
    args = parseArgs({
        options: {
            "base-url": { type: "string" },
            model: { type: "string" },
            "api-key": { type: "string" },
            "max-tokens": { type: "string", default: "16" },
            "timeout-ms": { type: "string", default: "30000" },
        },
        strict: true,
    }).values;
} catch (e) {
    process.stderr.write(`openai-check: ${e.message}\n`);
    process.exit(2);
}
if (!args["base-url"] || !args.model) {
    process.stderr.write("usage: node openai-check.mjs --base-url URL --model NAME [--api-key KEY] [--max-tokens N] [--timeout-ms MS]\n");
    process.exit(2);
}
const maxTokens = Number(args["max-tokens"]);
const timeoutMs = Number(args["timeout-ms"]);

class CheckError extends Error {}
function check(cond, msg) {
    if (!cond) throw new CheckError(msg);
}

function checkUsage(usage, where) {
    check(usage != null, `${where}: usage missing`);
    check(Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens > 0, `${where}: usage.prompt_tokens ${usage.prompt_tokens} not a positive integer`);
    check(Number.isInteger(usage.completion_tokens) && usage.completion_tokens > 0, `${where}: usage.completion_tokens ${usage.completion_tokens} not a positive integer`);
    check(usage.total_tokens === usage.prompt_tokens + usage.completion_tokens, `${where}: usage.total_tokens ${usage.total_tokens} != prompt + completion`);
}

// The SDK ends a stream quietly at EOF as well as at `data: [DONE]`; to tell a clean end from a
// truncated one, this fetch wrapper watches the raw SSE bytes for a `data: [DONE]` line (WHATWG SSE:
// a field line; the space after the colon is optional).
let sawDone = false;
const doneLine = /(?:^|[\r\n])data: ?\[DONE\]/;
async function fetchWithDoneProbe(url, init) {
    const res = await fetch(url, init);
    if (!res.body || !(res.headers.get("content-type") ?? "").startsWith("text/event-stream")) return res;
    const dec = new TextDecoder();
    let tail = "", first = true;
    const probe = new TransformStream({
        transform(chunk, ctl) {
            const s = (first ? "\n" : tail) + dec.decode(chunk, { stream: true });
            first = false;
            if (doneLine.test(s)) sawDone = true;
            tail = s.slice(-16);
            ctl.enqueue(chunk);
        },
    });
    return new Response(res.body.pipeThrough(probe), { status: res.status, statusText: res.statusText, headers: res.headers });
}

const client = new OpenAI({
    fetch: fetchWithDoneProbe,
    baseURL: args["base-url"],
    apiKey: args["api-key"] ?? process.env.OPENAI_API_KEY ?? "sk-test",
    maxRetries: 0,
    timeout: timeoutMs,
});
const messages = [
    { role: "system", content: "You are a test." },
    { role: "user", content: "Say something." },
];

const result = { ok: false, base_url: args["base-url"], model: args.model };
try {
    // 1. Non-streaming.
    let t0 = performance.now();
    const c = await client.chat.completions.create({ model: args.model, messages, max_tokens: maxTokens });
    check(c.object === "chat.completion", `non-stream: object ${JSON.stringify(c.object)}`);
    check(Array.isArray(c.choices) && c.choices.length === 1, `non-stream: ${c.choices?.length} choices`);
    const content = c.choices[0].message?.content;
    check(typeof content === "string" && content.length > 0, "non-stream: empty content");
    check(c.choices[0].finish_reason != null, "non-stream: finish_reason missing");
    checkUsage(c.usage, "non-stream");
    result.non_stream = {
        ms: +(performance.now() - t0).toFixed(1),
        content_chars: content.length,
        finish_reason: c.choices[0].finish_reason,
        usage: c.usage,
    };

    // 2. Streaming with include_usage.
    t0 = performance.now();
    const stream = await client.chat.completions.create({
        model: args.model, messages, max_tokens: maxTokens, stream: true, stream_options: { include_usage: true },
    });
    let text = "", chunks = 0, contentChunks = 0, ttft = null, finish = null, usage = null;
    for await (const chunk of stream) {
        chunks++;
        check(chunk.object === "chat.completion.chunk", `stream: chunk object ${JSON.stringify(chunk.object)}`);
        for (const ch of chunk.choices ?? []) {
            const d = ch.delta?.content;
            if (typeof d === "string" && d.length > 0) {
                if (ttft === null) ttft = performance.now() - t0;
                text += d;
                contentChunks++;
            }
            if (ch.finish_reason != null) finish = ch.finish_reason;
        }
        if (chunk.usage != null) usage = chunk.usage;
    }
    // The iterator returned without throwing and the raw stream carried `data: [DONE]`.
    check(sawDone, "stream: ended without data: [DONE]");
    check(text.length > 0, "stream: empty content");
    check(finish != null, "stream: no chunk with finish_reason");
    checkUsage(usage, "stream");
    check(usage.completion_tokens >= contentChunks, `stream: usage.completion_tokens ${usage.completion_tokens} < ${contentChunks} content chunks`);
    result.stream = {
        ms: +(performance.now() - t0).toFixed(1),
        ttft_ms: +ttft.toFixed(1),
        chunks,
        content_chunks: contentChunks,
        content_chars: text.length,
        finish_reason: finish,
        usage,
    };
    result.ok = true;
    process.stdout.write(JSON.stringify(result) + "\n");
    process.exit(0);
} catch (e) {
    result.error = e instanceof OpenAI.APIError
        ? `${e.constructor.name}: status ${e.status}: ${e.message}`
        : `${e.constructor?.name ?? "Error"}: ${e.message}`;
    process.stdout.write(JSON.stringify(result) + "\n");
    process.stderr.write(`openai-check: ${e.stack || e}\n`);
    process.exit(1);
}
