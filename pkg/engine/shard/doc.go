// Package shard holds what the subtasks of a sharded source share: one
// subtask tails one shard's oplog and applies that shard's writes, and
// Board is where every subtask publishes how far it has read and applied,
// so that a subtask can hold a namespace's writes after a chunk migration
// into its shard until every other subtask has applied everything up to
// the migration (DESIGN.md section 5). MemoryBoard serves subtasks of one
// process (ferry run); a board in the target's checkpoint database serves
// subtasks in separate pods.
package shard
