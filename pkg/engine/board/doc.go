// Package board holds what the subtasks of a sharded source share: one
// subtask tails one shard's oplog and applies that shard's writes, and
// Board is where every subtask publishes how far it has read and durably
// applied, the prepared transactions it holds, what it waits for and the
// commit decisions it read as a transaction's coordinator, so that a
// subtask can hold the writes a chunk migration into its shard could order
// wrongly until every other subtask has passed them (docs/sharded.md, "The
// ordering guarantee and its cost"). MemoryBoard (memory.go) serves
// subtasks of one process (ferry run); TargetBoard (target.go), a
// collection in the target's checkpoint database, serves subtasks in
// separate pods.
package board
