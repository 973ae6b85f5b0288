package llmsim

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
)

// fleetFileOf is the TOML fleet file: top-level Config keys, a [defaults] table and
// [[instance]] tables that override the defaults key by key. fleetFile keeps the tables as
// maps (an instance overrides only the keys it names); fleetShape types them, so that a
// strict decode reports every unknown or mistyped key with its line and column.
type fleetFileOf[T any] struct {
	Seed      *uint64 `toml:"seed"`
	Host      string  `toml:"host"`
	BasePort  int     `toml:"base_port"`
	Instances int     `toml:"instances"`
	Roles     []Role  `toml:"roles"`
	APIKey    string  `toml:"api_key"`
	APIKeyEnv string  `toml:"api_key_env"`
	Defaults  T       `toml:"defaults"`
	Instance  []T     `toml:"instance"`
}

type (
	fleetFile  = fleetFileOf[map[string]any]
	fleetShape = fleetFileOf[InstanceConfig]
)

// LoadFile reads a TOML fleet file (docs/llmsim.md): unknown keys and values of the wrong
// type are errors reported as file:line:column; api_key_env names an environment variable
// that must be set.
func LoadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("llmsim: %w", err)
	}
	return ParseFleetFile(path, data)
}

// ParseFleetFile parses fleet file content (name is used in error messages).
func ParseFleetFile(name string, data []byte) (Config, error) {
	// Typed pass first: it places unknown keys and bad values anywhere in the file.
	var shape fleetShape
	if err := strictDecode(data, &shape); err != nil {
		return Config{}, fileError(name, "", err)
	}
	var ff fleetFile
	if err := strictDecode(data, &ff); err != nil {
		return Config{}, fileError(name, "", err)
	}
	cfg := DefaultConfig()
	if ff.Seed != nil {
		cfg.Seed = *ff.Seed
	}
	if ff.Host != "" {
		cfg.Host = ff.Host
	}
	cfg.BasePort, cfg.Roles, cfg.APIKey = ff.BasePort, ff.Roles, ff.APIKey
	if ff.APIKey != "" && ff.APIKeyEnv != "" {
		return Config{}, fmt.Errorf("llmsim: %s: set api_key or api_key_env, not both", name)
	}
	if ff.Instances != 0 {
		cfg.Instances = ff.Instances // resolve checks the range
	}
	if ff.APIKeyEnv != "" {
		v, ok := os.LookupEnv(ff.APIKeyEnv)
		if !ok || v == "" {
			return Config{}, fmt.Errorf("llmsim: %s: api_key_env: environment variable %s is not set", name, ff.APIKeyEnv)
		}
		cfg.APIKey = v
	}
	for _, r := range cfg.Roles {
		if _, err := ParseRole(string(r)); err != nil {
			return Config{}, fmt.Errorf("llmsim: %s: roles: %w", name, err)
		}
	}
	if err := overlay(&cfg.Defaults, ff.Defaults); err != nil {
		return Config{}, fileError(name, "[defaults]: ", err)
	}
	for i, m := range ff.Instance {
		ic := cfg.Defaults
		if err := overlay(&ic, m); err != nil {
			return Config{}, fileError(name, fmt.Sprintf("instance %d: ", i), err)
		}
		cfg.Instance = append(cfg.Instance, ic)
	}
	if _, err := cfg.resolve(); err != nil {
		return Config{}, fmt.Errorf("llmsim: %s: %s", name, strings.ReplaceAll(err.Error(), "llmsim: ", ""))
	}
	return cfg, nil
}

// overlay decodes the keys of m over ic (keys absent from m keep ic's values).
func overlay(ic *InstanceConfig, m map[string]any) error {
	if len(m) == 0 {
		return nil
	}
	b, err := toml.Marshal(m)
	if err != nil {
		return err
	}
	return strictDecode(b, ic)
}

// strictDecode decodes data into v, refusing unknown keys. go-toml (v2.2.4) panics when it
// places an unknown key written with an escape sequence (its position code expects the key's
// bytes in the document, and an unescaped key is a copy): that panic is returned as the error
// it should have been.
func strictDecode(data []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("unknown key written with an escape sequence (%v)", r)
		}
	}()
	d := toml.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

func fileError(name, where string, err error) error {
	var de *toml.DecodeError
	if errors.As(err, &de) && where == "" {
		row, col := de.Position()
		msg := plainDecodeMessage(de.Error())
		if k := de.Key(); len(k) > 0 {
			msg = strings.Join(k, ".") + ": " + msg
		}
		return fmt.Errorf("llmsim: %s:%d:%d: %s", name, row, col, msg)
	}
	var sm *toml.StrictMissingError
	if errors.As(err, &sm) {
		if len(sm.Errors) > 0 && where == "" {
			e := &sm.Errors[0]
			row, col := e.Position()
			return fmt.Errorf("llmsim: %s:%d:%d: unknown key %s", name, row, col, strings.Join(e.Key(), "."))
		}
		return fmt.Errorf("llmsim: %s: %sunknown key: %s", name, where, sm.Error())
	}
	return fmt.Errorf("llmsim: %s: %s%w", name, where, err)
}

// plainDecodeMessage turns go-toml's "toml: cannot decode TOML string into struct field
// llmsim.fleetFileOf[...].Seed of type *uint64" into "cannot decode TOML string into an
// integer": the Go field path means nothing to someone editing a fleet file.
func plainDecodeMessage(msg string) string {
	for _, p := range []string{"llmsim: ", "toml: "} {
		msg = strings.ReplaceAll(msg, p, "")
	}
	i := strings.Index(msg, " into struct field ")
	j := strings.LastIndex(msg, " of type ")
	if i < 0 || j < i {
		return msg
	}
	goType := strings.TrimLeft(msg[j+len(" of type "):], "*[]")
	kind := "a value of type " + goType
	switch {
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		kind = "an integer"
	case strings.HasPrefix(goType, "float"):
		kind = "a number"
	case goType == "string", strings.HasSuffix(goType, "Role"):
		kind = "a string"
	case goType == "bool":
		kind = "a boolean"
	}
	if strings.Contains(msg[j:], "[]") {
		kind = "an array of " + strings.TrimPrefix(strings.TrimPrefix(kind, "an "), "a ") + "s"
	}
	return msg[:i] + " into " + kind
}
