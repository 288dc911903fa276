// Package source reads the source deployment: Splitter cuts a collection
// into _id ranges per BSON type bracket (so mixed _id types are covered
// without gaps or overlaps); OplogReader is what replay reads, implemented
// by Tailer (local.oplog.rs, re-opened when its cursor dies or goes quiet,
// handing out only majority-committed entries: commit.go, commitcap.go),
// ChangeStreamReader (change events, turned into oplog-shaped entries by
// oplog.EventToEntry) and Scripted (fixed entries, for tests); the
// positions replay starts from and resumes at (StartPosition, OplogBounds,
// CheckWindow: window.go, bounds.go; CheckRollback, the resume guard
// against a source that rolled back: rollback.go); whether the source
// keeps an oplog (HasOplog); and SetUserWriteBlock, which blocks the
// source's user writes at cut-over (writeblock.go).
package source
