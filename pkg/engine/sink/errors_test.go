package sink

import (
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// poolCleared stands for the driver's unexported poolClearedError: no
// label, no code, Retryable true (driver.RetryablePoolError).
type poolCleared struct{}

func (poolCleared) Error() string {
	return "connection pool for 127.0.0.1:39621 was cleared because another operation failed with: connection(127.0.0.1:39621[-23]) incomplete read of message header: EOF"
}

func (poolCleared) Retryable() bool { return true }

func TestClassify(t *testing.T) {
	busy := "[msg_delete.go:95 handler.(*Handler).MsgDelete] [collection.go:241 sqlite.(*collection).DeleteAll] database is locked (5) (SQLITE_BUSY)"
	for _, tc := range []struct {
		name string
		err  error
		want Class
	}{
		{"FerretDB's SQLite busy, as a command error", mongo.CommandError{Code: 1, Name: "InternalError", Message: busy}, Retryable},
		{"FerretDB's SQLite busy, as a write error", mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 1, Message: busy}}}, Retryable},
		{"another internal error", mongo.CommandError{Code: 1, Name: "InternalError", Message: "something broke"}, Fatal},
		{"a busy message outside a server error", errors.New("database is locked (5) (SQLITE_BUSY)"), Fatal},
		{"duplicate key", mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: CodeDuplicateKey}}}, Conflict},
		{"a shutdown", mongo.CommandError{Code: 91}, Retryable},
		{"nil", nil, Fatal},
		// A partition of the target link in the chaos suite: a replay
		// batch waiting for a connection got this after its retry, and
		// the worker exited instead of retrying again.
		{"pool cleared", fmt.Errorf("replay into chaos001.docs: %w", poolCleared{}), Retryable},
		{"server selection timeout", mongo.ErrClientDisconnected, Fatal},
		{"election", mongo.CommandError{Code: 11602, Message: "InterruptedDueToReplStateChange"}, Retryable},
		{"retryable label", mongo.CommandError{Code: 1, Labels: []string{"RetryableWriteError"}}, Retryable},
		{"bad value", mongo.CommandError{Code: 2, Message: "BadValue"}, Fatal},
		{"plain", errors.New("boom"), Fatal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
