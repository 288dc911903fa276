package docfilter

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// missing stands for a field a path does not reach: the server's EOO
// element, which equality to null matches.
var missing = bson.RawValue{}

// path is a dotted field path split into its components.
type path []string

func splitPath(s string) path { return strings.Split(s, ".") }

// visit is called with each value a path reaches; returning true stops
// the walk and makes it report true.
type visit func(v bson.RawValue) bool

// walk calls fn with every value the path reaches in doc, as the server's
// path traversal does: arrays met before the last component are walked
// element by element (embedded documents are followed, and a numeric
// component also picks the element at that position), a scalar before the
// last component and a document without the field give missing, and an
// array at the end gives each of its elements and then the array itself
// when expand is set (only the array otherwise).
func walk(doc bson.Raw, p path, expand bool, fn visit) bool {
	v, err := doc.LookupErr(p[0])
	if err != nil {
		return fn(missing)
	}
	return walkValue(v, p[1:], expand, fn)
}

func walkValue(v bson.RawValue, rest path, expand bool, fn visit) bool {
	if len(rest) == 0 {
		if expand && v.Type == bson.TypeArray {
			for _, e := range arrayValues(v) {
				if fn(e) {
					return true
				}
			}
		}
		return fn(v)
	}
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		return walk(v.Document(), rest, expand, fn)
	case bson.TypeArray:
		elems := arrayValues(v)
		if i, ok := arrayIndex(rest[0]); ok && i < len(elems) {
			if walkValue(elems[i], rest[1:], expand, fn) {
				return true
			}
		}
		for _, e := range elems {
			if e.Type == bson.TypeEmbeddedDocument && walk(e.Document(), rest, expand, fn) {
				return true
			}
		}
		return false
	}
	return fn(missing)
}

// arrayValues returns the elements of an array value; a malformed array
// (Match validates documents first) gives none.
func arrayValues(v bson.RawValue) []bson.RawValue {
	vals, err := v.Array().Values()
	if err != nil {
		return nil
	}
	return vals
}

// arrayIndex reads a path component that names an array position: digits
// only, without a leading zero.
func arrayIndex(s string) (int, bool) {
	if s == "" || len(s) > 9 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}
