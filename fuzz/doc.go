// Package fuzz holds the fuzz targets of the gateway's parsers and state machines: HTTP/1.1
// request and response heads, chunked coding, the routing rule language, the TOML config, the
// SSE scanner and the body relay. Each target checks invariants beyond "no panic" (a parse
// that succeeds is consistent; a relay gives the same client bytes for any split of the same
// upstream bytes). Run them with `make fuzz`.
package fuzz
