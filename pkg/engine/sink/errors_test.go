package sink

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

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
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
