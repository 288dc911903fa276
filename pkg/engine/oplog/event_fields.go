package oplog

import (
	"fmt"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// event is a change event being read: its fields, checked as they are
// read.
type event struct {
	doc bsoncore.Document
	typ string
}

// malformed returns an ErrMalformedChangeEvent naming the event's type.
func (e *event) malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s event: %s", ErrMalformedChangeEvent, e.typ, fmt.Sprintf(format, args...))
}

// field returns a field and whether it is present (a null counts as
// absent).
func (e *event) field(key string) (bsoncore.Value, bool) {
	v, err := e.doc.LookupErr(key)
	if err != nil || v.Type == bsoncore.TypeNull {
		return bsoncore.Value{}, false
	}
	return v, true
}

// document returns a document field; required says whether it must be
// there.
func (e *event) document(key string, required bool) (bsoncore.Document, error) {
	v, ok := e.field(key)
	if !ok {
		if required {
			return nil, e.malformed("%s is missing", key)
		}
		return nil, nil
	}
	d, err := asDocument(v)
	if err != nil {
		return nil, e.malformed("%s: %v", key, err)
	}
	return d, nil
}

// asDocument returns v as a valid document.
func asDocument(v bsoncore.Value) (bsoncore.Document, error) {
	if v.Type != bsoncore.TypeEmbeddedDocument {
		return nil, fmt.Errorf("is a %s, not a document", v.Type)
	}
	d := bsoncore.Document(v.Data)
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return d, nil
}

// asArray returns v as a valid array.
func asArray(v bsoncore.Value) (bsoncore.Array, error) {
	if v.Type != bsoncore.TypeArray {
		return nil, fmt.Errorf("is a %s, not an array", v.Type)
	}
	a := bsoncore.Array(v.Data)
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return a, nil
}

// eventInt reads an int32 or int64: the server writes an event's numbers
// as integers, so a double is malformed there.
func eventInt(v bsoncore.Value) (int64, bool) {
	if v.Type == bsoncore.TypeDouble {
		return 0, false
	}
	return integer(v)
}

// namespace reads ns (or to): {db, coll}; coll is required unless dbOnly.
func (e *event) namespace(key string, dbOnly bool) (db, coll string, err error) {
	ns, err := e.document(key, true)
	if err != nil {
		return "", "", err
	}
	db, ok := ns.Lookup("db").StringValueOK()
	if !ok || db == "" || strings.ContainsAny(db, ".\x00") {
		return "", "", e.malformed("%s.db must be a database name", key)
	}
	if dbOnly {
		return db, "", nil
	}
	coll, ok = ns.Lookup("coll").StringValueOK()
	if !ok || coll == "" || strings.Contains(coll, "\x00") {
		return "", "", e.malformed("%s.coll must be a collection name", key)
	}
	return db, coll, nil
}

// documentKey reads documentKey, which must hold an _id.
func (e *event) documentKey() ([]byte, error) {
	key, err := e.document("documentKey", true)
	if err != nil {
		return nil, err
	}
	if _, err := key.LookupErr("_id"); err != nil {
		return nil, e.malformed("documentKey has no _id")
	}
	return key, nil
}

// noEntry lists the operation types that change nothing a target keeps:
// sharding metadata events and transaction markers.
var noEntry = map[string]bool{
	"shardCollection": true, "reshardCollection": true, "refineCollectionShardKey": true,
	"migrateLastChunkFromShard": true, "migrateChunkToNewShard": true, "kNewShardDetected": true,
	"reshardBegin": true, "reshardBlockingWrites": true, "reshardDoneCatchUp": true,
	"endOfTransaction": true,
}

