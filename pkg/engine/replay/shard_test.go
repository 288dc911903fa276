package replay

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// TestHolds walks one subtask (shard a) through two migrations into
// namespace N and writes of N and M, checking what is held, what each
// board state releases, and the checkpoint cap.
func TestHolds(t *testing.T) {
	ts := func(i uint32) bson.Timestamp { return bson.Timestamp{T: 50, I: i} }
	n, m := catalog.Namespace{DB: "db", Coll: "n"}, catalog.Namespace{DB: "db", Coll: "m"}
	w := func(ns catalog.Namespace, i uint32) item { return item{ts: ts(i), src: ns, ns: ns} }
	var h holds
	if h.hold(w(n, 1)) {
		t.Fatal("a write held with no migration read")
	}
	h.migrated(n, ts(5))
	h.migrated(n, ts(6))
	if h.hold(w(m, 7)) {
		t.Fatal("a write of another namespace held")
	}
	for _, it := range []item{w(n, 7), w(n, 8)} {
		if !h.hold(it) {
			t.Fatalf("write at %v not held after the migration", it.ts)
		}
	}
	h.migrated(n, ts(10))
	if !h.hold(w(n, 11)) {
		t.Fatal("write at 11 not held after the second migration")
	}
	if got := h.cap(ts(20)); got != ts(4) {
		t.Errorf("cap %v, want just below the first migration entry %v", got, ts(4))
	}
	steps := []struct {
		name     string
		others   []board.Position
		released []uint32
		cap      bson.Timestamp
	}{
		{"others behind", []board.Position{{Shard: "b", Applied: ts(4)}, {Shard: "c", Applied: ts(9)}}, nil, ts(5)},
		{"one behind the first migration's last entry", []board.Position{{Shard: "b", Applied: ts(5)}, {Shard: "c", Applied: ts(9)}, {Shard: "a", Applied: ts(1)}}, []uint32{7, 8}, ts(9)},
		{"a retired one does not count", []board.Position{{Shard: "b", Retired: true}, {Shard: "c", Applied: ts(9)}}, []uint32{11}, ts(20)},
	}
	for _, s := range steps {
		its := h.release("a", s.others)
		var got []uint32
		for _, it := range its {
			got = append(got, it.ts.I)
		}
		if len(got) != len(s.released) || (len(got) > 0 && got[0] != s.released[0]) {
			t.Errorf("%s: released %v, want %v", s.name, got, s.released)
		}
		h.sent(its)
		if c := h.cap(ts(20)); c != s.cap {
			t.Errorf("%s: cap %v, want %v", s.name, c, s.cap)
		}
	}
	if st := h.status(); st.HeldWrites != 3 || st.HeldNow != 0 || st.Barriers != 0 {
		t.Errorf("status %+v, want 3 held, none now, no barriers", st)
	}
	if h.hold(w(n, 12)) {
		t.Error("a write held after every migration was released")
	}
}
