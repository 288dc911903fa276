// Package catalog knows what a task copies and what it is called on the
// target: Mapper (namespace filters and renames, internal namespaces),
// List (collections with their options and indexes on the source) and the
// DDL that recreates them on the target (CreateCollection, CreateIndexes).
package catalog
