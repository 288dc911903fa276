// Package controllers holds the SyncTask reconciler: it turns a SyncTask
// into the objects that run its workers and folds what the workers report
// back into the SyncTask's status.
//
// Parts: the reconciler and its watches (synctask_controller.go); the
// worker's task file rendered into a Secret (SyncTaskSpec.TaskSpec, given
// the usernames of the credentials Secrets), with the hash that rolls the
// workers (render.go); the TLS Secrets' keys mounted into the workers
// (tls.go); the worker StatefulSet, headless Service and
// PodMonitor (workers.go); reading each worker's /status (the worker
// contract, pkg/workerapi: the document, phases, exit codes and
// environment) and aggregating it into status, conditions and events
// (report.go, status.go; the conditions Ready, Progressing, Degraded and
// TargetSharding in conditions.go), with figures that move on every poll
// written at most every StatusMinInterval (settle.go); a failed task's workers
// stopped until a new generation or the retry annotation; the
// finalizer that removes the checkpoints on deletion (cleanup.go); one
// worker per shard of a sharded source, the shards the workers report and
// the pod ordinal of each shard (shards.go).
//
// The controller never moves data and never connects to the source (the
// workers discover its shards): it connects to MongoDB only to remove a
// deleted task's checkpoints from the target when spec.deletePolicy is
// Delete.
package controllers
