package holdback

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// Server codes Restore acts on.
const (
	codeNamespaceNotFound = 26
	codeCommandNotFound   = 59
	codeNotImplemented    = 238
)

// Pending lists what task holds back on target, ordered by namespace. The
// cut-over shows it before finalizing; status shows it during the sync.
func Pending(ctx context.Context, target *mongo.Client, checkpointDB, task string) ([]Held, error) {
	return list(ctx, records(target, checkpointDB), bson.D{{Key: "task", Value: task}})
}

// Report is what Restore did with each held-back option.
type Report struct {
	// Restored are back on the target; their records are gone.
	Restored []Held
	// Manual are options the target cannot take back (FerretDB has no
	// collMod, TTL index or convertToCapped): Outcome.Note names the
	// collection and what to do by hand. They stay recorded, so Pending
	// still lists them and Restore tries them again.
	Manual []Outcome
	// Gone are options of a collection or index the target no longer has
	// (dropped or renamed on the target by hand): nothing to restore,
	// their records are forgotten.
	Gone []Held
}

// Outcome is one held-back option Restore could not apply, and why.
type Outcome struct {
	Held Held
	Note string
}

// Restore applies every option task holds back on target, at cut-over,
// once the target holds the source's data: an index's expiry
// (collMod, MongoDB 5.1+; on an older server the index is dropped and
// built again as a TTL index), a collection's expiry (collMod), capped
// limits (convertToCapped, then the indexes it does not keep, then
// collMod cappedMax on MongoDB 6.0+) and uniqueness (collMod
// prepareUnique then unique on MongoDB 6.0+, else the index built
// again). It is idempotent: an option already in place is not applied
// again, and a restart midway finishes what was begun. Each record is
// removed once its option is back. The error is for failures other than
// a target that lacks the command, which go to Report.Manual.
func Restore(ctx context.Context, target *mongo.Client, checkpointDB, task string) (Report, error) {
	held, err := Pending(ctx, target, checkpointDB, task)
	if err != nil {
		return Report{}, err
	}
	return restore(ctx, clientRunner{target}, mongoRecords{records(target, checkpointDB)}, held)
}

// runner runs a command in a database: the target, or a model of it.
type runner interface {
	run(ctx context.Context, db string, cmd bson.D) (bson.Raw, error)
}

type clientRunner struct{ c *mongo.Client }

func (r clientRunner) run(ctx context.Context, db string, cmd bson.D) (bson.Raw, error) {
	return r.c.Database(db).RunCommand(ctx, cmd).Raw()
}

// restorer applies held options through a runner and keeps the records
// in coll.
type restorer struct {
	t    runner
	coll recordStore
}

// recordStore updates and removes records.
type recordStore interface {
	save(ctx context.Context, h Held) error
	remove(ctx context.Context, h Held) error
}

type mongoRecords struct{ c *mongo.Collection }

func (m mongoRecords) save(ctx context.Context, h Held) error {
	_, err := m.c.ReplaceOne(ctx, bson.D{{Key: "_id", Value: h.ID}}, h)
	return err
}

func (m mongoRecords) remove(ctx context.Context, h Held) error {
	_, err := m.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: h.ID}})
	return err
}

func restore(ctx context.Context, t runner, store recordStore, held []Held) (Report, error) {
	return (&restorer{t: t, coll: store}).all(ctx, held)
}

func (r *restorer) all(ctx context.Context, held []Held) (Report, error) {
	var rep Report
	for _, h := range held {
		note, state, err := r.one(ctx, &h)
		if err != nil {
			return rep, fmt.Errorf("restore %s: %w", h, err)
		}
		switch state {
		case stateRestored:
			rep.Restored = append(rep.Restored, h)
		case stateGone:
			rep.Gone = append(rep.Gone, h)
		case stateManual:
			rep.Manual = append(rep.Manual, Outcome{Held: h, Note: note})
			continue
		}
		if err := r.coll.remove(ctx, h); err != nil {
			return rep, fmt.Errorf("restore %s: forget the record: %w", h, err)
		}
	}
	return rep, nil
}

type state int

const (
	stateRestored state = iota
	stateGone
	stateManual
)

// one restores one option.
func (r *restorer) one(ctx context.Context, h *Held) (string, state, error) {
	ns := catalog.ParseNamespace(h.NS)
	opts, ok, err := r.collection(ctx, ns)
	if err != nil || !ok {
		return "", stateGone, err
	}
	switch h.Kind {
	case KindTTLIndex, KindUnique:
		return r.index(ctx, ns, h)
	case KindTTLCollection:
		if v, _ := opts.Lookup("expireAfterSeconds").AsInt64OK(); v == h.ExpireAfterSeconds {
			return "", stateRestored, nil
		}
		_, err := r.t.run(ctx, ns.DB, bson.D{{Key: "collMod", Value: ns.Coll}, {Key: "expireAfterSeconds", Value: h.ExpireAfterSeconds}})
		if hasCode(err, codeCommandNotFound, codeNotImplemented) {
			return manual(ns, err, fmt.Sprintf("db.runCommand({collMod: %q, expireAfterSeconds: %d})", ns.Coll, h.ExpireAfterSeconds)), stateManual, nil
		}
		return "", stateRestored, err
	case KindCapped:
		return r.capped(ctx, ns, opts, h)
	}
	return "", 0, fmt.Errorf("unknown kind %q", h.Kind)
}

