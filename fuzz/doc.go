// Package fuzz holds the fuzz targets of the gateway's parsers and state machines: HTTP/1.1
// request and response heads, chunked coding, the routing rule language, the TOML config, the
// SSE scanner, the body relay and the OpenAI request body peek. Each target checks invariants
// beyond "no panic" (a parse that succeeds is consistent; a relay gives the same client bytes
// for any split of the same upstream bytes; a body the peek accepts gives the model and stream
// encoding/json reads). Each also checks that its work, counted in steps (internal/steps), grows
// linearly with its input, on the input and on the input repeated, so that a parser whose work
// grows with the square of its input fails on a small one. Run them with `make fuzz`; their
// corpora are in testdata/fuzz/<Target>/.
package fuzz
