#!/usr/bin/env node
// openai-apis-check.mjs: runs the official OpenAI Node SDK (npm `openai@6`) against an
// OpenAI-compatible base URL for the APIs beyond chat completions: embeddings, the Responses
// API, legacy completions and the model list.
//
// Usage:
//   node openai-apis-check.mjs --base-url http://127.0.0.1:PORT/v1 --model NAME
//        [--checks embeddings,responses,completions,models] [--expect-models ID,ID...]
//        [--api-key KEY] [--timeout-ms MS]
//
// The checks run in the order given (default: embeddings,responses).
// embeddings: embeddings.create without encoding_format (the SDK then asks for base64 and
//   decodes little-endian float32 itself) and with encoding_format "float"; checks that the
//   SDK did send "base64", that every vector is non-empty, finite and not all zeros, and that
//   both encodings give exactly the same numbers.
// responses: responses.create non-streaming, responses.create with stream: true, and the
//   responses.stream helper (which rebuilds the response from the events); checks the output
//   text is non-empty and the same all three ways, the stream starts with response.created and
//   ends with response.completed, sequence numbers count up from 0, one delta per output
//   token, and usage is consistent (total = input + output).
// completions: completions.create non-streaming and streaming with
//   stream_options.include_usage; checks the text is non-empty, finish_reason is set, the
//   stream ended at a `data: [DONE]` line on the wire with a usage chunk, and usage is
//   consistent (total = prompt + completion > 0).
// models: models.list, iterated as the SDK pages it; checks every entry is a model object and,
//   with --expect-models, that the ids are exactly those (in any order): what a gateway's
//   caller may use.
// The API key defaults to env OPENAI_API_KEY, else "sk-test".
// On success it prints one JSON line {"ok":true,...} on stdout and exits 0; on any failure it
// prints {"ok":false,"error":...} on stdout, the error on stderr, and exits 1. Bad flags exit 2.
import { parseArgs } from "node:util";
import OpenAI from "openai";

let args;
try {
    args = parseArgs({
        options: {
            "base-url": { type: "string" },
            model: { type: "string" },
            checks: { type: "string", default: "embeddings,responses" },
            "expect-models": { type: "string" },
            "api-key": { type: "string" },
            "timeout-ms": { type: "string", default: "30000" },
        },
        strict: true,
    }).values;
} catch (e) {
    process.stderr.write(`openai-apis-check: ${e.message}\n`);
    process.exit(2);
}
const known = ["embeddings", "responses", "completions", "models"];
const checks = [...new Set(args.checks.split(",").filter(Boolean))];
if (!args["base-url"] || !args.model || checks.some((c) => !known.includes(c))) {
    process.stderr.write(`usage: node openai-apis-check.mjs --base-url URL --model NAME [--checks ${known.join(",")}] [--expect-models ID,ID...] [--api-key KEY] [--timeout-ms MS]\n`);
    process.exit(2);
}
const expectModels = args["expect-models"]?.split(",").filter(Boolean);

class CheckError extends Error {}
function check(cond, msg) {
    if (!cond) throw new CheckError(msg);
}

// The request bodies sent, to see what the SDK asked for on its own (encoding_format).
const sent = [];
// The SDK ends a stream quietly at EOF as well as at `data: [DONE]`; to tell a clean end from a
// truncated one, the SSE responses are watched for a `data: [DONE]` line (WHATWG SSE: a field
// line; the space after the colon is optional). doneSeen counts the streams that carried one.
let doneSeen = 0;
const doneLine = /(?:^|[\r\n])data: ?\[DONE\]/;
async function recordingFetch(url, init) {
    if (typeof init?.body === "string") sent.push({ url: String(url), body: JSON.parse(init.body) });
    const res = await fetch(url, init);
    if (!res.body || !(res.headers.get("content-type") ?? "").startsWith("text/event-stream")) return res;
    const dec = new TextDecoder();
    let tail = "\n", seen = false;
    const probe = new TransformStream({
        transform(chunk, ctl) {
            const s = tail + dec.decode(chunk, { stream: true });
            if (!seen && doneLine.test(s)) {
                seen = true;
                doneSeen++;
            }
            tail = s.slice(-16);
            ctl.enqueue(chunk);
        },
    });
    return new Response(res.body.pipeThrough(probe), { status: res.status, statusText: res.statusText, headers: res.headers });
}

