package docfilter

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// allCases is the whole evaluation table.
func allCases() []matchCase { return slices.Concat(matchCases, moreCases) }

// extJSON reads a relaxed Extended JSON document.
func extJSON(t testing.TB, s string) bson.Raw {
	t.Helper()
	var d bson.D
	if err := bson.UnmarshalExtJSON([]byte(s), false, &d); err != nil {
		t.Fatalf("extended JSON %s: %v", s, err)
	}
	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// caseDocs reads a case's documents.
func caseDocs(t testing.TB, c matchCase) []bson.Raw {
	t.Helper()
	vals, err := extJSON(t, `{"d": `+c.docs+`}`).Lookup("d").Array().Values()
	if err != nil {
		t.Fatal(err)
	}
	docs := make([]bson.Raw, len(vals))
	for i, v := range vals {
		docs[i] = v.Document()
	}
	if len(docs) != len(c.want) {
		t.Fatalf("%s: %d documents, want has %d", c.query, len(docs), len(c.want))
	}
	return docs
}

func TestMatchTable(t *testing.T) {
	cases := allCases()
	if len(cases) < 150 {
		t.Fatalf("the table has %d cases; keep at least 150", len(cases))
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%03d", i), func(t *testing.T) {
			f, err := Compile(extJSON(t, c.query))
			if err != nil {
				t.Fatalf("Compile(%s): %v", c.query, err)
			}
			for j, doc := range caseDocs(t, c) {
				got, err := f.Match(doc)
				if err != nil {
					t.Fatal(err)
				}
				if want := c.want[j] == '1'; got != want {
					t.Errorf("%s on %s: got %v, want %v", c.query, doc, got, want)
				}
			}
		})
	}
}

func TestCompileRefuses(t *testing.T) {
	cases := []struct {
		query       string
		want        string // in the error
		unsupported bool   // wraps ErrUnsupported
	}{
		{`{"$where": "this.a == 1"}`, "$where", true},
		{`{"$expr": {"$eq": ["$a", 1]}}`, "$expr", true},
		{`{"$text": {"$search": "x"}}`, "$text", true},
		{`{"$jsonSchema": {}}`, "$jsonSchema", true},
		{`{"$sampleRate": 0.5}`, "$sampleRate", true},
		{`{"a": {"$near": [0, 0]}}`, "a: $near", true},
		{`{"a": {"$nearSphere": [0, 0]}}`, "$nearSphere", true},
		{`{"a": {"$geoWithin": {}}}`, "$geoWithin", true},
		{`{"a": {"$geoIntersects": {}}}`, "$geoIntersects", true},
		{`{"$or": [{"a": 1}, {"$where": "1"}]}`, "$or.1: $where", true},
		{`{"a": {"$elemMatch": {"$expr": {}}}}`, "$expr", true},
		{`{"$foo": 1}`, "$foo: unknown", false},
		{`{"$not": {"a": 1}}`, "$not: unknown", false},
		{`{"a": {"$foo": 1}}`, "a: $foo: unknown", false},
		{`{"a": {"$bitsAllSet": 1}}`, "$bitsAllSet", false},
		{`{"a": {"$regex": "(?=x)"}}`, "look-around", false},
		{`{"a": {"$regex": "(a)\\1"}}`, "back-references", false},
		{`{"a": {"$regex": "x", "$options": "q"}}`, "option", false},
		{`{"a": {"$regex": {"$regularExpression": {"pattern": "x", "options": "i"}}, "$options": "m"}}`, "twice", false},
		{`{"a": {"$regex": 1}}`, "$regex", false},
		{`{"a": {"$options": "i"}}`, "needs a $regex", false},
		{`{"a": {"$in": 1}}`, "$in: takes an array", false},
		{`{"a": {"$in": [{"$gt": 1}]}}`, "operator", false},
		{`{"a": {"$nin": {"b": 1}}}`, "$nin", false},
		{`{"$or": []}`, "non-empty", false},
		{`{"$and": [1]}`, "$and.0", false},
		{`{"$nor": {"a": 1}}`, "$nor", false},
		{`{"a": {"$size": -1}}`, "$size", false},
		{`{"a": {"$size": 1.5}}`, "whole number", false},
		{`{"a": {"$size": "1"}}`, "$size", false},
		{`{"a": {"$mod": [0, 1]}}`, "divisor cannot be 0", false},
		{`{"a": {"$mod": [1]}}`, "[divisor, remainder]", false},
		{`{"a": {"$mod": ["a", 1]}}`, "finite numbers", false},
		{`{"a": {"$type": "nope"}}`, "unknown type name", false},
		{`{"a": {"$type": 99}}`, "not a BSON type", false},
		{`{"a": {"$type": []}}`, "at least one type", false},
		{`{"a": {"$not": 1}}`, "$not", false},
		{`{"a": {"$not": {"b": 1}}}`, "$not", false},
		{`{"a": {"$ne": {"$regularExpression": {"pattern": "x", "options": ""}}}}`, "$not", false},
		{`{"a": {"$elemMatch": 1}}`, "$elemMatch", false},
		{`{"a": {"$all": [{"$gt": 1}]}}`, "only $elemMatch", false},
		{`{"a": {"$all": 1}}`, "$all", false},
		{`{"a": {"$eq": {"$undefined": true}}}`, "undefined", false},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			_, err := Compile(extJSON(t, c.query))
			if err == nil {
				t.Fatalf("Compile(%s) accepted it", c.query)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Compile(%s) = %q, want it to mention %q", c.query, err, c.want)
			}
			if got := errors.Is(err, ErrUnsupported); got != c.unsupported {
				t.Errorf("Compile(%s): errors.Is(err, ErrUnsupported) = %v, want %v", c.query, got, c.unsupported)
			}
		})
	}
}

