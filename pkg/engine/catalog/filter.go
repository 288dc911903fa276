package catalog

import (
	"fmt"
	"regexp"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/docfilter"
)

// nsFilter is one namespaces.filters rule, compiled.
type nsFilter struct {
	index  int
	expr   string
	re     *regexp.Regexp
	filter *docfilter.Filter
}

// compileFilters compiles namespaces.filters: each pattern must match the
// whole db.collection, as include and exclude do.
func compileFilters(fs []config.Filter) ([]nsFilter, error) {
	out := make([]nsFilter, 0, len(fs))
	for i, f := range fs {
		re, err := config.NamespacePattern(f.Namespace)
		if err != nil {
			return nil, fmt.Errorf("namespaces.filters[%d].namespace: invalid regular expression %q: %w", i, f.Namespace, err)
		}
		df, err := f.Compile()
		if err != nil {
			return nil, fmt.Errorf("namespaces.filters[%d].query: %w", i, err)
		}
		out = append(out, nsFilter{index: i, expr: f.Namespace, re: re, filter: df})
	}
	return out, nil
}

// Filter returns the document filter of a source namespace
// (namespaces.filters), nil when its documents are copied whole. A
// namespace two filters match is an error naming both: validation
// refuses the cases it can see, overlapping patterns show here, before
// anything is copied.
func (m *Mapper) Filter(n Namespace) (*docfilter.Filter, error) {
	var found *nsFilter
	s := n.String()
	for i := range m.filters {
		f := &m.filters[i]
		if !f.re.MatchString(s) {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("%s: matched by namespaces.filters[%d] (%q) and [%d] (%q): a namespace takes one filter; narrow a pattern or combine the queries with $and",
				s, found.index, found.expr, f.index, f.expr)
		}
		found = f
	}
	if found == nil {
		return nil, nil
	}
	return found.filter, nil
}

// RangeQuery is the find filter that reads one _id range of the
// collection: the range's own filter, and with a document filter both.
func (c Collection) RangeQuery(rangeFilter bson.Raw) any {
	if c.Filter == nil {
		return rangeFilter
	}
	return bson.D{{Key: "$and", Value: bson.A{rangeFilter, c.Filter.Query()}}}
}
