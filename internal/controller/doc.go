// Package controller holds the SyncTask reconciler: it turns a SyncTask
// into the objects that run its workers (the task Secret, the worker
// StatefulSet, Service and PodMonitor) and folds what the workers report
// in /status back into the SyncTask's status, conditions and events. It
// never moves data. The loop and a map of its files: docs/architecture.md,
// "The operator loop".
package controller
