package holdback

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// ErrIndexNotFound says a collMod names an index the target does not
// have (the server's IndexNotFound, code 27). A checkpoint taken before a
// later dropIndexes applies the collMod again after a restart, and the
// index is gone by then: mongod's own oplog application accepts
// IndexNotFound (and NamespaceNotFound) from a collMod entry as applied
// (repl/oplog.cpp), and so does replay.
var ErrIndexNotFound = errors.New("index not found (IndexNotFound, 27)")

// CollMod takes a replayed collMod's options (the entry's o without the
// collMod key) for target namespace ns and returns those to apply to the
// target; empty when nothing is left. A change of what is held back
// updates the record instead of the target: an index's or the
// collection's expireAfterSeconds ("off" forgets a collection's), and a
// held capped collection's cappedSize and cappedMax. An index made a TTL
// index by collMod (MongoDB 5.1+) is held from then on.
func (h *Holder) CollMod(ctx context.Context, ns catalog.Namespace, opts bson.Raw) (bson.Raw, error) {
	if h.coll == nil {
		return opts, nil
	}
	elems, err := opts.Elements()
	if err != nil {
		return nil, fmt.Errorf("collMod of %s: %w", ns, err)
	}
	held, err := h.list(ctx, bson.D{{Key: "ns", Value: ns.String()}})
	if err != nil {
		return nil, err
	}
	out := bson.D{}
	for _, e := range elems {
		v := e.Value()
		switch e.Key() {
		case "expireAfterSeconds":
			if s, ok := v.StringValueOK(); ok && s == "off" {
				if err := h.forget(ctx, bson.D{{Key: "ns", Value: ns.String()}, {Key: "kind", Value: KindTTLCollection}}); err != nil {
					return nil, err
				}
				continue
			}
			secs, err := seconds(v)
			if err != nil {
				return nil, fmt.Errorf("collMod of %s: expireAfterSeconds: %w", ns, err)
			}
			if err := h.record(ctx, ns, Held{Kind: KindTTLCollection, ExpireAfterSeconds: secs}); err != nil {
				return nil, err
			}
		case "index":
			idx, ok := v.DocumentOK()
			if !ok || idx.Lookup("expireAfterSeconds").Type == 0 {
				out = append(out, bson.E{Key: e.Key(), Value: v})
				continue
			}
			rest, err := h.indexExpiry(ctx, ns, idx, held)
			if err != nil {
				return nil, err
			}
			if rest != nil {
				out = append(out, bson.E{Key: e.Key(), Value: rest})
			}
		case "cappedSize", "cappedMax":
			c := find(held, func(x Held) bool { return x.Kind == KindCapped })
			if c == nil {
				out = append(out, bson.E{Key: e.Key(), Value: v})
				continue
			}
			n, _ := v.AsInt64OK()
			if e.Key() == "cappedSize" {
				c.CappedSize = n
			} else {
				c.CappedMax = n
			}
			if err := h.record(ctx, ns, *c); err != nil {
				return nil, err
			}
		default:
			out = append(out, bson.E{Key: e.Key(), Value: v})
		}
	}
	return bson.Marshal(out)
}

// indexExpiry records the expiry a collMod gives an index and returns the
// collMod's index document without it (nil when only the index's name or
// key pattern remains).
func (h *Holder) indexExpiry(ctx context.Context, ns catalog.Namespace, idx bson.Raw, held []Held) (bson.Raw, error) {
	secs, err := seconds(idx.Lookup("expireAfterSeconds"))
	if err != nil {
		return nil, fmt.Errorf("collMod of %s: index expireAfterSeconds: %w", ns, err)
	}
	name, _ := idx.Lookup("name").StringValueOK()
	key, _ := idx.Lookup("keyPattern").DocumentOK()
	match := func(n string, k []byte) bool {
		return (name != "" && n == name) || (len(key) > 0 && bytes.Equal(k, key))
	}
	x := find(held, func(x Held) bool { return x.Kind == KindTTLIndex && match(x.Index, x.Key) })
	if x == nil {
		// A plain index made a TTL index: hold it from now on, with its
		// specification as the target has it.
		spec, err := h.targetIndex(ctx, ns, match)
		if err != nil {
			return nil, err
		}
		if spec == nil {
			return nil, fmt.Errorf("collMod of %s: no index %s%s on the target to give expireAfterSeconds: %w", ns, name, bson.Raw(key), ErrIndexNotFound)
		}
		x = &Held{Kind: KindTTLIndex, Spec: spec}
		x.Index, _ = spec.Lookup("name").StringValueOK()
		x.Key, _ = spec.Lookup("key").DocumentOK()
	}
	x.ExpireAfterSeconds = secs
	if err := h.record(ctx, ns, *x); err != nil {
		return nil, err
	}
	rest, err := without(idx, "expireAfterSeconds")
	if err != nil {
		return nil, err
	}
	elems, _ := rest.Elements()
	for _, e := range elems {
		if e.Key() != "name" && e.Key() != "keyPattern" {
			return rest, nil
		}
	}
	return nil, nil
}

// targetIndex returns the target's index that match accepts, without the
// fields a build does not take.
func (h *Holder) targetIndex(ctx context.Context, ns catalog.Namespace, match func(name string, key []byte) bool) (bson.Raw, error) {
	cur, err := h.target.Database(ns.DB).Collection(ns.Coll).Indexes().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list indexes of %s: %w", ns, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	for cur.Next(ctx) {
		n, _ := cur.Current.Lookup("name").StringValueOK()
		k, _ := cur.Current.Lookup("key").DocumentOK()
		if match(n, k) {
			return without(cur.Current, "v", "ns", "background", "expireAfterSeconds")
		}
	}
	return nil, cur.Err()
}

func find(held []Held, f func(Held) bool) *Held {
	for i := range held {
		if f(held[i]) {
			return &held[i]
		}
	}
	return nil
}
