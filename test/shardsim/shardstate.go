package shardsim

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// shardState is what one shard holds: its oplog applied in order, every
// entry of the model's collection counted (fromMigrate copies, catch-up
// writes and range deletions too), prepared transactions at their
// commit. A reader reading the shard directly sees these documents,
// orphans included.
type shardState struct {
	docs map[int64]Doc
	next int
	txns map[string]bson.RawArray // prepared applyOps by session and txnNumber
}

func newShardState() *shardState {
	return &shardState{docs: map[int64]Doc{}, txns: map[string]bson.RawArray{}}
}

// advance applies the entries s logged since the last call.
func (st *shardState) advance(ns string, s *Shard) {
	for ; st.next < len(s.Log); st.next++ {
		st.entry(ns, s.Log[st.next])
	}
}

func txnKey(e bson.Raw) string {
	return fmt.Sprint(e.Lookup("lsid", "id"), e.Lookup("txnNumber"))
}

func (st *shardState) entry(ns string, e bson.Raw) {
	op := e.Lookup("op").StringValue()
	if op != "c" {
		if e.Lookup("ns").StringValue() == ns {
			st.crud(op, e)
		}
		return
	}
	o := e.Lookup("o").Document()
	switch {
	case o.Lookup("applyOps").Type == bson.TypeArray:
		ops := o.Lookup("applyOps").Array()
		if p, ok := o.Lookup("prepare").BooleanOK(); ok && p {
			st.txns[txnKey(e)] = ops
			return
		}
		st.applyOps(ns, ops)
	case o.Lookup("commitTransaction").Type != 0:
		st.applyOps(ns, st.txns[txnKey(e)])
		delete(st.txns, txnKey(e))
	case o.Lookup("abortTransaction").Type != 0:
		delete(st.txns, txnKey(e))
	}
}

func (st *shardState) applyOps(ns string, ops bson.RawArray) {
	vals, _ := ops.Values()
	for _, v := range vals {
		inner := v.Document()
		if inner.Lookup("ns").StringValue() == ns {
			st.crud(inner.Lookup("op").StringValue(), inner)
		}
	}
}

// crud applies an insert, update or delete entry (or applyOps operation).
func (st *shardState) crud(op string, e bson.Raw) {
	o := e.Lookup("o").Document()
	switch op {
	case "i":
		d := decode(o)
		st.docs[d.ID] = d
	case "d":
		delete(st.docs, o.Lookup("_id").AsInt64())
	case "u":
		id := e.Lookup("o2", "_id").AsInt64()
		if _, err := o.LookupErr("_id"); err == nil {
			st.docs[id] = decode(o) // a replacement (a migration's catch-up)
			return
		}
		cur, ok := st.docs[id]
		if !ok {
			return
		}
		set, err := o.LookupErr("diff", "u")
		if err != nil {
			set = o.Lookup("$set")
		}
		if v, err := set.Document().LookupErr("v"); err == nil {
			cur.V = v.AsInt64()
		}
		if sk, err := set.Document().LookupErr("sk"); err == nil {
			cur.SK = sk.AsInt64()
		}
		st.docs[id] = cur
	}
}
