package shardsim

import (
	"math/rand/v2"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestBehavioursKeepMongoInvariants checks, over seeded schedules with
// every behaviour on, what mongod guarantees of the logs the model
// writes: each shard's ts strictly increase; a commitTimestamp is a
// participant's prepare ts, below every commit entry of the transaction;
// a periodic no-op (with Clocks) follows 10 s without a write.
func TestBehavioursKeepMongoInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		b := AllBehaviours(rand.New(rand.NewPCG(seed, 0x7e55)))
		m := GenerateWith(seed, "app.users", simSteps, b).Model
		prepares := map[bson.Timestamp]bool{}
		for _, s := range m.Shards {
			for _, e := range s.Log {
				if o, ok := e.Lookup("o").DocumentOK(); ok {
					if _, ok := o.Lookup("prepare").BooleanOK(); ok {
						prepares[tsOf(e)] = true
					}
				}
			}
		}
		for _, s := range m.Shards {
			var last bson.Timestamp
			for i, e := range s.Log {
				ts := tsOf(e)
				if i > 0 && !ts.After(last) {
					t.Fatalf("seed %d, shard %s: ts %v after %v", seed, s.Name, ts, last)
				}
				o, _ := e.Lookup("o").DocumentOK()
				if v, err := o.LookupErr("commitTimestamp"); err == nil {
					ct, ci := v.Timestamp()
					cts := bson.Timestamp{T: ct, I: ci}
					if !prepares[cts] || !cts.Before(ts) {
						t.Errorf("seed %d, shard %s: commitTimestamp %v at %v is no prepare ts below the commit", seed, s.Name, cts, ts)
					}
				}
				if msg, _ := o.Lookup("msg").StringValueOK(); msg == "periodic noop" && i > 0 && ts.T < last.T+noopInterval {
					t.Errorf("seed %d, shard %s: periodic no-op at %v, %d s after the write at %v", seed, s.Name, ts, ts.T-last.T, last)
				}
				last = ts
			}
		}
	}
}
