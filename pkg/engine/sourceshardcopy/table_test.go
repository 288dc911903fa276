package sourceshardcopy

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

func raw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// chunks builds chunks on key field f at the bounds, owned in turn by
// shards, all at version 1|0.
func chunks(t *testing.T, f string, bounds []any, shards ...string) []Chunk {
	t.Helper()
	var out []Chunk
	for i := 0; i+1 < len(bounds); i++ {
		out = append(out, Chunk{Min: raw(t, bson.D{{Key: f, Value: bounds[i]}}), Max: raw(t, bson.D{{Key: f, Value: bounds[i+1]}}),
			Shard: shards[i%len(shards)], Version: bson.Timestamp{T: 1}})
	}
	return out
}

func TestOwner(t *testing.T) {
	key := raw(t, bson.D{{Key: "sk", Value: 1}})
	tab, err := NewTable(key, chunks(t, "sk", []any{bson.MinKey{}, int64(10), int64(20), bson.MaxKey{}}, "s0", "s1", "s2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		doc  bson.D
		want string
	}{
		{"below the first bound", bson.D{{Key: "_id", Value: 1}, {Key: "sk", Value: int64(-5)}}, "s0"},
		{"at a bound: the chunk it starts", bson.D{{Key: "_id", Value: 2}, {Key: "sk", Value: int32(10)}}, "s1"},
		{"a double between bounds", bson.D{{Key: "_id", Value: 3}, {Key: "sk", Value: 19.5}}, "s1"},
		{"missing key field: null, in the first chunk", bson.D{{Key: "_id", Value: 4}}, "s0"},
		{"a string sorts after numbers", bson.D{{Key: "_id", Value: 5}, {Key: "sk", Value: "a"}}, "s2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := raw(t, tc.doc)
			if got := tab.Owner(doc); got != tc.want {
				t.Fatalf("owner %s, want %s", got, tc.want)
			}
			if !tab.Owns(tc.want, doc) || tab.Owns("other", doc) {
				t.Fatal("Owns disagrees with Owner")
			}
		})
	}
}

