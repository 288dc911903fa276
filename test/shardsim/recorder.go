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
	// refused counts the writes answered with a duplicate key on _id:
	// they arrived, and the subtask steps over those that meet a newer
	// document.
	refused map[WriteKey]int
	// lastRefused is, per write and instance of its shard's subtask, the
	// event at which that instance last had the write refused so; events
	// counts the writes applied and refused.
	lastRefused map[refusal]int
	events      int
	// deletes are, per _id, the numbers of the model's deletes that end
	// a document (deletedBetween).
	deletes map[int64][]int
	// removals counts older documents a write removed before its own
	// (replay's settleConflict).
	removals int
	// rereads counts writes of documents as the source holds them
	// (replay's recheck).
	rereads int
	errs    []string
	// target, when set, routes every write first (a sharded target).
	target *Target
}

type applied struct {
	w    Write
	inst int
	at   int // its number among the events (Recorder.events)
}

// refusal is a write refused to one instance of its shard's subtask.
type refusal struct {
	k    WriteKey
	inst int
}

type start struct {
	inst int
	from bson.Timestamp
}

// NewRecorder returns an empty target for m's writes.
func NewRecorder(m *Model) *Recorder {
	return &Recorder{m: m, docs: map[int64]Doc{}, applied: map[int64][]applied{}, starts: map[string][]start{}, count: map[WriteKey]int{}, refused: map[WriteKey]int{},
		lastRefused: map[refusal]int{}}
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
		if ts[i].IsZero() {
			// A write of no entry: replay's recheck writes the document
			// as the source holds it (Model.Lookup), or deletes it.
			if r.target != nil {
				cur, exists := r.docs[id]
				if err := r.target.route(wm, filter, cur, exists); err != nil {
					r.failf("shard %s: the target refuses %s of _id %d with filter %s: %v", shard, kindOf(wm), id, filter, err)
					return err
				}
			}
			r.reread(shard, wm, id)
			continue
		}
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
		if _, del := wm.(*mongo.DeleteOneModel); del && w.Kind != 'd' {
			// A write that met an older document with its _id while the
			// source holds its own removes the older one first
			// (replay's settleConflict); the write itself follows.
			delete(r.docs, id)
			r.removals++
			continue
		}
		next, effect, dup := r.effect(wm, filter)
		if dup {
			// What mongod answers an upsert whose filter matches nothing
			// while a document with its _id exists: E11000 on the _id
			// index; the writes after it in the ordered command are not
			// applied.
			r.refused[key]++
			r.events++
			r.lastRefused[refusal{k: key, inst: inst}] = r.events
			return mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Index: i, Code: 11000,
				Message: fmt.Sprintf("E11000 duplicate key error collection: %s index: _id_ dup key: { _id: %d }", r.m.NS, id),
				Details: bson.Raw(dupDetails)}}}}
		}
		r.checkOrder(w, inst, effect)
		r.count[key]++
		r.events++
		r.applied[id] = append(r.applied[id], applied{w: w, inst: inst, at: r.events})
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