// ConvertEvent reads one change event into the change it stands for (see
// EventToEntry). ok is false for events without an entry (the change's TS
// is still set).
func ConvertEvent(raw bson.Raw) (c Change, ok bool, err error) {
	e := event{doc: bsoncore.Document(raw), typ: "change"}
	if err := e.doc.Validate(); err != nil {
		return Change{}, false, fmt.Errorf("%w: %v", ErrMalformedChangeEvent, err)
	}
	typ, found := e.doc.Lookup("operationType").StringValueOK()
	if !found {
		return Change{}, false, e.malformed("operationType is missing or not a string")
	}
	e.typ = strconv.Quote(typ)
	if typ == "invalidate" {
		return Change{}, false, fmt.Errorf("%w: the server ended the stream (an invalidate event); resume the task from its checkpoint", ErrChangeStreamInvalidated)
	}
	t, i, found := e.doc.Lookup("clusterTime").TimestampOK()
	if !found {
		return Change{}, false, e.malformed("clusterTime is missing or not a timestamp")
	}
	c.ts = bson.Timestamp{T: t, I: i}
	if noEntry[typ] {
		return c, false, nil
	}
	if err := e.common(&c); err != nil {
		return Change{}, false, err
	}
	switch typ {
	case "insert", "update", "replace", "delete":
		err = e.crud(&c, typ)
	case "create", "drop", "rename", "dropDatabase", "createIndexes", "dropIndexes", "modify",
		"startIndexBuild", "abortIndexBuild":
		err = e.ddl(&c, typ)
	default:
		return Change{}, false, fmt.Errorf("%w: operationType %q (the reader knows insert, update, replace, delete, "+
			"create, drop, rename, dropDatabase, createIndexes, dropIndexes, modify and the sharding events); "+
			"a newer server may have added it, use incremental.method oplog", ErrUnsupportedChangeEvent, typ)
	}
	if err != nil {
		return Change{}, false, err
	}
	return c, true, nil
}

// common reads wallTime, collectionUUID, lsid and txnNumber.
func (e *event) common(c *Change) error {
	if v, ok := e.field("wallTime"); ok {
		ms, ok := v.DateTimeOK()
		if !ok {
			return e.malformed("wallTime is a %s, not a date", v.Type)
		}
		c.wall, c.hasWall = ms, true
	}
	if v, ok := e.field("collectionUUID"); ok {
		sub, data, ok := v.BinaryOK()
		if !ok || sub != bson.TypeBinaryUUID || len(data) != 16 {
			return e.malformed("collectionUUID is not a UUID")
		}
		c.ui = data
	}
	lsid, err := e.document("lsid", false)
	if err != nil {
		return err
	}
	c.lsid = lsid
	if v, ok := e.field("txnNumber"); ok {
		n, ok := eventInt(v)
		if !ok {
			return e.malformed("txnNumber is a %s, not an integer", v.Type)
		}
		c.txn, c.hasTxn = n, true
	}
	return nil
}

// crud converts insert, update, replace and delete.
func (e *event) crud(c *Change, typ string) error {
	db, coll, err := e.namespace("ns", false)
	if err != nil {
		return err
	}
	c.ns = db + "." + coll
	key, err := e.documentKey()
	if err != nil {
		return err
	}
	full, err := e.document("fullDocument", typ == "insert" || typ == "replace")
	if err != nil {
		return err
	}
	switch typ {
	case "insert":
		if _, err := full.LookupErr("_id"); err != nil {
			return e.malformed("fullDocument has no _id")
		}
		c.op, c.o, c.o2 = "i", full, key
	case "replace":
		c.op, c.o, c.o2 = "u", full, key
	case "delete":
		c.op, c.o = "d", key
	case "update":
		desc, err := e.document("updateDescription", true)
		if err != nil {
			return err
		}
		o, err := updateOp(desc, full)
		if err != nil {
			return fmt.Errorf("update of %s %s: %w", c.ns, bson.Raw(key), err)
		}
		c.op, c.o, c.o2 = "u", o, key
	}
	return nil
}

