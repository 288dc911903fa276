// Package shardcopy decides what a shard's reader copies in a per-shard
// full copy of a sharded source (docs/sharded.md, "Per-shard copy"): a
// Table is a collection's chunk ownership as config.chunks lists it at a
// known point (FromLayout builds it from what sharding.ReadLayout reads
// through mongos), Owns keeps the documents a shard owned then (orphans left
// out), and Changed names the chunks whose owner or version moved
// between two reads of the table, the ranges the copy reads again from
// their new owner before replay starts.
package shardcopy
