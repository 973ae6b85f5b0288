// Package configs holds sluice's embedded default configuration and the
// worked example configurations (configs/examples, not embedded).
package configs

import _ "embed" // for go:embed

// DefaultName is the name under which the embedded default configuration is
// reported in positions and error messages ("embedded configs/default.toml:23:1:
// ..."). It says "embedded", as the CLI help does, because a user running the
// binary has no such file to open: it is in the sluice source only.
const DefaultName = "embedded configs/default.toml"

// Default is the content of configs/default.toml, the configuration
// `sluice serve` uses when no --config is given.
//
//go:embed default.toml
var Default []byte
