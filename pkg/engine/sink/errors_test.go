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
	for _, c := range []struct {
		name string
		err  error
		want Class
	}{
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
		if got := Classify(c.err); got != c.want {
			t.Errorf("%s: Classify(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
