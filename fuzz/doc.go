// Package fuzz holds the fuzz targets of the gateway's parsers and state machines: HTTP/1.1
// request and response heads, chunked coding, the routing rule language, the TOML config, the
// SSE scanner, the body relay, the OpenAI request body peek and the prefix fingerprint's JSON
// normalisation. Each target checks invariants beyond "no panic" (a parse that succeeds is
// consistent; a relay gives the same client bytes for any split of the same upstream bytes; a
// body the peek accepts gives the model and stream encoding/json reads; a body re-encoded by
// encoding/json has the same fingerprint). The parser targets also check that their work,
// counted in steps (internal/steps), grows linearly with their input, on the input and on the
// input repeated, so that a parser whose work grows with the square of its input fails on a
// small one. The fingerprint's bound also grows with the body's nesting: an object finds where
// each member's value ends before it writes them in key order, so each byte is scanned once
// per object around it (affinityCost). Run them with `make fuzz`; their corpora are in testdata/fuzz/<Target>/.
package fuzz
