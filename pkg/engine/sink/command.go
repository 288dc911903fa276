package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Write commands built from raw documents. The driver's
// Collection.BulkWrite marshals every document, filter and update
// through its encoder, and decodes each inserted document again to find
// its _id; documents read from a source are BSON already, so an insert,
// update or delete command can be assembled from their bytes (statements
// in the command body, as the server accepts them besides document
// sequences). Models it does not cover (options replay never sets,
// values that are not raw BSON) and commands above MaxRawCommandBytes
// are left to the driver.

// MaxRawCommandBytes caps a command built from raw documents: a command
// body may hold up to 16 MiB and 16 KiB (maxBsonObjectSize plus room
// for the command's own fields). A larger batch goes through the driver,
// which splits it into document sequences.
const MaxRawCommandBytes = 16 << 20

// MaxRawCommandWrites is the server's default maxWriteBatchSize: a batch
// with more writes goes through the driver, which splits it.
const MaxRawCommandWrites = 100_000

// CommandKind is a write command.
type CommandKind uint8

// Write command kinds.
const (
	InsertCommand CommandKind = iota
	UpdateCommand
	DeleteCommand
)

// AppendWriteCommand appends to dst the kind command of models' writes
// into collection coll ({insert|update|delete: coll, ordered,
// bypassDocumentValidation: true (not on a delete), documents|updates|deletes: [...],
// writeConcern: wc when set}; the caller's RunCommand adds $db) and
// reports whether it could: every model must be of the kind (an
// InsertOneModel; a ReplaceOneModel or UpdateOneModel; a DeleteOneModel)
// with raw documents and no collation, hint, sort or array filters.
func AppendWriteCommand(dst []byte, coll string, kind CommandKind, models []mongo.WriteModel, ordered bool, wc *writeconcern.WriteConcern) ([]byte, bool) {
	if len(models) == 0 || len(models) > MaxRawCommandWrites {
		return dst, false
	}
	start := len(dst)
	name, field := "insert", "documents"
	switch kind {
	case UpdateCommand:
		name, field = "update", "updates"
	case DeleteCommand:
		name, field = "delete", "deletes"
	}
	docIdx, dst := bsoncore.AppendDocumentStart(dst)
	dst = bsoncore.AppendStringElement(dst, name, coll)
	dst = bsoncore.AppendBooleanElement(dst, "ordered", ordered)
	if kind != DeleteCommand {
		// delete takes no such field.
		dst = bsoncore.AppendBooleanElement(dst, "bypassDocumentValidation", true)
	}
	if wc != nil {
		var ok bool
		if dst, ok = AppendWriteConcern(dst, wc); !ok {
			return dst[:start], false
		}
	}
	arrIdx, dst := bsoncore.AppendArrayElementStart(dst, field)
	for i, m := range models {
		var ok bool
		if dst, ok = appendStatement(dst, i, kind, m); !ok || len(dst)-start > MaxRawCommandBytes {
			return dst[:start], false
		}
	}
	dst, _ = bsoncore.AppendArrayEnd(dst, arrIdx)
	dst, _ = bsoncore.AppendDocumentEnd(dst, docIdx)
	return dst, true
}

