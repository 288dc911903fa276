// Package replay applies the source's oplog to the target: Replayer reads
// entries from a source.OplogReader, assembles transactions, partitions
// writes by document key across writers, applies DDL as barriers, and
// checkpoints the Watermark of applied positions. With Options.Board, a
// Replayer is one subtask of a sharded source and follows the ordering
// rule of shard.go: writes held after chunk migrations, multi-shard
// transaction parts that wait for the other subtasks.
package replay
