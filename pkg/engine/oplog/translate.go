package oplog

import (
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// Write is one idempotent write on the target, made from one entry.
type Write struct {
	// NS is the source namespace, "db.coll" ("db" for dropDatabase); the
	// sink maps it to the target's name.
	NS string
	// Kind is the kind of the entry the write comes from (Insert, Update,
	// Delete, or Command for DDL).
	Kind Kind
	// DocKey is the document key ({_id} or the shard key with _id) the
	// partitioner hashes, so that a document's writes stay in order. Nil for
	// DDL.
	DocKey bson.Raw
	// Model is the write for a bulk write on NS's target collection; nil
	// for DDL.
	Model mongo.WriteModel
	// DDL is set, instead of Model, for a DDL command: a barrier.
	DDL *DDL
	// Unconfirmed marks an upsert that stands for an update the source
	// may have logged without writing it, so that the write must not
	// create the document by itself. FerretDB v1 logs an update once its
	// write returns, whether or not the write found the document: an
	// update that read a document a concurrent delete then removed is
	// logged after that delete, with the whole document it meant to
	// write (backends/decorators/oplog, UpdateAll). The replayer re-reads
	// from the source a document such a write inserted.
	Unconfirmed bool
}

// Translate turns one entry into the writes that apply it on the target,
// in the order they must be applied:
//
//   - insert: ReplaceOne with upsert, filtered on the document key (o2 when
//     present, else {_id}), so replaying it again, or over the copy, is
//     harmless (InsertOne of the document with Translator.InsertModels);
//     a document with a top-level '$' field is replaced by a pipeline
//     update instead, as every replacement below (sink.Replace);
//   - update with $v: 2: the diff as $set/$unset/$push updates (UpdateOne,
//     no upsert; see translateDiff); "is a diff" is decided by $v == 2 and
//     nothing else, so a replacement with a field named diff stays one;
//   - update with $v: 1, or without $v but with $-operators: UpdateOne with
//     those operators ($set and $unset; others are refused), no upsert;
//   - update without $v or operators: o is the whole new document,
//     ReplaceOne with upsert filtered on o2;
//   - delete: DeleteOne filtered on o (the document key);
//   - no-op, startIndexBuild, abortIndexBuild, dbCheck: nothing;
//   - DDL: one Write whose DDL is set (the replayer applies it as a
//     barrier).
//
// Updates that are not replacements do not upsert: on a missing document
// they match nothing, which is what the copy/replay overlap needs.
//
// Transaction entries (applyOps, commitTransaction, abortTransaction)
// return ErrNeedsAssembly: pass them to an Assembler and translate the
// operations of the units it emits. Translate does not apply Skip.
func Translate(e Entry) ([]Write, error) {
	return AppendTranslate(nil, e)
}

// AppendTranslate is Translate appending the writes to dst, so that a
// caller can reuse one slice for every entry. On error it returns dst
// unchanged.
func AppendTranslate(dst []Write, e Entry) ([]Write, error) {
	return Translator{}.Append(dst, e)
}

// Translator translates the entries of one source, whose oplog may log
// updates in a shape of its own. The zero value reads entries as mongod
// writes them (Translate).
type Translator struct {
	// WholeDocumentUpdates: the source logs every update, replacements
	// and $unset included, as {$v: 1, $set: <the whole new document>}
	// with o2 {_id} (FerretDB v1). Such an entry is applied as a
	// replacement of the document by its key (an upsert, so replaying it
	// again is harmless), so a field the update removed is removed on the
	// target too; the write is Unconfirmed, as such a source may log an
	// update that found no document. Set it from the source's profile
	// only: on MongoDB a $set that names _id and other fields is a
	// partial update.
	WholeDocumentUpdates bool
	// PipelineUpdates: the target applies pipeline-style updates
	// (MongoDB 4.2+). A $v:2 diff's i section (fields inserted or moved
	// to the end of their document) is then one pipeline update per run
	// of fields instead of an $unset and a $set in two updates, so that a
	// unique index never sees the field missing in between.
	PipelineUpdates bool
	// InsertModels: an insert is an InsertOne of the document instead of
	// a replacement upsert by its key. Far cheaper on some servers
	// (FerretDB serves an upsert with a scan of the collection), but not
	// idempotent: the caller replaces the document by DocKey when the
	// insert meets a duplicate key (the copy/replay overlap, a resume).
	InsertModels bool
}

// Append is AppendTranslate for this source.
func (t Translator) Append(dst []Write, e Entry) ([]Write, error) {
	out, err := t.translate(dst, e)
	if err != nil {
		return dst, fmt.Errorf("%s: %w", e, err)
	}
	return out, nil
}

// upsert is the Upsert of every upserting model: the driver only reads it,
// so one shared value saves an allocation per write.
var upsert = true

func (t Translator) translate(dst []Write, e Entry) ([]Write, error) {
	if e.op != OpCommand && e.op != OpNoop && IsViews(e.Namespace()) {
		return translateView(dst, e)
	}
	switch e.op {
	case OpInsert:
		key, err := e.DocKey()
		if err != nil {
			return nil, err
		}
		if t.InsertModels {
			return append(dst, Write{NS: e.ns, Kind: Insert, DocKey: key, Model: &mongo.InsertOneModel{Document: e.o}}), nil
		}
		return append(dst, Write{NS: e.ns, Kind: Insert, DocKey: key, Model: sink.Replace(key, e.o)}), nil
	case OpUpdate:
		if t.WholeDocumentUpdates {
			if doc, ok := wholeDocumentSet(e.o, e.o2); ok {
				return append(dst, Write{NS: e.ns, Kind: Update, DocKey: e.o2, Model: sink.Replace(e.o2, doc), Unconfirmed: true}), nil
			}
		}
		return translateUpdate(dst, e, t)
	case OpDelete:
		return append(dst, Write{NS: e.ns, Kind: Delete, DocKey: e.o, Model: &mongo.DeleteOneModel{Filter: e.o}}), nil
	case OpNoop:
		return dst, nil
	case OpCommand:
		switch {
		case e.cmd.IsDDL():
			d, err := e.ddl()
			if err != nil {
				return nil, err
			}
			ns := d.NS.String()
			if d.Class == CmdDropDatabase {
				ns = d.NS.DB
			}
			return append(dst, Write{NS: ns, Kind: Command, DDL: &d}), nil
		case e.cmd.Skipped():
			return dst, nil
		case e.cmd.IsTxn():
			return nil, ErrNeedsAssembly
		default:
			name, _ := firstKey(e.o)
			return nil, fmt.Errorf("%w %q", ErrUnknownCommand, name)
		}
	}
	return nil, fmt.Errorf("%w: op %q", ErrMalformedEntry, e.op)
}

// DocKey returns the key of the document an insert, update or delete
// writes, as Translate's writes carry it in Write.DocKey: an insert's o2
// when present (the shard key with _id), else {_id}; an update's o2; a
// delete's o. Nil for other entries.
func (e Entry) DocKey() (bson.Raw, error) {
	switch e.op {
	case OpInsert:
		if e.o2 != nil {
			return e.o2, nil
		}
		id, _, err := lookup(e.o, "_id")
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformedEntry, err)
		}
		return bson.Raw(singleton("_id", id)), nil
	case OpUpdate:
		return e.o2, nil
	case OpDelete:
		return e.o, nil
	}
	return nil, nil
}

