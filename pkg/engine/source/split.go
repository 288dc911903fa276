package source

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/engine/bsonorder"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// Range is a part of a collection to copy: the documents its filter
// matches. The ranges of one collection cover every document exactly once.
type Range struct {
	Filter   bson.Raw
	Describe string
}

// Splitter plans a collection's ranges.
type Splitter struct {
	// RangeDocuments is about how many documents one range holds.
	RangeDocuments int64
	// SamplesPerRange is how many sampled _ids back each boundary; 20 when
	// zero.
	SamplesPerRange int
	// Whole plans one range per collection whatever its size: only the
	// document count is read.
	Whole bool
}

// Split returns the ranges of coll and its estimated document count.
//
// Boundaries come from a sample of _id values ($sample where the server has
// it, otherwise a reservoir sample over one scan of the _ids), sorted in
// MongoDB's order. A range between two boundaries is a filter per type
// bracket: {_id: {$type: [bracket], $gte: lo}} on the lower bracket, whole
// brackets in between by $type alone, and {$type, $lt: hi} on the upper,
// since comparison operators only match values of their operand's bracket.
func (s Splitter) Split(ctx context.Context, coll *mongo.Collection) ([]Range, int64, error) {
	estimated, err := Estimate(ctx, coll)
	if err != nil {
		return nil, 0, err
	}
	per := max(s.RangeDocuments, 1)
	if s.Whole || estimated <= per {
		return []Range{whole()}, estimated, nil
	}
	k := int((estimated + per - 1) / per)
	spr := s.SamplesPerRange
	if spr == 0 {
		spr = 20
	}
	sample, err := sampleIDs(ctx, coll, min(k*spr, 100_000))
	if err != nil {
		return nil, 0, err
	}
	bounds := Boundaries(sample, k)
	return RangesFromBoundaries(bounds), estimated, nil
}

// Estimate returns about how many documents coll holds: collStats' count,
// or estimatedDocumentCount where collStats is refused. (FerretDB answers
// the count command, which estimatedDocumentCount sends, by reading
// every document; collStats it answers from its metadata.)
func Estimate(ctx context.Context, coll *mongo.Collection) (int64, error) {
	if st, err := catalog.CollStats(ctx, coll); err == nil {
		return st.Count, nil
	}
	n, err := coll.EstimatedDocumentCount(ctx)
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", nsOf(coll), err)
	}
	return n, nil
}

func whole() Range {
	raw, _ := bson.Marshal(bson.D{})
	return Range{Filter: raw, Describe: "all documents"}
}

// Boundaries picks up to k-1 split points from sampled _ids: sorted in
// MongoDB's order, without duplicates, from splittable brackets only.
func Boundaries(sample []bson.RawValue, k int) []bson.RawValue {
	vals := slices.DeleteFunc(slices.Clone(sample), func(v bson.RawValue) bool { return !splittable(v.Type) })
	slices.SortFunc(vals, bsonorder.Compare)
	vals = slices.CompactFunc(vals, func(a, b bson.RawValue) bool { return bsonorder.Compare(a, b) == 0 })
	if k <= 1 || len(vals) == 0 {
		return nil
	}
	var out []bson.RawValue
	for i := 1; i < k; i++ {
		v := vals[i*len(vals)/k]
		if len(out) == 0 || bsonorder.Compare(out[len(out)-1], v) < 0 {
			out = append(out, v)
		}
	}
	return out
}

// splitAliases are the $type names of the splittable brackets, in
// MongoDB's order; every server knows them (FerretDB rejects exotic ones
// such as minKey, so they are never named in a filter).
var splitAliases = []struct {
	types []bson.Type
	alias string
}{
	{[]bson.Type{bson.TypeInt32, bson.TypeInt64, bson.TypeDouble, bson.TypeDecimal128}, "number"},
	{[]bson.Type{bson.TypeString}, "string"},
	{[]bson.Type{bson.TypeEmbeddedDocument}, "object"},
	{[]bson.Type{bson.TypeBinary}, "binData"},
	{[]bson.Type{bson.TypeObjectID}, "objectId"},
	{[]bson.Type{bson.TypeDateTime}, "date"},
	{[]bson.Type{bson.TypeTimestamp}, "timestamp"},
}

// splittable brackets have an order $gte/$lt can express on every server:
// numbers, strings, documents, binary, ObjectId, dates and timestamps.
func splittable(t bson.Type) bool { return aliasIndex(t) >= 0 }

func aliasIndex(t bson.Type) int {
	for i, a := range splitAliases {
		if slices.Contains(a.types, t) {
			return i
		}
	}
	return -1
}

