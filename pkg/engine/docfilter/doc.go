// Package docfilter evaluates a MongoDB query document on one raw BSON
// document, as the server's matcher does, so that a sync can keep a
// namespace's matching subset (docs/architecture.md). Compile parses a
// query and refuses what cannot be evaluated on a document; Filter.Match
// tests a document and Filter.Fields names the top-level fields read.
// Paths walk embedded documents and arrays (path.go), and values compare
// in MongoDB's order through bsonorder (match.go).
package docfilter
