package workload

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// keyPrefix and keyDigits give YCSB's string keys: user%010d.
const (
	keyPrefix = "user"
	keyDigits = 10
)

// Key returns record n's _id: a string (user0000000042) or an int64.
func (t KeyType) Key(n int64) any {
	if t == KeyInt {
		return n
	}
	return string(appendStringKey(make([]byte, 0, len(keyPrefix)+keyDigits), n))
}

// appendStringKey appends user%010d without fmt.
func appendStringKey(dst []byte, n int64) []byte {
	dst = append(dst, keyPrefix...)
	var digits [20]byte
	d := strconv.AppendInt(digits[:0], n, 10)
	for i := len(d); i < keyDigits; i++ {
		dst = append(dst, '0')
	}
	return append(dst, d...)
}

// parseKey is the inverse of KeyType.Key; ok is false for values the
// generator does not produce.
func parseKey(v bson.RawValue) (n int64, ok bool) {
	switch v.Type {
	case bson.TypeString:
		s := v.StringValue()
		if len(s) < len(keyPrefix)+keyDigits || s[:len(keyPrefix)] != keyPrefix {
			return 0, false
		}
		n, err := strconv.ParseInt(s[len(keyPrefix):], 10, 64)
		return n, err == nil && n >= 0
	case bson.TypeInt64:
		n := v.Int64()
		return n, n >= 0
	case bson.TypeInt32:
		n := int64(v.Int32())
		return n, n >= 0
	}
	return 0, false
}

// fieldNames are field0, field1, ... for the largest FieldCount allowed.
var fieldNames = func() []string {
	names := make([]string, maxFieldCount)
	for i := range names {
		names[i] = "field" + strconv.Itoa(i)
	}
	return names
}()

// alphabet holds the 64 characters of generated strings, so each byte takes
// six random bits.
const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// fillRandom fills b with random alphabet characters, ten per Uint64.
func fillRandom(rng *rand.Rand, b []byte) {
	for len(b) > 0 {
		r := rng.Uint64()
		for i := 0; i < 10 && len(b) > 0; i++ {
			b[0] = alphabet[r&63]
			r >>= 6
			b = b[1:]
		}
	}
}

// GenerateDocument returns a document {_id: key, field0: ..., ...} with
// fieldCount fields of fieldLength random characters drawn from rng. key is
// usually KeyType.Key(n); any value the BSON marshaller accepts may be
// given, and GenerateDocument panics on one it refuses (a programming
// error).
func GenerateDocument(rng *rand.Rand, key any, fieldCount, fieldLength int) bson.Raw {
	return AppendDocument(nil, rng, key, fieldCount, fieldLength)
}

// AppendDocument is GenerateDocument appending to dst; with a dst of enough
// capacity and a string or integer key it allocates nothing but the key's
// interface value.
func AppendDocument(dst []byte, rng *rand.Rand, key any, fieldCount, fieldLength int) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	switch k := key.(type) {
	case string:
		dst = appendStringElement(dst, "_id", k)
	case int64:
		dst = appendInt64Element(dst, "_id", k)
	case int:
		dst = appendInt64Element(dst, "_id", int64(k))
	case int32:
		dst = append(dst, byte(bson.TypeInt32), '_', 'i', 'd', 0)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(k))
	default:
		t, v, err := bson.MarshalValue(key)
		if err != nil {
			panic(fmt.Sprintf("workload.GenerateDocument: key %T cannot be marshalled: %v", key, err))
		}
		dst = append(dst, byte(t), '_', 'i', 'd', 0)
		dst = append(dst, v...)
	}
	return appendFields(dst, start, rng, fieldCount, fieldLength)
}

// appendRecord appends record n (key and fields) without boxing the key.
func appendRecord(dst []byte, rng *rand.Rand, t KeyType, n int64, fieldCount, fieldLength int) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	if t == KeyInt {
		dst = appendInt64Element(dst, "_id", n)
	} else {
		dst = append(dst, byte(bson.TypeString), '_', 'i', 'd', 0)
		lenAt := len(dst)
		dst = append(dst, 0, 0, 0, 0)
		dst = appendStringKey(dst, n)
		dst = append(dst, 0)
		binary.LittleEndian.PutUint32(dst[lenAt:], uint32(len(dst)-lenAt-4))
	}
	return appendFields(dst, start, rng, fieldCount, fieldLength)
}

// appendFields appends field0..fieldN-1 and closes the document that
// starts at start.
func appendFields(dst []byte, start int, rng *rand.Rand, fieldCount, fieldLength int) []byte {
	for i := 0; i < fieldCount; i++ {
		dst = append(dst, byte(bson.TypeString))
		dst = append(dst, fieldName(i)...)
		dst = append(dst, 0)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(fieldLength+1))
		m := len(dst)
		dst = slices.Grow(dst, fieldLength)[:m+fieldLength]
		fillRandom(rng, dst[m:])
		dst = append(dst, 0)
	}
	dst = append(dst, 0)
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start))
	return dst
}

func fieldName(i int) string {
	if i < len(fieldNames) {
		return fieldNames[i]
	}
	return "field" + strconv.Itoa(i)
}

func appendStringElement(dst []byte, name, v string) []byte {
	dst = append(dst, byte(bson.TypeString))
	dst = append(dst, name...)
	dst = append(dst, 0)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v)+1))
	dst = append(dst, v...)
	return append(dst, 0)
}

func appendInt64Element(dst []byte, name string, v int64) []byte {
	dst = append(dst, byte(bson.TypeInt64))
	dst = append(dst, name...)
	dst = append(dst, 0)
	return binary.LittleEndian.AppendUint64(dst, uint64(v))
}

// recordRNG returns the generator of record n's field values for a seed.
func recordRNG(pcg *rand.PCG, seed, n int64) {
	pcg.Seed(uint64(seed), uint64(n)^0x9e3779b97f4a7c15)
}

// Document returns record n as Load inserts it (and as a run-phase insert
// of key n does): GenerateDocument with KeyType.Key(n) and a generator
// seeded by Seed and n, so the same options always give the same bytes.
func (o Options) Document(n int64) bson.Raw {
	o = o.WithDefaults()
	pcg := rand.NewPCG(0, 0)
	recordRNG(pcg, o.Seed, n)
	return appendRecord(nil, rand.New(pcg), o.KeyType, n, o.FieldCount, o.FieldLength)
}

// DocumentSize returns the size in bytes of every generated record for
// the options (all records have the same size while keys fit in ten
// digits).
func (o Options) DocumentSize() int {
	o = o.WithDefaults()
	idLen := 1 + 4 + 8 // type, "_id\0", int64
	if o.KeyType != KeyInt {
		idLen = 1 + 4 + 4 + len(keyPrefix) + keyDigits + 1 // type, "_id\0", length, key, NUL
	}
	size := 4 + idLen + 1
	for i := 0; i < o.FieldCount; i++ {
		size += 1 + len(fieldName(i)) + 1 + 4 + o.FieldLength + 1
	}
	return size
}
