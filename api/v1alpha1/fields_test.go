package v1alpha1_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/testutil"
)

// TestCreateEveryFieldWrong sends the API server a SyncTask with one field
// of its spec wrong, for every field (by reflection, so a new field is
// covered without editing the test) but those of Kubernetes' own types
// (resources, workerTemplate): a value of the wrong type, a negative
// number, an unknown key in every mapping (with strict field validation,
// as kubectl applies by default). Each is refused with a problem that
// names the field's path.
func TestCreateEveryFieldWrong(t *testing.T) {
	ns := env.Namespace(t)
	n := 0
	for _, f := range testutil.ModelFields(ownSpecFields()) {
		type bad struct {
			value any
			what  string
			path  []string
		}
		var bads []bad
		list := strings.HasSuffix(f.Path[len(f.Path)-1], "[]")
		switch f.Kind {
		case reflect.Struct:
			if !list {
				bads = append(bads, bad{int64(7), "a number for a mapping", f.Path})
			}
			bads = append(bads, bad{int64(1), "an unknown key", append(slices.Clone(f.Path), "noSuchField")})
		case reflect.Slice:
			bads = append(bads, bad{int64(7), "a number for a list", f.Path})
		case reflect.String:
			bads = append(bads, bad{map[string]any{"a": int64(1)}, "a mapping for a string", f.Path})
		case reflect.Bool:
			bads = append(bads, bad{"maybe", "a word for true or false", f.Path})
		case reflect.Int:
			bads = append(bads, bad{"many", "a word for a number", f.Path}, bad{int64(-1), "a negative number", f.Path})
		}
		for _, b := range bads {
			n++
			name := strings.Join(b.path, ".") + ": " + b.what
			t.Run(name, func(t *testing.T) {
				err := createWith(t, ns, b.path, b.value)
				if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
					t.Fatalf("error %v, want Invalid or BadRequest", err)
				}
				// The field's path as the API server writes it: spec.a.b,
				// a list element as [0].
				want := "spec." + strings.ReplaceAll(strings.Join(b.path, "."), "[]", "[0]")
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not name %s:\n%v", want, err)
				}
			})
		}
	}
	t.Logf("%d cases over the SyncTask spec", n)
}

// ownSpecFields is SyncTaskSpec without the fields whose schema is
// Kubernetes' own (the Pod's types).
func ownSpecFields() reflect.Type {
	t := reflect.TypeFor[v1alpha1.SyncTaskSpec]()
	var fields []reflect.StructField
	for i := range t.NumField() {
		if f := t.Field(i); f.Name != "Resources" && f.Name != "WorkerTemplate" {
			fields = append(fields, f)
		}
	}
	return reflect.StructOf(fields)
}

// TestCreateCLIFields sends the API server a SyncTask with a field of the
// CLI's task file that a SyncTask does not have (credentials and PEM come
// from Secrets; a target has no kind or shards, a source no sharding): with
// strict field validation, as kubectl applies by default, each is refused
// naming it.
func TestCreateCLIFields(t *testing.T) {
	ns := env.Namespace(t)
	cases := []struct {
		path  []string
		value any
	}{
		{[]string{"source", "username"}, "ferry"},
		{[]string{"source", "passwordFile"}, "/run/secrets/pw"},
		{[]string{"source", "passwordEnv"}, "SRC_PASSWORD"},
		{[]string{"target", "username"}, "ferry"},
		{[]string{"target", "passwordFile"}, "/run/secrets/pw"},
		{[]string{"target", "passwordEnv"}, "DST_PASSWORD"},
		{[]string{"source", "tls", "caFile"}, "/etc/ca.pem"},
		{[]string{"target", "tls", "certificateKeyFile"}, "/etc/client.pem"},
		{[]string{"source", "tls", "certificateFile"}, "/etc/tls/tls.crt"},
		{[]string{"source", "tls", "privateKeyFile"}, "/etc/tls/tls.key"},
		{[]string{"target", "kind"}, "sharded"},
		{[]string{"target", "shards"}, []any{map[string]any{"name": "rs0", "uri": "mongodb://s0.mongo:27018/"}}},
		{[]string{"source", "sharding"}, "keep"},
		{[]string{"source", "shardKeys"}, []any{map[string]any{"namespace": "shop.orders", "fields": []any{"region"}}}},
	}
	for _, c := range cases {
		name := strings.Join(c.path, ".")
		t.Run(name, func(t *testing.T) {
			err := createWith(t, ns, c.path, c.value)
			if want := `unknown field "spec.` + name + `"`; !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want one naming %s", err, want)
			}
		})
	}
}

// createWith creates a valid SyncTask with value at path in its spec, with
// strict field validation as kubectl applies by default, and returns the
// API server's error (the test fails if there is none).
func createWith(t *testing.T, ns string, path []string, value any) error {
	t.Helper()
	spec := map[string]any{
		"source": map[string]any{"uri": "mongodb://src.mongo:27017/", "credentialsSecret": "src-creds"},
		"target": map[string]any{"uri": "mongodb://dst.mongo:27017/", "credentialsSecret": "dst-creds"},
	}
	set(spec, path, value)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sync.mongoferry.io/v1alpha1", "kind": "SyncTask",
		"metadata": map[string]any{"namespace": ns, "generateName": "field-"},
		"spec":     spec,
	}}
	err := env.Client.Create(ctx(t), u, client.FieldValidation("Strict"))
	if err == nil {
		t.Fatalf("accepted: %v", spec)
	}
	return err
}

// set puts value at path in m, creating mappings on the way and a list of
// one mapping for "name[]".
func set(m map[string]any, path []string, value any) {
	for i, p := range path {
		name, list := strings.CutSuffix(p, "[]")
		if i == len(path)-1 {
			m[name] = value
			return
		}
		next, ok := m[name].(map[string]any)
		if !ok {
			next = map[string]any{}
		}
		if list {
			m[name] = []any{next}
		} else {
			m[name] = next
		}
		m = next
	}
}
