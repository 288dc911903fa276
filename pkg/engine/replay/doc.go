// Package replay applies the source's oplog to the target: Replayer reads
// entries from a source.OplogReader, assembles transactions, partitions
// writes by document key across writers, applies DDL as barriers, and
// checkpoints the Watermark of applied positions. With Options.Board, a
// Replayer is one subtask of a sharded source and follows the ordering
// rule of shard.go: writes held after chunk migrations, multi-shard
// transaction parts that wait for the other participants
// (participants.go).
//
// One file per role: replayer.go composes the parts (Options, New, Run);
// dispatch.go reads, orders and partitions entries; worker.go is the
// writers; gate.go decides when their batches go and combines them into
// fuller commands; bulk.go and bulkcmd.go build the commands from a
// batch, reinsert.go turns runs of replacements into a delete and an
// insert where the target wants them so; ddl.go applies DDL barriers; refetch.go and stale.go re-read
// documents from the source (late entries, stale paths), recopy.go a
// whole collection renamed into the task; timeseries.go writes
// time-series buckets; shardkey.go gives writes to a sharded target their
// shard key; shard.go, holds.go, migration.go, participants.go and
// topology.go are a sharded source's subtask; watermark.go and
// checkpoint.go track and save positions; status.go reports.
package replay
