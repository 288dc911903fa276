// Package shardsim is a deterministic model of a sharded MongoDB cluster
// with the balancer on, for testing the per-shard replay subtasks. There
// is no mongod and no sharding here; what stands in for what:
//
//   - Model is the cluster: shards with their own oplogs, chunks of a
//     shard-key range table, a balancer that moves chunks both ways and
//     sometimes aborts, user writes and transactions on one cluster clock
//     (every entry gets the next ts, so the clock is shared and strictly
//     ordered), shard-key changes as prepared transactions on two shards,
//     idle shards writing periodic no-ops, a shard added and one drained
//     and removed, and topology DDL (the no-ops of shardCollection,
//     refineCollectionShardKey, reshardCollection, resharding and
//     movePrimary: followed, or on the task's collection a stop the run
//     must end at). It writes each shard's oplog as raw entries in
//     MongoDB's shapes (inserts and deletes with o2/the document key,
//     $v:2 diffs, fromMigrate copies, catch-up writes and range
//     deletions, applyOps, prepare and commitTransaction, op n no-ops);
//   - Run feeds each shard's oplog to a real replay.Replayer (one subtask
//     per shard, ShardMember, a shared shard.MemoryBoard) through readers
//     whose per-shard delivery speed is set by the seed (one reader far
//     ahead of another), kills subtasks and restarts them from their last
//     saved checkpoint;
//   - Recorder is the target: an Options.ApplyAt sink that applies the
//     writes to documents in memory and checks that each document's
//     writes arrive in the cluster's order, none from a fromMigrate entry
//     and none twice except when a restarted subtask replays after its
//     checkpoint. Optionally it forwards them to a real FerretDB target;
//   - Target, optionally, makes that target a sharded cluster of a given
//     version (5.0 to 8.0) and shard key: the task's pre-split plan
//     (sharding.MakePlan from the model's chunks) is applied to its chunk
//     table, which must cover the key space with no gap, and every write
//     is routed as mongos routes it, refused as mongos refuses it (an
//     upsert without the whole key up to 7.0, a shard-key change without
//     it, a single write with neither the key nor _id). The replayers
//     read its keys and documents through replay.ShardKeys, and the run
//     checks that every update, replacement and delete carried the whole
//     shard key, shard-key changes included.
//
// The final documents must equal the model's.
package shardsim
