package targetsharding

import (
	"sort"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/bsonorder"
)

// Router tells which target shard owns a document, from a plan whose
// chunk layout is known (placement moveRange): the copy groups each batch
// by owner and writes the groups in parallel, one command per shard.
type Router struct {
	key    Key
	bounds [][]bson.RawValue // each split point's key values, in key order
	owners []string
}

// Router returns the plan's router, or nil when the plan does not decide
// where chunks go (hashed keys, zones, the balancer, an unsharded or kept
// collection).
func (p Plan) Router() *Router {
	if p.Placement != PlaceMoves || len(p.Owners) != len(p.Bounds)+1 || len(p.Key) == 0 || p.Key.Hashed() {
		return nil
	}
	r := &Router{key: p.Key, owners: p.Owners}
	for _, b := range p.Bounds {
		vals := make([]bson.RawValue, len(p.Key))
		for i, f := range p.Key {
			vals[i] = b.Lookup(f.Name) // a bound names the fields as they are, dots included
		}
		r.bounds = append(r.bounds, vals)
	}
	return r
}

// Owner returns the shard that owns doc's chunk. A key field missing from
// doc counts as null, as mongos routes it.
func (r *Router) Owner(doc bson.Raw) string {
	vals := make([]bson.RawValue, len(r.key))
	for i, f := range r.key {
		v, err := doc.LookupErr(strings.Split(f.Name, ".")...)
		if err != nil {
			v = bson.RawValue{Type: bson.TypeNull}
		}
		vals[i] = v
	}
	// The first split point above the document's key ends its chunk.
	j := sort.Search(len(r.bounds), func(j int) bool { return compareKeys(vals, r.bounds[j]) < 0 })
	return r.owners[j]
}

// Group splits docs by owner, keeping their order within each group.
func (r *Router) Group(docs []bson.Raw) [][]bson.Raw {
	index := map[string]int{}
	var out [][]bson.Raw
	for _, d := range docs {
		o := r.Owner(d)
		i, ok := index[o]
		if !ok {
			i = len(out)
			index[o] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], d)
	}
	return out
}

// compareKeys orders two key tuples field by field, as chunk bounds are
// ordered.
func compareKeys(a, b []bson.RawValue) int {
	for i := range a {
		if c := bsonorder.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return 0
}