// reread applies a write of the document as the source holds it: a
// delete by _id, or a replacement with the model's document.
func (r *Recorder) reread(shard string, wm mongo.WriteModel, id int64) {
	r.rereads++
	switch m := wm.(type) {
	case *mongo.DeleteOneModel:
		delete(r.docs, id)
	case *mongo.ReplaceOneModel:
		d := decode(m.Replacement.(bson.Raw))
		if want, ok := r.m.Docs[id]; !ok || want != d {
			r.failf("shard %s wrote _id %d from a read of the source as %+v; the source holds %+v (%v)", shard, id, d, want, ok)
		}
		r.docs[id] = d
	default:
		r.failf("shard %s: a write of no entry that is neither a delete nor a replacement: %s of _id %d", shard, kindOf(wm), id)
	}
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
		// The same for a write the earlier instance had refused on
		// _id (another shard's document with its _id) and never
		// applied: it stepped the write over, or wrote the source's
		// document, after its last refusal (replay's conflict.go,
		// stale.go), and only then applied the newer write. This
		// instance, started below the write, applies both again, in
		// order.
		if r.refusedBefore(w, a) && r.restartedBelow(w.Shard, inst, w.TS) && inst > a.inst {
			continue
		}
		// A write filtered on a document key the document on the target
		// does not have changes nothing: the old shard's part of a
		// shard-key change may land after the new shard's later writes
		// (its commit entry may be logged after them), and the writes of
		// a document whose _id the application moved to another shard
		// may land after the new document's.
		if !effect {
			continue
		}
		// A document deleted and inserted again with its _id (on another
		// shard, by the application: Behaviours.IDReuse, an empty
		// migration's re-insert) is another document: the subtasks
		// order each document's writes, not one document's against the
		// next one's with the same _id, which they may apply first
		// (docs/sharded.md, "What it does not cover").
		if r.deletedBetween(w.ID, w.Seq, a.w.Seq) {
			continue
		}
		r.failf("the write of _id %d at ts %d,%d (shard %s, #%d of the document) was applied after its #%d (ts %d,%d, shard %s)",
			w.ID, w.TS.T, w.TS.I, w.Shard, w.Seq, a.w.Seq, a.w.TS.T, a.w.TS.I, a.w.Shard)
		return
	}
}

// refusedBefore reports whether the instance that applied a, of w's
// shard, last met a duplicate key on _id with w before it applied a.
func (r *Recorder) refusedBefore(w Write, a applied) bool {
	at, ok := r.lastRefused[refusal{k: w.WriteKey, inst: a.inst}]
	return ok && a.w.Shard == w.Shard && at < a.at
}

// deletedBetween reports whether the model deleted document id with a
// user write of its own (not a shard-key change, whose delete and insert
// share one number) numbered from seq up to, not including, later.
func (r *Recorder) deletedBetween(id int64, seq, later int) bool {
	if r.deletes == nil {
		r.deletes = map[int64][]int{}
		ins := map[int64]map[int]bool{}
		for _, x := range r.m.Writes {
			if x.Kind == 'i' {
				if ins[x.ID] == nil {
					ins[x.ID] = map[int]bool{}
				}
				ins[x.ID][x.Seq] = true
			}
		}
		for _, x := range r.m.Writes {
			if x.Kind == 'd' && !ins[x.ID][x.Seq] {
				r.deletes[x.ID] = append(r.deletes[x.ID], x.Seq)
			}
		}
	}
	for _, d := range r.deletes[id] {
		if d >= seq && d < later {
			return true
		}
	}
	return false
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

// dupDetails is the keyPattern a duplicate key error on _id names.
var dupDetails, _ = bson.Marshal(bson.D{{Key: "keyPattern", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "keyValue", Value: bson.D{}}})

// effect returns the document after the write, whether it changes
// anything, and whether it is an upsert that meets another document with
// its _id (a duplicate key on _id, which it does not apply).
func (r *Recorder) effect(wm mongo.WriteModel, filter bson.Raw) (*Doc, bool, bool) {
	id := filter.Lookup("_id").AsInt64()
	cur, exists := r.docs[id]
	match := exists
	if sk, err := filter.LookupErr("sk"); err == nil && exists {
		match = sk.AsInt64() == cur.SK
	}
	switch m := wm.(type) {
	case *mongo.ReplaceOneModel:
		d := decode(m.Replacement.(bson.Raw))
		if !match && exists && m.Upsert != nil && *m.Upsert {
			return nil, false, true
		}
		if !match && (m.Upsert == nil || !*m.Upsert) {
			return nil, false, false
		}
		return &d, !exists || d != cur, false
	case *mongo.UpdateOneModel:
		if !match {
			return nil, false, false
		}
		set := m.Update.(bson.Raw).Lookup("$set").Document()
		d := cur
		if v, err := set.LookupErr("v"); err == nil {
			d.V = v.AsInt64()
		}
		if sk, err := set.LookupErr("sk"); err == nil {
			d.SK = sk.AsInt64()
		}
		return &d, d != cur, false
	case *mongo.DeleteOneModel:
		return nil, match, false
	}
	return nil, false, false
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
		if r.count[k] == 0 && r.refused[k] == 0 {
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