// ddl converts the DDL events into command entries.
func (e *event) ddl(c *Change, typ string) error {
	db, coll, err := e.namespace("ns", typ == "dropDatabase")
	if err != nil {
		return err
	}
	c.op, c.ns = "c", db+".$cmd"
	desc, err := e.document("operationDescription", typ == "createIndexes" || typ == "dropIndexes")
	if err != nil {
		return err
	}
	idx, o := bsoncore.AppendDocumentStart(nil)
	switch typ {
	case "dropDatabase":
		o = bsoncore.AppendInt32Element(o, "dropDatabase", 1)
	case "drop":
		o = bsoncore.AppendStringElement(o, "drop", coll)
	case "create", "modify":
		name := map[string]string{"create": "create", "modify": "collMod"}[typ]
		if typ == "create" {
			if err := e.notTimeseries(desc, db, coll); err != nil {
				return err
			}
		}
		o = bsoncore.AppendStringElement(o, name, coll)
		o = appendFields(o, desc)
	case "rename":
		toDB, toColl, err := e.renameTarget(desc)
		if err != nil {
			return err
		}
		o = bsoncore.AppendStringElement(o, "renameCollection", db+"."+coll)
		o = bsoncore.AppendStringElement(o, "to", toDB+"."+toColl)
		if desc != nil {
			if v, err := desc.LookupErr("dropTarget"); err == nil && (v.Type == bsoncore.TypeBinary || v.Type == bsoncore.TypeBoolean) {
				o = bsoncore.AppendValueElement(o, "dropTarget", v)
			}
		}
	case "createIndexes", "startIndexBuild", "abortIndexBuild":
		name := map[string]string{"createIndexes": "commitIndexBuild"}[typ]
		if name == "" {
			name = typ
		}
		v, err := desc.LookupErr("indexes")
		if err != nil {
			return e.malformed("operationDescription.indexes is missing")
		}
		if _, err := asArray(v); err != nil {
			return e.malformed("operationDescription.indexes %v", err)
		}
		o = bsoncore.AppendStringElement(o, name, coll)
		o = bsoncore.AppendValueElement(o, "indexes", v)
	case "dropIndexes":
		names, err := e.indexNames(desc)
		if err != nil {
			return err
		}
		o = bsoncore.AppendStringElement(o, "dropIndexes", coll)
		if len(names) == 1 {
			o = bsoncore.AppendStringElement(o, "index", names[0])
		} else {
			aIdx, a := bsoncore.AppendArrayElementStart(o, "index")
			for i, n := range names {
				a = bsoncore.AppendStringElement(a, strconv.Itoa(i), n)
			}
			o, _ = bsoncore.AppendArrayEnd(a, aIdx)
		}
	}
	c.o, _ = bsoncore.AppendDocumentEnd(o, idx)
	return nil
}

// appendFields appends every field of doc (nil: none).
func appendFields(dst []byte, doc bsoncore.Document) []byte {
	if doc == nil {
		return dst
	}
	elems, _ := doc.Elements()
	for _, el := range elems {
		dst = append(dst, el...)
	}
	return dst
}

// notTimeseries refuses the create of a time-series collection: the event
// shows it as a view on system.buckets.<coll> (with nsType "timeseries" on
// newer servers), without its time-series options.
func (e *event) notTimeseries(desc bsoncore.Document, db, coll string) error {
	nsType, _ := e.doc.Lookup("nsType").StringValueOK()
	var viewOn string
	if desc != nil {
		viewOn, _ = desc.Lookup("viewOn").StringValueOK()
	}
	if nsType == "timeseries" || strings.HasPrefix(viewOn, "system.buckets.") {
		return fmt.Errorf("%w: create of the time-series collection %s.%s: a Change stream does not give its time-series options; "+
			"create it on the target by hand before the copy, or use incremental.method oplog", ErrUnsupportedChangeEvent, db, coll)
	}
	return nil
}

// renameTarget reads the new name of a rename: the top-level to, or
// operationDescription.to.
func (e *event) renameTarget(desc bsoncore.Document) (db, coll string, err error) {
	if _, ok := e.field("to"); ok {
		return e.namespace("to", false)
	}
	if desc == nil {
		return "", "", e.malformed("to is missing")
	}
	sub := event{doc: desc, typ: e.typ}
	return sub.namespace("to", false)
}

// indexNames reads the names of the indexes a dropIndexes event drops.
func (e *event) indexNames(desc bsoncore.Document) ([]string, error) {
	v, err := desc.LookupErr("indexes")
	if err != nil {
		return nil, e.malformed("operationDescription.indexes is missing")
	}
	arr, err := asArray(v)
	if err != nil {
		return nil, e.malformed("operationDescription.indexes %v", err)
	}
	vals, _ := arr.Values()
	var names []string
	for _, v := range vals {
		spec, err := asDocument(v)
		if err != nil {
			return nil, e.malformed("an index of operationDescription.indexes %v", err)
		}
		name, ok := spec.Lookup("name").StringValueOK()
		if !ok || name == "" {
			return nil, e.malformed("an index of operationDescription.indexes has no name")
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, e.malformed("operationDescription.indexes is empty")
	}
	return names, nil
}
