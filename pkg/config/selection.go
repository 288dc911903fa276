package config

import (
	"fmt"
	"slices"
	"strings"
)

// SelectionChanges describes how the namespace selection now differs from
// was, one clause per changed field ("namespaces.include was [...], now
// [...]"); "" when they select and name collections alike (the same
// patterns and renames, in any order).
func SelectionChanges(was, now Namespaces) string {
	var out []string
	field := func(name string, a, b []string) {
		a, b = sortedCopy(a), sortedCopy(b)
		if !slices.Equal(a, b) {
			out = append(out, fmt.Sprintf("namespaces.%s was %s, now %s", name, listOf(a), listOf(b)))
		}
	}
	field("include", was.Include, now.Include)
	field("exclude", was.Exclude, now.Exclude)
	field("rename", renameStrings(was.Rename), renameStrings(now.Rename))
	field("filters", filterStrings(was.Filters), filterStrings(now.Filters))
	return strings.Join(out, "; ")
}

func renameStrings(rs []Rename) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("{from: %s, to: %s}", r.From, r.To)
	}
	return out
}

func filterStrings(fs []Filter) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = fmt.Sprintf("{namespace: %s, query: %s}", f.Namespace, f.Query)
	}
	return out
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func listOf(s []string) string {
	if len(s) == 0 {
		return "empty"
	}
	return "[" + strings.Join(s, ", ") + "]"
}