// index restores an index's expiry or uniqueness.
func (r *restorer) index(ctx context.Context, ns catalog.Namespace, h *Held) (string, state, error) {
	want, err := h.wantSpec()
	if err != nil {
		return "", 0, err
	}
	cur, ok, err := r.findIndex(ctx, ns, h.Index)
	if err != nil {
		return "", 0, err
	}
	if !ok {
		if !h.Rebuilding {
			return "", stateGone, nil
		}
		return "", stateRestored, r.createIndex(ctx, ns, want)
	}
	if h.Kind == KindTTLIndex {
		if v, _ := cur.Lookup("expireAfterSeconds").AsInt64OK(); v == h.ExpireAfterSeconds && cur.Lookup("expireAfterSeconds").Type != 0 {
			return "", stateRestored, nil
		}
		_, err := r.t.run(ctx, ns.DB, ttlCollMod(ns, h))
		switch {
		case err == nil:
			return "", stateRestored, nil
		case hasCode(err, codeCommandNotFound, codeNotImplemented):
			return manual(ns, err, fmt.Sprintf("db.runCommand(%s)", extJSON(ttlCollMod(ns, h)))), stateManual, nil
		}
		// A server before 5.1 cannot make a plain index a TTL index.
	} else {
		if u, _ := cur.Lookup("unique").BooleanOK(); u {
			return "", stateRestored, nil
		}
		_, err := r.t.run(ctx, ns.DB, uniqueCollMod(ns, h, "prepareUnique"))
		if err == nil {
			_, err = r.t.run(ctx, ns.DB, uniqueCollMod(ns, h, "unique"))
		}
		if err == nil {
			return "", stateRestored, nil
		}
		// Before 6.0 (or FerretDB), collMod cannot make an index unique.
	}
	return "", stateRestored, r.rebuild(ctx, ns, h, want)
}

// rebuild drops an index and builds it with the held option, marking the
// record first so that a restart between the two builds it.
func (r *restorer) rebuild(ctx context.Context, ns catalog.Namespace, h *Held, want bson.Raw) error {
	h.Rebuilding = true
	if err := r.coll.save(ctx, *h); err != nil {
		return fmt.Errorf("mark the rebuild: %w", err)
	}
	if _, err := r.t.run(ctx, ns.DB, bson.D{{Key: "dropIndexes", Value: ns.Coll}, {Key: "index", Value: h.Index}}); err != nil {
		return fmt.Errorf("drop index %s to build it again: %w", h.Index, err)
	}
	return r.createIndex(ctx, ns, want)
}

func (r *restorer) createIndex(ctx context.Context, ns catalog.Namespace, spec bson.Raw) error {
	_, err := r.t.run(ctx, ns.DB, bson.D{{Key: "createIndexes", Value: ns.Coll}, {Key: "indexes", Value: bson.A{spec}}})
	if duplicateKey(err) {
		return fmt.Errorf("the target holds duplicate keys for a unique index of the source (the target differs from the source; verify before cutting over): %w", err)
	}
	return err
}

// capped converts a collection to capped, rebuilds its indexes and sets
// its max.
func (r *restorer) capped(ctx context.Context, ns catalog.Namespace, opts bson.Raw, h *Held) (string, state, error) {
	if isCapped, _ := opts.Lookup("capped").BooleanOK(); !isCapped {
		idx, err := r.indexes(ctx, ns)
		if err != nil {
			return "", 0, err
		}
		h.Indexes = idx
		if err := r.coll.save(ctx, *h); err != nil {
			return "", 0, fmt.Errorf("save the indexes before convertToCapped: %w", err)
		}
		cmd := bson.D{{Key: "convertToCapped", Value: ns.Coll}, {Key: "size", Value: h.CappedSize}}
		_, err = r.t.run(ctx, ns.DB, cmd)
		if hasCode(err, codeCommandNotFound, codeNotImplemented) {
			fix := fmt.Sprintf("db.runCommand(%s), then create the collection's indexes again", extJSON(cmd))
			if h.CappedMax > 0 {
				fix += fmt.Sprintf(" and, on MongoDB 6.0+, db.runCommand(%s)", extJSON(bson.D{{Key: "collMod", Value: ns.Coll}, {Key: "cappedMax", Value: h.CappedMax}}))
			}
			return manual(ns, err, fix), stateManual, nil
		}
		if err != nil {
			return "", 0, err
		}
	}
	// convertToCapped keeps only the _id index.
	for _, spec := range h.Indexes {
		if err := r.createIndex(ctx, ns, spec); err != nil {
			return "", 0, fmt.Errorf("build index again after convertToCapped: %w", err)
		}
	}
	if cur, _ := opts.Lookup("max").AsInt64OK(); h.CappedMax > 0 && cur != h.CappedMax {
		cmd := bson.D{{Key: "collMod", Value: ns.Coll}, {Key: "cappedMax", Value: h.CappedMax}}
		_, err := r.t.run(ctx, ns.DB, cmd)
		if err != nil {
			return manual(ns, err, fmt.Sprintf("the collection is capped at %d bytes; to limit it to %d documents too, run db.runCommand(%s) on MongoDB 6.0+", h.CappedSize, h.CappedMax, extJSON(cmd))), stateManual, nil
		}
	}
	return "", stateRestored, nil
}

