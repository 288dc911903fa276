package catalog

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
)

func TestMapperFilter(t *testing.T) {
	ns := config.Namespaces{Filters: []config.Filter{
		{Namespace: "shop.orders", Query: config.Query(`{"tenant": "acme"}`)},
		{Namespace: `crm\..*`, Query: config.Query(`{"region": {"$in": ["eu", "uk"]}}`)},
		{Namespace: `crm\.people`, Query: config.Query(`{"tenant": "acme"}`)},
	}}
	m, err := NewMapper(ns, "mongoferry")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ns      string
		want    string // the filter's query; "" for none
		wantErr string
	}{
		{"shop.orders", `{"tenant": "acme"}`, ""},
		{"shop.invoices", "", ""},
		{"shop.ordersX", "", ""},
		{"crm.deals", `{"region": {"$in": ["eu","uk"]}}`, ""},
		{"crm.people", "", `crm.people: matched by namespaces.filters[1] ("crm\\..*") and [2] ("crm\\.people")`},
	} {
		f, err := m.Filter(ParseNamespace(c.ns))
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("Filter(%s) error = %v, want %q", c.ns, err, c.wantErr)
			}
		case err != nil:
			t.Errorf("Filter(%s): %v", c.ns, err)
		case c.want == "" && f != nil:
			t.Errorf("Filter(%s) = %s, want none", c.ns, f.Query())
		case c.want != "" && (f == nil || f.Query().String() != mustDoc(t, c.want).String()):
			t.Errorf("Filter(%s) = %v, want %s", c.ns, f, c.want)
		}
	}
	if _, err := NewMapper(config.Namespaces{Filters: []config.Filter{{Namespace: "a.b", Query: config.Query(`{"$where": "1"}`)}}}, "mongoferry"); err == nil ||
		!strings.Contains(err.Error(), "namespaces.filters[0].query: $where") {
		t.Errorf("NewMapper with $where: %v", err)
	}
}

func TestRangeQuery(t *testing.T) {
	rangeFilter := mustDoc(t, `{"_id": {"$gte": 10}}`)
	whole := Collection{}
	if got := whole.RangeQuery(rangeFilter); !bsonEqual(t, got, rangeFilter) {
		t.Errorf("without a filter: %v, want the range's own filter", got)
	}
	m, err := NewMapper(config.Namespaces{Filters: []config.Filter{{Namespace: "shop.orders", Query: config.Query(`{"tenant": "acme"}`)}}}, "mongoferry")
	if err != nil {
		t.Fatal(err)
	}
	f, _ := m.Filter(ParseNamespace("shop.orders"))
	filtered := Collection{Filter: f}
	want := mustDoc(t, `{"$and": [{"_id": {"$gte": 10}}, {"tenant": "acme"}]}`)
	if got := filtered.RangeQuery(rangeFilter); !bsonEqual(t, got, want) {
		t.Errorf("with a filter: %v, want %s", got, want)
	}
}

func mustDoc(t *testing.T, s string) bson.Raw {
	t.Helper()
	var d bson.D
	if err := bson.UnmarshalExtJSON([]byte(s), false, &d); err != nil {
		t.Fatal(err)
	}
	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func bsonEqual(t *testing.T, v any, want bson.Raw) bool {
	t.Helper()
	raw, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return bson.Raw(raw).String() == want.String()
}
