package bsonorder

import (
	"bytes"
	"encoding/binary"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The readers below take the raw bytes of one value (bson.RawValue.Value)
// and report ok=false instead of panicking when the bytes are too short or
// a length is out of range. They check only what the comparison needs.

// int32At reads a little-endian int32 at the start of b.
func int32At(b []byte) (int32, bool) {
	if len(b) < 4 {
		return 0, false
	}
	return int32(binary.LittleEndian.Uint32(b)), true
}

// int64At reads a little-endian int64 at the start of b.
func int64At(b []byte) (int64, bool) {
	if len(b) < 8 {
		return 0, false
	}
	return int64(binary.LittleEndian.Uint64(b)), true
}

// cstring returns the bytes before the first NUL in b and the length
// consumed including the NUL.
func cstring(b []byte) (s []byte, n int, ok bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return nil, 0, false
	}
	return b[:i], i + 1, true
}

// stringBytes returns the bytes of a BSON string (int32 length including
// the trailing NUL, bytes, NUL), without the NUL, and the length consumed.
// Strings may contain NUL bytes; the length prefix is authoritative.
func stringBytes(b []byte) (s []byte, n int, ok bool) {
	l, ok := int32At(b)
	if !ok || l < 1 || int64(l) > int64(len(b)-4) {
		return nil, 0, false
	}
	return b[4 : 4+l-1], 4 + int(l), true
}

// valueLen returns the length of the value of type t at the start of b.
func valueLen(t bson.Type, b []byte) (int, bool) {
	var n int
	switch t {
	case bson.TypeNull, bson.TypeUndefined, bson.TypeMinKey, bson.TypeMaxKey:
		n = 0
	case bson.TypeBoolean:
		n = 1
	case bson.TypeInt32:
		n = 4
	case bson.TypeDouble, bson.TypeInt64, bson.TypeDateTime, bson.TypeTimestamp:
		n = 8
	case bson.TypeObjectID:
		n = 12
	case bson.TypeDecimal128:
		n = 16
	case bson.TypeString, bson.TypeJavaScript, bson.TypeSymbol:
		_, m, ok := stringBytes(b)
		return m, ok
	case bson.TypeEmbeddedDocument, bson.TypeArray, bson.TypeCodeWithScope:
		l, ok := int32At(b)
		if !ok || l < 5 {
			return 0, false
		}
		n = int(l)
	case bson.TypeBinary:
		l, ok := int32At(b)
		if !ok || l < 0 {
			return 0, false
		}
		n = 5 + int(l)
	case bson.TypeRegex:
		_, m1, ok := cstring(b)
		if !ok {
			return 0, false
		}
		_, m2, ok := cstring(b[m1:])
		return m1 + m2, ok
	case bson.TypeDBPointer:
		_, m, ok := stringBytes(b)
		if !ok {
			return 0, false
		}
		n = m + 12
	default:
		return 0, false
	}
	if n > len(b) {
		return 0, false
	}
	return n, true
}

// elements walks the elements of a raw document or array.
type elements struct {
	doc []byte // up to, not including, the terminating NUL
	pos int
}

// newElements starts a walk over the document at the start of b.
func newElements(b []byte) (elements, bool) {
	l, ok := int32At(b)
	if !ok || l < 5 || int64(l) > int64(len(b)) {
		return elements{}, false
	}
	return elements{doc: b[:l-1], pos: 4}, true
}

// next returns the next element; done is true at the end of the document.
// ok is false when the element cannot be read.
func (e *elements) next() (t bson.Type, key, val []byte, done, ok bool) {
	if e.pos >= len(e.doc) || e.doc[e.pos] == 0 {
		return 0, nil, nil, true, true
	}
	t = bson.Type(e.doc[e.pos])
	key, kn, ok := cstring(e.doc[e.pos+1:])
	if !ok {
		return 0, nil, nil, false, false
	}
	start := e.pos + 1 + kn
	vn, ok := valueLen(t, e.doc[start:])
	if !ok {
		return 0, nil, nil, false, false
	}
	e.pos = start + vn
	return t, key, e.doc[start:e.pos], false, true
}

// rest returns the bytes not yet walked.
func (e *elements) rest() []byte {
	if e.pos >= len(e.doc) {
		return nil
	}
	return e.doc[e.pos:]
}
