package sink

import (
	"errors"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
)

// Class is what the engine does about an error.
type Class int

// Error classes.
const (
	// Fatal errors stop the task.
	Fatal Class = iota
	// Retryable errors (network, elections, shutdown) are retried with
	// backoff.
	Retryable
	// Conflict errors (duplicate key) are resolved by the conflict policy,
	// and tolerated where a copy and a replay overlap.
	Conflict
)

func (c Class) String() string {
	switch c {
	case Retryable:
		return "retryable"
	case Conflict:
		return "conflict"
	}
	return "fatal"
}

// ErrConflict is returned when onConflict is fail and a document already
// exists on the target.
var ErrConflict = errors.New("document already exists on the target")

// CodeDuplicateKey is the server's duplicate key error code.
const CodeDuplicateKey = 11000

// CodeUserWritesBlocked is the server's error for a write refused while
// setUserWriteBlockMode blocks user writes (MongoDB 6.0 and later).
const CodeUserWritesBlocked = 372

// retryableCodes are server errors that go away on their own: elections,
// shutdowns, network and lock timeouts.
var retryableCodes = []int{6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 112, 117, 251}

// Classify sorts an error.
func Classify(err error) Class {
	if err == nil {
		return Fatal
	}
	if mongo.IsDuplicateKeyError(err) && !mixedWriteErrors(err) {
		return Conflict
	}
	if mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return Retryable
	}
	// A connection pool cleared by another operation's network error
	// (the driver's poolClearedError) carries no label and no code: a
	// command that was waiting for a connection of that pool fails with
	// it, and it clears as the network does.
	var pe driver.RetryablePoolError
	if errors.As(err, &pe) && pe.Retryable() {
		return Retryable
	}
	var le interface{ HasErrorLabel(string) bool }
	if errors.As(err, &le) && (le.HasErrorLabel("RetryableWriteError") || le.HasErrorLabel("TransientTransactionError")) {
		return Retryable
	}
	var se mongo.ServerError
	if errors.As(err, &se) {
		for _, c := range retryableCodes {
			if se.HasErrorCode(c) {
				return Retryable
			}
		}
		if Busy(err) {
			return Retryable
		}
	}
	return Fatal
}

// sqliteBusy ends the InternalError of a FerretDB v1 (SQLite) server that
// could not take its database's write lock in time ("database is locked
// (5) (SQLITE_BUSY)"): the statement did not run, and it goes through
// once the other writer is done. On a busy machine a replay delete met it
// and stopped the task.
const sqliteBusy = "(SQLITE_BUSY)"

// mixedWriteErrors reports whether a bulk error holds other errors besides
// duplicate keys.
func mixedWriteErrors(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) {
		return false
	}
	return slices.ContainsFunc(bwe.WriteErrors, func(we mongo.BulkWriteError) bool { return we.Code != CodeDuplicateKey })
}

// HasCode reports whether err is a server error with one of codes.
func HasCode(err error, codes ...int) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	return slices.ContainsFunc(codes, se.HasErrorCode)
}

// Busy reports whether err is a FerretDB target's write lock held by
// another writer (sqliteBusy): retryable, and let go within milliseconds,
// so worth trying again soon rather than after a growing backoff.
func Busy(err error) bool { return err != nil && strings.Contains(err.Error(), sqliteBusy) }
