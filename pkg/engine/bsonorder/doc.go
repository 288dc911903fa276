// Package bsonorder implements MongoDB's total order of BSON values (the
// order of sort and index keys without a collation): Bracket and Brackets
// name the type brackets in order, TypeAliases turns a bracket into a $type
// filter, and Compare orders two bson.RawValues, working on the raw bytes.
package bsonorder
