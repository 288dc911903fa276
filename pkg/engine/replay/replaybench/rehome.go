package replaybench

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// Documents moved to another shard by the application: a share of the
// pool's inserts (ShardConfig.Rehome) are served on the shard after the
// one their _id hashes to, and that shard, their home, first logs an
// earlier document with the same _id and another shard-key value, just
// before the insert: its insert and its delete, without a transaction.
// The replayers filter every write on its document key; the bench's sink
// discards the writes and never answers with a duplicate key, so no
// write meets the other document here.

// rehome marks the pool's inserts to move, evenly spread, about share of
// the run's entries.
func (p *shardPlan) rehome(share float64) error {
	if share == 0 {
		return nil
	}
	if share < 0 || share > 1 || p.in.ShardKey == "" || p.shards < 2 {
		return fmt.Errorf("rehome %v: give a share between 0 and 1, with a shard key and 2 shards or more", share)
	}
	var inserts []int
	for i, k := range p.in.kinds {
		if k == 'i' && p.in.writes == nil {
			inserts = append(inserts, i)
		}
	}
	want := int(share * float64(len(p.in.Entries)))
	if want > len(inserts) {
		return fmt.Errorf("rehome %v: %d documents to move, but the pool has %d inserts", share, want, len(inserts))
	}
	p.moved = make([]bool, len(p.in.Entries))
	for j := range want {
		i := inserts[j*len(inserts)/max(want, 1)]
		p.moved[i] = true
		p.of[i] = uint8((int(p.of[i]) + 1) % p.shards)
	}
	pool := int64(len(p.in.Entries))
	for k := range p.ops {
		if p.moved[k%pool] {
			p.moves++
		}
	}
	return nil
}

// home is the shard pool entry i's _id hashes to.
func (p *shardPlan) home(i int64) int {
	s := int(p.of[i])
	if p.moved[i] {
		s = (s + p.shards - 1) % p.shards
	}
	return s
}

// earlier appends, for the moved insert at entry k (pool entry i), the
// earlier document's insert and delete on its home shard.
func (p *shardPlan) earlier(out []bson.Raw, i, k int64) []bson.Raw {
	e, err := oplog.Parse(p.in.Entries[i])
	if err != nil {
		return out
	}
	f := p.in.ShardKey
	doc := e.O()
	old := int32(-1)
	if v, ok := doc.Lookup(f).Int32OK(); ok {
		old = -v - 1
	}
	elems, _ := doc.Elements()
	db := bsoncore.NewDocumentBuilder()
	for _, el := range elems {
		if el.Key() == f {
			db.AppendInt32(f, old)
			continue
		}
		db.AppendValue(el.Key(), bsoncore.Value{Type: bsoncore.Type(el.Value().Type), Data: el.Value().Value})
	}
	id := doc.Lookup("_id")
	key := bsoncore.NewDocumentBuilder().AppendInt32(f, old).
		AppendValue("_id", bsoncore.Value{Type: bsoncore.Type(id.Type), Data: id.Value}).Build()
	at := p.tsBefore(k, 3)
	ins := bsoncore.NewDocumentBuilder().AppendTimestamp("ts", at.T, at.I).AppendInt64("t", 1).
		AppendString("op", "i").AppendString("ns", e.NS()).AppendDocument("o", db.Build()).AppendDocument("o2", key).Build()
	at = p.tsBefore(k, 2)
	del := bsoncore.NewDocumentBuilder().AppendTimestamp("ts", at.T, at.I).AppendInt64("t", 1).
		AppendString("op", "d").AppendString("ns", e.NS()).AppendDocument("o", key).Build()
	return append(out, bson.Raw(ins), bson.Raw(del))
}
