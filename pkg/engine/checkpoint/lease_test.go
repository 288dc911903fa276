package checkpoint

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mongoferry/mongoferry/internal/testserver"
)

// TestLease: on a real FerretDB target, a second run of a task takes the
// lease of a holder that is gone (at once when it ran on the same host,
// after the TTL otherwise) and stops with ErrTaskRunning while the holder
// renews it.
func TestLease(t *testing.T) {
	srv := testserver.Start(t)
	ctx := context.Background()
	const ttl = 1200 * time.Millisecond
	here := Holder{Name: "host-a", PID: 100}
	tests := []struct {
		name    string
		holder  Holder
		renew   bool // the first holder keeps renewing
		dead    bool // the first holder's process is gone (o.Dead)
		wantErr error
		minWait time.Duration
	}{
		{name: "same host, process gone: taken at once", holder: Holder{Name: "host-a", PID: 99}, dead: true},
		{name: "another host, not renewed: taken after the TTL", holder: Holder{Name: "host-b", PID: 7}, minWait: ttl},
		{name: "another host, renewed: refused", holder: Holder{Name: "host-b", PID: 7}, renew: true, wantErr: ErrTaskRunning},
		{name: "same host, process alive and renewing: refused", holder: Holder{Name: "host-a", PID: 98}, renew: true, wantErr: ErrTaskRunning},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(srv.MustClient(t), "mongoferry", "lease-"+string(rune('a'+i)))
			first, err := s.AcquireLease(ctx, LeaseOptions{Holder: tc.holder, TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			defer stop()
			if tc.renew {
				go func() {
					for rctx.Err() == nil {
						_ = first.Renew(rctx)
						time.Sleep(ttl / 4)
					}
				}()
			}
			start := time.Now()
			var told []Holder
			second, err := s.AcquireLease(ctx, LeaseOptions{Holder: here, TTL: ttl, Dead: func(Holder) bool { return tc.dead },
				Waiting: func(h Holder) { told = append(told, h) }})
			waited := time.Since(start)
			// A run that waits says so once, naming the holder it waits on.
			if wantTold := tc.minWait > 0 || tc.renew; wantTold != (len(told) == 1) || len(told) > 1 {
				t.Errorf("told of the wait %d times (%v), want %v", len(told), told, wantTold)
			} else if len(told) == 1 && told[0] != tc.holder {
				t.Errorf("told of a wait on %v, want %v", told[0], tc.holder)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("second run: %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if waited < tc.minWait {
				t.Errorf("taken after %s, want at least %s", waited, tc.minWait)
			}
			if err := first.Renew(ctx); !errors.Is(err, ErrTaskRunning) {
				t.Errorf("the first holder's renewal after the takeover: %v, want ErrTaskRunning", err)
			}
			if err := second.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
