// Package replay applies the source's oplog to the target: Replayer reads
// entries from a source.OplogReader, assembles transactions, partitions
// writes by document key across writers, applies DDL as barriers, and
// checkpoints the Watermark of applied positions.
package replay
