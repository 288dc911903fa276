package targetsharding

import (
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// KeyField is one field of a shard key: ranged (1) or hashed.
type KeyField struct {
	Name   string
	Hashed bool
}

// Key is a shard key, its fields in order.
type Key []KeyField

// ParseKey reads a shard key document ({region: 1, userId: "hashed"}).
func ParseKey(raw bson.Raw) (Key, error) {
	elems, err := raw.Elements()
	if err != nil {
		return nil, fmt.Errorf("shard key %s: %w", raw, err)
	}
	if len(elems) == 0 {
		return nil, errors.New("shard key is empty")
	}
	key := make(Key, 0, len(elems))
	for _, e := range elems {
		f := KeyField{Name: e.Key()}
		v := e.Value()
		switch {
		case v.Type == bson.TypeString && v.StringValue() == "hashed":
			f.Hashed = true
		case isOne(v):
		default:
			return nil, fmt.Errorf("shard key %s: field %s is %s; a shard key field is 1 or \"hashed\"", raw, f.Name, v)
		}
		key = append(key, f)
	}
	return key, key.check()
}

// isOne reports whether v is the number 1 of any numeric type.
func isOne(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeInt32:
		return v.Int32() == 1
	case bson.TypeInt64:
		return v.Int64() == 1
	case bson.TypeDouble:
		return v.Double() == 1
	}
	return false
}

// check refuses keys the server refuses: no field twice, at most one
// hashed field, no empty or $-prefixed name.
func (k Key) check() error {
	seen := map[string]bool{}
	hashed := 0
	for _, f := range k {
		if f.Name == "" || strings.HasPrefix(f.Name, "$") {
			return fmt.Errorf("shard key %s: field name %q is not allowed", k, f.Name)
		}
		if seen[f.Name] {
			return fmt.Errorf("shard key %s: field %s appears twice", k, f.Name)
		}
		seen[f.Name] = true
		if f.Hashed {
			hashed++
		}
	}
	if hashed > 1 {
		return fmt.Errorf("shard key %s: at most one field may be hashed", k)
	}
	return nil
}

// Doc returns the key as the shardCollection command takes it.
func (k Key) Doc() bson.D {
	d := make(bson.D, 0, len(k))
	for _, f := range k {
		if f.Hashed {
			d = append(d, bson.E{Key: f.Name, Value: "hashed"})
		} else {
			d = append(d, bson.E{Key: f.Name, Value: int32(1)})
		}
	}
	return d
}

// Hashed reports whether a field of the key is hashed.
func (k Key) Hashed() bool {
	for _, f := range k {
		if f.Hashed {
			return true
		}
	}
	return false
}

// Equal reports whether two keys are the same fields, in the same order,
// hashed alike.
func (k Key) Equal(o Key) bool {
	if len(k) != len(o) {
		return false
	}
	for i := range k {
		if k[i] != o[i] {
			return false
		}
	}
	return true
}

