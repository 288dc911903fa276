package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// Load reads a task file, rejects unknown fields, sets defaults and
// validates it.
func Load(path string) (*Task, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read task file: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse decodes a task from YAML or JSON, sets defaults and validates it.
func Parse(data []byte) (*Task, error) {
	jsonData, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(jsonData))
	dec.DisallowUnknownFields()
	var t Task
	if err := dec.Decode(&t); err != nil {
		return nil, decodeError(err)
	}
	t.SetDefaults()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

func decodeError(err error) error {
	msg := err.Error()
	if field, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return ValidationError{{Field: strings.Trim(field, `"`), Message: "unknown field: check its spelling and indentation against `ferry run --help` or config/samples"}}
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return ValidationError{{Field: te.Field, Message: fmt.Sprintf("expected a %s, got a JSON %s", te.Type, te.Value)}}
	}
	return fmt.Errorf("%w: %v", ErrInvalid, err)
}