func TestOwnerCompoundDotted(t *testing.T) {
	key := raw(t, bson.D{{Key: "region", Value: 1}, {Key: "a.b", Value: 1}})
	b := func(r, v any) bson.Raw { return raw(t, bson.D{{Key: "region", Value: r}, {Key: "a.b", Value: v}}) }
	tab, err := NewTable(key, []Chunk{
		{Min: b(bson.MinKey{}, bson.MinKey{}), Max: b("EU", int64(5)), Shard: "s0"},
		{Min: b("EU", int64(5)), Max: b(bson.MaxKey{}, bson.MaxKey{}), Shard: "s1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	doc := func(r string, v int64) bson.Raw {
		return raw(t, bson.D{{Key: "_id", Value: 1}, {Key: "region", Value: r}, {Key: "a", Value: bson.D{{Key: "b", Value: v}}}})
	}
	if got := tab.Owner(doc("EU", 4)); got != "s0" {
		t.Fatalf("EU,4 on %s, want s0", got)
	}
	if got := tab.Owner(doc("EU", 5)); got != "s1" {
		t.Fatalf("EU,5 on %s, want s1", got)
	}
	if got := tab.Owner(doc("AP", 99)); got != "s0" {
		t.Fatalf("AP,99 on %s, want s0", got)
	}
}

// TestOuterBoundsNotCompared: the first chunk holds every key below the
// next chunk's Min and the last every key from its own Min, whatever
// their outer bounds hold (the cluster stand-in's placeholders here).
func TestOuterBoundsNotCompared(t *testing.T) {
	key := raw(t, bson.D{{Key: "sk", Value: 1}})
	cs := chunks(t, "sk", []any{"stand-in MinKey", int64(10), int64(20), "stand-in MaxKey"}, "s0", "s1", "s2")
	cs[0], cs[2] = cs[2], cs[0] // any order
	tab, err := NewTable(key, cs)
	if err != nil {
		t.Fatal(err)
	}
	for v, want := range map[any]string{int64(-1 << 40): "s0", int64(9): "s0", int64(10): "s1", int64(25): "s2", "a string": "s2"} {
		if got := tab.Owner(raw(t, bson.D{{Key: "sk", Value: v}})); got != want {
			t.Errorf("owner of %v is %s, want %s", v, got, want)
		}
	}
}

func TestNewTableRefuses(t *testing.T) {
	key := raw(t, bson.D{{Key: "sk", Value: 1}})
	gap := chunks(t, "sk", []any{bson.MinKey{}, int64(10), bson.MaxKey{}}, "s0")
	gap[1].Min = raw(t, bson.D{{Key: "sk", Value: int64(11)}})
	for _, tc := range []struct {
		name   string
		key    bson.Raw
		chunks []Chunk
		want   string
	}{
		{"hashed key", raw(t, bson.D{{Key: "sk", Value: "hashed"}}), chunks(t, "sk", []any{bson.MinKey{}, bson.MaxKey{}}, "s0"), "hashed"},
		{"no chunks", key, nil, "empty"},
		{"a gap", key, gap, "gap"},
		{"two overlapping chunks", key, append(chunks(t, "sk", []any{bson.MinKey{}, int64(10), bson.MaxKey{}}, "s0"), chunks(t, "sk", []any{int64(5), int64(20)}, "s1")...), "overlap"},
		{"a bound without the key field", key, []Chunk{{Min: raw(t, bson.D{{Key: "x", Value: bson.MinKey{}}}), Max: raw(t, bson.D{{Key: "sk", Value: bson.MaxKey{}}})}}, `lacks shard key field "sk"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewTable(tc.key, tc.chunks)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %q", err, tc.want)
			}
			if tc.name == "hashed key" && !errors.Is(err, ErrHashedKey) {
				t.Fatalf("err %v is not ErrHashedKey", err)
			}
		})
	}
}

func TestChanged(t *testing.T) {
	key := raw(t, bson.D{{Key: "sk", Value: 1}})
	bounds := []any{bson.MinKey{}, int64(10), int64(20), bson.MaxKey{}}
	before := chunks(t, "sk", bounds, "s0", "s1", "s2")
	moved := chunks(t, "sk", bounds, "s0", "s1", "s2")
	moved[1].Shard, moved[1].Version = "s2", bson.Timestamp{T: 2}
	back := chunks(t, "sk", bounds, "s0", "s1", "s2")
	back[1].Version = bson.Timestamp{T: 3} // moved away and back: same shard, new version
	split := chunks(t, "sk", []any{bson.MinKey{}, int64(5), int64(10), int64(20), bson.MaxKey{}}, "s0", "s0", "s1", "s2")
	split[0].Version, split[1].Version = bson.Timestamp{T: 1, I: 1}, bson.Timestamp{T: 1, I: 2}
	for _, tc := range []struct {
		name  string
		after []Chunk
		want  []string // owners of the changed chunks
	}{
		{"unchanged", before, nil},
		{"a migration", moved, []string{"s2"}},
		{"moved away and back", back, []string{"s1"}},
		{"a split", split, []string{"s0", "s0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewTable(key, before)
			if err != nil {
				t.Fatal(err)
			}
			a, err := NewTable(key, tc.after)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range Changed(b, a) {
				got = append(got, c.Shard)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("changed chunks on %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFromLayout builds the table of a layout as targetsharding.ReadLayout
// reads it, and refuses a hashed key naming the collection.
func TestFromLayout(t *testing.T) {
	cs := chunks(t, "sk", []any{bson.MinKey{}, int64(10), bson.MaxKey{}}, "s0", "s1")
	l := targetsharding.Layout{NS: "app.users", Key: targetsharding.Key{{Name: "sk"}}}
	for _, c := range cs {
		l.Chunks = append(l.Chunks, targetsharding.Chunk{Min: c.Min, Max: c.Max, Shard: c.Shard, Version: c.Version})
	}
	tab, err := FromLayout(l)
	if err != nil {
		t.Fatal(err)
	}
	if got := tab.Owner(raw(t, bson.D{{Key: "_id", Value: 1}, {Key: "sk", Value: int64(12)}})); got != "s1" {
		t.Fatalf("owner %s, want s1", got)
	}
	if n := len(Changed(tab, tab)); n != 0 {
		t.Fatalf("%d chunks changed between a table and itself", n)
	}
	l.Key = targetsharding.Key{{Name: "sk", Hashed: true}}
	if _, err := FromLayout(l); !errors.Is(err, ErrHashedKey) || !strings.Contains(err.Error(), "app.users") {
		t.Fatalf("hashed key: %v, want ErrHashedKey naming app.users", err)
	}
}
