package oplog

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// translateView turns a write on <db>.system.views into the view DDL it
// stands for. mongod keeps one document per view there, {_id: "db.view",
// viewOn, pipeline[, collation]}, and logs createView, collMod of a view
// and the drop of a view as an insert, a replacement and a delete of that
// document (durable_view_catalog.cpp), never as commands:
//
//   - insert: create the view (viewOn, pipeline, collation);
//   - update (a replacement: the catalog rewrites the whole document):
//     collMod of the view with its new viewOn and pipeline;
//   - delete: drop the view.
func translateView(dst []Write, e Entry) ([]Write, error) {
	db := e.Namespace().DB
	key := e.o
	if e.op == OpUpdate {
		key = e.o2
	}
	view, err := viewNamespace(key, db)
	if err != nil {
		return nil, err
	}
	d := DDL{NS: view}
	switch e.op {
	case OpInsert:
		if on, _ := lookupString(e.o, "viewOn"); IsBucketsName(on) {
			// The view half of a time-series create: the create of its
			// buckets collection, logged before it, makes the whole
			// time-series collection on the target (TimeSeriesCreate).
			return dst, nil
		}
		d.Class = CmdCreate
		d.Command, err = viewCommand("create", view.Coll, e.o, "viewOn", "pipeline", "collation")
	case OpUpdate:
		form, _, cerr := classifyUpdate(e.o)
		if cerr != nil {
			return nil, cerr
		}
		if form != formReplacement {
			return nil, fmt.Errorf("%w: the definition of view %s changed by an update that is not a replacement (mongod rewrites the whole view document)", ErrUnsupportedUpdate, view)
		}
		d.Class = CmdCollMod
		d.Command, err = viewCommand("collMod", view.Coll, e.o, "viewOn", "pipeline")
	case OpDelete:
		d.Class = CmdDrop
		d.Command, err = viewCommand("drop", view.Coll, nil)
	}
	if err != nil {
		return nil, err
	}
	return append(dst, Write{NS: view.String(), Kind: Command, DDL: &d}), nil
}

// viewNamespace reads a view document's _id ("db.view") and checks that it
// names a view of db.
func viewNamespace(doc bson.Raw, db string) (catalog.Namespace, error) {
	id, ok := lookupString(doc, "_id")
	if !ok {
		return catalog.Namespace{}, fmt.Errorf("%w: a system.views document's _id must be the view's name as a string", ErrMalformedEntry)
	}
	ns := catalog.ParseNamespace(id)
	if ns.DB != db || ns.Coll == "" {
		return catalog.Namespace{}, fmt.Errorf("%w: view %q is not in database %s", ErrMalformedEntry, id, db)
	}
	return ns, nil
}

// viewCommand builds {name: coll, <fields of doc named in keep>}.
func viewCommand(name, coll string, doc bson.Raw, keep ...string) (bson.Raw, error) {
	b := start(make([]byte, 0, 64+len(doc)))
	b.value(name, bsoncore.Value{Type: bsoncore.TypeString, Data: bsoncore.AppendString(nil, coll)})
	for _, k := range keep {
		v, found, err := lookup(doc, k)
		if err != nil {
			return nil, fmt.Errorf("%w: view document: %v", ErrMalformedEntry, err)
		}
		if found {
			b.value(k, v)
		}
	}
	return bson.Raw(b.finish()), nil
}