const client = new OpenAI({
    fetch: recordingFetch,
    baseURL: args["base-url"],
    apiKey: args["api-key"] ?? process.env.OPENAI_API_KEY ?? "sk-test",
    maxRetries: 0,
    timeout: Number(args["timeout-ms"]),
});
const model = args.model;

async function checkEmbeddings() {
    const input = ["The quick brown fox.", "jumped over the lazy dog"];
    const before = sent.length;
    const dflt = await client.embeddings.create({ model, input });
    const asked = sent[before]?.body?.encoding_format;
    check(asked === "base64", `the SDK asked for encoding_format ${JSON.stringify(asked)}, expected it to default to "base64"`);
    const flt = await client.embeddings.create({ model, input, encoding_format: "float" });
    check(dflt.data.length === input.length && flt.data.length === input.length, `${dflt.data.length} and ${flt.data.length} embeddings for ${input.length} inputs`);
    let dims = 0;
    for (let i = 0; i < input.length; i++) {
        const a = dflt.data[i].embedding, b = flt.data[i].embedding;
        check(Array.isArray(a) && a.length > 0, `default (base64) embedding ${i} is not a non-empty array`);
        check(a.every(Number.isFinite), `default (base64) embedding ${i} has a non-finite value`);
        check(a.some((v) => v !== 0), `default (base64) embedding ${i} is all zeros`);
        check(a.length === b.length, `embedding ${i}: ${a.length} values from base64, ${b.length} as floats`);
        for (let j = 0; j < a.length; j++) {
            check(a[j] === b[j], `embedding ${i} value ${j}: ${a[j]} from base64, ${b[j]} as floats`);
        }
        dims = a.length;
    }
    check(dflt.usage?.prompt_tokens > 0, `usage.prompt_tokens ${dflt.usage?.prompt_tokens}`);
    return { count: dflt.data.length, dims, default_encoding: asked, first: dflt.data[0].embedding.slice(0, 3) };
}

function checkUsage(u, where) {
    check(u != null, `${where}: usage missing`);
    check(Number.isInteger(u.input_tokens) && u.input_tokens > 0, `${where}: usage.input_tokens ${u.input_tokens}`);
    check(Number.isInteger(u.output_tokens) && u.output_tokens > 0, `${where}: usage.output_tokens ${u.output_tokens}`);
    check(u.total_tokens === u.input_tokens + u.output_tokens, `${where}: usage.total_tokens ${u.total_tokens} != input + output`);
    check(Number.isInteger(u.input_tokens_details?.cached_tokens), `${where}: usage.input_tokens_details.cached_tokens missing`);
}

async function checkResponses() {
    const params = { model, instructions: "You are a test.", input: "Say something." };
    // 1. Non-streaming.
    let t0 = performance.now();
    const r = await client.responses.create(params);
    check(r.object === "response", `non-stream: object ${JSON.stringify(r.object)}`);
    check(r.status === "completed", `non-stream: status ${JSON.stringify(r.status)}`);
    check(typeof r.output_text === "string" && r.output_text.length > 0, "non-stream: empty output_text");
    checkUsage(r.usage, "non-stream");
    const nonStream = { ms: +(performance.now() - t0).toFixed(1), id: r.id, text: r.output_text, usage: r.usage };

    // 2. Streaming events.
    t0 = performance.now();
    const stream = await client.responses.create({ ...params, stream: true });
    const types = [];
    let text = "", deltas = 0, seq = 0, completed = null, ttft = null;
    for await (const ev of stream) {
        check(ev.sequence_number === seq, `stream: event ${types.length} (${ev.type}) has sequence_number ${ev.sequence_number}, want ${seq}`);
        seq++;
        types.push(ev.type);
        if (ev.type === "response.output_text.delta") {
            if (ttft === null) ttft = performance.now() - t0;
            text += ev.delta;
            deltas++;
        }
        if (ev.type === "response.completed") completed = ev.response;
    }
    check(types[0] === "response.created", `stream: first event ${types[0]}`);
    check(types.at(-1) === "response.completed", `stream: last event ${types.at(-1)}`);
    check(completed != null, "stream: no response.completed");
    check(text === r.output_text, `stream: text ${JSON.stringify(text)} differs from the non-streamed ${JSON.stringify(r.output_text)}`);
    checkUsage(completed.usage, "stream");
    check(completed.usage.output_tokens === deltas, `stream: ${deltas} deltas for ${completed.usage.output_tokens} output tokens`);
    const streamed = { ms: +(performance.now() - t0).toFixed(1), ttft_ms: +(ttft ?? 0).toFixed(1), events: types.length, deltas, usage: completed.usage };

    // 3. The stream helper accumulates the events into the final response.
    const helper = client.responses.stream(params);
    let helperDeltas = "";
    helper.on("response.output_text.delta", (ev) => { helperDeltas += ev.delta; });
    const final = await helper.finalResponse();
    check(final.output_text === r.output_text, `stream helper: final output_text ${JSON.stringify(final.output_text)} differs`);
    check(helperDeltas === r.output_text, "stream helper: deltas differ from the output");
    check(final.status === "completed", `stream helper: status ${final.status}`);
    return { non_stream: nonStream, stream: streamed, helper: { text: final.output_text } };
}

