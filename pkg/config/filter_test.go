package config

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"sigs.k8s.io/yaml"
)

func TestValidateFilters(t *testing.T) {
	cases := []struct {
		name       string
		namespaces string   // YAML of the namespaces section
		want       []string // every message
	}{
		{"one tenant", `{filters: [{namespace: shop.orders, query: {tenant: acme}}]}`, nil},
		{"operators and Extended JSON", `{filters: [{namespace: shop.orders, query: {$or: [{tenant: {$in: [acme, beta]}}, {createdAt: {$gte: {$date: "2025-01-01T00:00:00Z"}}}], total: {$not: {$lt: 10}}}}]}`, nil},
		{"pattern", `{include: ['shop\..*'], filters: [{namespace: 'shop\..*', query: {tenant: acme}}]}`, nil},
		{"two namespaces", `{filters: [{namespace: shop.orders, query: {tenant: acme}}, {namespace: shop.invoices, query: {tenant: acme}}]}`, nil},
		{"included", `{include: ['shop\.orders', 'crm\..*'], filters: [{namespace: crm.people, query: {tenant: acme}}]}`, nil},
		{"empty query", `{filters: [{namespace: shop.orders, query: {}}]}`, nil},

		{"$where", `{filters: [{namespace: shop.orders, query: {$where: "this.tenant == 'acme'"}}]}`,
			[]string{"namespaces.filters[0].query: $where: operator cannot be evaluated on a document: it runs JavaScript on the server; express the condition with query operators such as $eq, $in and $regex"}},
		{"$expr with $function", `{filters: [{namespace: shop.orders, query: {$expr: {$function: {body: "return true", args: [], lang: js}}}}]}`,
			[]string{"namespaces.filters[0].query: $expr: operator cannot be evaluated on a document: aggregation expressions (and $function inside them) are not evaluated by the engine; compare fields with query operators on constants instead"}},
		{"$text", `{filters: [{namespace: shop.orders, query: {$text: {$search: acme}}}]}`,
			[]string{"namespaces.filters[0].query: $text: operator cannot be evaluated on a document: it needs the collection's text index; use $regex on the field instead"}},
		{"$near", `{filters: [{namespace: shop.stores, query: {loc: {$near: [0, 0]}}}]}`,
			[]string{"namespaces.filters[0].query: loc: $near: operator cannot be evaluated on a document: geospatial queries are not evaluated by the engine; filter on plain fields (for example a region code) instead"}},
		{"unknown operator", `{filters: [{namespace: shop.orders, query: {tenant: {$equals: acme}}}]}`,
			[]string{"namespaces.filters[0].query: tenant: $equals: unknown or unsupported query operator; use $eq $ne $gt $gte $lt $lte $in $nin $exists $type $regex $not $elemMatch $size $all $mod $and $or $nor"}},
		{"bad regex", `{filters: [{namespace: shop.orders, query: {name: {$regex: "(?<=a)b"}}}]}`,
			[]string{"namespaces.filters[0].query: name: $regex: regular expression /(?<=a)b/: error parsing regexp: invalid named capture: `(?<=a)b`; rewrite it without look-around or back-references"}},
		{"bad Extended JSON", `{filters: [{namespace: shop.orders, query: {day: {$date: tomorrow}}}]}`,
			[]string{"namespaces.filters[0].query: not a query document: invalid $date value string: tomorrow"}},
		{"query a list", `{filters: [{namespace: shop.orders, query: [tenant]}]}`,
			[]string{`namespaces.filters[0].query: not a query document: ["tenant"] is not a mapping: write the query as one, such as {tenant: acme}`}},
		{"no query", `{filters: [{namespace: shop.orders}]}`,
			[]string{"namespaces.filters[0].query: is required: give the MongoDB query that selects the documents to keep, for example {tenant: acme}"}},
		{"no namespace", `{filters: [{query: {tenant: acme}}]}`,
			[]string{"namespaces.filters[0].namespace: is required: name the db.collection whose documents the query selects, for example shop.orders"}},
		{"bad pattern", `{filters: [{namespace: 'shop\.(orders', query: {tenant: acme}}]}`,
			[]string{`namespaces.filters[0].namespace: invalid regular expression "shop\\.(orders": missing closing ): ` + "`shop\\.(orders`"}},
		{"not included", `{include: ['crm\..*'], filters: [{namespace: shop.orders, query: {tenant: acme}}]}`,
			[]string{`namespaces.filters[0].namespace: "shop.orders" matches no pattern of namespaces.include, so the task does not copy it: add it to include, or remove the filter`}},
		{"excluded", `{exclude: ['.*\.tmp_.*', 'shop\.orders'], filters: [{namespace: shop.orders, query: {tenant: acme}}]}`,
			[]string{`namespaces.filters[0].namespace: "shop.orders" is excluded by namespaces.exclude[1] ("shop\\.orders"): remove the filter, or narrow the exclusion`}},
		{"pattern excluded", `{exclude: ['shop\..*'], filters: [{namespace: 'shop\..*', query: {tenant: acme}}]}`,
			[]string{`namespaces.filters[0].namespace: "shop\\..*" is excluded by namespaces.exclude[0]: the filter would never apply; remove it or the exclusion`}},
		{"internal database", `{filters: [{namespace: admin.users, query: {tenant: acme}}]}`,
			[]string{`namespaces.filters[0].namespace: "admin.users" is in database admin, which is never copied: remove the filter`}},
		{"checkpoint database", `{filters: [{namespace: mongoferry.ranges, query: {tenant: acme}}]}`,
			[]string{`namespaces.filters[0].namespace: "mongoferry.ranges" is in database mongoferry, which is never copied: remove the filter`}},
		{"system collection", `{filters: [{namespace: shop.system.views, query: {tenant: acme}}]}`,
			[]string{`namespaces.filters[0].namespace: "shop.system.views" is a system collection, which is never copied as documents: remove the filter`}},
		{"two filters", `{filters: [{namespace: shop.orders, query: {tenant: acme}}, {namespace: shop.orders, query: {total: {$gt: 0}}}]}`,
			[]string{`namespaces.filters[1].namespace: "shop.orders" has two filters (namespaces.filters[0] too): a namespace takes one filter; combine the queries into one with $and`}},
		{"pattern and name", `{filters: [{namespace: 'shop\..*', query: {tenant: acme}}, {namespace: shop.orders, query: {total: {$gt: 0}}}]}`,
			[]string{`namespaces.filters[1].namespace: "shop.orders" is also matched by namespaces.filters[0] ("shop\\..*"): a namespace takes one filter; narrow that pattern or combine the queries with $and`}},
		{"every problem", `{include: ['crm\..*'], filters: [{namespace: shop.orders, query: {$where: "1"}}, {namespace: crm.people, query: {a: {$size: -1}}}]}`,
			[]string{
				`namespaces.filters[0].query: $where: operator cannot be evaluated on a document: it runs JavaScript on the server; express the condition with query operators such as $eq, $in and $regex`,
				`namespaces.filters[0].namespace: "shop.orders" matches no pattern of namespaces.include, so the task does not copy it: add it to include, or remove the filter`,
				`namespaces.filters[1].query: a: $size: takes a whole number, zero or more`,
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ns Namespaces
			if err := yaml.UnmarshalStrict([]byte(c.namespaces), &ns); err != nil {
				t.Fatal(err)
			}
			var got []string
			add := func(field, format string, args ...any) {
				got = append(got, field+": "+fmt.Sprintf(format, args...))
			}
			validateFilters(add, ns, DefaultDatabase)
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("namespaces %s:\ngot:\n%s\nwant:\n%s", c.namespaces, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// TestParseFilters reads filters from a task file: a valid one is taken,
// and every problem of an invalid one is named with its field.
func TestParseFilters(t *testing.T) {
	task, err := Parse([]byte(taskYAML("namespaces: {filters: [{namespace: shop.orders, query: {tenant: acme, total: {$gte: 100}}}]}")))
	if err != nil || len(task.Namespaces.Filters) != 1 {
		t.Fatalf("Parse: %v; want the task with its filter", err)
	}
	_, err = Parse([]byte(taskYAML("namespaces: {filters: [{namespace: shop.orders, query: {$where: x}}, {namespace: shop.orders, query: {}}]}")))
	want := "namespaces.filters[0].query: $where: operator cannot be evaluated on a document: it runs JavaScript on the server; express the condition with query operators such as $eq, $in and $regex\n" +
		`namespaces.filters[1].namespace: "shop.orders" has two filters (namespaces.filters[0] too): a namespace takes one filter; combine the queries into one with $and`
	if err == nil || err.Error() != want {
		t.Errorf("Parse:\n%v\nwant:\n%s", err, want)
	}
}

// TestQueryDocument reads a query as YAML gives it and writes it back.
func TestQueryDocument(t *testing.T) {
	var f Filter
	if err := yaml.UnmarshalStrict([]byte(`{namespace: shop.orders, query: {tenant: acme, total: {$gte: 100}, at: {$lt: {$date: "2025-01-01T00:00:00Z"}}}}`), &f); err != nil {
		t.Fatal(err)
	}
	doc, err := f.Query.Document()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := bson.Marshal(bson.D{
		{Key: "at", Value: bson.D{{Key: "$lt", Value: bson.NewDateTimeFromTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))}}},
		{Key: "tenant", Value: "acme"},
		{Key: "total", Value: bson.D{{Key: "$gte", Value: int32(100)}}},
	})
	if !bytes.Equal(doc, want) {
		t.Errorf("Document() = %s, want %s", doc, bson.Raw(want))
	}
	out, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var back Filter
	if err := yaml.UnmarshalStrict(out, &back); err != nil {
		t.Fatal(err)
	}
	if d2, _ := back.Query.Document(); !bytes.Equal(d2, want) {
		t.Errorf("after a YAML round trip (%s): %s, want %s", out, d2, bson.Raw(want))
	}
	if j, _ := Query(nil).MarshalJSON(); string(j) != "{}" {
		t.Errorf("an empty query marshals as %s, want {}", j)
	}
}
