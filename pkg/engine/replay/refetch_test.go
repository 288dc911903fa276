package replay

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestStalePath: an older entry applied again over a newer document
// (the copy/replay overlap, a resume a little behind) can meet a field
// whose type has changed; the server answers PathNotViable (28), BadValue
// (2) or TypeMismatch (14) on that update. Such an update is re-read from
// the source rather than stopping replay; any other failure stops it.
func TestStalePath(t *testing.T) {
	upd, ins := item{model: &mongo.UpdateOneModel{}}, item{model: &mongo.ReplaceOneModel{}}
	bwe := func(index, code int) error {
		return mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Index: index, Code: code}}}}
	}
	tests := []struct {
		name  string
		err   error
		batch []item
		k     int
		stale bool
	}{
		{"PathNotViable on an update", bwe(1, 28), []item{ins, upd}, 1, true},
		{"BadValue on an update", bwe(0, 2), []item{upd}, 0, true},
		{"TypeMismatch on an update", bwe(0, 14), []item{upd}, 0, true},
		{"the same code on a replacement", bwe(0, 28), []item{ins}, 0, false},
		{"an index on a replacement (FerretDB reports 0): the next update", bwe(0, 28), []item{ins, ins, upd}, 2, true},
		{"a duplicate key", bwe(0, 11000), []item{upd}, 0, false},
		{"an index out of range", bwe(3, 28), []item{upd}, 0, false},
		{"not a bulk write error", errors.New("connection reset"), []item{upd}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, ok := stalePath(tt.err, tt.batch)
			if ok != tt.stale || (ok && k != tt.k) {
				t.Errorf("stalePath = %d %v, want %d %v", k, ok, tt.k, tt.stale)
			}
		})
	}
}
