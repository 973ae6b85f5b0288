// Package config loads sluice's TOML configuration into a
// validated, defaulted Config.
//
// Loading parses each file with go-toml/v2 (syntax errors carry go-toml's
// DecodeError position), indexes the position of every key with go-toml's
// unstable parser, then decodes the generic values against the schema in
// schema.go: unknown keys, wrong TOML types, bad values and dangling
// references are all reported, each at its file:line:col, as one ErrorList.
// ${VAR} is expanded from the environment in every decoded string value; the
// text as written is kept (Written, Document, MaskEnv) so that what shows the
// configuration never shows a value read from the environment.
// The runtime compiles a Config into its own snapshot and reports its own
// errors (rule syntax, certificates) with Pos, ValuePos and OffsetPos.
package config
