package bsonorder

import "go.mongodb.org/mongo-driver/v2/bson"

// Bracket ranks, lowest first. The server's canonical type values
// (canonicalizeBSONType in bsontypes.h) are MinKey -1, Undefined 0, Null 5,
// numbers 10, String/Symbol 15, Object 20, Array 25, BinData 30, ObjectId 35,
// Bool 40, Date 45, Timestamp 47, Regex 50, DBPointer 55, JavaScript 60,
// JavaScript with scope 65, MaxKey 127; the ranks here are the same order,
// numbered 0..16 so that Brackets()[Bracket(t)] is t's representative.
const (
	rankMinKey = iota
	rankUndefined
	rankNull
	rankNumber
	rankString
	rankObject
	rankArray
	rankBinary
	rankObjectID
	rankBoolean
	rankDateTime
	rankTimestamp
	rankRegex
	rankDBPointer
	rankJavaScript
	rankCodeWithScope
	rankMaxKey
	numRanks
)

// rankInvalid is the rank of a byte that is not a BSON type.
const rankInvalid = -1

// representatives lists one type per bracket, in bracket order: the lowest
// BSON type code of the bracket.
var representatives = [numRanks]bson.Type{
	rankMinKey:        bson.TypeMinKey,
	rankUndefined:     bson.TypeUndefined,
	rankNull:          bson.TypeNull,
	rankNumber:        bson.TypeDouble,
	rankString:        bson.TypeString,
	rankObject:        bson.TypeEmbeddedDocument,
	rankArray:         bson.TypeArray,
	rankBinary:        bson.TypeBinary,
	rankObjectID:      bson.TypeObjectID,
	rankBoolean:       bson.TypeBoolean,
	rankDateTime:      bson.TypeDateTime,
	rankTimestamp:     bson.TypeTimestamp,
	rankRegex:         bson.TypeRegex,
	rankDBPointer:     bson.TypeDBPointer,
	rankJavaScript:    bson.TypeJavaScript,
	rankCodeWithScope: bson.TypeCodeWithScope,
	rankMaxKey:        bson.TypeMaxKey,
}

// aliases holds the $type aliases of each bracket.
var aliases = [numRanks][]string{
	rankMinKey:        {"minKey"},
	rankUndefined:     {"undefined"},
	rankNull:          {"null"},
	rankNumber:        {"int", "long", "double", "decimal"},
	rankString:        {"string", "symbol"},
	rankObject:        {"object"},
	rankArray:         {"array"},
	rankBinary:        {"binData"},
	rankObjectID:      {"objectId"},
	rankBoolean:       {"bool"},
	rankDateTime:      {"date"},
	rankTimestamp:     {"timestamp"},
	rankRegex:         {"regex"},
	rankDBPointer:     {"dbPointer"},
	rankJavaScript:    {"javascript"},
	rankCodeWithScope: {"javascriptWithScope"},
	rankMaxKey:        {"maxKey"},
}

// ranks maps a type byte to its bracket rank, rankInvalid for bytes that are
// not BSON types.
var ranks = func() (r [256]int8) {
	for i := range r {
		r[i] = rankInvalid
	}
	for rank, t := range representatives {
		r[t] = int8(rank)
	}
	r[bson.TypeInt32] = rankNumber
	r[bson.TypeInt64] = rankNumber
	r[bson.TypeDecimal128] = rankNumber
	r[bson.TypeSymbol] = rankString
	return r
}()

// Bracket returns the rank of t's type bracket in MongoDB's comparison order,
// lowest first:
//
//	MinKey < Undefined < Null < numbers (int, long, double, decimal) <
//	String and Symbol < Object < Array < BinData < ObjectId < Boolean <
//	Date < Timestamp < Regex < DBPointer < JavaScript <
//	JavaScript with scope < MaxKey
//
// Ranks run from 0 to len(Brackets())-1, and Brackets()[Bracket(t)] is the
// representative type of t's bracket. Undefined is a bracket of its own
// just below Null, as in the server's canonical type order (queries for
// null match undefined, but sort and index keys keep them apart). Bracket
// returns -1 for a byte that is not a BSON type.
func Bracket(t bson.Type) int {
	return int(ranks[byte(t)])
}

// Brackets returns the representative type of every bracket in order, so
// that Brackets()[r] is the representative of rank r. A caller enumerates
// the brackets between two values a and b with
// Brackets()[Bracket(a.Type):Bracket(b.Type)+1]. The slice is a fresh copy.
func Brackets() []bson.Type {
	out := make([]bson.Type, numRanks)
	copy(out, representatives[:])
	return out
}

// TypeAliases returns the $type aliases of every type in t's bracket, for a
// {$type: [...]} filter that selects exactly that bracket: for example
// ["int", "long", "double", "decimal"] for the numbers and
// ["string", "symbol"] for the strings. The query $type operator also
// matches an array that has an element of one of the types; _id is never
// an array, so on _id the filter selects exactly the bracket. TypeAliases
// returns nil for a byte that is not a BSON type. The slice is a fresh copy.
func TypeAliases(t bson.Type) []string {
	r := Bracket(t)
	if r == rankInvalid {
		return nil
	}
	out := make([]string, len(aliases[r]))
	copy(out, aliases[r])
	return out
}