// String writes the key as the shell shows it.
func (k Key) String() string {
	parts := make([]string, len(k))
	for i, f := range k {
		v := "1"
		if f.Hashed {
			v = `"hashed"`
		}
		parts[i] = f.Name + ": " + v
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// bound returns a key document with every field at v (MinKey or MaxKey):
// the lower bound of the first chunk, the upper bound of the last.
func (k Key) bound(v any) bson.Raw {
	d := make(bson.D, len(k))
	for i, f := range k {
		d[i] = bson.E{Key: f.Name, Value: v}
	}
	raw, _ := bson.Marshal(d)
	return raw
}

// Chunk is one chunk of a sharded collection: [Min, Max) on Shard.
type Chunk struct {
	Min, Max bson.Raw
	Shard    string
	// Version is the chunk's lastmod (zero when absent): a migration's
	// commit gives the moved chunk a new one.
	Version bson.Timestamp
}

// ZoneRange is a range of shard-key values pinned to a zone: [Min, Max).
type ZoneRange struct {
	Min, Max bson.Raw
	Zone     string
}

// Layout is how one collection is sharded.
type Layout struct {
	// NS is the collection ("db.coll").
	NS     string
	Key    Key
	Unique bool
	// UUID is the collection's UUID (config.chunks names chunks by it
	// from 5.0; 4.4 names them by NS).
	UUID *bson.Binary
	// SimpleCollation is set when the collection has a default collation:
	// shardCollection then needs collation {locale: "simple"}.
	SimpleCollation bool
	// Chunks are sorted by Min; Zones are the collection's zone ranges.
	Chunks []Chunk
	Zones  []ZoneRange
}

// ParseCollection reads one config.collections document. It reports
// false for what is not a sharded collection: a dropped one (4.4 keeps
// them, dropped: true) and, from 8.0, a collection the cluster tracks
// without sharding it (unsplittable: true, after moveCollection).
func ParseCollection(raw bson.Raw) (Layout, bool, error) {
	ns, ok := raw.Lookup("_id").StringValueOK()
	if !ok {
		return Layout{}, false, fmt.Errorf("config.collections: document without a string _id: %s", raw)
	}
	if b, _ := raw.Lookup("dropped").BooleanOK(); b {
		return Layout{}, false, nil
	}
	if b, _ := raw.Lookup("unsplittable").BooleanOK(); b {
		return Layout{}, false, nil
	}
	keyDoc, ok := raw.Lookup("key").DocumentOK()
	if !ok {
		return Layout{}, false, fmt.Errorf("config.collections %s: no key", ns)
	}
	key, err := ParseKey(keyDoc)
	if err != nil {
		return Layout{}, false, fmt.Errorf("config.collections %s: %w", ns, err)
	}
	l := Layout{NS: ns, Key: key}
	l.Unique, _ = raw.Lookup("unique").BooleanOK()
	if st, data, ok := raw.Lookup("uuid").BinaryOK(); ok {
		l.UUID = &bson.Binary{Subtype: st, Data: data}
	}
	if _, ok := raw.Lookup("defaultCollation").DocumentOK(); ok {
		l.SimpleCollation = true
	}
	return l, true, nil
}

// ParseChunk reads one config.chunks document.
func ParseChunk(raw bson.Raw) (Chunk, error) {
	min, ok1 := raw.Lookup("min").DocumentOK()
	max, ok2 := raw.Lookup("max").DocumentOK()
	shard, ok3 := raw.Lookup("shard").StringValueOK()
	if !ok1 || !ok2 || !ok3 {
		return Chunk{}, fmt.Errorf("config.chunks: document without min, max and shard: %s", raw)
	}
	c := Chunk{Min: min, Max: max, Shard: shard}
	if t, i, ok := raw.Lookup("lastmod").TimestampOK(); ok {
		c.Version = bson.Timestamp{T: t, I: i}
	}
	return c, nil
}

// ParseZoneRange reads one config.tags document.
func ParseZoneRange(raw bson.Raw) (ns string, z ZoneRange, err error) {
	ns, ok := raw.Lookup("ns").StringValueOK()
	min, ok1 := raw.Lookup("min").DocumentOK()
	max, ok2 := raw.Lookup("max").DocumentOK()
	tag, ok3 := raw.Lookup("tag").StringValueOK()
	if !ok || !ok1 || !ok2 || !ok3 {
		return "", ZoneRange{}, fmt.Errorf("config.tags: document without ns, min, max and tag: %s", raw)
	}
	return ns, ZoneRange{Min: min, Max: max, Zone: tag}, nil
}

// Shard is one shard of a cluster with the zones it belongs to.
type Shard struct {
	Name  string
	Zones []string
}

// ParseShard reads one config.shards document's name and zones (tags).
func ParseShard(raw bson.Raw) (Shard, error) {
	name, ok := raw.Lookup("_id").StringValueOK()
	if !ok {
		return Shard{}, fmt.Errorf("config.shards: document without a string _id: %s", raw)
	}
	s := Shard{Name: name}
	if arr, ok := raw.Lookup("tags").ArrayOK(); ok {
		vals, _ := arr.Values()
		for _, v := range vals {
			if z, ok := v.StringValueOK(); ok {
				s.Zones = append(s.Zones, z)
			}
		}
	}
	return s, nil
}
