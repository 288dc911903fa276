package sink

import (
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Pipeline is a pipeline-style update: the bytes of a BSON array of
// stages. The driver, and RawUpdate, send it as an array.
type Pipeline []byte

// MarshalBSONValue implements bson.ValueMarshaler.
func (p Pipeline) MarshalBSONValue() (byte, []byte, error) {
	return byte(bson.TypeArray), p, nil
}

// upsert is the Upsert of every model Replace returns: the driver only
// reads it.
var upsert = true

// Replace returns the write that replaces the document filter selects
// with doc, inserting doc when there is none (an upsert).
//
// MongoDB 5.0+ stores documents with top-level fields whose names begin
// with '$' (an insert takes them), but refuses them in an update's
// replacement document (DollarPrefixedFieldName, code 52), through
// replaceOne as through an upserting update. Such a document is written
// as MongoDB's own hint says, with a pipeline update
// [{$replaceWith: {$literal: doc}}], which replaces the whole document
// (a pipeline update may write top-level '$' fields) and upserts as the
// replacement would. Nested '$' names and names with '.' need nothing:
// 5.0+ checks only the top level of a replacement. Any other document is
// a plain ReplaceOneModel, after one scan of its top-level keys.
func Replace(filter, doc bson.Raw) mongo.WriteModel {
	if !TopLevelDollar(doc) {
		return &mongo.ReplaceOneModel{Filter: filter, Replacement: doc, Upsert: &upsert}
	}
	return &mongo.UpdateOneModel{Filter: filter, Update: LiteralReplacement(doc), Upsert: &upsert}
}

// TopLevelDollar reports whether doc has a top-level field whose name
// begins with '$'. It reads the raw bytes without allocating and never
// panics on a malformed document (the server refuses one either way).
func TopLevelDollar(doc []byte) bool {
	if len(doc) < 5 {
		return false
	}
	rem := doc[4 : len(doc)-1]
	for len(rem) > 1 {
		if rem[1] == '$' {
			return true
		}
		_, rest, ok := bsoncore.ReadElement(rem)
		if !ok {
			return false
		}
		rem = rest
	}
	return false
}

// LiteralReplacement returns the pipeline [{$replaceWith: {$literal: doc}}]:
// the document becomes doc as it is, whatever its field names.
func LiteralReplacement(doc []byte) Pipeline {
	lit := bsoncore.BuildDocumentFromElements(nil, bsoncore.AppendDocumentElement(nil, "$literal", doc))
	stage := bsoncore.BuildDocumentFromElements(nil, bsoncore.AppendDocumentElement(nil, "$replaceWith", lit))
	return Pipeline(bsoncore.BuildArray(nil, bsoncore.Value{Type: bsoncore.TypeEmbeddedDocument, Data: stage}))
}
