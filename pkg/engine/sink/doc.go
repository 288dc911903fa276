// Package sink writes to the target: Writer inserts full-copy batches with
// a conflict policy (overwrite, skip, fail) (writer.go); Classify sorts
// every write error once into retryable, conflict (tolerable where the
// policy says so) and fatal (errors.go); AppendWriteCommand and
// RunWriteCommand build insert, update and delete commands from raw
// documents and send them (command.go); Replace upserts a whole document,
// through a pipeline update when it has top-level $-prefixed fields
// (replace.go); and Turns gives writes to one database one kind of turn at
// a time on FerretDB (turns.go).
package sink
