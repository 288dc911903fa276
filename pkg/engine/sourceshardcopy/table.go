package sourceshardcopy

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/bsonorder"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// ErrHashedKey is returned for a collection sharded on a hashed key: its
// chunks bound hashes of the key, which this package does not compute.
var ErrHashedKey = errors.New("hashed shard keys are not supported by the per-shard copy; copy the collection through mongos")

// Chunk is one range of a collection's shard key and the shard owning it,
// as a config.chunks document has them (min, max, shard, lastmod).
type Chunk struct {
	// Min is the inclusive and Max the exclusive bound, key documents
	// with the shard key's fields in order ({sk: MinKey} for the first).
	Min, Max bson.Raw
	Shard    string
	// Version is the chunk's lastmod: a migration's commit raises its
	// major part (T), a split or merge its minor part (I).
	Version bson.Timestamp
}

// identity is the chunk's bounds, shard and version as one key: two
// reads of a chunk that no commit changed give the same bytes.
func (c Chunk) identity() string {
	return fmt.Sprintf("%x|%x|%s|%d|%d", []byte(c.Min), []byte(c.Max), c.Shard, c.Version.T, c.Version.I)
}

// String names the chunk for messages.
func (c Chunk) String() string {
	return fmt.Sprintf("[%s, %s) on %s at %d|%d", c.Min, c.Max, c.Shard, c.Version.T, c.Version.I)
}

// Table is a collection's chunk ownership at one point.
type Table struct {
	fields []string
	chunks []Chunk
	// inner are the Min values of every chunk but the first, in order.
	inner [][]bson.RawValue
}

// NewTable checks chunks against the shard key pattern key (the key
// document of config.collections) and returns their table: the chunks,
// in any order, must chain with no gap and no overlap, each starting
// where another ends but one, the first. The outer bounds (the first
// chunk's Min, the last's Max) are the ends of the key space and are not
// compared: MongoDB writes MinKey and MaxKey there, the cluster stand-in
// of the tests a placeholder its FerretDB can store.
func NewTable(key bson.Raw, chunks []Chunk) (*Table, error) {
	elems, err := key.Elements()
	if err != nil || len(elems) == 0 {
		return nil, fmt.Errorf("shard key %s: not a key pattern", key)
	}
	t := &Table{}
	for _, e := range elems {
		if s, ok := e.Value().StringValueOK(); ok && s == "hashed" {
			return nil, fmt.Errorf("shard key %s: %w", key, ErrHashedKey)
		}
		t.fields = append(t.fields, e.Key())
	}
	if len(chunks) == 0 {
		return nil, errors.New("no chunks: the collection's chunk table is empty")
	}
	for i, c := range chunks {
		if _, err := t.bound(c.Min); err != nil {
			return nil, fmt.Errorf("chunk %d min: %w", i, err)
		}
		if _, err := t.bound(c.Max); err != nil {
			return nil, fmt.Errorf("chunk %d max: %w", i, err)
		}
	}
	if t.chunks, err = t.chain(chunks); err != nil {
		return nil, err
	}
	for _, c := range t.chunks[1:] {
		v, _ := t.bound(c.Min)
		t.inner = append(t.inner, v)
	}
	return t, nil
}

// chain returns chunks in key order: the one chunk whose Min is no
// chunk's Max first, the others sorted by Min, each starting where the
// one before ends.
func (t *Table) chain(chunks []Chunk) ([]Chunk, error) {
	maxes := make([][]bson.RawValue, len(chunks))
	for i, c := range chunks {
		maxes[i], _ = t.bound(c.Max)
	}
	sort.Slice(maxes, func(i, j int) bool { return compareKeys(maxes[i], maxes[j]) < 0 })
	first := -1
	for i, c := range chunks {
		v, _ := t.bound(c.Min)
		j := sort.Search(len(maxes), func(j int) bool { return compareKeys(maxes[j], v) >= 0 })
		if j < len(maxes) && compareKeys(maxes[j], v) == 0 {
			continue
		}
		if first >= 0 {
			return nil, fmt.Errorf("chunks %s and %s both start where no chunk ends: a gap or an overlap in the chunk table", chunks[first], c)
		}
		first = i
	}
	if first < 0 {
		return nil, errors.New("every chunk starts where another ends: the chunk table has no first chunk")
	}
	rest := make([]Chunk, 0, len(chunks)-1)
	rest = append(rest, chunks[:first]...)
	rest = append(rest, chunks[first+1:]...)
	sort.Slice(rest, func(i, j int) bool { return t.cmpBounds(rest[i].Min, rest[j].Min) < 0 })
	out := append([]Chunk{chunks[first]}, rest...)
	for i := 1; i < len(out); i++ {
		if t.cmpBounds(out[i-1].Max, out[i].Min) != 0 {
			return nil, fmt.Errorf("chunk %s does not start where %s ends: a gap or an overlap", out[i], out[i-1])
		}
	}
	return out, nil
}

