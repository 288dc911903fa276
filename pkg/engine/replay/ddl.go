package replay

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/holdback"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// Server codes a replayed DDL command may meet when it was already applied
// before a restart.
const (
	codeNamespaceNotFound = 26
	codeIndexNotFound     = 27
	codeNamespaceExists   = 48
	codeCommandNotFound   = 59
	codeNotImplemented    = 238
	// codeCommandNotSupportedOnView: MongoDB's answer to listIndexes
	// (and other collection commands) on a view (jstests/core/views/
	// views_all_commands.js expects it for listIndexes).
	codeCommandNotSupportedOnView = 166
)

// applyDDL applies one DDL command to the target, under the task's
// namespace filters and renames. Every command is safe to apply twice.
func (r *Replayer) applyDDL(ctx context.Context, d oplog.DDL) error {
	m := r.o.Mapper
	if ts, ok := oplog.BucketsOf(d.NS); ok && d.Class != oplog.CmdDropDatabase && d.Class != oplog.CmdRenameCollection {
		return r.applyTimeSeriesDDL(ctx, d, ts)
	}
	if d.Class == oplog.CmdDropDatabase {
		if !m.SelectedDB(d.NS.DB) {
			return nil
		}
	} else if !m.Selected(d.NS) && (d.Class != oplog.CmdRenameCollection || !m.Selected(d.To)) {
		r.count("filtered", true)
		return nil
	}
	return r.applyMapped(ctx, d, d.Map(m.Target))
}

// applyMapped applies src, a selected DDL command, as d: src with the
// target's names.
func (r *Replayer) applyMapped(ctx context.Context, src, d oplog.DDL) error {
	if err := r.track(src); err != nil {
		return err
	}
	if r.o.ApplyDDL != nil {
		if err := r.o.ApplyDDL(ctx, d); err != nil {
			return fmt.Errorf("replay %s on %s: %w", d.Class, d.NS, err)
		}
		return nil
	}
	m, t := r.o.Mapper, r.o.Target
	var err error
	switch d.Class {
	case oplog.CmdCreate:
		var opts bson.Raw
		if opts, err = d.Options(); err == nil {
			typ := "collection"
			if len(opts) > 0 && opts.Lookup("viewOn").Type != 0 {
				typ = "view"
			}
			err = r.holder.CreateCollection(ctx, catalog.Collection{Source: src.NS, Target: d.NS, Type: typ, Options: opts}, m)
		}
	case oplog.CmdDrop:
		if err = t.Database(d.NS.DB).Collection(d.NS.Coll).Drop(ctx); err == nil {
			err = r.holder.Dropped(ctx, d.NS)
		}
	case oplog.CmdDropDatabase:
		if err = t.Database(d.NS.DB).Drop(ctx); err == nil {
			err = r.holder.DroppedDatabase(ctx, d.NS.DB)
		}
	case oplog.CmdRenameCollection:
		err = r.rename(ctx, src, d)
	case oplog.CmdCreateIndexes, oplog.CmdCommitIndexBuild:
		var specs []bson.Raw
		if specs, err = d.Indexes(); err == nil {
			err = r.holder.CreateIndexes(ctx, catalog.Collection{Source: src.NS, Target: d.NS, Indexes: specs}, r.o.IndexesOneByOne)
		}
	case oplog.CmdDropIndexes:
		err = r.dropIndexes(ctx, d)
	case oplog.CmdCollMod:
		err = r.collMod(ctx, src, d)
	case oplog.CmdEmptyCapped:
		_, err = t.Database(d.NS.DB).Collection(d.NS.Coll).DeleteMany(ctx, bson.D{})
	default:
		return fmt.Errorf("replay: unexpected DDL %s on %s", d.Class, d.NS)
	}
	if hasCode(err, codeNamespaceNotFound, codeIndexNotFound) || errors.Is(err, holdback.ErrIndexNotFound) {
		// Applied before a restart, or nothing to act on: mongod's own
		// oplog application accepts these codes from DDL entries too
		// (collMod: IndexNotFound and NamespaceNotFound, repl/oplog.cpp).
		r.log.Info("DDL had nothing to act on on the target (applied before a restart?)", "command", d.Class.String(), "ns", d.NS.String(), "err", err)
		err = nil
	}
	if err != nil {
		return fmt.Errorf("replay %s on %s: %w", d.Class, d.NS, err)
	}
	r.log.Info("applied DDL", "command", d.Class.String(), "ns", d.NS.String())
	return r.refreshUnique(ctx, d.NS, d.To)
}

// dropIndexes drops on the target the indexes a dropIndexes entry names.
func (r *Replayer) dropIndexes(ctx context.Context, d oplog.DDL) error {
	names, err := d.DropIndexNames()
	if err != nil {
		return err
	}
	if err := r.holder.DroppedIndexes(ctx, d.NS, names); err != nil {
		return err
	}
	idx := bson.A{}
	for _, n := range names {
		idx = append(idx, n)
	}
	var index any = idx
	if len(names) == 1 {
		index = names[0]
	}
	return r.o.Target.Database(d.NS.DB).RunCommand(ctx, bson.D{{Key: "dropIndexes", Value: d.NS.Coll}, {Key: "index", Value: index}}).Err()
}

