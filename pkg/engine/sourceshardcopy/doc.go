// Package sourceshardcopy runs the per-shard full copy of a sharded source
// (docs/sharded.md, "Per-shard copy"): a Table is a collection's chunk
// ownership as config.chunks lists it at a known point (ReadTable, or
// FromLayout of what targetsharding.ReadLayout reads through mongos), Owns keeps
// the documents a shard owned then (orphans left out), and Changed names
// the chunks whose owner or version moved between two reads. A Copier
// copies one shard's _id ranges of a pass (PlanShard), read from the shard
// directly, filtered by the pass's table, leased and recorded through
// rangelease; Passes runs pass 0 on every shard and the settling passes
// on the shards migrations went into (Recipients) until the table is
// unchanged.
package sourceshardcopy
