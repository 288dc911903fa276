package shardsim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Recorder is the simulated target: it applies writes to documents in
// memory and checks their order against the model.
type Recorder struct {
	m *Model

	mu      sync.Mutex
	docs    map[int64]Doc
	applied map[int64][]applied // per _id, in the order applied
	starts  map[string][]start  // per shard, each instance's start
	count   map[WriteKey]int
	errs    []string
	// target, when set, routes every write first (a sharded target).
	target *Target
}

type applied struct {
	w    Write
	inst int
}

type start struct {
	inst int
	from bson.Timestamp
}

// NewRecorder returns an empty target for m's writes.
func NewRecorder(m *Model) *Recorder {
	return &Recorder{m: m, docs: map[int64]Doc{}, applied: map[int64][]applied{}, starts: map[string][]start{}, count: map[WriteKey]int{}}
}

// Started records that instance inst of shard's subtask starts after from.
func (r *Recorder) Started(shard string, inst int, from bson.Timestamp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts[shard] = append(r.starts[shard], start{inst: inst, from: from})
}

func (r *Recorder) failf(format string, args ...any) {
	if len(r.errs) < 20 {
		r.errs = append(r.errs, fmt.Sprintf(format, args...))
	}
}

// Errors returns the violations seen.
func (r *Recorder) Errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

// Apply checks and applies one batch of instance inst of shard's subtask.
func (r *Recorder) Apply(_ context.Context, shard string, inst int, models []mongo.WriteModel, ts []bson.Timestamp) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, wm := range models {
		var filter bson.Raw
		switch m := wm.(type) {
		case *mongo.ReplaceOneModel:
			filter = m.Filter.(bson.Raw)
		case *mongo.UpdateOneModel:
			filter = m.Filter.(bson.Raw)
		case *mongo.DeleteOneModel:
			filter = m.Filter.(bson.Raw)
		default:
			r.failf("shard %s: unexpected write model %T", shard, wm)
			continue
		}
		id := filter.Lookup("_id").AsInt64()
		key := WriteKey{Shard: shard, TS: ts[i], ID: id}
		w, ok := r.m.Writes[key]
		if !ok {
			r.failf("shard %s wrote _id %d at ts %d,%d: no user write of that shard (a fromMigrate entry applied?)", shard, id, ts[i].T, ts[i].I)
			continue
		}
		if r.target != nil {
			cur, exists := r.docs[id]
			if err := r.target.route(wm, filter, cur, exists); err != nil {
				r.failf("shard %s: the target refuses %s of _id %d with filter %s: %v", shard, kindOf(wm), id, filter, err)
				return err
			}
		}
		next, effect := r.effect(wm, filter)
		r.checkOrder(w, inst, effect)
		r.count[key]++
		r.applied[id] = append(r.applied[id], applied{w: w, inst: inst})
		if effect {
			if next == nil {
				delete(r.docs, id)
			} else {
				r.docs[id] = *next
			}
		}
	}
	return nil
}

// checkOrder checks w against the writes of its document applied before.
func (r *Recorder) checkOrder(w Write, inst int, effect bool) {
	hist := r.applied[w.ID]
	replay := false // w was applied by an earlier instance of its shard
	for _, a := range hist {
		if a.w.WriteKey == w.WriteKey {
			if a.inst == inst {
				r.failf("shard %s applied the write of _id %d at ts %d,%d twice", w.Shard, w.ID, w.TS.T, w.TS.I)
				return
			}
			replay = true
		}
	}
	if replay && !r.restartedBelow(w.Shard, inst, w.TS) {
		r.failf("shard %s applied the write of _id %d at ts %d,%d again without restarting below it", w.Shard, w.ID, w.TS.T, w.TS.I)
		return
	}
	for _, a := range hist {
		if a.w.Seq <= w.Seq {
			continue
		}
		// A newer write is on the target already: only a restarted
		// subtask's replay of its own writes may come back behind it,
		// or a replay that changes nothing.
		if replay && (!effect || a.w.Shard == w.Shard && a.inst < inst) {
			continue
		}
		// A delete filtered on a key the document no longer has removes
		// nothing: the old shard's part of a shard-key change may land
		// after the new shard's later writes (its commit entry may be
		// logged after them; the new shard waits for the old one's
		// position to reach the commit timestamp, not its commit entry).
		if !effect && w.Kind == 'd' {
			continue
		}
		r.failf("the write of _id %d at ts %d,%d (shard %s, #%d of the document) was applied after its #%d (ts %d,%d, shard %s)",
			w.ID, w.TS.T, w.TS.I, w.Shard, w.Seq, a.w.Seq, a.w.TS.T, a.w.TS.I, a.w.Shard)
		return
	}
}

