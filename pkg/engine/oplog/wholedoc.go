package oplog

import (
	"bytes"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// wholeDocumentSet recognises an update logged as the whole new document,
// as FerretDB v1 logs every update:
//
//	{op: "u", o: {$v: 1, $set: <new document>}, o2: {_id: <id>}}
//
// o holds exactly $v (1) and $set (a document), $set holds an _id equal to
// o2's, and o2 holds only _id. It returns the new document. Anything else
// (more operators, a $set without the _id) is not that shape and is read
// as mongod writes it.
func wholeDocumentSet(o, o2 bson.Raw) (bson.Raw, bool) {
	var (
		doc    []byte
		fields int
		ok     = true
	)
	err := forEach(o, func(k []byte, v bsoncore.Value) error {
		fields++
		switch string(k) {
		case "$v":
			n, isInt := integer(v)
			ok = ok && isInt && n == 1
		case "$set":
			d, isDoc := document(v)
			ok = ok && isDoc && v.Type == bsoncore.TypeEmbeddedDocument
			doc = d
		default:
			ok = false
		}
		return nil
	})
	if err != nil || !ok || fields != 2 || doc == nil {
		return nil, false
	}
	key, keyFields := bsoncore.Value{}, 0
	if err := forEach(o2, func(k []byte, v bsoncore.Value) error {
		keyFields++
		if string(k) == "_id" {
			key = v
		}
		return nil
	}); err != nil || keyFields != 1 || key.Type == 0 {
		return nil, false
	}
	id, found, err := lookup(doc, "_id")
	if err != nil || !found || id.Type != key.Type || !bytes.Equal(id.Data, key.Data) {
		return nil, false
	}
	return bson.Raw(doc), true
}