function checkCompletionUsage(u, where) {
    check(u != null, `${where}: usage missing`);
    check(Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, `${where}: usage.prompt_tokens ${u.prompt_tokens}`);
    check(Number.isInteger(u.completion_tokens) && u.completion_tokens > 0, `${where}: usage.completion_tokens ${u.completion_tokens}`);
    check(u.total_tokens === u.prompt_tokens + u.completion_tokens, `${where}: usage.total_tokens ${u.total_tokens} != prompt + completion`);
}

async function checkCompletions() {
    const params = { model, prompt: "Say something.", max_tokens: 16 };
    // 1. Non-streaming.
    let t0 = performance.now();
    const c = await client.completions.create(params);
    check(c.object === "text_completion", `non-stream: object ${JSON.stringify(c.object)}`);
    check(c.choices?.length === 1, `non-stream: ${c.choices?.length} choices`);
    const text = c.choices[0].text;
    check(typeof text === "string" && text.length > 0, "non-stream: empty text");
    check(c.choices[0].finish_reason != null, "non-stream: finish_reason missing");
    checkCompletionUsage(c.usage, "non-stream");
    const nonStream = { ms: +(performance.now() - t0).toFixed(1), text_chars: text.length, finish_reason: c.choices[0].finish_reason, usage: c.usage };

    // 2. Streaming with include_usage.
    t0 = performance.now();
    const before = doneSeen;
    const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
    let streamed = "", chunks = 0, finish = null, usage = null;
    for await (const chunk of stream) {
        chunks++;
        check(chunk.object === "text_completion", `stream: chunk object ${JSON.stringify(chunk.object)}`);
        for (const ch of chunk.choices ?? []) {
            if (typeof ch.text === "string") streamed += ch.text;
            if (ch.finish_reason != null) finish = ch.finish_reason;
        }
        if (chunk.usage != null) usage = chunk.usage;
    }
    check(doneSeen > before, "stream: ended without data: [DONE]");
    check(streamed.length > 0, "stream: empty text");
    check(finish != null, "stream: no chunk with finish_reason");
    checkCompletionUsage(usage, "stream");
    return { non_stream: nonStream, stream: { ms: +(performance.now() - t0).toFixed(1), chunks, text_chars: streamed.length, finish_reason: finish, usage } };
}

async function checkModels() {
    const ids = [];
    for await (const m of client.models.list()) {
        check(m.object === "model", `model ${JSON.stringify(m.id)}: object ${JSON.stringify(m.object)}`);
        check(typeof m.id === "string" && m.id.length > 0, `a model without an id: ${JSON.stringify(m)}`);
        ids.push(m.id);
    }
    check(ids.length > 0, "models.list: no models");
    if (expectModels) {
        const got = [...ids].sort(), want = [...expectModels].sort();
        check(JSON.stringify(got) === JSON.stringify(want), `models.list: ids ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
    }
    return { ids };
}

const run = { embeddings: checkEmbeddings, responses: checkResponses, completions: checkCompletions, models: checkModels };
const result = { ok: false, base_url: args["base-url"], model };
try {
    for (const c of checks) result[c] = await run[c]();
    result.ok = true;
    process.stdout.write(JSON.stringify(result) + "\n");
    process.exit(0);
} catch (e) {
    result.error = e instanceof OpenAI.APIError
        ? `${e.constructor.name}: status ${e.status}: ${e.message}`
        : `${e.constructor?.name ?? "Error"}: ${e.message}`;
    process.stdout.write(JSON.stringify(result) + "\n");
    process.stderr.write(`openai-apis-check: ${e.stack || e}\n`);
    process.exit(1);
}
