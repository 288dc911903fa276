package oplog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// The helpers below read and build raw BSON without trusting it: every
// length is checked, and a malformed document is an error, never a panic.
// Keys are compared as bytes so that walking a document does not allocate.

// maxDepth bounds the recursion over nested applyOps and $v:2 diffs. BSON
// documents from a server nest at most 100 or so levels deep; anything
// deeper is hostile input, and refusing it keeps the stack small.
const maxDepth = 200

// docBytes checks the frame of a BSON document (length prefix equal to
// len(doc), trailing NUL) and returns the bytes of its elements.
func docBytes(doc []byte) ([]byte, error) {
	if len(doc) < 5 {
		return nil, fmt.Errorf("document of %d bytes is too short", len(doc))
	}
	n := int64(int32(binary.LittleEndian.Uint32(doc)))
	if n != int64(len(doc)) {
		return nil, fmt.Errorf("document length prefix %d does not match its %d bytes", n, len(doc))
	}
	if doc[n-1] != 0 {
		return nil, fmt.Errorf("document does not end with a NUL byte")
	}
	return doc[4 : n-1], nil
}

// forEach calls fn for every element of doc, in order, with the element's
// key (valid only during the call) and value. It stops at the first error.
func forEach(doc []byte, fn func(key []byte, v bsoncore.Value) error) error {
	rem, err := docBytes(doc)
	if err != nil {
		return err
	}
	// One pass per element: the type byte, the key up to its NUL, then
	// the value, whose length ReadValue checks against what is left.
	for len(rem) > 0 {
		k := bytes.IndexByte(rem[1:], 0)
		if k < 0 {
			return fmt.Errorf("truncated or invalid element at byte %d", len(doc)-1-len(rem))
		}
		v, rest, ok := bsoncore.ReadValue(rem[2+k:], bsoncore.Type(rem[0]))
		if !ok {
			return fmt.Errorf("truncated or invalid element at byte %d", len(doc)-1-len(rem))
		}
		if err := fn(rem[1:1+k], v); err != nil {
			return err
		}
		rem = rest
	}
	return nil
}

// lookup returns the first element named key in doc.
func lookup(doc []byte, key string) (bsoncore.Value, bool, error) {
	var (
		out   bsoncore.Value
		found bool
	)
	err := forEach(doc, func(k []byte, v bsoncore.Value) error {
		if string(k) == key {
			out, found = v, true
			return errStop
		}
		return nil
	})
	if err != nil && err != errStop {
		return bsoncore.Value{}, false, err
	}
	return out, found, nil
}

// errStop ends a forEach early without being an error.
var errStop = errors.New("stop")

// document returns v as a document whose frame is checked.
func document(v bsoncore.Value) ([]byte, bool) {
	if v.Type != bsoncore.TypeEmbeddedDocument && v.Type != bsoncore.TypeArray {
		return nil, false
	}
	if _, err := docBytes(v.Data); err != nil {
		return nil, false
	}
	return v.Data, true
}

// integer returns a numeric value as an int64 when it is a whole number
// (int32, int64, or a double without a fraction, as some drivers write
// counts and versions).
func integer(v bsoncore.Value) (int64, bool) {
	switch v.Type {
	case bsoncore.TypeInt32:
		i, ok := v.Int32OK()
		return int64(i), ok
	case bsoncore.TypeInt64:
		return v.Int64OK()
	case bsoncore.TypeDouble:
		f, ok := v.DoubleOK()
		if !ok || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			return 0, false
		}
		return int64(f), true
	}
	return 0, false
}

// builder appends the elements of one BSON document.
type builder struct {
	idx int32
	buf []byte
}

// start begins a document at the end of buf.
func start(buf []byte) builder {
	idx, buf := bsoncore.AppendDocumentStart(buf)
	return builder{idx: idx, buf: buf}
}

// value appends key: v.
func (b *builder) value(key string, v bsoncore.Value) {
	b.buf = bsoncore.AppendValueElement(b.buf, key, v)
}

// finish closes the document and returns buf with it appended.
func (b *builder) finish() []byte {
	b.buf = append(b.buf, 0)
	return bsoncore.UpdateLength(b.buf, b.idx, int32(len(b.buf[b.idx:])))
}

// singleton returns the document {key: v}.
func singleton(key string, v bsoncore.Value) []byte {
	b := start(make([]byte, 0, 4+1+len(key)+1+len(v.Data)+1))
	b.value(key, v)
	return b.finish()
}
