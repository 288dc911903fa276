package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
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
		return nil, decodeError(err, jsonData)
	}
	t.SetDefaults()
	// A number written as 0 where 0 is not allowed (threads.readers: 0,
	// fullSync.workers: 0) reads like a field left out, which takes its
	// default. Keep it 0, so that validation refuses it as the SyncTask's
	// schema (minimum 1) does, along with every other bad field.
	var doc any
	if json.Unmarshal(jsonData, &doc) == nil {
		for _, path := range writtenZeros(doc, "") {
			setZero(reflect.ValueOf(&t).Elem(), path)
		}
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// writtenZeros returns the paths (threads.readers) of the numbers written
// as 0 in doc, a decoded JSON document.
func writtenZeros(doc any, path string) []string {
	var out []string
	switch v := doc.(type) {
	case map[string]any:
		for k, e := range v {
			p := k
			if path != "" {
				p = path + "." + k
			}
			out = append(out, writtenZeros(e, p)...)
		}
	case float64:
		if v == 0 && path != "" {
			out = append(out, path)
		}
	}
	return out
}

// setZero sets the whole-number field at path (a.b.c, no list indexes)
// of struct v to 0.
func setZero(v reflect.Value, path string) {
	for name := range strings.SplitSeq(path, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return
		}
		f, ok := fieldValue(v, name)
		if !ok {
			return
		}
		v = f
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.CanSet() {
			v.SetInt(0)
		}
	}
}

func decodeError(err error, jsonData []byte) error {
	msg := err.Error()
	if field, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		field = strings.Trim(field, `"`)
		var doc any
		if json.Unmarshal(jsonData, &doc) == nil {
			if path := unknownField(doc, reflect.TypeFor[Task](), ""); path != "" {
				field = path
			}
		}
		if msg, ok := syncTaskOnly(field); ok {
			return ValidationError{{Field: field, Message: msg}}
		}
		return ValidationError{{Field: field, Message: "unknown field: check its spelling and indentation against `ferry explain task` (every field of a task file, its type, default and meaning) or docs/cli.md"}}
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// Spec is inlined in Task: its fields are top-level in the file.
		field := strings.TrimPrefix(te.Field, "Spec.")
		if field == "" {
			field = "task"
		}
		value, _, _ := strings.Cut(te.Value, " ") // "number 1.5"
		got, ok := yamlValue[value]
		if !ok {
			got = value
		}
		msg := fmt.Sprintf("expected %s, got %s", yamlKind(te.Type), got)
		if te.Type.Kind() == reflect.String && (value == "number" || value == "bool") {
			msg += ": put the value in quotes"
		}
		return ValidationError{{Field: field, Message: msg}}
	}
	return fmt.Errorf("%w: %v", ErrInvalid, err)
}

// syncTaskOnly says what a task file uses instead of a field of a SyncTask's
// source or target that names a Kubernetes Secret, given the field's path.
func syncTaskOnly(path string) (string, bool) {
	role, rest, _ := strings.Cut(path, ".")
	if role != "source" && role != "target" {
		return "", false
	}
	switch rest {
	case "credentialsSecret":
		return "names a Kubernetes Secret, which only a SyncTask reads: in a task file, use " + role + ".username with " + role + ".passwordFile or " + role + ".passwordEnv", true
	case "tls.caSecret":
		return "names a Kubernetes Secret, which only a SyncTask mounts: in a task file, use " + role + ".tls.caFile", true
	case "tls.certificateKeySecret":
		return "names a Kubernetes Secret, which only a SyncTask mounts: in a task file, use " + role + ".tls.certificateKeyFile", true
	case "tls.certificateSecret":
		return "names a Kubernetes Secret, which only a SyncTask mounts: in a task file, use " + role + ".tls.certificateFile with " + role + ".tls.privateKeyFile", true
	}
	return "", false
}

// unknownField returns the path (source.tls.caFle, namespaces.rename[0].form)
// of the first key in doc that type t has no field for, or "".
func unknownField(doc any, t reflect.Type, path string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := doc.(type) {
	case []any:
		if t.Kind() != reflect.Slice {
			return ""
		}
		for i, e := range v {
			if p := unknownField(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	case map[string]any:
		if t.Kind() != reflect.Struct {
			return ""
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			f, ok := jsonField(t, k)
			if !ok {
				return p
			}
			if q := unknownField(v[k], f.Type, p); q != "" {
				return q
			}
		}
	}
	return ""
}

// jsonField finds the field of struct t named name in JSON, looking into
// inlined structs (json:",inline" or embedded without a name).
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "" && f.Anonymous {
			if g, ok := jsonField(f.Type, name); ok {
				return g, true
			}
			continue
		}
		if strings.EqualFold(tag, name) || (tag == "" && strings.EqualFold(f.Name, name)) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// fieldValue is the field of struct value v named name in JSON, looking
// into inlined structs as jsonField does.
func fieldValue(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "" && f.Anonymous {
			if g, ok := fieldValue(v.Field(i), name); ok {
				return g, true
			}
			continue
		}
		if strings.EqualFold(tag, name) || (tag == "" && strings.EqualFold(f.Name, name)) {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// yamlValue names JSON value kinds the way a YAML task file writes them.
var yamlValue = map[string]string{"string": "a string", "number": "a number", "bool": "true or false",
	"array": "a list", "object": "a mapping", "null": "null"}

// yamlKind names a Go type the way a YAML task file writes it.
func yamlKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return yamlKind(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "a mapping of fields"
	}
	return t.String()
}
