// Package replaybench measures the replayer on a synthetic oplog, with no
// server on either side. Generate builds raw oplog entries of a Shape
// (DDT's small documents or YCSB's 1 KB ones); Reader serves them in
// batches as a source.OplogReader; Sink discards every write after encoding
// it as the driver would; Run puts them through a real replay.Replayer and
// reports rates and allocations. RunShards splits the same entries over
// shards by _id, adds chunk migrations' fromMigrate entries, and replays
// each shard with its own Replayer on a shared board.Board.
package replaybench
