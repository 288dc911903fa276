package shardedsource

import (
	"strings"
	"testing"

	"github.com/mongoferry/mongoferry/pkg/engine/conn"
)

// TestOrphanWritesWarning: a sharded source before MongoDB 6.0 is told,
// when its subtasks start, that its shards log writes to orphans which
// the replay cannot tell apart (docs/sharded.md); 6.0 and later, and
// FerretDB, are not.
func TestOrphanWritesWarning(t *testing.T) {
	mongo := func(version string, major int) conn.Profile {
		p := conn.MongoDBProfile
		p.Version, p.Major = version, major
		return p
	}
	for _, tc := range []struct {
		name    string
		profile conn.Profile
		warns   bool
	}{
		{"4.4", mongo("4.4.29", 4), true},
		{"5.0", mongo("5.0.31", 5), true},
		{"6.0", mongo("6.0.20", 6), false},
		{"8.0", mongo("8.0.4", 8), false},
		{"version unknown", mongo("", 0), false},
		{"FerretDB", conn.FerretDBProfile, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := orphanWritesWarning(tc.profile)
			if !tc.warns {
				if msg != "" {
					t.Fatalf("warned: %s", msg)
				}
				return
			}
			for _, want := range []string{tc.profile.Version, "orphan", "shard key", "transaction", "6.0", "docs/sharded.md", "verify.continuous"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the warning does not say %q: %s", want, msg)
				}
			}
		})
	}
}
