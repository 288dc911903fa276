package board_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine/board"
)

func ts(t, i uint32) bson.Timestamp { return bson.Timestamp{T: t, I: i} }

func TestReaches(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        board.Position
		at, wait bson.Timestamp
		want     bool
	}{
		{"applied past", board.Position{Applied: ts(10, 5)}, ts(10, 3), bson.Timestamp{}, true},
		{"applied just below", board.Position{Applied: ts(10, 2)}, ts(10, 3), bson.Timestamp{}, true},
		{"applied below", board.Position{Applied: ts(10, 1)}, ts(10, 3), bson.Timestamp{}, false},
		{"just below across seconds", board.Position{Applied: ts(9, ^uint32(0))}, ts(10, 0), bson.Timestamp{}, true},
		{"retired", board.Position{Retired: true}, ts(10, 3), bson.Timestamp{}, true},
		{"drained for a cut-over", board.Position{Applied: ts(1, 1), Drained: true}, ts(10, 3), bson.Timestamp{}, true},
		{"waiting on the same commit", board.Position{Applied: ts(1, 1), Waiting: ts(10, 3)}, ts(10, 3), ts(10, 3), true},
		{"waiting on another commit", board.Position{Applied: ts(1, 1), Waiting: ts(10, 4)}, ts(10, 3), ts(10, 3), false},
		{"waiting counts only for a commit", board.Position{Applied: ts(1, 1), Waiting: ts(10, 3)}, ts(10, 3), bson.Timestamp{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Reaches(tc.at, tc.wait); got != tc.want {
				t.Errorf("%+v.Reaches(%v, %v) = %v, want %v", tc.p, tc.at, tc.wait, got, tc.want)
			}
		})
	}
}

// exercise publishes positions of three subtasks, one twice, and checks
// what every reader of the board sees.
func exercise(t *testing.T, publish, read board.Board, wait func()) {
	t.Helper()
	ctx := context.Background()
	want := []board.Position{
		{Shard: "rs0", Read: ts(20, 1), Applied: ts(19, 7),
			Decided: []board.Decision{{Txn: "1emeutum12nl9", Commit: ts(18, 2), Participants: []string{"rs0", "rs1"}}}},
		{Shard: "rs1", Read: ts(21, 1), Applied: ts(21, 1), Waiting: ts(21, 4)},
		{Shard: "rs2", Read: ts(5, 1), Applied: ts(5, 1), Retired: true},
	}
	for _, p := range []board.Position{{Shard: "rs1", Applied: ts(1, 1)}, want[2], want[0], want[1]} {
		if err := publish.Publish(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	wait()
	got, err := read.Positions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("positions %+v, want %+v", got, want)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("position %d is %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestMemoryBoard(t *testing.T) {
	b := board.NewMemoryBoard()
	exercise(t, b, b, func() {})
}

// TestTargetBoard runs the board on a real FerretDB target: one subtask's
// board publishes, another process's board (its own client) reads the
// documents after its refresh interval.
func TestTargetBoard(t *testing.T) {
	srv := testserver.Start(t)
	pub := board.NewTargetBoard(srv.MustClient(t), "mongoferry", "task1")
	other := board.NewTargetBoard(srv.MustClient(t), "mongoferry", "task1")
	other.Refresh = 50 * time.Millisecond
	if ps, err := other.Positions(context.Background()); err != nil || len(ps) != 0 {
		t.Fatalf("an empty board has positions %+v (%v)", ps, err)
	}
	exercise(t, pub, other, func() { time.Sleep(100 * time.Millisecond) })
	// Another task's subtasks do not show.
	if err := board.NewTargetBoard(srv.MustClient(t), "mongoferry", "task2").Publish(context.Background(), board.Position{Shard: "rs9"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if ps, _ := other.Positions(context.Background()); len(ps) != 3 {
		t.Errorf("task1's board shows %d positions, want 3: %+v", len(ps), ps)
	}
}
