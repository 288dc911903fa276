// Package shardedsource supervises a sharded source read shard by shard
// (docs/sharded.md; docs/architecture.md, "Sharded sources"): Source
// runs one replay subtask per shard, each tailing its shard's oplog from
// its own checkpoint and skipping chunk migrations (fromMigrate), and
// the full copy reads each shard directly (pershard.go) or through
// mongos. In `ferry run` every subtask runs in one process; a worker
// started with Options.Shard runs one of them, and the worker of the
// shard whose name sorts first leads the copy and the cut-over
// (shardworker.go). Source is the engine's streamer for such a source.
package shardedsource
