package testutil

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// ModelField is one field of a task model type, by its JSON names from the
// top ("namespaces", "rename[]", "from": a list of structs is marked
// "name[]").
type ModelField struct {
	Path []string
	// Kind is the field's kind after pointers: Struct, Slice, String,
	// Bool or Int.
	Kind reflect.Kind
}

// ModelFields lists every field of t and of the structs it holds, in
// declaration order, inlined structs (json ",inline" or no name) flattened,
// so that a table test over them covers a field added later without being
// edited.
func ModelFields(t reflect.Type) []ModelField {
	var out []ModelField
	var walk func(t reflect.Type, path []string)
	walk = func(t reflect.Type, path []string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if name == "" {
				walk(ft, path)
				continue
			}
			p := append(slices.Clone(path), name)
			kind := ft.Kind()
			switch kind {
			case reflect.Int, reflect.Int32, reflect.Int64:
				kind = reflect.Int
			case reflect.Struct, reflect.Slice, reflect.String, reflect.Bool:
			default:
				panic(fmt.Sprintf("field %v of kind %s: teach ModelFields about it", p, kind))
			}
			out = append(out, ModelField{Path: p, Kind: kind})
			switch {
			case kind == reflect.Struct:
				walk(ft, p)
			case kind == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				q := slices.Clone(p)
				q[len(q)-1] += "[]"
				out = append(out, ModelField{Path: q, Kind: reflect.Struct})
				walk(ft.Elem(), q)
			}
		}
	}
	walk(t, nil)
	return out
}
