package shardsim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/bsonorder"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// Target is the target side of a run: a sharded cluster as its mongos
// routes single-document writes. What stands in for what: the chunk
// table is what the task's pre-split plan (targetsharding.MakePlan, from the
// model's chunks) leaves after its commands are applied here, and must
// cover the key space with no gap; a write is refused as mongos refuses
// it (the rules of pkg/engine/replay/shardkey.go, by major version), with
// the server's code, and the refusal fails the run; the documents
// themselves are the Recorder's. The model's documents have _id and sk,
// so a key is made of those.
type Target struct {
	// Major is the target's major version (5 to 8).
	Major int
	// Key is the target collection's shard key; Shards its shard count.
	Key    targetsharding.Key
	Shards int

	mu     sync.Mutex
	chunks []targetChunk
	plan   targetsharding.Plan
	stats  TargetStats
}

// targetChunk is one chunk of the target: [min, max) of the key's
// routing values (a hashed field's hash).
type targetChunk struct {
	min, max bson.Raw
	shard    string
}

// TargetStats counts what the target saw.
type TargetStats struct {
	// Writes are the writes routed; Inserts among them; WithKey those
	// whose filter held the whole shard key; GoneByID deletes by _id
	// alone of a document the target no longer holds (a conflict's
	// delete after the other shard's own: it matches nothing, and mongos
	// routes a delete by exact _id).
	Writes, Inserts, WithKey, GoneByID int
	// KeyChanges are writes that changed a document's shard-key value;
	// Moves those that moved it to another shard (WouldChangeOwningShard).
	KeyChanges, Moves int
	// Refused are the writes refused (each fails the run).
	Refused int
	// Chunks is the pre-split's chunk count.
	Chunks int
}

// TargetShapes are the shard keys runs use: the source's key (ranged,
// pre-split at its chunk boundaries), that key hashed, a compound key
// and _id alone (the last three by target.shardKeys).
var TargetShapes = []targetsharding.Key{
	{{Name: "sk"}},
	{{Name: "sk", Hashed: true}},
	{{Name: "sk"}, {Name: "_id"}},
	{{Name: "_id"}},
}

// shardNames are the target's shards.
func (t *Target) shardNames() []targetsharding.Shard {
	out := make([]targetsharding.Shard, t.Shards)
	for i := range out {
		out[i] = targetsharding.Shard{Name: fmt.Sprintf("t%d", i)}
	}
	return out
}

// Prepare plans the target collection from the model's chunks, as the
// copy does before its first write, applies the plan's commands to the
// chunk table and checks that the chunks cover the key space, each on a
// shard. It returns the violations.
func (t *Target) Prepare(m *Model) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	src := targetsharding.Layout{NS: m.NS, Key: targetsharding.Key{{Name: "sk"}}}
	for c := range chunkCount {
		lo, hi := any(int64(c*chunkWidth)), any(int64((c+1)*chunkWidth))
		if c == 0 {
			lo = bson.MinKey{}
		}
		if c == chunkCount-1 {
			hi = bson.MaxKey{}
		}
		src.Chunks = append(src.Chunks, targetsharding.Chunk{Min: keyDoc(targetsharding.Key{{Name: "sk"}}, lo), Max: keyDoc(targetsharding.Key{{Name: "sk"}}, hi), Shard: m.owner[c].Name})
	}
	req := targetsharding.Request{TargetNS: m.NS, Source: &src, Target: targetsharding.Cluster{Shards: t.shardNames(), Major: t.Major}, Primary: "t0"}
	if !t.Key.Equal(src.Key) {
		req.Key = t.Key // target.shardKeys
	}
	plan, err := targetsharding.MakePlan(req)
	if err != nil {
		return []string{fmt.Sprintf("target plan: %v", err)}
	}
	t.plan = plan
	var errs []string
	for _, c := range plan.Commands {
		if err := t.run(c.Cmd); err != nil {
			errs = append(errs, fmt.Sprintf("target: %s (%s): %v", extJSON(c.Cmd), c.Why, err))
		}
	}
	errs = append(errs, t.covered()...)
	t.stats.Chunks = len(t.chunks)
	return errs
}

