package replay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// A bulkWrite command built from the writes' raw documents. The driver's
// Client.BulkWrite marshals every document through its encoder and
// decodes each inserted one again to find its _id; the oplog already
// holds every document, filter and update as BSON, so the command is
// assembled from those bytes (with the ops in the command body, which
// the server accepts as it accepts document sequences). A batch the
// builder does not cover (a model with options replay never sets, a
// value that is not raw BSON, a command above sink.MaxRawCommandBytes) goes
// through the driver as before.

// bulkBuf holds what building a command needs besides its bytes (the
// nsInfo array and the namespaces' indexes) between commands.
type bulkBuf struct {
	ns  []byte
	idx map[catalog.Namespace]int32
}

var bulkBufs = sync.Pool{New: func() any { return &bulkBuf{idx: map[catalog.Namespace]int32{}} }}

// appendBulkWrite appends to dst an ordered bulkWrite command carrying
// runs' writes in order (errorsOnly, bypassing document validation, with
// write concern wc when set) and reports whether it could. b's buffers
// are used for the namespaces.
func appendBulkWrite(dst []byte, b *bulkBuf, runs []run, wc *writeconcern.WriteConcern) ([]byte, bool) {
	clear(b.idx)
	start := len(dst)
	docIdx, dst := bsoncore.AppendDocumentStart(dst)
	dst = bsoncore.AppendInt32Element(dst, "bulkWrite", 1)
	dst = bsoncore.AppendBooleanElement(dst, "errorsOnly", true)
	dst = bsoncore.AppendBooleanElement(dst, "bypassDocumentValidation", true)
	dst = bsoncore.AppendBooleanElement(dst, "ordered", true)
	opsIdx, dst := bsoncore.AppendArrayElementStart(dst, "ops")
	nsIdx, nsArr := bsoncore.AppendArrayElementStart(b.ns[:0], "nsInfo")
	n := 0
	for _, rn := range runs {
		at, ok := b.idx[rn.ns]
		if !ok {
			at = int32(len(b.idx))
			b.idx[rn.ns] = at
			var e int32
			e, nsArr = sink.AppendArrayDocumentStart(nsArr, int(at))
			nsArr = bsoncore.AppendHeader(nsArr, bsoncore.TypeString, "ns")
			nsArr = appendNamespaceString(nsArr, rn.ns)
			nsArr, _ = bsoncore.AppendDocumentEnd(nsArr, e)
		}
		for _, it := range rn.items {
			var ok bool
			dst, ok = appendBulkOp(dst, n, at, it.model)
			if !ok {
				b.ns = nsArr
				return dst[:start], false
			}
			n++
			if len(dst)-start+len(nsArr) > sink.MaxRawCommandBytes || n > sink.MaxRawCommandWrites {
				b.ns = nsArr
				return dst[:start], false
			}
		}
	}
	dst, _ = bsoncore.AppendArrayEnd(dst, opsIdx)
	nsArr, _ = bsoncore.AppendArrayEnd(nsArr, nsIdx)
	b.ns = nsArr
	dst = append(dst, nsArr...)
	if wc != nil {
		var ok bool
		if dst, ok = sink.AppendWriteConcern(dst, wc); !ok {
			return dst[:start], false
		}
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, docIdx)
	return dst, true
}