// restartedBelow reports whether instance inst of shard started below ts.
func (r *Recorder) restartedBelow(shard string, inst int, ts bson.Timestamp) bool {
	for _, s := range r.starts[shard] {
		if s.inst == inst {
			return s.from.Before(ts)
		}
	}
	return false
}

// effect returns the document after the write and whether it changes
// anything.
func (r *Recorder) effect(wm mongo.WriteModel, filter bson.Raw) (*Doc, bool) {
	id := filter.Lookup("_id").AsInt64()
	cur, exists := r.docs[id]
	match := exists
	if sk, err := filter.LookupErr("sk"); err == nil && exists {
		match = sk.AsInt64() == cur.SK
	}
	switch m := wm.(type) {
	case *mongo.ReplaceOneModel:
		d := decode(m.Replacement.(bson.Raw))
		if !match && exists {
			r.failf("an upsert of _id %d with filter %s meets another document with that _id (duplicate key): %+v", id, filter, cur)
			return nil, false
		}
		if !match && (m.Upsert == nil || !*m.Upsert) {
			return nil, false
		}
		return &d, !exists || d != cur
	case *mongo.UpdateOneModel:
		if !match {
			return nil, false
		}
		set := m.Update.(bson.Raw).Lookup("$set").Document()
		d := cur
		if v, err := set.LookupErr("v"); err == nil {
			d.V = v.AsInt64()
		}
		if sk, err := set.LookupErr("sk"); err == nil {
			d.SK = sk.AsInt64()
		}
		return &d, d != cur
	case *mongo.DeleteOneModel:
		return nil, match
	}
	return nil, false
}

// kindOf names a write model for messages.
func kindOf(wm mongo.WriteModel) string {
	return strings.TrimPrefix(strings.TrimSuffix(fmt.Sprintf("%T", wm), "Model"), "*mongo.")
}

func decode(raw bson.Raw) Doc {
	return Doc{ID: raw.Lookup("_id").AsInt64(), SK: raw.Lookup("sk").AsInt64(), V: raw.Lookup("v").AsInt64()}
}

// Check compares the final documents with the model's and checks that
// every user write arrived.
func (r *Recorder) Check() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.m.Writes {
		if r.count[k] == 0 {
			r.failf("the write of _id %d at ts %d,%d on shard %s never arrived", k.ID, k.TS.T, k.TS.I, k.Shard)
		}
	}
	r.errs = append(r.errs, CompareDocs(r.m.Docs, r.docs)...)
	return slices.Clone(r.errs)
}

// CompareDocs lists the differences between the expected documents and
// those found.
func CompareDocs(want, got map[int64]Doc) []string {
	var diffs []string
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("_id %d missing, want %+v", id, w))
		case g != w:
			diffs = append(diffs, fmt.Sprintf("_id %d is %+v, want %+v", id, g, w))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("_id %d is %+v, want no document", id, g))
		}
	}
	slices.Sort(diffs)
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("... and %d more differences", len(diffs)-10))
	}
	return diffs
}

// AppliedFrom counts the writes of shard's subtasks at or after ts that
// reached the target.
func (r *Recorder) AppliedFrom(shard string, ts bson.Timestamp) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, c := range r.count {
		if k.Shard == shard && !k.TS.Before(ts) {
			n += c
		}
	}
	return n
}

// Docs returns a copy of the target's documents.
func (r *Recorder) Docs() map[int64]Doc {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int64]Doc, len(r.docs))
	for id, d := range r.docs {
		out[id] = d
	}
	return out
}