// keyDoc is a key document with every field at v.
func keyDoc(k targetsharding.Key, vs ...any) bson.Raw {
	d := bson.D{}
	for i, f := range k {
		v := vs[0]
		if i < len(vs) {
			v = vs[i]
		}
		d = append(d, bson.E{Key: f.Name, Value: v})
	}
	raw, _ := bson.Marshal(d)
	return raw
}

func extJSON(v any) string {
	b, err := bson.MarshalExtJSON(v, false, false)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// run applies one planning command to the chunk table.
func (t *Target) run(cmd bson.D) error {
	arg := func(name string) any {
		for _, e := range cmd {
			if e.Key == name {
				return e.Value
			}
		}
		return nil
	}
	raw := func(v any) bson.Raw {
		b, _ := bson.Marshal(v)
		return b
	}
	switch cmd[0].Key {
	case "shardCollection":
		if t.chunks != nil {
			return fmt.Errorf("already sharded")
		}
		n := 1
		if v, ok := arg("numInitialChunks").(int32); ok {
			n = int(v)
		}
		if n > 1 && !t.Key.Hashed() {
			return fmt.Errorf("numInitialChunks on a ranged key")
		}
		// One chunk on the primary, or n chunks spread over the
		// shards, evenly over the hashed values.
		bounds := []any{bson.MinKey{}}
		for i := 1; i < n; i++ {
			bounds = append(bounds, int64(uint64(1)<<63+uint64(i)*(math.MaxUint64/uint64(n)))) //nolint:gosec // G115: from MinInt64 up, wrapped on purpose
		}
		bounds = append(bounds, bson.MaxKey{})
		for i := range n {
			t.chunks = append(t.chunks, targetChunk{min: keyDoc(t.Key, bounds[i]), max: keyDoc(t.Key, bounds[i+1]), shard: fmt.Sprintf("t%d", i%t.Shards)})
		}
	case "split":
		mid := raw(arg("middle"))
		for i, c := range t.chunks {
			if compare(c.min, mid) < 0 && compare(mid, c.max) < 0 {
				t.chunks = slices.Insert(t.chunks, i+1, targetChunk{min: mid, max: c.max, shard: c.shard})
				t.chunks[i].max = mid
				return nil
			}
		}
		return fmt.Errorf("no chunk strictly contains %s", extJSON(mid))
	case "moveRange", "moveChunk":
		var lo, hi bson.Raw
		var to string
		if cmd[0].Key == "moveRange" {
			if t.Major < 6 {
				return fmt.Errorf("moveRange on %d.0 (from 6.0)", t.Major)
			}
			lo, hi, to = raw(arg("min")), raw(arg("max")), arg("toShard").(string)
		} else {
			b := arg("bounds").(bson.A)
			lo, hi, to = raw(b[0]), raw(b[1]), arg("to").(string)
		}
		for i, c := range t.chunks {
			if compare(c.min, lo) == 0 && compare(c.max, hi) == 0 {
				t.chunks[i].shard = to
				return nil
			}
		}
		return fmt.Errorf("no chunk [%s, %s)", extJSON(lo), extJSON(hi))
	default:
		return fmt.Errorf("command the model does not know")
	}
	return nil
}

func compare(a, b bson.Raw) int {
	return bsonorder.Compare(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: a}, bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: b})
}

// covered checks that the chunks run from MinKey to MaxKey with no gap
// or overlap, each on a shard of the cluster.
func (t *Target) covered() []string {
	var errs []string
	if len(t.chunks) == 0 {
		return []string{"target: the collection was not sharded"}
	}
	if first := t.chunks[0].min; compare(first, keyDoc(t.Key, bson.MinKey{})) != 0 {
		errs = append(errs, "target: the first chunk starts at "+extJSON(first)+", not MinKey")
	}
	if last := t.chunks[len(t.chunks)-1].max; compare(last, keyDoc(t.Key, bson.MaxKey{})) != 0 {
		errs = append(errs, "target: the last chunk ends at "+extJSON(last)+", not MaxKey")
	}
	for i, c := range t.chunks {
		if i > 0 && compare(t.chunks[i-1].max, c.min) != 0 {
			errs = append(errs, fmt.Sprintf("target: a gap or overlap between %s and %s", extJSON(t.chunks[i-1].max), extJSON(c.min)))
		}
		if !slices.ContainsFunc(t.shardNames(), func(s targetsharding.Shard) bool { return s.Name == c.shard }) {
			errs = append(errs, "target: a chunk on unknown shard "+c.shard)
		}
	}
	return errs
}