// appendStatement appends statement i of a kind command, as the driver
// writes it.
func appendStatement(dst []byte, i int, kind CommandKind, m mongo.WriteModel) ([]byte, bool) {
	switch kind {
	case InsertCommand:
		m, ok := m.(*mongo.InsertOneModel)
		if !ok {
			return dst, false
		}
		doc, ok := RawDocument(m.Document)
		if !ok {
			return dst, false
		}
		if _, err := bsoncore.Document(doc).LookupErr("_id"); err != nil {
			return dst, false // the driver adds an _id; a source's document always has one
		}
		return AppendArrayDocument(dst, i, doc), true
	case DeleteCommand:
		m, ok := m.(*mongo.DeleteOneModel)
		if !ok || m.Collation != nil || m.Hint != nil {
			return dst, false
		}
		f, ok := RawDocument(m.Filter)
		if !ok {
			return dst, false
		}
		var idx int32
		idx, dst = AppendArrayDocumentStart(dst, i)
		dst = bsoncore.AppendDocumentElement(dst, "q", f)
		dst = bsoncore.AppendInt32Element(dst, "limit", 1)
		dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
		return dst, true
	}
	var (
		f, u   []byte
		t      = bsoncore.TypeEmbeddedDocument
		upsert *bool
		ok1    bool
		ok2    bool
	)
	switch m := m.(type) {
	case *mongo.ReplaceOneModel:
		if m.Collation != nil || m.Hint != nil || m.Sort != nil {
			return dst, false
		}
		f, ok1 = RawDocument(m.Filter)
		u, ok2 = RawDocument(m.Replacement)
		upsert = m.Upsert
	case *mongo.UpdateOneModel:
		if m.ArrayFilters != nil || m.Collation != nil || m.Hint != nil || m.Sort != nil {
			return dst, false
		}
		f, ok1 = RawDocument(m.Filter)
		t, u, ok2 = RawUpdate(m.Update)
		upsert = m.Upsert
	}
	if !ok1 || !ok2 {
		return dst, false
	}
	var idx int32
	idx, dst = AppendArrayDocumentStart(dst, i)
	dst = bsoncore.AppendDocumentElement(dst, "q", f)
	dst = bsoncore.AppendHeader(dst, t, "u")
	dst = append(dst, u...)
	if upsert != nil {
		dst = bsoncore.AppendBooleanElement(dst, "upsert", *upsert)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst, true
}

// AppendArrayDocumentStart starts element i of an array, a document.
func AppendArrayDocumentStart(dst []byte, i int) (int32, []byte) {
	dst = appendArrayKey(dst, i)
	return bsoncore.AppendDocumentStart(dst)
}

// AppendArrayDocument appends doc as element i of an array.
func AppendArrayDocument(dst []byte, i int, doc []byte) []byte {
	return append(appendArrayKey(dst, i), doc...)
}

func appendArrayKey(dst []byte, i int) []byte {
	dst = append(dst, byte(bsoncore.TypeEmbeddedDocument))
	dst = strconv.AppendInt(dst, int64(i), 10)
	return append(dst, 0)
}

// AppendWriteConcern appends wc as a command's writeConcern; false for
// one it does not cover (an unacknowledged w: 0, or a w of another type).
func AppendWriteConcern(dst []byte, wc *writeconcern.WriteConcern) ([]byte, bool) {
	if wc.W == nil && wc.Journal == nil {
		return dst, true
	}
	idx, dst := bsoncore.AppendDocumentElementStart(dst, "writeConcern")
	switch w := wc.W.(type) {
	case nil:
	case int:
		if w <= 0 {
			return dst, false
		}
		dst = bsoncore.AppendInt32Element(dst, "w", int32(w))
	case string:
		dst = bsoncore.AppendStringElement(dst, "w", w)
	default:
		return dst, false
	}
	if wc.Journal != nil {
		dst = bsoncore.AppendBooleanElement(dst, "j", *wc.Journal)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst, true
}

// RawDocument returns v's bytes when v is a whole BSON document given as
// bytes (bson.Raw, bsoncore.Document or []byte).
func RawDocument(v any) ([]byte, bool) {
	var b []byte
	switch v := v.(type) {
	case bson.Raw:
		b = v
	case bsoncore.Document:
		b = v
	case []byte:
		b = v
	default:
		return nil, false
	}
	if len(b) < 5 || int(binary.LittleEndian.Uint32(b)) != len(b) || b[len(b)-1] != 0 {
		return nil, false
	}
	return b, true
}

// RawUpdate returns an update's type (a document of operators or a
// replacement, or a pipeline array) and bytes.
func RawUpdate(v any) (bsoncore.Type, []byte, bool) {
	if b, ok := RawDocument(v); ok {
		return bsoncore.TypeEmbeddedDocument, b, true
	}
	vm, ok := v.(bson.ValueMarshaler)
	if !ok {
		return 0, nil, false
	}
	t, b, err := vm.MarshalBSONValue()
	if err != nil || bsoncore.Type(t) != bsoncore.TypeArray && bsoncore.Type(t) != bsoncore.TypeEmbeddedDocument {
		return 0, nil, false
	}
	if _, ok := RawDocument(b); !ok {
		return 0, nil, false
	}
	return bsoncore.Type(t), b, true
}

// RunWriteCommand runs cmd, a command AppendWriteCommand built of
// models, on db, and returns its reply (nil when the command failed as a
// whole); its error is the one the driver's BulkWrite would return
// (write errors as a mongo.BulkWriteException).
func RunWriteCommand(ctx context.Context, db *mongo.Database, cmd bson.Raw, models []mongo.WriteModel) (bson.Raw, error) {
	reply, err := db.RunCommand(ctx, cmd).Raw()
	var we mongo.WriteException
	if err != nil && (!errors.As(err, &we) || len(reply) == 0) {
		return nil, err
	}
	// The reply holds writeErrors or a writeConcernError (RunCommand's
	// WriteException): read them as BulkWrite reports them.
	return reply, WriteCommandResult(reply, models)
}

// Upserted returns the indexes of the writes that inserted a document,
// from the reply of an update command (its upserted array).
func Upserted(reply bson.Raw) []int {
	arr, ok := reply.Lookup("upserted").ArrayOK()
	if !ok {
		return nil
	}
	vals, err := arr.Values()
	if err != nil {
		return nil
	}
	idx := make([]int, 0, len(vals))
	for _, v := range vals {
		if d, ok := v.DocumentOK(); ok {
			if i, ok := d.Lookup("index").AsInt64OK(); ok {
				idx = append(idx, int(i))
			}
		}
	}
	return idx
}

// WriteCommandResult reads the reply to an insert, update or delete
// command of models, as the driver's BulkWrite reports it: nil when
// every write was applied, or a mongo.BulkWriteException holding the
// write errors (each with its model) and the write concern error. A
// command that failed as a whole (ok: 0) is RunCommand's error already.
func WriteCommandResult(reply bson.Raw, models []mongo.WriteModel) error {
	var bwe mongo.BulkWriteException
	if v, err := reply.LookupErr("writeErrors"); err == nil {
		arr, ok := v.ArrayOK()
		if !ok {
			return fmt.Errorf("write command reply: writeErrors is a %s", v.Type)
		}
		vals, err := arr.Values()
		if err != nil {
			return fmt.Errorf("write command reply: writeErrors: %w", err)
		}
		for _, v := range vals {
			d, ok := v.DocumentOK()
			if !ok {
				return fmt.Errorf("write command reply: writeErrors holds a %s", v.Type)
			}
			i, _ := d.Lookup("index").AsInt64OK()
			code, _ := d.Lookup("code").AsInt64OK()
			msg, _ := d.Lookup("errmsg").StringValueOK()
			we := mongo.BulkWriteError{WriteError: mongo.WriteError{Index: int(i), Code: int(code), Message: msg, Raw: bson.Raw(d)}}
			if info, ok := d.Lookup("errInfo").DocumentOK(); ok {
				we.Details = bson.Raw(info)
			}
			if i >= 0 && int(i) < len(models) {
				we.Request = models[i]
			}
			bwe.WriteErrors = append(bwe.WriteErrors, we)
		}
	}
	if d, ok := reply.Lookup("writeConcernError").DocumentOK(); ok {
		code, _ := d.Lookup("code").AsInt64OK()
		name, _ := d.Lookup("codeName").StringValueOK()
		msg, _ := d.Lookup("errmsg").StringValueOK()
		wce := &mongo.WriteConcernError{Name: name, Code: int(code), Message: msg, Raw: bson.Raw(d)}
		if info, ok := d.Lookup("errInfo").DocumentOK(); ok {
			wce.Details = bson.Raw(info)
		}
		bwe.WriteConcernError = wce
		bwe.Labels = appendLabels(bwe.Labels, bsoncore.Document(d))
	}
	if bwe.WriteConcernError == nil && len(bwe.WriteErrors) == 0 {
		return nil
	}
	bwe.Labels = appendLabels(bwe.Labels, bsoncore.Document(reply))
	return bwe
}

// appendLabels appends d's errorLabels.
func appendLabels(dst []string, d bsoncore.Document) []string {
	arr, ok := d.Lookup("errorLabels").ArrayOK()
	if !ok {
		return dst
	}
	vals, err := arr.Values()
	if err != nil {
		return dst
	}
	for _, v := range vals {
		if s, ok := v.StringValueOK(); ok {
			dst = append(dst, s)
		}
	}
	return dst
}
