#!/usr/bin/env node
// openai-error-check.mjs: sends one chat completion whose prompt is PROMPT_BYTES long through the
// official OpenAI Node SDK and reports how the SDK failed: for a gateway that refuses the
// request (a prompt over its body limit), the SDK must throw its typed API error carrying the
// gateway's status and error body, not a connection error.
//
// Usage:
//   node openai-error-check.mjs --base-url http://127.0.0.1:PORT/v1 --model NAME --prompt-bytes N
//        [--timeout-ms MS]
//
// It prints one JSON line on stdout:
//   {"ok":true,"class":"APIError","status":413,"type":"invalid_request_error","code":"request_too_large","message":...}
// when the SDK threw an API error with an HTTP status (exit 0), and
//   {"ok":false,"class":"APIConnectionError","error":...}
// when it threw anything else or the request succeeded (exit 1). Bad flags exit 2.
import { parseArgs } from "node:util";
import OpenAI from "openai";

let args;
try {
    args = parseArgs({
        options: {
            "base-url": { type: "string" },
            model: { type: "string" },
            "prompt-bytes": { type: "string" },
            "timeout-ms": { type: "string", default: "30000" },
        },
        strict: true,
    }).values;
} catch (e) {
    process.stderr.write(`openai-error-check: ${e.message}\n`);
    process.exit(2);
}
const promptBytes = Number(args["prompt-bytes"]);
if (!args["base-url"] || !args.model || !Number.isInteger(promptBytes) || promptBytes < 1) {
    process.stderr.write("usage: node openai-error-check.mjs --base-url URL --model NAME --prompt-bytes N [--timeout-ms MS]\n");
    process.exit(2);
}

const client = new OpenAI({
    baseURL: args["base-url"],
    apiKey: process.env.OPENAI_API_KEY ?? "sk-test",
    maxRetries: 0, // a connection error must show, not be retried away
    timeout: Number(args["timeout-ms"]),
});

const result = { ok: false, base_url: args["base-url"] };
try {
    await client.chat.completions.create({
        model: args.model,
        messages: [{ role: "user", content: "a".repeat(promptBytes) }],
        max_tokens: 1,
    });
    result.error = "the request succeeded";
} catch (e) {
    result.class = e?.constructor?.name ?? "Error";
    if (e instanceof OpenAI.APIError && typeof e.status === "number" && !(e instanceof OpenAI.APIConnectionError)) {
        result.ok = true;
        result.status = e.status;
        result.type = e.type ?? null;
        result.code = e.code ?? null;
        result.message = e.message;
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