// owner returns the shard owning a document.
func (t *Target) owner(d Doc) string {
	vals := make([]any, len(t.Key))
	for i, f := range t.Key {
		v := d.SK
		if f.Name == "_id" {
			v = d.ID
		}
		vals[i] = v
		if f.Hashed {
			h := fnv.New64a()
			_, _ = fmt.Fprint(h, v)
			vals[i] = int64(h.Sum64()) //nolint:gosec // G115: a hash, wrapped on purpose
		}
	}
	k := keyDoc(t.Key, vals...)
	for _, c := range t.chunks {
		if compare(c.min, k) <= 0 && compare(k, c.max) < 0 {
			return c.shard
		}
	}
	return ""
}

// refused is a write mongos refuses.
func refused(code int, msg string) error {
	return mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Code: code, Message: msg}}}}
}

// route checks one write against mongos's rules, given the document its
// _id names on the target now (exists false when there is none), and
// counts it.
func (t *Target) route(wm mongo.WriteModel, filter bson.Raw, cur Doc, exists bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.Writes++
	if _, ok := wm.(*mongo.InsertOneModel); ok {
		t.stats.Inserts++
		return nil
	}
	full := true
	for _, f := range t.Key {
		if _, err := filter.LookupErr(f.Name); err != nil {
			full = false
		}
	}
	_, idErr := filter.LookupErr("_id")
	_, isDelete := wm.(*mongo.DeleteOneModel)
	switch {
	case full:
		t.stats.WithKey++
	case isDelete && !exists && idErr == nil:
		t.stats.GoneByID++
	}
	relaxed := t.Major >= 8
	var upsert bool
	var next *Doc
	switch m := wm.(type) {
	case *mongo.ReplaceOneModel:
		upsert = m.Upsert != nil && *m.Upsert
		d := decode(m.Replacement.(bson.Raw))
		next = &d
	case *mongo.UpdateOneModel:
		upsert = m.Upsert != nil && *m.Upsert
		if sk, err := m.Update.(bson.Raw).LookupErr("$set", "sk"); err == nil {
			d := cur
			d.SK = sk.AsInt64()
			next = &d
		}
	}
	switch {
	case upsert && !full && !relaxed:
		t.stats.Refused++
		return refused(61, "Failed to target upsert by query :: could not extract exact shard key")
	case !full && idErr != nil && !relaxed:
		t.stats.Refused++
		return refused(72, "A {multi:false} update on a sharded collection must contain an exact match on _id or target a single shard")
	}
	match := exists
	if sk, err := filter.LookupErr("sk"); err == nil && exists {
		match = sk.AsInt64() == cur.SK
	}
	if match && next != nil && next.SK != cur.SK && slices.ContainsFunc(t.Key, func(f targetsharding.KeyField) bool { return f.Name == "sk" }) {
		if !full && !relaxed {
			t.stats.Refused++
			return refused(31025, "Shard key update is not allowed without specifying the full shard key in the query")
		}
		t.stats.KeyChanges++
		if t.owner(cur) != t.owner(*next) {
			t.stats.Moves++ // WouldChangeOwningShard: mongos deletes and inserts in one transaction
		}
	}
	return nil
}

// Stats returns what the target counted.
func (t *Target) Stats() TargetStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// Describe names the target for messages: version and key.
func (t *Target) Describe() string {
	return fmt.Sprintf("%d.0 sharded on %s (%s)", t.Major, t.Key, t.plan.Placement)
}

// targetKeys is replay.ShardKeys for a run: the target's key, and the
// Recorder's documents as the target's.
type targetKeys struct {
	t   *Target
	rec *Recorder
}

func (k targetKeys) Key(context.Context, catalog.Namespace) (targetsharding.Key, error) {
	return k.t.Key, nil
}

func (k targetKeys) Current(_ context.Context, _ catalog.Namespace, _ targetsharding.Key, ids []bson.RawValue) ([]bson.Raw, error) {
	docs := k.rec.Docs()
	var out []bson.Raw
	for _, id := range ids {
		if d, ok := docs[id.AsInt64()]; ok {
			raw, err := bson.Marshal(d.raw())
			if err != nil {
				return nil, err
			}
			out = append(out, raw)
		}
	}
	return out, nil
}