// bound returns a key document's values in the key's field order.
func (t *Table) bound(b bson.Raw) ([]bson.RawValue, error) {
	out := make([]bson.RawValue, len(t.fields))
	for i, f := range t.fields {
		v, err := b.LookupErr(f)
		if err != nil {
			return nil, fmt.Errorf("bound %s lacks shard key field %q", b, f)
		}
		out[i] = v
	}
	return out, nil
}

func (t *Table) cmpBounds(a, b bson.Raw) int {
	va, _ := t.bound(a)
	vb, _ := t.bound(b)
	return compareKeys(va, vb)
}

func compareKeys(a, b []bson.RawValue) int {
	for i := range a {
		if c := bsonorder.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return 0
}

var null = bson.RawValue{Type: bson.TypeNull}

// KeyOf returns doc's shard-key values in the key's order; a missing
// field counts as null, as the server routes it.
func (t *Table) KeyOf(doc bson.Raw) []bson.RawValue {
	out := make([]bson.RawValue, len(t.fields))
	for i, f := range t.fields {
		v, err := doc.LookupErr(strings.Split(f, ".")...)
		if err != nil {
			v = null
		}
		out[i] = v
	}
	return out
}

// Chunk returns the chunk holding doc's shard key.
func (t *Table) Chunk(doc bson.Raw) Chunk {
	key := t.KeyOf(doc)
	i := sort.Search(len(t.inner), func(i int) bool { return compareKeys(t.inner[i], key) > 0 })
	return t.chunks[i] // the first chunk holds every key below inner[0]
}

// Owner returns the shard that owned doc at the table's point.
func (t *Table) Owner(doc bson.Raw) string { return t.Chunk(doc).Shard }

// Owns reports whether shard owned doc at the table's point: a document
// a shard holds that it does not own is an orphan and is not copied.
func (t *Table) Owns(shard string, doc bson.Raw) bool { return t.Owner(doc) == shard }

// Chunks returns the table's chunks in key order.
func (t *Table) Chunks() []Chunk { return append([]Chunk(nil), t.chunks...) }

// Changed returns the chunks of after that before does not have as they
// are (same bounds, shard and version): every range that a migration
// committed into, or that was split or merged, between the two reads.
// The copy reads each of them again from its shard in after.
func Changed(before, after *Table) []Chunk {
	had := make(map[string]bool, len(before.chunks))
	for _, c := range before.chunks {
		had[c.identity()] = true
	}
	var out []Chunk
	for _, c := range after.chunks {
		if !had[c.identity()] {
			out = append(out, c)
		}
	}
	return out
}

// FromLayout returns the table of a collection's layout as
// targetsharding.ReadLayout reads it through mongos (config.collections and
// config.chunks, with each chunk's lastmod).
func FromLayout(l targetsharding.Layout) (*Table, error) {
	key, err := bson.Marshal(l.Key.Doc())
	if err != nil {
		return nil, fmt.Errorf("%s: shard key: %w", l.NS, err)
	}
	chunks := make([]Chunk, len(l.Chunks))
	for i, c := range l.Chunks {
		chunks[i] = Chunk{Min: c.Min, Max: c.Max, Shard: c.Shard, Version: c.Version}
	}
	t, err := NewTable(key, chunks)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.NS, err)
	}
	return t, nil
}
