// Package catalog knows what a task copies and what it is called on the
// target: Mapper (namespace filters and renames, internal namespaces),
// Select and Collisions (what the rules keep of the source's Names, and
// two source collections mapped to one target collection; Claims tracks
// the same during replay), List (collections with their options and
// indexes on the source) and the DDL that recreates them on the target
// (CreateCollection, CreateIndexes).
package catalog
