// Package source reads the source deployment: Splitter cuts a collection
// into _id ranges per BSON type bracket (so mixed _id types are covered
// without gaps or overlaps); OplogReader is what replay reads, implemented
// by Tailer (local.oplog.rs, re-opened when its cursor dies or goes quiet),
// ChangeStreamReader (change events, turned into oplog-shaped entries by
// oplog.ConvertEvent) and
// Scripted (fixed entries, for tests); CheckWindow guards resumes.
package source
