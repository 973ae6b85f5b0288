// Package openai reads and validates the JSON body of an inference request before any upstream
// work: what routing needs, and the faults that deserve a precise 400 from the gateway rather
// than an upstream's. Endpoints: /v1/chat/completions, /v1/completions, /v1/embeddings,
// /v1/responses (OpenAI Responses API) and /v1/messages (Anthropic Messages API).
//
// # What it reads
//
// Peek(endpoint, body, &req) fills a Request:
//
//   - Model: "model", escapes decoded, and ModelSpan, its string token in the body;
//   - Stream ("stream") and IncludeUsage ("stream_options"."include_usage");
//   - MaxTokens, MaxCompletionTokens, MaxOutputTokens: output caps in tokens, 0 when absent
//     (OutputCap picks the one the endpoint honours);
//   - Prompt: the byte span of "messages" (chat, messages), "input" (responses, embeddings) or
//     "prompt" (completions), and System: the span of "system" (messages) or "instructions"
//     (responses), for prefix fingerprinting;
//   - PromptCacheKey ("prompt_cache_key") and User ("user").
//
// Byte slices alias the body, or the Request's buffer for strings with escapes. Peek walks the
// body once with a hand-written scanner: no decoding into maps or structs, values it does not
// read are validated and skipped, and a reused Request makes a successful Peek allocate
// nothing (BenchmarkPeekChat1KiB: about 0.7 µs and 0 allocs for a 1 KiB chat body; 2.5 GB/s
// on 64 KiB). Decoding into a fixed struct with goccy/go-json copies the body and every raw
// field (9 allocations) and is 2–4 times slower, and it cannot see what this package refuses:
// it skips malformed values it does not decode (trailing commas, missing colons, raw control
// characters, invalid UTF-8, leading zeros), keeps the last of two "model" members and matches
// keys case-insensitively.
//
// RewriteModel replaces the model value (an alias by the upstream's model id) and copies every
// other byte unchanged.
//
// # What it refuses, and why
//
// Every error is a *ValidationError (status 400, Param, Code, Message); AppendErrorBody writes
// it in OpenAI's shape {"error":{"message","type","param","code"}}, or in Anthropic's
// {"type":"error","error":{"type","message"}} for /v1/messages. Messages start with the
// parameter ("messages[2].content: expected a string or an array of content parts").
//
//   - A body that is not well-formed JSON (RFC 8259: strings in valid UTF-8, control
//     characters escaped, no trailing data, at most MaxDepth levels): code invalid_json, with
//     the byte offset in Offset and in the message. It wins over every other fault. A body
//     that starts with a byte order mark is refused so, with a message that names the mark
//     (RFC 8259 forbids it on the network; Go's encoding/json refuses it; no SDK sends one).
//   - A body that is not an object, a "model" that is missing or not a non-empty string (or
//     holds control characters or a lone \u surrogate), the required conversation
//     ("messages", "prompt", embeddings' "input") missing or of the wrong shape, and on
//     /v1/messages a missing "max_tokens" (Anthropic requires it).
//   - Messages: each an object with a string "role" among the endpoint's roles (chat: system,
//     developer, user, assistant, tool, function; messages: user, assistant; Responses
//     message items: user, assistant, system, developer) and a "content" that is a string or
//     a non-empty array of parts (objects with a string "type"); on chat, null or no content
//     is accepted from an assistant message with tool_calls, function_call, refusal or audio
//     (openai-go's ChatCompletionMessage.ToParam leaves content out of a refusal or an audio
//     answer), and null from a function message. Responses items of another type (function calls, tool outputs), and item
//     references (an "id" with no type, or a null one, and no role), are only checked to be
//     objects.
//   - Ranges (OpenAI API reference; Anthropic's for /v1/messages): temperature 0..2 (0..1 on
//     messages), top_p 0..1, presence_penalty and frequency_penalty −2..2, n ≥ 1, top_k ≥ 0,
//     max_tokens (≥ 0 on completions, where 0 with echo scores the prompt and generates
//     nothing), max_completion_tokens and max_output_tokens ≥ 1. An integer (those, and token
//     ids) may be written with a fraction or an exponent when its value is an integer: 3.0
//     and 1e3 are 3 and 1000, as vLLM's pydantic models (lax mode) and llama.cpp read them;
//     3.5 is refused. stream and stream_options.include_usage are booleans, and
//     stream_options is allowed only with stream true. null stands for an absent optional
//     parameter, as in OpenAI's API.
//   - Embeddings input: a non-empty string, or 1..2048 elements all non-empty strings, all
//     token ids (integers ≥ 0) or all non-empty token id arrays; completions' prompt alike,
//     empty strings allowed, and null (nullable in OpenAI's API and the SDKs' types: the
//     start of a document), which leaves Prompt absent.
//
// Two rules close the gap between what the gateway reads and what an upstream reads, so that
// it never routes on one model while the upstream serves another:
//
//   - A parameter Peek reads that is named twice is refused (duplicate_parameter): servers
//     differ on which member they keep (most keep the last; a streaming parser may act on the
//     first), so any choice here could be the wrong one for some upstream. So are duplicate
//     role, content and type members of a message.
//   - A key that differs from such a parameter's name only in case ("Model", "STREAM", or
//     "ſtream" with U+017F) is refused (ambiguous_parameter): Go servers decoding with
//     encoding/json match struct fields case-insensitively, with that folding. So is such a
//     variant of a member Peek reads inside a parameter: a message's role and content
//     (tool_calls, function_call, refusal and audio in chat, type in a Responses input item),
//     a content part's type, and stream_options.include_usage.
//
// Keys are compared after decoding their escapes, as every JSON parser does: "mod\u0065l" is
// "model" (and a second "model" beside it is a duplicate). Unknown parameters are not
// refused: upstreams such as vLLM accept extensions OpenAI does not.
//
// # Sources
//
// OpenAI API reference (https://platform.openai.com/docs/api-reference): chat completions,
// completions, embeddings and responses request bodies, their types, ranges and error codes
// (invalid_type, missing_required_parameter, integer_below_min_value, ...). Anthropic Messages
// API (https://docs.anthropic.com/en/api/messages): model, max_tokens (required), messages
// roles and content, system, temperature 0..1, top_p, top_k; errors
// (https://docs.anthropic.com/en/api/errors).
package openai
