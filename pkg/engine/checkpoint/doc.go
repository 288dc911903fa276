// Package checkpoint keeps a task's progress in the target's checkpoint
// database (mongoferry by default) so that a restarted worker continues
// where it stopped: Store holds the task record, the full-copy plan of each
// namespace (its _id ranges) and the state of every range; for a sharded
// source, one ShardRecord per shard subtask (its start position, applied
// checkpoint, saved replay state and retirement), the task's checkpoint
// being their minimum; the cut-over record and each shard's part in it
// (cutover.go, in a collection of their own); and the lease that lets one worker process
// run a task at a time (lease.go). Drop removes all of it.
package checkpoint
