package replay

import (
	"strings"
	"testing"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// filteredMapper returns a mapper of spec's defaults with one filter per
// namespace and query given in pairs.
func filteredMapper(t *testing.T, nsQuery ...string) (*config.Spec, *catalog.Mapper) {
	t.Helper()
	spec := config.Spec{}
	for i := 0; i+1 < len(nsQuery); i += 2 {
		spec.Namespaces.Filters = append(spec.Namespaces.Filters, config.Filter{Namespace: nsQuery[i], Query: config.Query(nsQuery[i+1])})
	}
	spec.SetDefaults()
	m, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	return &spec, m
}

// TestRouteFilter: a namespace's route carries its filter, found once;
// a filtered time-series collection's bucket writes are refused with a
// message naming the collection and the fix, and so is a namespace two
// filters match.
func TestRouteFilter(t *testing.T) {
	spec, m := filteredMapper(t, `shop\.orders`, `{"tenant": "a"}`, `metrics\.cpu`, `{"host": "h1"}`,
		`two\..*`, `{"a": 1}`, `two\.c`, `{"b": 1}`)
	r := New(Options{Task: "t", Spec: spec, Mapper: m})
	tests := []struct {
		ns       string
		filtered bool
		err      string // part of the error, "" for none
	}{
		{"shop.orders", true, ""},
		{"shop.customers", false, ""},
		{"metrics.system.buckets.cpu", false, "metrics.cpu is a time-series collection and has a filter"},
		{"metrics.system.buckets.mem", false, ""},
		{"two.c", false, "a namespace takes one filter"},
	}
	for _, tt := range tests {
		t.Run(tt.ns, func(t *testing.T) {
			rt := r.route(tt.ns)
			if got := rt.filter != nil; got != tt.filtered {
				t.Errorf("filtered = %v, want %v", got, tt.filtered)
			}
			switch {
			case tt.err == "" && rt.err != nil:
				t.Errorf("err = %v, want none", rt.err)
			case tt.err != "" && (rt.err == nil || !strings.Contains(rt.err.Error(), tt.err)):
				t.Errorf("err = %v, want one saying %q", rt.err, tt.err)
			}
			if tt.ns == "metrics.system.buckets.cpu" && !strings.Contains(rt.err.Error(), "remove the filter for metrics.cpu") {
				t.Errorf("err = %v, want the fix named", rt.err)
			}
		})
	}
}
