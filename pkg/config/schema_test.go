package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestSchemaCoversTheTask checks that the generated schema lists every
// field a task file can hold, and nothing else: a field added to the
// types without `make generate` fails here.
func TestSchemaCoversTheTask(t *testing.T) {
	var want []string
	taskPaths(reflect.TypeFor[Task](), "", &want)
	var got []string
	for _, f := range Schema() {
		got = append(got, f.Path)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("schema paths differ from the Task type's (run make generate):\nschema: %v\ntype:   %v", got, want)
	}
}

// TestSchemaDefaultsAreSetDefaults checks that the default the schema
// prints (from the kubebuilder markers, as the CRD's) is what a task file
// that leaves the field out gets.
func TestSchemaDefaultsAreSetDefaults(t *testing.T) {
	task, err := Parse([]byte(taskYAML("")))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range Schema() {
		if f.Default == "" || strings.Contains(f.Path, "[]") || f.Type == "object" {
			continue
		}
		v := reflect.ValueOf(task).Elem()
		for name := range strings.SplitSeq(f.Path, ".") {
			if v.Kind() == reflect.Pointer {
				if v.IsNil() {
					break // a section left out (source.tls): nothing to compare
				}
				v = v.Elem()
			}
			field, ok := fieldValue(v, name)
			if !ok {
				t.Fatalf("%s: no such field", f.Path)
			}
			v = field
		}
		if v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct {
			continue
		}
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				t.Errorf("%s: schema default %q, task has none", f.Path, f.Default)
				continue
			}
			v = v.Elem()
		}
		if got := fmt.Sprint(v.Interface()); got != f.Default {
			t.Errorf("%s: schema default %q, SetDefaults gives %q", f.Path, f.Default, got)
		}
	}
}

// TestSchemaSelectsByPrefix checks Schema's filter: a section and its
// fields, a field alone, a list's item fields.
func TestSchemaSelectsByPrefix(t *testing.T) {
	var got []string
	for _, f := range Schema("threads", "namespaces.rename", "fullSync.workers") {
		got = append(got, f.Path)
	}
	want := []string{"namespaces.rename", "namespaces.rename[].from", "namespaces.rename[].to", "threads", "threads.readers", "threads.writers", "fullSync.workers"}
	if !slices.Equal(got, want) {
		t.Fatalf("Schema(threads, namespaces.rename, fullSync.workers) = %v, want %v", got, want)
	}
}

// taskPaths appends the JSON paths of t's fields under prefix, parents
// first, as the schema lists them.
func taskPaths(t reflect.Type, prefix string, out *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous || strings.Contains(opts, "inline") {
			taskPaths(f.Type, prefix, out)
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		*out = append(*out, path)
		e := f.Type
		if e.Kind() == reflect.Slice {
			e = e.Elem()
			path += "[]"
		}
		if e.Kind() == reflect.Pointer {
			e = e.Elem()
		}
		if e.Kind() == reflect.Struct {
			taskPaths(e, path, out)
		}
	}
}
