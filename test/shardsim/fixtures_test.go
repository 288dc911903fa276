package shardsim

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// fixtureSchedule is what the fixtures of version v hold, on two shards
// (s0 owns chunk 0, s1 chunk 1): a retryable write and a transaction in
// chunk 0, chunk 0 migrated to s1 and committed (X deleted before its
// clone batch), chunk 2 migrated to s1 and aborted, both range deleters
// run, and a two-shard transaction committed, another aborted.
func fixtureSchedule(v int) *Model {
	m := NewModel(1, "app.users", 2, false).With(Behaviours{Version: v, Clocks: true, ConfigDocs: true,
		RecordIDClone: true, Sessions: true, Coordinator: true})
	s0, s1 := m.Owner(0), m.Owner(1)
	a := m.Insert(1)
	x := m.Insert(2)
	b := m.Insert(22)
	// A retryable update of A (session 1) and a one-shard transaction.
	d := m.Docs[a.ID]
	d.V++
	e, ss := m.retryable(m.crud("u", m.diff(bson.D{{Key: "v", Value: d.V}}), d.key(), false))
	ts := m.at(s0)
	m.log(s0, ts, e)
	m.record(s0, ts, a.ID, 'u', m.nextSeq(a.ID))
	m.Docs[a.ID] = d
	m.wroteRetryable(s0, ss, d.SK)
	m.ShardTxn(s0)
	m.Elapse(2)
	g := m.StartMigration(0, s1)
	g.Clone(1)
	g.DonorDelete(x.ID)
	g.Clone(-1)
	g.Commit()
	m.Elapse(1)
	g = m.StartMigration(2, s1)
	g.Clone(-1)
	g.Abort()
	m.RangeDelete(s0)
	m.RangeDelete(s1)
	t := m.NewTxn(m.Parts(TxnWrite{Kind: 'u', ID: a.ID}, TxnWrite{Kind: 'u', ID: b.ID}))
	t.Prepare(s1)
	t.Prepare(s0)
	t.Commit(s0)
	t.Commit(s1)
	t.End()
	t = m.NewTxn(m.Parts(TxnWrite{Kind: 'i', ID: 100, SK: 12}, TxnWrite{Kind: 'u', ID: b.ID}))
	t.Prepare(s1)
	t.Abort(s1)
	t.Abort(s0)
	t.End()
	return m
}

// fixtureEntries returns the entries of m that a chunk migration, a range
// deletion, session migration and a transaction coordinator add to what
// the user wrote: config.* writes, fromMigrate entries, prepares,
// commits and aborts, as canonical extended JSON, one per line, each
// with its shard.
func fixtureEntries(t *testing.T, m *Model) []byte {
	var b bytes.Buffer
	b.WriteString("[\n")
	first := true
	for _, s := range m.Shards {
		for _, e := range s.Log {
			ns, _ := e.Lookup("ns").StringValueOK()
			_, fm := e.Lookup("fromMigrate").BooleanOK()
			o, _ := e.Lookup("o").DocumentOK()
			txn := false
			if el, err := o.IndexErr(0); err == nil {
				k := el.Key()
				txn = k == "commitTransaction" || k == "abortTransaction" || k == "applyOps"
			}
			if !strings.HasPrefix(ns, "config.") && !fm && !txn {
				continue
			}
			j, err := bson.MarshalExtJSON(e, true, false)
			if err != nil {
				t.Fatal(err)
			}
			if !first {
				b.WriteString(",\n")
			}
			first = false
			fmt.Fprintf(&b, `{"shard": %q, "entry": %s}`, s.Name, j)
		}
	}
	b.WriteString("\n]\n")
	return b.Bytes()
}

// TestConfigShapeFixtures holds testdata/migration-shapes-<version>.json
// (docs/oplog-shapes.md, "Chunk migrations and transaction coordinators
// by version") to what the model writes; SHARDSIM_UPDATE_FIXTURES=1
// writes them again.
func TestConfigShapeFixtures(t *testing.T) {
	for _, v := range versions {
		path := filepath.Join("testdata", fmt.Sprintf("migration-shapes-%d.json", v))
		got := fixtureEntries(t, fixtureSchedule(v))
		if os.Getenv("SHARDSIM_UPDATE_FIXTURES") != "" {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (SHARDSIM_UPDATE_FIXTURES=1 writes it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the model writes for %d; SHARDSIM_UPDATE_FIXTURES=1 writes it again (and docs/oplog-shapes.md must say why)", path, v)
		}
		var entries []struct {
			Shard string
			Entry bson.Raw
		}
		if err := bson.UnmarshalExtJSON([]byte(`{"a":`+string(want)+`}`), true, &struct {
			A *[]struct {
				Shard string
				Entry bson.Raw
			} `bson:"a"`
		}{&entries}); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(entries) == 0 {
			t.Errorf("%s holds no entry", path)
		}
	}
}
