package fullsync

import (
	"testing"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestStatusMaxBytes: /status's copy.maxBytes is cache.maxBytes as the
// task sets it (256MiB by default; it read 128MiB, the queue's share),
// and queueBudgetBytes the part of it queued documents may take.
func TestStatusMaxBytes(t *testing.T) {
	for _, tc := range []struct {
		maxBytes config.ByteSize
		want     int64
	}{{"", 256 << 20}, {"64MiB", 64 << 20}} {
		spec := config.Spec{Cache: config.Cache{MaxBytes: tc.maxBytes}}
		spec.SetDefaults()
		c, err := New(Options{Task: "t", Spec: &spec})
		if err != nil {
			t.Fatal(err)
		}
		s := c.Status()
		if s.MaxBytes != tc.want || s.QueueBudgetBytes <= 0 || s.QueueBudgetBytes >= s.MaxBytes {
			t.Errorf("cache.maxBytes %q: maxBytes %d, queueBudgetBytes %d; want maxBytes %d and a smaller queue budget", tc.maxBytes, s.MaxBytes, s.QueueBudgetBytes, tc.want)
		}
	}
}
