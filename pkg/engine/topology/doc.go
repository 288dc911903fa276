// Package topology finds out what a task's source is: a replica set, or a
// sharded cluster reached through mongos. Parts: Kind (hello's answer,
// hello.go), Shard and ParseShards (config.shards documents, with
// source.shards[] address overrides, shards.go), and Discover/Open, which
// ask the source and connect one client per shard replica set with the
// task's credentials and TLS (discover.go).
package topology
