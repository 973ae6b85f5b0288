// Package fuzz holds the fuzz targets of the gateway's parsers and state machines: HTTP/1.1
// request and response heads, chunked coding, the routing rule language, the TOML config, the
// SSE scanner, the body relay, the OpenAI request body peek and the prefix fingerprint's JSON
// normalisation. Each target checks invariants beyond "no panic" (a parse that succeeds is
// consistent; a relay gives the same client bytes for any split of the same upstream bytes; a
// body the peek accepts gives the model and stream encoding/json reads; a body re-encoded by
// encoding/json has the same fingerprint). Run them with `make fuzz`.
package fuzz
