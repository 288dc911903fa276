// Package verify compares a target with its source, namespace by namespace:
// document counts (count), an order-independent hash per collection with the
// differing _ids listed (hash; Digest, idKey), or sampled documents fetched by
// _id from both sides (sample). Run returns a Report that renders as a table.
// Streamer compares while the source changes and the task replays,
// rechecking a mismatch once replay has passed the position it was seen at
// (stream.go, pending.go, positions.go). A namespace with a filter
// (namespaces.filters) compares the source's matching documents with the
// target's whole collection (query).
package verify
