package schema

import (
	"bytes"
	_ "embed" // for go:embed
	"encoding/json"
	"fmt"
	"sync"

	"github.com/pelletier/go-toml/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// JSON is the committed schema, deploy/schema/sluice.schema.json.
//
//go:embed sluice.schema.json
var JSON []byte

var compiled = sync.OnceValues(func() (*jsonschema.Schema, error) {
	return Compile(JSON)
})

// Compile compiles a schema such as JSON, checking it against its draft's meta-schema.
func Compile(data []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("sluice.schema.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("sluice.schema.json")
}

// ValidateTOML checks one TOML document against the committed schema, as an editor that
// uses it would. It is a quick check for tools: the loader (sluice validate) checks more,
// and is the authority.
func ValidateTOML(data []byte) error {
	var tree map[string]any
	if err := toml.Unmarshal(data, &tree); err != nil {
		return err
	}
	return ValidateTree(tree)
}

// ValidateTree checks a decoded TOML document against the committed schema.
func ValidateTree(tree map[string]any) error {
	sch, err := compiled()
	if err != nil {
		return fmt.Errorf("compiling the schema: %w", err)
	}
	// Through JSON: dates and times become strings, as in a JSON view of the document, and
	// numbers become what the validator reads.
	data, err := json.Marshal(tree)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return sch.Validate(v)
}
