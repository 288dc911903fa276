package config

import "strings"

// SchemaField describes one field of a task file: what `ferry explain
// task` prints. The list is generated (zz_generated.schema.go, by
// hack/gen-taskschema in make generate) from this package's types, their
// doc comments and the kubebuilder markers that also make the SyncTask
// CRD's schema, so the two agree on every field they share.
// +kubebuilder:object:generate=false
type SchemaField struct {
	// Path is the field's place in the file: fullSync.workers, or
	// namespaces.rename[].to for a field of a list's items.
	Path string
	// Type is string, integer, boolean, size, enum, object or "list of
	// ...".
	Type string
	// Default is the value a field left out takes ("" when none).
	Default string
	// Limits are the values allowed: a range, the choices of an enum, a
	// maximum length.
	Limits string
	// Required is set for a field a task file must give.
	Required bool
	// Summary is the first sentence of the field's doc; Doc the whole.
	Summary, Doc string
}

// Schema returns every field of a task file, each parent before its
// fields. With prefixes, only the fields at or under one of them
// (threads, fullSync.workers).
func Schema(prefixes ...string) []SchemaField {
	var out []SchemaField
	for _, f := range taskSchema {
		if len(prefixes) == 0 {
			out = append(out, f)
			continue
		}
		for _, p := range prefixes {
			p = strings.TrimSuffix(p, ".")
			if f.Path == p || strings.HasPrefix(f.Path, p+".") || strings.HasPrefix(f.Path, p+"[]") {
				out = append(out, f)
				break
			}
		}
	}
	return out
}