// appendBulkOp appends write i of a bulkWrite's ops (namespace at, model
// m) as the driver writes it, and reports whether m is one it covers.
func appendBulkOp(dst []byte, i int, at int32, m mongo.WriteModel) ([]byte, bool) {
	start := len(dst)
	var idx int32
	switch m := m.(type) {
	case *mongo.InsertOneModel:
		doc, ok := sink.RawDocument(m.Document)
		if !ok {
			return dst, false
		}
		if _, err := bsoncore.Document(doc).LookupErr("_id"); err != nil {
			return dst, false // the driver adds an _id; an oplog insert always has one
		}
		idx, dst = sink.AppendArrayDocumentStart(dst, i)
		dst = bsoncore.AppendInt32Element(dst, "insert", at)
		dst = bsoncore.AppendDocumentElement(dst, "document", doc)
	case *mongo.ReplaceOneModel:
		f, ok1 := sink.RawDocument(m.Filter)
		u, ok2 := sink.RawDocument(m.Replacement)
		if !ok1 || !ok2 || m.Collation != nil || m.Hint != nil || m.Sort != nil {
			return dst, false
		}
		idx, dst = sink.AppendArrayDocumentStart(dst, i)
		dst = appendUpdateOp(dst, at, f, bsoncore.TypeEmbeddedDocument, u, m.Upsert)
	case *mongo.UpdateOneModel:
		f, ok := sink.RawDocument(m.Filter)
		if !ok || m.ArrayFilters != nil || m.Collation != nil || m.Hint != nil || m.Sort != nil {
			return dst, false
		}
		t, u, ok := sink.RawUpdate(m.Update)
		if !ok {
			return dst, false
		}
		idx, dst = sink.AppendArrayDocumentStart(dst, i)
		dst = appendUpdateOp(dst, at, f, t, u, m.Upsert)
	case *mongo.DeleteOneModel:
		f, ok := sink.RawDocument(m.Filter)
		if !ok || m.Collation != nil || m.Hint != nil {
			return dst, false
		}
		idx, dst = sink.AppendArrayDocumentStart(dst, i)
		dst = bsoncore.AppendInt32Element(dst, "delete", at)
		dst = bsoncore.AppendDocumentElement(dst, "filter", f)
		dst = bsoncore.AppendBooleanElement(dst, "multi", false)
	default:
		return dst[:start], false
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst, true
}

// appendUpdateOp appends the fields of an update (or replacement) op.
func appendUpdateOp(dst []byte, at int32, filter []byte, t bsoncore.Type, update []byte, upsert *bool) []byte {
	dst = bsoncore.AppendInt32Element(dst, "update", at)
	dst = bsoncore.AppendDocumentElement(dst, "filter", filter)
	dst = bsoncore.AppendHeader(dst, t, "updateMods")
	dst = append(dst, update...)
	dst = bsoncore.AppendBooleanElement(dst, "multi", false)
	if upsert != nil {
		dst = bsoncore.AppendBooleanElement(dst, "upsert", *upsert)
	}
	return dst
}

// appendNamespaceString appends "db.coll" as a BSON string value.
func appendNamespaceString(dst []byte, ns catalog.Namespace) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(ns.DB)+1+len(ns.Coll)+1))
	dst = append(dst, ns.DB...)
	dst = append(dst, '.')
	dst = append(dst, ns.Coll...)
	return append(dst, 0)
}

// errBulkWrite is a bulkWrite command's reply naming a failed write.
var errBulkWrite = errors.New("bulkWrite")

// bulkWriteReply reads the reply to an ordered, errorsOnly bulkWrite of
// n writes: nil when every write was applied; otherwise how many writes
// were applied before the one that failed, and an error that says why
// (a write concern error counts none applied, as the driver's path
// does: every write goes again).
func bulkWriteReply(reply bson.Raw, n int) (int, error) {
	if wce, err := reply.LookupErr("writeConcernError"); err == nil {
		return 0, fmt.Errorf("%w: write concern error: %s", errBulkWrite, wce)
	}
	nErrors, ok := reply.Lookup("nErrors").AsInt64OK()
	if !ok {
		return 0, fmt.Errorf("%w: reply without nErrors", errBulkWrite)
	}
	if nErrors == 0 {
		return n, nil
	}
	arr, ok := reply.Lookup("cursor", "firstBatch").ArrayOK()
	if !ok {
		return 0, fmt.Errorf("%w: %d errors, no first batch of results", errBulkWrite, nErrors)
	}
	vals, err := arr.Values()
	if err != nil {
		return 0, fmt.Errorf("%w: %d errors, results unreadable: %w", errBulkWrite, nErrors, err)
	}
	for _, v := range vals {
		d, ok := v.DocumentOK()
		if !ok {
			continue
		}
		if okv, _ := d.Lookup("ok").AsFloat64OK(); okv == 1 {
			continue
		}
		idx, ok := d.Lookup("idx").AsInt64OK()
		if !ok || idx < 0 || idx >= int64(n) {
			break
		}
		code, _ := d.Lookup("code").AsInt64OK()
		msg, _ := d.Lookup("errmsg").StringValueOK()
		return int(idx), fmt.Errorf("%w: write %d: (%d) %s", errBulkWrite, idx, code, msg)
	}
	return 0, fmt.Errorf("%w: %d errors, none named in the first batch", errBulkWrite, nErrors)
}
