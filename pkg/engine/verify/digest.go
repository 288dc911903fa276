package verify

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// docHash is the 128-bit hash of one document: the first 16 bytes of the
// SHA-256 of its raw BSON bytes.
type docHash [16]byte

func hashDoc(doc []byte) docHash {
	sum := sha256.Sum256(doc)
	return docHash(sum[:16])
}

// Digest is an order-independent hash of a set of documents: two 64-bit
// lanes, each the sum modulo 2^64 of one half of every document's 128-bit
// hash, and the number of documents. Addition, unlike XOR, does not let two
// equal documents cancel each other out, and digests of disjoint parts (_id
// ranges, shards) Merge into the digest of the whole. The zero value is the
// digest of no documents.
type Digest struct {
	Lanes [2]uint64
	Count int64
}

// Add adds one document, given as its raw BSON bytes. Documents are equal
// when their bytes are: field order and value types count, as they do in
// MongoDB, and the copier writes the source's bytes unchanged.
func (d *Digest) Add(doc bson.Raw) { d.add(hashDoc(doc)) }

func (d *Digest) add(h docHash) {
	d.Lanes[0] += binary.BigEndian.Uint64(h[:8])
	d.Lanes[1] += binary.BigEndian.Uint64(h[8:])
	d.Count++
}

// Merge adds the documents of another digest.
func (d *Digest) Merge(o Digest) {
	d.Lanes[0] += o.Lanes[0]
	d.Lanes[1] += o.Lanes[1]
	d.Count += o.Count
}

// Hex returns the two lanes as 32 hexadecimal digits (the count is not
// included).
func (d Digest) Hex() string { return fmt.Sprintf("%016x%016x", d.Lanes[0], d.Lanes[1]) }

// idKey identifies a document by the raw bytes of its _id value with the
// BSON type byte in front, so int32 1, int64 1 and double 1.0 are three
// keys (MongoDB compares them equal, but the copier keeps types, so a type
// change is a difference). A document without _id is keyed by a zero byte
// (no BSON type) followed by the whole document.
type idKey string

// appendKey appends the key of doc to dst.
func appendKey(dst []byte, doc bson.Raw) ([]byte, error) {
	v, err := bsoncore.Document(doc).LookupErr("_id")
	switch {
	case errors.Is(err, bsoncore.ErrElementNotFound):
		return append(append(dst, 0), doc...), nil
	case err != nil:
		return dst, fmt.Errorf("malformed document: %w", err)
	}
	return append(append(dst, byte(v.Type)), v.Data...), nil
}

// keyOf returns the key of doc.
func keyOf(doc bson.Raw) (idKey, error) {
	b, err := appendKey(nil, doc)
	return idKey(b), err
}

// rawValue returns the _id value; ok is false for a document without _id.
func (k idKey) rawValue() (v bson.RawValue, ok bool) {
	if len(k) == 0 || k[0] == 0 {
		return v, false
	}
	return bson.RawValue{Type: bson.Type(k[0]), Value: []byte(k[1:])}, true
}

// maxIDChars bounds a rendered _id; longer ones end in "...".
const maxIDChars = 200

// String renders the _id as canonical extended JSON, which keeps types
// apart ({"$numberInt":"1"} and {"$numberLong":"1"}).
func (k idKey) String() string {
	var s string
	if v, ok := k.rawValue(); ok {
		b, err := bson.MarshalExtJSON(bson.D{{Key: "_id", Value: v}}, true, false)
		if err != nil {
			s = v.DebugString()
		} else {
			s = strings.TrimSuffix(strings.TrimPrefix(string(b), `{"_id":`), "}")
		}
	} else if len(k) > 0 {
		s = "(no _id) " + bson.Raw(k[1:]).String()
	}
	if len(s) > maxIDChars {
		n := maxIDChars
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + "..."
	}
	return s
}
