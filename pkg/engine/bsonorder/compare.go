package bsonorder

import (
	"bytes"
	"cmp"
	"encoding/binary"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Compare orders two values as MongoDB's sort does without a collation
// (BSONElement::woCompare in the server): first by bracket (see Bracket),
// then within the bracket. It returns -1, 0 or +1.
//
// Within a bracket:
//   - numbers by exact numeric value across int, long, double and decimal:
//     NaN is below every other number and equal to every NaN, -0 equals 0,
//     and no value is rounded on the way (an int64 near 2^63 against a
//     double, a decimal against a double);
//   - String and Symbol, and JavaScript, by simple binary comparison of the
//     bytes, a prefix first;
//   - Object and Array element by element: the element's bracket, then its
//     field name, then its value; the shorter of two documents where one is
//     a prefix of the other comes first;
//   - BinData by length, then subtype, then bytes;
//   - ObjectId by bytes; Boolean false before true; Date as a signed int64;
//     Timestamp by (T, I) unsigned; Regex by pattern, then options;
//   - DBPointer by length, then bytes; JavaScript with scope by code, then
//     scope document;
//   - MinKey, Undefined, Null and MaxKey equal to themselves.
//
// Compare never panics and reads only as much of a value as the order
// needs. Where it meets bytes it cannot read, the unreadable value sorts
// first within its bracket, and two unreadable ones by their bytes; that is
// only meant to be deterministic, not a total order on malformed input.
// Type bytes that are not BSON types sort before MinKey, by type byte and
// then value bytes.
func Compare(a, b bson.RawValue) int {
	return compareValues(a.Type, a.Value, b.Type, b.Value)
}

// malformed orders two values of one bracket when at least one of them
// could not be read.
func malformed(a, b []byte, okA, okB bool) int {
	switch {
	case okA && !okB:
		return 1
	case !okA && okB:
		return -1
	}
	return bytes.Compare(a, b)
}

func compareValues(ta bson.Type, a []byte, tb bson.Type, b []byte) int {
	ra, rb := Bracket(ta), Bracket(tb)
	if ra != rb {
		return cmp.Compare(ra, rb)
	}
	switch ra {
	case rankMinKey, rankUndefined, rankNull, rankMaxKey:
		return 0
	case rankNumber:
		return compareNumbers(ta, a, tb, b)
	case rankString, rankJavaScript:
		// Symbol compares as a String; JavaScript code, in its own
		// bracket, the same way.
		sa, _, okA := stringBytes(a)
		sb, _, okB := stringBytes(b)
		if !okA || !okB {
			return malformed(a, b, okA, okB)
		}
		return bytes.Compare(sa, sb)
	case rankObject, rankArray:
		// Arrays compare as documents, element by element, as the server
		// compares whole arrays (and index keys). A sort on an array field
		// of a document instead uses the array's smallest (or largest)
		// element; that never applies to _id, which cannot be an array.
		return compareDocuments(a, b)
	case rankBinary:
		return compareBinary(a, b)
	case rankObjectID:
		okA, okB := len(a) >= 12, len(b) >= 12
		if !okA || !okB {
			return malformed(a, b, okA, okB)
		}
		return bytes.Compare(a[:12], b[:12])
	case rankBoolean:
		// The server compares the raw byte: 0 is false, 1 is true.
		okA, okB := len(a) >= 1, len(b) >= 1
		if !okA || !okB {
			return malformed(a, b, okA, okB)
		}
		return cmp.Compare(a[0], b[0])
	case rankDateTime:
		da, okA := int64At(a)
		db, okB := int64At(b)
		if !okA || !okB {
			return malformed(a, b, okA, okB)
		}
		return cmp.Compare(da, db)
	case rankTimestamp:
		// Little-endian (I, T) read as one uint64 orders by T, then I.
		okA, okB := len(a) >= 8, len(b) >= 8
		if !okA || !okB {
			return malformed(a, b, okA, okB)
		}
		return cmp.Compare(binary.LittleEndian.Uint64(a), binary.LittleEndian.Uint64(b))
	case rankRegex:
		return compareRegex(a, b)
	case rankDBPointer:
		la, okA := valueLen(bson.TypeDBPointer, a)
		lb, okB := valueLen(bson.TypeDBPointer, b)
		if !okA || !okB {
			return malformed(a, b, okA, okB)
		}
		if la != lb {
			return cmp.Compare(la, lb)
		}
		return bytes.Compare(a[:la], b[:lb])
	case rankCodeWithScope:
		return compareCodeWithScope(a, b)
	}
	// Not a BSON type.
	if ta != tb {
		return cmp.Compare(byte(ta), byte(tb))
	}
	return bytes.Compare(a, b)
}

// compareDocuments compares two raw documents (or arrays) element by
// element: bracket, then field name, then value.
func compareDocuments(a, b []byte) int {
	ea, okA := newElements(a)
	eb, okB := newElements(b)
	if !okA || !okB {
		return malformed(a, b, okA, okB)
	}
	for {
		ta, ka, va, doneA, okA := ea.next()
		tb, kb, vb, doneB, okB := eb.next()
		switch {
		case !okA || !okB:
			return malformed(ea.rest(), eb.rest(), okA, okB)
		case doneA && doneB:
			return 0
		case doneA:
			return -1
		case doneB:
			return 1
		}
		if c := cmp.Compare(Bracket(ta), Bracket(tb)); c != 0 {
			return c
		}
		if c := bytes.Compare(ka, kb); c != 0 {
			return c
		}
		if c := compareValues(ta, va, tb, vb); c != 0 {
			return c
		}
	}
}

// compareBinary orders BinData by data length, then subtype, then bytes.
// For the old binary subtype 2 the length is the outer one, which counts
// the inner length prefix as data, as the server does.
func compareBinary(a, b []byte) int {
	la, okA := valueLen(bson.TypeBinary, a)
	lb, okB := valueLen(bson.TypeBinary, b)
	if !okA || !okB {
		return malformed(a, b, okA, okB)
	}
	if la != lb {
		return cmp.Compare(la, lb)
	}
	return bytes.Compare(a[4:la], b[4:lb])
}

// compareRegex orders regular expressions by pattern, then options.
func compareRegex(a, b []byte) int {
	pa, na, okA := cstring(a)
	pb, nb, okB := cstring(b)
	if okA {
		_, _, okA = cstring(a[na:])
	}
	if okB {
		_, _, okB = cstring(b[nb:])
	}
	if !okA || !okB {
		return malformed(a, b, okA, okB)
	}
	if c := bytes.Compare(pa, pb); c != 0 {
		return c
	}
	oa, _, _ := cstring(a[na:])
	ob, _, _ := cstring(b[nb:])
	return bytes.Compare(oa, ob)
}

// compareCodeWithScope orders JavaScript with scope by code, then scope.
func compareCodeWithScope(a, b []byte) int {
	ca, sa, okA := splitCodeWithScope(a)
	cb, sb, okB := splitCodeWithScope(b)
	if !okA || !okB {
		return malformed(a, b, okA, okB)
	}
	if c := bytes.Compare(ca, cb); c != 0 {
		return c
	}
	return compareDocuments(sa, sb)
}

// splitCodeWithScope splits int32 total length, string, document.
func splitCodeWithScope(b []byte) (code, scope []byte, ok bool) {
	n, ok := valueLen(bson.TypeCodeWithScope, b)
	if !ok {
		return nil, nil, false
	}
	code, cn, ok := stringBytes(b[4:n])
	if !ok {
		return nil, nil, false
	}
	return code, b[4+cn : n], true
}