func TestFields(t *testing.T) {
	cases := []struct {
		query string
		want  []string
	}{
		{`{}`, []string{}},
		{`{"a": 1}`, []string{"a"}},
		{`{"tenant": "t1", "a.b.c": {"$gt": 1}}`, []string{"a", "tenant"}},
		{`{"$or": [{"c": 1}, {"d.e": {"$elemMatch": {"f": 1}}}], "a": {"$not": {"$gt": 1}}}`, []string{"a", "c", "d"}},
		{`{"$nor": [{"b": 1}], "$and": [{"b": 2}, {"a": {"$all": [{"$elemMatch": {"x": 1}}]}}]}`, []string{"a", "b"}},
		{`{"$comment": "x"}`, []string{}},
	}
	for _, c := range cases {
		f, err := Compile(extJSON(t, c.query))
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Fields(); !slices.Equal(got, c.want) {
			t.Errorf("Fields(%s) = %q, want %q", c.query, got, c.want)
		}
		for _, name := range []string{"a", "b", "c", "d", "tenant", "x", "f", "a.b"} {
			if got, want := f.Reads(name), slices.Contains(c.want, name); got != want {
				t.Errorf("Reads(%s) of %s = %v, want %v", name, c.query, got, want)
			}
		}
	}
}

func TestMatchRefusesInvalidDocument(t *testing.T) {
	f, err := Compile(extJSON(t, `{"a": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Match(bson.Raw{5, 0, 0, 0, 1}); err == nil {
		t.Error("Match accepted a malformed document")
	}
	if _, err := Compile(bson.Raw{1, 2}); err == nil {
		t.Error("Compile accepted a malformed query")
	}
}

func TestQueryKeepsTheDocument(t *testing.T) {
	q := extJSON(t, `{"tenant": "t1"}`)
	f, err := Compile(q)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.Query(), q) {
		t.Errorf("Query() = %s, want %s", f.Query(), q)
	}
}

func BenchmarkMatch(b *testing.B) {
	f, err := Compile(extJSON(b, `{"tenant": "t1", "$or": [{"items.qty": {"$gte": 5}}, {"tags": {"$in": ["x", "y"]}}]}`))
	if err != nil {
		b.Fatal(err)
	}
	doc := extJSON(b, `{"_id": 1, "tenant": "t1", "name": "order", "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 7}], "tags": ["z"]}`)
	b.ReportAllocs()
	for b.Loop() {
		if ok, _ := f.Match(doc); !ok {
			b.Fatal("no match")
		}
	}
}