// RangesFromBoundaries turns sorted boundaries b1 < b2 < ... (all of
// splittable brackets) into ranges (-inf, b1), [b1, b2), ..., [bn, +inf)
// over the splittable brackets, plus one last range for _ids of every
// other type (null, booleans, regexes, MinKey, ...). Together the ranges
// match every document exactly once.
func RangesFromBoundaries(bounds []bson.RawValue) []Range {
	if len(bounds) == 0 {
		return []Range{whole()}
	}
	out := make([]Range, 0, len(bounds)+2)
	add := func(f bson.D, describe string) {
		raw, err := bson.Marshal(f)
		if err != nil {
			panic(fmt.Sprintf("source: marshal range filter: %v", err))
		}
		out = append(out, Range{Filter: raw, Describe: describe})
	}
	for i := 0; i <= len(bounds); i++ {
		var lo, hi *bson.RawValue
		if i > 0 {
			lo = &bounds[i-1]
		}
		if i < len(bounds) {
			hi = &bounds[i]
		}
		add(rangeFilter(lo, hi), describe(lo, hi))
	}
	all := make(bson.A, len(splitAliases))
	for i, a := range splitAliases {
		all[i] = a.alias
	}
	add(bson.D{{Key: "_id", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: all}}}}}},
		"_ids of other types (null, boolean, regex, MinKey, ...)")
	return out
}

// rangeFilter matches splittable _ids in [lo, hi); nil means unbounded.
func rangeFilter(lo, hi *bson.RawValue) bson.D {
	first, last := -1, len(splitAliases)
	if lo != nil {
		first = aliasIndex(lo.Type)
	}
	if hi != nil {
		last = aliasIndex(hi.Type)
	}
	cond := func(v *bson.RawValue, op string) bson.D {
		return bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: splitAliases[aliasIndex(v.Type)].alias}, {Key: op, Value: *v}}}}
	}
	if lo != nil && hi != nil && first == last {
		return bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: splitAliases[first].alias}, {Key: "$gte", Value: *lo}, {Key: "$lt", Value: *hi}}}}
	}
	var parts bson.A
	if lo != nil {
		parts = append(parts, cond(lo, "$gte"))
	}
	var middle bson.A
	for i := first + 1; i < last; i++ {
		middle = append(middle, splitAliases[i].alias)
	}
	if len(middle) > 0 {
		parts = append(parts, bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: middle}}}})
	}
	if hi != nil {
		parts = append(parts, cond(hi, "$lt"))
	}
	if len(parts) == 1 {
		return parts[0].(bson.D)
	}
	return bson.D{{Key: "$or", Value: parts}}
}

func describe(lo, hi *bson.RawValue) string {
	var b strings.Builder
	if lo == nil {
		b.WriteString("[start")
	} else {
		b.WriteString("[" + lo.String())
	}
	if hi == nil {
		b.WriteString(", end]")
	} else {
		b.WriteString(", " + hi.String() + ")")
	}
	return b.String()
}

// sampleIDs returns up to n _id values drawn at random.
func sampleIDs(ctx context.Context, coll *mongo.Collection, n int) ([]bson.RawValue, error) {
	if ids, err := sampleWithStage(ctx, coll, n); err == nil {
		return ids, nil
	}
	// No $sample (FerretDB): reservoir-sample one scan of the _ids.
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(1_000_000))
	if err != nil {
		return nil, fmt.Errorf("sample _id of %s: %w", nsOf(coll), err)
	}
	defer func() { _ = cur.Close(context.Background()) }()
	rng := rand.New(rand.NewPCG(uint64(n), 0x6d6f6e676f))
	var out []bson.RawValue
	seen := 0
	for cur.Next(ctx) {
		id := cloneValue(cur.Current.Lookup("_id"))
		seen++
		if len(out) < n {
			out = append(out, id)
		} else if j := rng.IntN(seen); j < n {
			out[j] = id
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("sample _id of %s: %w", nsOf(coll), err)
	}
	return out, nil
}

func sampleWithStage(ctx context.Context, coll *mongo.Collection, n int) ([]bson.RawValue, error) {
	cur, err := coll.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$sample", Value: bson.D{{Key: "size", Value: n}}}},
		{{Key: "$project", Value: bson.D{{Key: "_id", Value: 1}}}},
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = cur.Close(context.Background()) }()
	var out []bson.RawValue
	for cur.Next(ctx) {
		out = append(out, cloneValue(cur.Current.Lookup("_id")))
	}
	return out, cur.Err()
}

func cloneValue(v bson.RawValue) bson.RawValue {
	v.Value = slices.Clone(v.Value)
	return v
}

func nsOf(c *mongo.Collection) string { return c.Database().Name() + "." + c.Name() }
