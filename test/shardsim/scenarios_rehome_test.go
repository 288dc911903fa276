package shardsim

import (
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The scenarios of this file move a document to another shard the way
// applications did before 4.2 and many still do: a plain delete of _id X
// on its shard, then an insert of X with a shard-key value another shard
// owns, no transaction (MongoDB checks _id uniqueness per shard, and the
// application keeps it unique at every moment). Each runs under the
// task's default options, at every version, inserts without o2 before
// the 5.3 binary, with each shard's reader far behind in turn.

// rehomeBehaviours are the versions the scenarios run at: every one,
// and 6.0 at FCV 5.0 (its inserts carry o2 as 6.0's do).
func rehomeBehaviours() []Behaviours {
	var out []Behaviours
	for _, v := range versions {
		out = append(out, Behaviours{Version: v, ConfigDocs: true, RecordIDClone: true})
	}
	return append(out, Behaviours{Version: 60, FCV: 50, ConfigDocs: true, RecordIDClone: true})
}

func (b Behaviours) name() string {
	if b.FCV != 0 {
		return fmt.Sprintf("%d at FCV %d", b.Version, b.FCV)
	}
	return fmt.Sprint(b.Version)
}

// otherChunk returns a chunk that s does not own.
func otherChunk(m *Model, s *Shard) int {
	for c := range chunkCount {
		if m.Owner(c) != s {
			return c
		}
	}
	panic("every chunk on one shard")
}

// TestScenarioRehome: X is inserted and updated on one shard, deleted,
// inserted with a key of another shard and updated there; in the second
// case it then moves back. Whichever subtask runs first, the target ends
// with the source's document: a lagging old shard's insert meets the new
// document, waits, meets it again and is stepped over, and its update and
// delete, filtered on its own key, change nothing; a new shard whose
// insert meets the old document waits until the old shard deleted it.
func TestScenarioRehome(t *testing.T) {
	for _, b := range rehomeBehaviours() {
		for _, back := range []bool{false, true} {
			for slow := range 2 {
				t.Run(fmt.Sprintf("%s back %v slow %d", b.name(), back, slow), func(t *testing.T) {
					m := NewModel(41, "app.users", 2, false).With(b)
					old := m.Owner(0)
					c := otherChunk(m, old)
					x := m.Insert(3)
					m.Update(x.ID)
					m.Delete(x.ID)
					m.InsertID(x.ID, int64(c*chunkWidth+5))
					m.Update(x.ID)
					if back {
						m.Delete(x.ID)
						m.InsertID(x.ID, 4)
						m.Update(x.ID)
					}
					m.Finish()
					rec := NewRecorder(m)
					mustRun(t, Schedule{Seed: 41, Model: m}, Config{Seed: 41, Recorder: rec, Speeds: slowFast(m, m.Shards[slow])})
					wantDoc(t, rec, m, x.ID)
				})
			}
		}
	}
}

// TestScenarioRehomeDuringMigration: a chunk migrates from A to B while
// the application moves X. Out of it: X lives in the migrating chunk, is
// deleted on the donor during the clone and inserted on C. Into it: X
// lives on C, is deleted there and inserted into the migrating chunk on
// the donor, reaching the recipient as a transferred write (fromMigrate,
// skipped); the recipient then updates it. Each shard's reader is far
// behind in turn.
func TestScenarioRehomeDuringMigration(t *testing.T) {
	for _, b := range rehomeBehaviours() {
		for _, into := range []bool{false, true} {
			for slow := range 3 {
				t.Run(fmt.Sprintf("%s into %v slow %d", b.name(), into, slow), func(t *testing.T) {
					m := NewModel(43, "app.users", 3, false).With(b)
					a := m.Owner(0)
					var to, other *Shard
					for _, s := range m.Shards {
						switch {
						case s == a:
						case to == nil:
							to = s
						default:
							other = s
						}
					}
					oc := -1
					for c := range chunkCount {
						if m.Owner(c) == other {
							oc = c
						}
					}
					if oc < 0 {
						t.Skip("no chunk on the third shard")
					}
					m.Insert(2)
					var x Doc
					if into {
						x = m.Insert(int64(oc*chunkWidth + 1))
					} else {
						x = m.Insert(3)
					}
					g := m.StartMigration(0, to)
					g.Clone(1)
					if into {
						m.Delete(x.ID)
						m.InsertID(x.ID, 7) // chunk 0, still the donor's
						g.mods = append(g.mods, mod{x.ID, 'r'})
					} else {
						g.DonorDelete(x.ID)
						m.InsertID(x.ID, int64(oc*chunkWidth+2))
					}
					g.Clone(-1)
					g.Transfer()
					g.Commit()
					m.Update(x.ID)
					m.Finish()
					rec := NewRecorder(m)
					mustRun(t, Schedule{Seed: 43, Model: m}, Config{Seed: 43, Recorder: rec, Speeds: slowFast(m, m.Shards[slow])})
					wantDoc(t, rec, m, x.ID)
				})
			}
		}
	}
}

// TestScenarioRehomeInsertBelowDelete: the application deletes X on A and
// inserts X with a key B owns, in that order in real time, but the insert
// comes from another client through another router (InsertIDUnrelated):
// nothing carries the delete's cluster time to B, whose clock is a second
// behind A's, and the insert's ts lies between X's insert and its delete
// on A. MongoDB orders two shards' ts only through the cluster time a
// message carries (VectorClock::gossipIn, db/vector_clock.cpp); the
// scenarios above gossip the document's last write to its next one, as one
// client does. In the held case a migration of another chunk from B into
// A is open when A deletes X, so A's delete waits for B (the migration
// rule); in the in-place case B then changes X's shard key to another
// value B owns. The source ends with B's document. B's insert meets A's X,
// waits until A is settled below its ts (A may wait at its delete, above
// it) and meets it again: only the source tells which X it keeps, and
// only when read by _id, since B's X may no longer have the insert's key.
// Read by the insert's key, the in-place case lost X: the insert was
// stepped over as if A's X were newer, and A's delete removed A's X.
func TestScenarioRehomeInsertBelowDelete(t *testing.T) {
	for _, b := range rehomeBehaviours() {
		b.Clocks = true
		for _, held := range []bool{false, true} {
			for _, tc := range rehomeCases() {
				slow, inPlace := tc.slow, tc.inPlace
				t.Run(fmt.Sprintf("%s held %v slow %d in place %v", b.name(), held, slow, inPlace), func(t *testing.T) {
					m := NewModel(47, "app.users", 2, false).With(b)
					a := m.Owner(0)
					c := otherChunk(m, a)
					other := m.Owner(c)
					a.skew, other.skew = 1, 0
					x := m.Insert(3)
					m.Elapse(2)
					var g *Migration
					if held { // another chunk of B's than X's new one
						for d := c + 1; d < chunkCount && g == nil; d++ {
							if m.Owner(d) == other {
								g = m.StartMigration(d, a)
							}
						}
					}
					m.Delete(x.ID)
					m.InsertIDUnrelated(x.ID, int64(c*chunkWidth+5))
					if inPlace {
						m.ChangeKeyInPlace(x.ID, int64(c*chunkWidth+7))
					}
					var ins, del, mine bson.Timestamp
					for _, w := range m.Writes {
						switch {
						case w.ID != x.ID:
						case w.Shard == a.Name && w.Kind == 'i':
							ins = w.TS
						case w.Shard == a.Name && w.Kind == 'd':
							del = w.TS
						case w.Kind == 'i':
							mine = w.TS
						}
					}
					if !ins.Before(mine) || !mine.Before(del) {
						t.Fatalf("want X's insert on %s below the insert on %s below the delete: %v, %v, %v", a.Name, other.Name, ins, mine, del)
					}
					m.Elapse(1)
					if g != nil {
						g.Clone(-1)
						g.Transfer()
						g.Commit()
					}
					m.Finish()
					speeds := map[string]int{a.Name: 1000, other.Name: 1000}
					if slow < 2 {
						speeds = slowFast(m, m.Shards[slow])
					}
					rec := NewRecorder(m)
					mustRun(t, Schedule{Seed: 47, Model: m}, Config{Seed: 47, Recorder: rec, Speeds: speeds})
					wantDoc(t, rec, m, x.ID)
				})
			}
		}
	}
}

// rehomeCase is a variant of a move below the delete: which shard's
// reader is slow (2: none), and whether the moved document's shard key
// then changes in place.
type rehomeCase struct {
	slow    int
	inPlace bool
}

// rehomeCases returns every rehomeCase.
func rehomeCases() []rehomeCase {
	var cs []rehomeCase
	for _, inPlace := range []bool{false, true} {
		for slow := range 3 {
			cs = append(cs, rehomeCase{slow, inPlace})
		}
	}
	return cs
}
