// Package sink writes to the target: Writer inserts full-copy batches with
// a conflict policy (overwrite, skip, fail), and Classify sorts every write
// error once into retryable, conflict (tolerable where the policy says so)
// and fatal.
package sink
