// Package schema generates sluice.schema.json, a JSON Schema of sluice's TOML configuration
// for editors (taplo and the Even Better TOML extension: completion, hover documentation and
// validation as you type; see docs/deploy.md).
//
// The schema is made from the configuration itself, so that the two cannot drift: the keys
// and their TOML types by reflection over core/config's structs and their `toml` tags, the
// descriptions from the fields' doc comments, the defaults and the required keys by loading
// a minimal configuration with config.LoadBytes (a key is required when leaving it out makes
// the load fail). What reflection cannot see — enumerations, ranges and the shape of
// durations, addresses and URLs — is declared in constraints, next to the generator, and the
// package's tests check it against the loader. A test also fails when the committed schema
// differs from the generated one: run `go generate ./deploy/schema` after changing core/config.
//
// The schema uses only keywords that mean the same from draft-04 to draft 2020-12 (taplo
// implements draft-04) and declares draft-07.
package schema

//go:generate go run ./gen -o sluice.schema.json