// firstKey returns the name of doc's first field.
func firstKey(doc []byte) (string, bool) {
	elem, err := bsoncore.Document(doc).IndexErr(0)
	if err != nil {
		return "", false
	}
	k, err := elem.KeyErr()
	return k, err == nil
}

// updateForm is the shape of an update entry's o.
type updateForm uint8

const (
	formReplacement updateForm = iota
	formOperators
	formDiff
)

// classifyUpdate decides an update's form as mongod does
// (UpdateModification::parseFromOplogEntry): an o with an _id is a
// replacement, whatever else it holds (5.0+ documents may have top-level
// $-prefixed fields, $v included); otherwise $v decides. It checks that o
// holds only what that form allows. For a diff it returns the diff
// document.
func classifyUpdate(o []byte) (updateForm, []byte, error) {
	if _, found, err := lookup(o, "_id"); err != nil {
		return 0, nil, fmt.Errorf("%w: o: %v", ErrMalformedEntry, err)
	} else if found {
		return formReplacement, nil, nil
	}
	var (
		version            bsoncore.Value
		hasVersion         bool
		diff               bsoncore.Value
		hasDiff            bool
		operators, plain   int
		badOperator, other string
	)
	err := forEach(o, func(k []byte, v bsoncore.Value) error {
		switch key := string(k); {
		case key == "$v":
			version, hasVersion = v, true
		case strings.HasPrefix(key, "$"):
			operators++
			if key != "$set" && key != "$unset" && badOperator == "" {
				badOperator = key
			}
		default:
			plain++
			if key == "diff" {
				diff, hasDiff = v, true
			} else if other == "" {
				other = key
			}
		}
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("%w: o: %v", ErrMalformedEntry, err)
	}
	if hasVersion {
		v, ok := integer(version)
		switch {
		case ok && v == 2:
			if operators > 0 || other != "" || !hasDiff {
				return 0, nil, fmt.Errorf("%w: a $v:2 update must be {$v: 2, diff: {...}}", ErrUnsupportedUpdate)
			}
			if diff.Type != bsoncore.TypeEmbeddedDocument {
				return 0, nil, fmt.Errorf("%w: diff is a %s, not a document", ErrMalformedDiff, diff.Type)
			}
			return formDiff, diff.Data, nil
		case ok && v == 1:
			// $v:1 is the operator form.
		default:
			return 0, nil, fmt.Errorf("%w: $v %s (only 1 and 2 are known)", ErrUnsupportedUpdate, version)
		}
		if plain > 0 {
			return 0, nil, fmt.Errorf("%w: a $v:1 update mixes operators and fields", ErrUnsupportedUpdate)
		}
	} else if operators == 0 {
		return formReplacement, nil, nil
	} else if plain > 0 {
		return 0, nil, fmt.Errorf("%w: the update mixes operators and fields", ErrUnsupportedUpdate)
	}
	if badOperator != "" {
		return 0, nil, fmt.Errorf("%w: operator %s (a $v:1 entry only holds $set and $unset)", ErrUnsupportedUpdate, badOperator)
	}
	return formOperators, nil, nil
}

// translateUpdate translates a 'u' entry.
func translateUpdate(dst []Write, e Entry, t Translator) ([]Write, error) {
	form, diff, err := classifyUpdate(e.o)
	if err != nil {
		return nil, err
	}
	switch form {
	case formReplacement:
		return append(dst, Write{NS: e.ns, Kind: Update, DocKey: e.o2, Model: sink.Replace(e.o2, e.o)}), nil
	case formOperators:
		u, err := operatorsWithoutVersion(e.o)
		if err != nil {
			return dst, err
		}
		if u == nil {
			if !e.Upsert() {
				return dst, nil
			}
			// Nothing to set, yet the document must exist: set its _id,
			// which the upsert takes from the filter anyway.
			id, _, err := lookup(e.o2, "_id")
			if err != nil {
				return dst, fmt.Errorf("%w: o2: %v", ErrMalformedEntry, err)
			}
			u = singleton("$set", bsoncore.Value{Type: bsoncore.TypeEmbeddedDocument, Data: singleton("_id", id)})
		}
		return append(dst, e.updateOne(u)), nil
	}
	sc := getDiffScratch()
	defer putDiffScratch(sc)
	sc.docs, err = sc.appendDiff(sc.docs[:0], diff, t.PipelineUpdates)
	if err != nil {
		return nil, err
	}
	for _, d := range sc.docs {
		dst = append(dst, e.updateOne(d))
	}
	return dst, nil
}

// updateOne is an UpdateOne on the entry's document key. It upserts when
// the entry says b: true (possible in a user's applyOps), as mongod does.
func (e Entry) updateOne(update []byte) Write {
	var u any = bson.Raw(update)
	if isPipeline(update) {
		u = pipeline(update)
	}
	m := &mongo.UpdateOneModel{Filter: e.o2, Update: u}
	if e.Upsert() {
		m.Upsert = &upsert
	}
	return Write{NS: e.ns, Kind: Update, DocKey: e.o2, Model: m}
}

// operatorsWithoutVersion returns o without $v and without empty
// operators (a server refuses {$set: {}}); nil when nothing is left.
func operatorsWithoutVersion(o []byte) ([]byte, error) {
	b := start(make([]byte, 0, len(o)))
	n := 0
	err := forEach(o, func(k []byte, v bsoncore.Value) error {
		key := string(k)
		if key == "$v" {
			return nil
		}
		if v.Type != bsoncore.TypeEmbeddedDocument {
			return fmt.Errorf("%w: %s is a %s, not a document", ErrUnsupportedUpdate, key, v.Type)
		}
		body, err := docBytes(v.Data)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrMalformedEntry, key, err)
		}
		if len(body) == 0 {
			return nil
		}
		b.value(key, v)
		n++
		return nil
	})
	if err != nil || n == 0 {
		return nil, err
	}
	return b.finish(), nil
}

// pipeline is a pipeline-style update: a BSON array of stages.
type pipeline = sink.Pipeline

// isPipeline reports whether an update built by translateDiff is a
// pipeline: its first key is "0", where an update document's is an
// operator.
func isPipeline(update []byte) bool {
	return len(update) > 6 && update[4] == byte(bsoncore.TypeEmbeddedDocument) && update[5] == '0' && update[6] == 0
}
