package replay

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// TestRecheckSavedWithCheckpoint: a recheck pending when the checkpoint
// is saved comes back with it, so a subtask killed before every other
// one passed the read still writes the document again after its restart.
func TestRecheckSavedWithCheckpoint(t *testing.T) {
	key, _ := bson.Marshal(bson.D{{Key: "sk", Value: 44}, {Key: "_id", Value: "order-7"}})
	doc, _ := bson.Marshal(bson.D{{Key: "_id", Value: "order-7"}, {Key: "sk", Value: 44}, {Key: "v", Value: 3}})
	ns := catalog.Namespace{DB: "app", Coll: "orders"}
	at := bson.Timestamp{T: 1700000090, I: 4}
	var h holds
	h.addRecheck(item{ns: ns, src: ns, key: key}, doc, at)

	var back holds
	rest, _, err := back.recoverState(h.stateEntries(bson.Timestamp{}))
	if err != nil || len(rest) != 0 {
		t.Fatalf("recover: %v, %d entries left", err, len(rest))
	}
	if len(back.rechecks) != 1 {
		t.Fatalf("%d rechecks recovered, want 1", len(back.rechecks))
	}
	for k, c := range h.rechecks {
		got := back.rechecks[k]
		if got == nil || got.at != c.at || got.ns != c.ns || got.src != c.src || got.seen != c.seen || len(got.fields) != 2 ||
			got.fields[0].Name != "sk" || got.fields[1].Name != "_id" || got.id.String() != c.id.String() {
			t.Fatalf("recovered %+v, saved %+v", got, c)
		}
	}
	if st := back.status(); st.Rechecks != 1 {
		t.Fatalf("status shows %d rechecks pending, want 1", st.Rechecks)
	}
}

// TestRecheckDue: a recheck runs once every subtask, its own included, is
// settled past the read.
func TestRecheckDue(t *testing.T) {
	at := bson.Timestamp{T: 100, I: 2}
	for _, tc := range []struct {
		name string
		ps   []board.Position
		due  bool
	}{
		{"every subtask at the read", []board.Position{{Shard: "a", Applied: at}, {Shard: "b", Applied: at}}, true},
		{"its own subtask below it", []board.Position{{Shard: "a", Applied: bson.Timestamp{T: 100, I: 1}}, {Shard: "b", Applied: at}}, false},
		{"another below it", []board.Position{{Shard: "a", Applied: at}, {Shard: "b", Applied: bson.Timestamp{T: 99}}}, false},
		{"another retired below it", []board.Position{{Shard: "a", Applied: at}, {Shard: "b", Retired: true}}, true},
		{"another drained below it", []board.Position{{Shard: "a", Applied: at}, {Shard: "b", Drained: true}}, true},
		{"another past it with a transaction begun before it", []board.Position{{Shard: "a", Applied: at},
			{Shard: "b", Applied: bson.Timestamp{T: 101}, OpenFrom: bson.Timestamp{T: 99}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := passed("a", tc.ps, at); got != tc.due {
				t.Fatalf("passed = %v, want %v", got, tc.due)
			}
		})
	}
}
