// Package controller holds the SyncTask reconciler: it turns a SyncTask
// into the objects that run its workers and folds what the workers report
// back into the SyncTask's status.
//
// Files:
//   - synctask_controller.go: the reconciler, its steps and its watches,
//     and the events that tell scaling and phase changes.
//   - render.go: the worker's task file rendered into a Secret
//     (SyncTaskSpec.TaskSpec, given the usernames of the credentials
//     Secrets), with the hash that rolls the workers, and the blocked
//     reasons of a task the controller cannot start.
//   - tls.go: the TLS Secrets' keys mounted into the workers.
//   - workertls.go: the manager's CA and each task's worker serving
//     certificate, for /status over HTTPS (--worker-tls).
//   - workers.go: the worker StatefulSet, headless Service and PodMonitor.
//   - template.go: spec.workerTemplate (metadata, scheduling, volumes)
//     applied to the worker pod.
//   - report.go: reading each worker's /status (the worker contract,
//     pkg/workerapi: the document, phases, exit codes and environment).
//   - status.go: the workers' reports aggregated into the phase, the
//     shards, failures and verification of status.
//   - conditions.go: the conditions Ready, Progressing, Degraded and
//     TargetSharding from the aggregate (their types and reasons are in
//     api/v1alpha1).
//   - settle.go: figures that move on every poll written at most every
//     StatusMinInterval.
//   - cutover.go: status.cutover, the CutoverReady and CutoverComplete
//     conditions and the cut-over events from the workers' reports.
//   - reverse.go: the reverse SyncTask created once a cut-over is
//     complete and spec.reverse asks for it.
//   - verifyrequest.go: the verify annotation passed on to the workers as
//     POST /verify, recorded in status.verifyRequest.
//   - specterms.go: the task-file field names in worker messages rewritten
//     into the SyncTask fields a user sets.
//   - shards.go: one worker per shard of a sharded source, the shards the
//     workers report and the pod ordinal of each shard.
//   - cleanup.go: the finalizer that removes the checkpoints on deletion.
//   - metrics.go: the Prometheus collector of every SyncTask's status and
//     its worker pods' restarts.
//
// A failed task's workers stay stopped until a new generation or the
// retry annotation.
//
// The controller never moves data and never connects to the source (the
// workers discover its shards): it connects to MongoDB only to remove a
// deleted task's checkpoints from the target when spec.deletePolicy is
// Delete.
package controller
