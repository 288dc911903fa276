package config

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/docfilter"
)

// Query is a MongoDB query document held as its JSON text (relaxed
// Extended JSON v2 for the BSON types JSON lacks); Document reads it.
type Query []byte

// MarshalJSON writes the query as it was given; an empty query as {}.
func (q Query) MarshalJSON() ([]byte, error) {
	if len(q) == 0 {
		return []byte("{}"), nil
	}
	return slices.Clone(q), nil
}

// UnmarshalJSON keeps the query's JSON text (null leaves it empty).
func (q *Query) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*q = nil
		return nil
	}
	*q = slices.Clone(b)
	return nil
}

// Document returns the query as a BSON document.
func (q Query) Document() (bson.Raw, error) {
	if t := bytes.TrimSpace(q); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("%s is not a mapping: write the query as one, such as {tenant: acme}", t)
	}
	var d bson.D
	if err := bson.UnmarshalExtJSON(q, false, &d); err != nil {
		return nil, err
	}
	return bson.Marshal(d)
}

// Compile returns the filter's query compiled for evaluation on documents.
func (f Filter) Compile() (*docfilter.Filter, error) {
	doc, err := f.Query.Document()
	if err != nil {
		return nil, fmt.Errorf("not a query document: %w", err)
	}
	return docfilter.Compile(doc)
}

// NamespacePattern compiles a pattern of namespaces.include, exclude or
// filters: a regular expression that must match the whole db.collection.
func NamespacePattern(expr string) (*regexp.Regexp, error) {
	return regexp.Compile("^(?:" + expr + ")$")
}

// literalNamespace reports whether a pattern names one db.collection:
// no regular expression syntax but the dots, which then match themselves.
func literalNamespace(expr string) bool {
	plain := strings.ReplaceAll(expr, ".", "")
	return strings.Contains(expr, ".") && regexp.QuoteMeta(plain) == plain
}

// validateFilters checks namespaces.filters: each query compiles, each
// namespace is one the task selects, and no namespace has two filters.
func validateFilters(add func(string, string, ...any), ns Namespaces, checkpointDB string) {
	patterns := make([]*regexp.Regexp, len(ns.Filters))
	seen := map[string]int{}
	for i, f := range ns.Filters {
		field := fmt.Sprintf("namespaces.filters[%d]", i)
		if len(bytes.TrimSpace(f.Query)) == 0 {
			add(field+".query", "is required: give the MongoDB query that selects the documents to keep, for example {tenant: acme}")
		} else if _, err := f.Compile(); err != nil {
			add(field+".query", "%v", err)
		}
		if f.Namespace == "" {
			add(field+".namespace", "is required: name the db.collection whose documents the query selects, for example shop.orders")
			continue
		}
		if _, err := regexp.Compile(f.Namespace); err != nil {
			add(field+".namespace", "invalid regular expression %q: %v", f.Namespace, unwrapRegexp(err))
			continue
		}
		patterns[i], _ = NamespacePattern(f.Namespace)
		if j, ok := seen[f.Namespace]; ok {
			add(field+".namespace", "%q has two filters (namespaces.filters[%d] too): a namespace takes one filter; combine the queries into one with $and", f.Namespace, j)
			continue
		}
		seen[f.Namespace] = i
		if msg := notSelected(ns, f.Namespace, checkpointDB); msg != "" {
			add(field+".namespace", "%s", msg)
		}
	}
	// A namespace named outright must not also match another filter's
	// pattern. Two patterns that overlap are found when the namespaces are
	// listed, before the copy.
	for i, f := range ns.Filters {
		if patterns[i] == nil || !literalNamespace(f.Namespace) || seen[f.Namespace] != i {
			continue
		}
		for j, re := range patterns {
			if j != i && re != nil && ns.Filters[j].Namespace != f.Namespace && re.MatchString(f.Namespace) {
				add(fmt.Sprintf("namespaces.filters[%d].namespace", i), "%q is also matched by namespaces.filters[%d] (%q): a namespace takes one filter; narrow that pattern or combine the queries with $and",
					f.Namespace, j, ns.Filters[j].Namespace)
			}
		}
	}
}

// notSelected says why the task never copies the namespaces a filter
// names, "" when it may. A pattern is only compared with the exclusions
// it repeats; a plain db.collection is checked against every rule.
func notSelected(ns Namespaces, expr, checkpointDB string) string {
	if !literalNamespace(expr) {
		if j := slices.Index(ns.Exclude, expr); j >= 0 {
			return fmt.Sprintf("%q is excluded by namespaces.exclude[%d]: the filter would never apply; remove it or the exclusion", expr, j)
		}
		return ""
	}
	db, coll, _ := strings.Cut(expr, ".")
	switch {
	case slices.Contains(InternalDatabases, db) || db == checkpointDB:
		return fmt.Sprintf("%q is in database %s, which is never copied: remove the filter", expr, db)
	case strings.HasPrefix(coll, "system."):
		return fmt.Sprintf("%q is a system collection, which is never copied as documents: remove the filter", expr)
	}
	matches := func(exprs []string) int {
		for j, e := range exprs {
			if re, err := NamespacePattern(e); err == nil && re.MatchString(expr) {
				return j
			}
		}
		return -1
	}
	if len(ns.Include) > 0 && matches(ns.Include) < 0 {
		return fmt.Sprintf("%q matches no pattern of namespaces.include, so the task does not copy it: add it to include, or remove the filter", expr)
	}
	if j := matches(ns.Exclude); j >= 0 {
		return fmt.Sprintf("%q is excluded by namespaces.exclude[%d] (%q): remove the filter, or narrow the exclusion", expr, j, ns.Exclude[j])
	}
	return ""
}