// ttlCollMod is the collMod that gives an index its expiry back.
func ttlCollMod(ns catalog.Namespace, h *Held) bson.D {
	return bson.D{{Key: "collMod", Value: ns.Coll}, {Key: "index", Value: bson.D{
		{Key: "name", Value: h.Index}, {Key: "expireAfterSeconds", Value: h.ExpireAfterSeconds},
	}}}
}

// uniqueCollMod is one of the two collMods that make an index unique.
func uniqueCollMod(ns catalog.Namespace, h *Held, field string) bson.D {
	return bson.D{{Key: "collMod", Value: ns.Coll}, {Key: "index", Value: bson.D{
		{Key: "name", Value: h.Index}, {Key: field, Value: true},
	}}}
}

// wantSpec is the index as the source has it: the spec built on the
// target with the held option put back.
func (h Held) wantSpec() (bson.Raw, error) {
	field, value := "unique", any(true)
	if h.Kind == KindTTLIndex {
		field, value = "expireAfterSeconds", h.ExpireAfterSeconds
	}
	elems, err := bson.Raw(h.Spec).Elements()
	if err != nil {
		return nil, fmt.Errorf("index specification: %w", err)
	}
	out := bson.D{}
	for _, e := range elems {
		switch e.Key() {
		case "v", "ns", "background", field:
		default:
			out = append(out, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	return bson.Marshal(append(out, bson.E{Key: field, Value: value}))
}

// collection returns a target collection's options; ok is false when it
// does not exist.
func (r *restorer) collection(ctx context.Context, ns catalog.Namespace) (bson.Raw, bool, error) {
	docs, err := r.firstBatch(ctx, ns.DB, bson.D{{Key: "listCollections", Value: 1}, {Key: "filter", Value: bson.D{{Key: "name", Value: ns.Coll}}}})
	if err != nil || len(docs) == 0 {
		return nil, false, err
	}
	opts, _ := docs[0].Lookup("options").DocumentOK()
	return opts, true, nil
}

// findIndex returns a target index by name.
func (r *restorer) findIndex(ctx context.Context, ns catalog.Namespace, name string) (bson.Raw, bool, error) {
	docs, err := r.firstBatch(ctx, ns.DB, bson.D{{Key: "listIndexes", Value: ns.Coll}})
	if err != nil {
		return nil, false, err
	}
	for _, d := range docs {
		if n, _ := d.Lookup("name").StringValueOK(); n == name {
			return d, true, nil
		}
	}
	return nil, false, nil
}

// indexes returns a target collection's indexes but _id's, as specs to
// build again.
func (r *restorer) indexes(ctx context.Context, ns catalog.Namespace) ([][]byte, error) {
	docs, err := r.firstBatch(ctx, ns.DB, bson.D{{Key: "listIndexes", Value: ns.Coll}})
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, d := range docs {
		if n, _ := d.Lookup("name").StringValueOK(); n == "_id_" {
			continue
		}
		spec, err := without(d, "v", "ns", "background")
		if err != nil {
			return nil, err
		}
		out = append(out, spec)
	}
	return out, nil
}

// firstBatch runs a listing command and returns its documents (index and
// collection listings of one name fit in the first batch).
func (r *restorer) firstBatch(ctx context.Context, db string, cmd bson.D) ([]bson.Raw, error) {
	res, err := r.t.run(ctx, db, cmd)
	if hasCode(err, codeNamespaceNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	arr, ok := res.Lookup("cursor", "firstBatch").ArrayOK()
	if !ok {
		return nil, fmt.Errorf("%s: no cursor.firstBatch in %s", cmd[0].Key, res)
	}
	vals, err := arr.Values()
	if err != nil {
		return nil, err
	}
	out := make([]bson.Raw, 0, len(vals))
	for _, v := range vals {
		if d, ok := v.DocumentOK(); ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// manual is the note for an option the target cannot take back.
func manual(ns catalog.Namespace, err error, fix string) string {
	return fmt.Sprintf("%s: the target cannot apply this (%v); on a server that can, run in database %s: %s", ns, err, ns.DB, fix)
}

func extJSON(cmd bson.D) string {
	b, err := bson.MarshalExtJSON(cmd, false, false)
	if err != nil {
		return fmt.Sprint(cmd)
	}
	return string(b)
}