// collMod applies a collMod entry's options to the target, but those the
// sync holds back.
func (r *Replayer) collMod(ctx context.Context, src, d oplog.DDL) error {
	opts, err := d.Options()
	if err != nil {
		return err
	}
	// What the sync holds back changes its record, not the target.
	if opts, err = r.holder.CollMod(ctx, d.NS, opts); err != nil || len(bsonElems(opts)) == 0 {
		return err
	}
	cmd := bson.D{{Key: "collMod", Value: d.NS.Coll}}
	elems, _ := opts.Elements()
	for _, e := range elems {
		v := any(e.Value())
		if on, ok := e.Value().StringValueOK(); ok && e.Key() == "viewOn" {
			v = r.o.Mapper.Target(catalog.Namespace{DB: src.NS.DB, Coll: on}).Coll // a view's new source, renamed
		}
		cmd = append(cmd, bson.E{Key: e.Key(), Value: v})
	}
	err = r.o.Target.Database(d.NS.DB).RunCommand(ctx, cmd).Err()
	if hasCode(err, codeCommandNotFound, codeNotImplemented) {
		r.log.Warn("the target cannot apply collMod; collection options may differ", "ns", d.NS.String(), "err", err)
		return nil
	}
	return err
}

// track keeps r.claims current with the source's DDL d before it is
// applied: a collection created, or renamed, on the source onto a target
// name another selected source collection holds fails with
// catalog.ErrNamespaceCollision rather than merge the two.
func (r *Replayer) track(d oplog.DDL) error {
	if r.claims == nil {
		return nil
	}
	m := r.o.Mapper
	switch d.Class {
	case oplog.CmdCreate:
		if m.Selected(d.NS) {
			return r.claims.Claim(d.NS)
		}
	case oplog.CmdDrop:
		r.claims.Release(d.NS)
	case oplog.CmdDropDatabase:
		r.claims.ReleaseDB(d.NS.DB)
	case oplog.CmdRenameCollection:
		r.claims.Release(d.NS)
		if m.Selected(d.To) {
			return r.claims.Claim(d.To)
		}
	}
	return nil
}

// rename applies a renameCollection whose names may fall on either side of
// the task's filters.
func (r *Replayer) rename(ctx context.Context, src, d oplog.DDL) error {
	m, t := r.o.Mapper, r.o.Target
	switch {
	case !m.Selected(src.To):
		// Renamed out of the task's scope: the target no longer keeps it.
		if err := t.Database(d.NS.DB).Collection(d.NS.Coll).Drop(ctx); err != nil {
			return err
		}
		return r.holder.Dropped(ctx, d.NS)
	case !m.Selected(src.NS):
		// Renamed in from outside the task ($out, convertToCapped or a
		// rename across databases through a temporary collection the
		// filters do not name, or a user's rename): its writes were not
		// replayed, so it is copied from the source.
		return r.recopy(ctx, src.To)
	}
	rename := func(dropTarget bool) error {
		return t.Database("admin").RunCommand(ctx, bson.D{
			{Key: "renameCollection", Value: d.NS.String()}, {Key: "to", Value: d.To.String()},
			{Key: "dropTarget", Value: dropTarget},
		}).Err()
	}
	err := rename(d.DropTarget())
	if d.DropTarget() && hasCode(err, codeNotImplemented) {
		// A target without dropTarget (FerretDB): drop, then rename. A
		// restart between the two applies the entry again, which finds
		// the new name gone and renames.
		if n, _ := t.Database(d.NS.DB).ListCollectionNames(ctx, bson.D{{Key: "name", Value: d.NS.Coll}}); len(n) == 0 {
			return r.holder.Renamed(ctx, d.NS, d.To) // applied before a restart
		}
		if err := t.Database(d.To.DB).Collection(d.To.Coll).Drop(ctx); err != nil {
			return fmt.Errorf("drop %s before renaming %s over it: %w", d.To, d.NS, err)
		}
		err = rename(false)
	}
	if hasCode(err, codeNamespaceExists) {
		// Applied before a restart: the source name is gone and the new one
		// exists; anything else is a real conflict.
		if n, _ := t.Database(d.NS.DB).ListCollectionNames(ctx, bson.D{{Key: "name", Value: d.NS.Coll}}); len(n) == 0 {
			err = nil
		}
	}
	if err != nil {
		return err
	}
	return r.holder.Renamed(ctx, d.NS, d.To)
}

// bsonElems returns a document's elements (none for an empty or
// malformed one).
func bsonElems(doc bson.Raw) []bson.RawElement {
	elems, _ := doc.Elements()
	return elems
}

// refreshUnique re-reads whether target collections have a unique
// secondary index, after DDL that may have changed it.
func (r *Replayer) refreshUnique(ctx context.Context, nss ...catalog.Namespace) error {
	for _, ns := range nss {
		if ns.Coll == "" {
			continue
		}
		u, err := HasUniqueIndex(ctx, r.o.Target.Database(ns.DB).Collection(ns.Coll))
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.unique[ns] = u
		r.mu.Unlock()
	}
	return nil
}

// HasUniqueIndex reports whether a collection has a unique index other
// than _id. A namespace that does not exist, or is a view (created or
// changed by a replayed create or collMod), has none: a view holds no
// documents of its own.
func HasUniqueIndex(ctx context.Context, coll *mongo.Collection) (bool, error) {
	cur, err := coll.Indexes().List(ctx)
	if hasCode(err, codeNamespaceNotFound, codeCommandNotSupportedOnView) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("list indexes of %s.%s: %w", coll.Database().Name(), coll.Name(), err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	for cur.Next(ctx) {
		name, _ := cur.Current.Lookup("name").StringValueOK()
		if u, _ := cur.Current.Lookup("unique").BooleanOK(); u && name != "_id_" {
			return true, nil
		}
	}
	return false, cur.Err()
}

func hasCode(err error, codes ...int) bool { return sink.HasCode(err, codes...) }
