package replay

import (
	"os"
	"path/filepath"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// TestMigrationMarkersOfFixtures reads the config.* entries mongod writes
// around a migration, by version (test/shardsim/testdata, described in
// docs/oplog-shapes.md): each shard recognises the migrations into it by
// their start markers, and every one it recognises ends.
func TestMigrationMarkersOfFixtures(t *testing.T) {
	forEachShapeFixture(t, func(t *testing.T, entries []fixtureEntry) {
		hs := map[string]*holds{}
		started := 0
		for _, x := range entries {
			e, err := oplog.Parse(x.Entry)
			if err != nil {
				t.Fatal(err)
			}
			h := hs[x.Shard]
			if h == nil {
				h = &holds{}
				hs[x.Shard] = h
			}
			before := len(h.migrations)
			h.marker(e, e.TS(), x.Shard)
			if len(h.migrations) > before {
				started++
			}
		}
		if started == 0 {
			t.Fatalf("no migration recognised in %d entries", len(entries))
		}
		for name, h := range hs {
			for _, m := range h.migrations {
				if m.end.IsZero() {
					t.Errorf("shard %s: migration %s of %s (start %v) never ends", name, m.key, m.ns, m.start)
				}
			}
		}
	})
}

// fixtureEntry is one entry of a shape fixture and the shard that logs it.
type fixtureEntry struct {
	Shard string
	Entry bson.Raw
}

// forEachShapeFixture runs f, as a subtest, on the entries of each
// fixture of what mongod logs around migrations and transactions
// (test/shardsim/testdata, described in docs/oplog-shapes.md).
func forEachShapeFixture(t *testing.T, f func(t *testing.T, entries []fixtureEntry)) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "..", "test", "shardsim", "testdata", "migration-shapes-*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				A []fixtureEntry `bson:"a"`
			}
			if err := bson.UnmarshalExtJSON(append(append([]byte(`{"a":`), data...), '}'), true, &doc); err != nil {
				t.Fatal(err)
			}
			f(t, doc.A)
		})
	}
}
