package sink

import (
	"context"
	"sync"
)

// Turns gives out one turn at a time per database: the writers that
// send a target's update commands one at a time per database
// (conn.Profile.SerialUpdates) take one around each command. The zero
// value is ready.
type Turns struct {
	byDB sync.Map // database -> chan struct{} of size 1
}

// Take waits for db's turn and returns what gives it back; it fails with
// ctx's error when ctx ends first.
func (t *Turns) Take(ctx context.Context, db string) (release func(), err error) {
	v, _ := t.byDB.LoadOrStore(db, make(chan struct{}, 1))
	turn := v.(chan struct{})
	select {
	case turn <- struct{}{}:
		return func() { <-turn }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
