package holdback

import (
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Kind names one sort of option held back on the target.
type Kind string

// The options held back during a sync.
const (
	// KindTTLIndex: an index's expireAfterSeconds. The index is built
	// without it, so the target's TTL monitor never deletes a document
	// the source still holds; at cut-over the expiry is set again.
	KindTTLIndex Kind = "ttlIndex"
	// KindTTLCollection: a clustered or time series collection's
	// expireAfterSeconds (a collection-wide TTL), left out of create.
	KindTTLCollection Kind = "ttlCollection"
	// KindCapped: a capped collection's size and max. The target
	// collection is created uncapped: a capped target would drop
	// documents on its own (in its own insertion order, which the
	// parallel copy does not keep) and, before MongoDB 5.0, refuse the
	// replayed deletes. At cut-over it is converted (convertToCapped).
	KindCapped Kind = "capped"
	// KindUnique: a unique index whose build met duplicate keys in the
	// copied data (the copy reads each document at a different moment, so
	// until the replay passes the copy's end the target may hold two
	// documents with the same key that never coexisted on the source). It
	// is built non-unique and made unique at cut-over.
	KindUnique Kind = "unique"
)

// Held is one option held back on one target collection.
type Held struct {
	// ID is task/ns/kind[/index].
	ID   string `bson:"_id"`
	Task string `bson:"task"`
	// NS is the target namespace.
	NS   string `bson:"ns"`
	Kind Kind   `bson:"kind"`
	// Index is the index's name (TTL and unique indexes).
	Index string `bson:"index,omitempty"`
	// Key is the index's key pattern, Spec the index as built on the
	// target, without the held option; raw BSON bytes, as index keys may
	// be field names a server refuses to store ($**).
	Key  []byte `bson:"key,omitempty"`
	Spec []byte `bson:"spec,omitempty"`
	// ExpireAfterSeconds is the source's expiry (TTL kinds).
	ExpireAfterSeconds int64 `bson:"expireAfterSeconds,omitempty"`
	// CappedSize and CappedMax are the source's capped limits.
	CappedSize int64 `bson:"cappedSize,omitempty"`
	CappedMax  int64 `bson:"cappedMax,omitempty"`
	// Indexes are a capped collection's indexes, saved by Restore before
	// convertToCapped (which keeps only _id's) so that a restart rebuilds
	// them.
	Indexes [][]byte `bson:"indexes,omitempty"`
	// Rebuilding is set by Restore before it drops an index to build it
	// again with the held option: a restart then builds it even though
	// the index is missing.
	Rebuilding bool `bson:"rebuilding,omitempty"`
	// HeldAt is when the option was last recorded.
	HeldAt time.Time `bson:"heldAt"`
}

// String says what is held, for logs and reports.
func (h Held) String() string {
	switch h.Kind {
	case KindTTLIndex:
		return fmt.Sprintf("%s: index %s expireAfterSeconds %d", h.NS, h.Index, h.ExpireAfterSeconds)
	case KindTTLCollection:
		return fmt.Sprintf("%s: collection expireAfterSeconds %d", h.NS, h.ExpireAfterSeconds)
	case KindCapped:
		if h.CappedMax > 0 {
			return fmt.Sprintf("%s: capped size %d max %d", h.NS, h.CappedSize, h.CappedMax)
		}
		return fmt.Sprintf("%s: capped size %d", h.NS, h.CappedSize)
	case KindUnique:
		return fmt.Sprintf("%s: index %s unique", h.NS, h.Index)
	}
	return h.NS + ": " + string(h.Kind)
}

// HoldIndex returns the index specification (as listIndexes or a
// createIndexes entry gives it) to build on the target during the sync
// and, for a TTL index, the expiry held back. A TTL index is built as a
// plain index on the same key, under the same name and with its other
// options, so queries use it as before and collMod can make it a TTL
// index again (MongoDB 5.1+).
func HoldIndex(spec bson.Raw) (bson.Raw, *Held, error) {
	v := spec.Lookup("expireAfterSeconds")
	if v.Type == 0 {
		return spec, nil, nil
	}
	secs, err := seconds(v)
	if err != nil {
		return nil, nil, fmt.Errorf("index expireAfterSeconds: %w", err)
	}
	out, err := without(spec, "expireAfterSeconds")
	if err != nil {
		return nil, nil, err
	}
	held := &Held{Kind: KindTTLIndex, ExpireAfterSeconds: secs, Spec: out}
	held.Index, _ = spec.Lookup("name").StringValueOK()
	if key, ok := spec.Lookup("key").DocumentOK(); ok {
		held.Key = key
	}
	return out, held, nil
}

// without returns doc without the named top-level fields.
func without(doc bson.Raw, keys ...string) (bson.Raw, error) {
	elems, err := doc.Elements()
	if err != nil {
		return nil, err
	}
	out := bson.D{}
	for _, e := range elems {
		if !slices.Contains(keys, e.Key()) {
			out = append(out, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	return bson.Marshal(out)
}

// HoldOptions returns the create options to use on the target during the
// sync (listCollections options or a create entry's, without the create
// key) and what they hold back: a collection-wide expireAfterSeconds and
// a capped collection's capped, size and max.
func HoldOptions(opts bson.Raw) (bson.Raw, []Held, error) {
	if len(opts) == 0 {
		return opts, nil, nil
	}
	elems, err := opts.Elements()
	if err != nil {
		return nil, nil, err
	}
	isCap, _ := opts.Lookup("capped").BooleanOK()
	out := bson.D{}
	var held []Held
	capped := Held{Kind: KindCapped}
	for _, e := range elems {
		switch k := e.Key(); {
		case k == "expireAfterSeconds":
			secs, err := seconds(e.Value())
			if err != nil {
				return nil, nil, fmt.Errorf("expireAfterSeconds: %w", err)
			}
			held = append(held, Held{Kind: KindTTLCollection, ExpireAfterSeconds: secs})
		case isCap && k == "capped":
		case isCap && k == "size":
			capped.CappedSize, _ = e.Value().AsInt64OK()
		case isCap && k == "max":
			capped.CappedMax, _ = e.Value().AsInt64OK()
		default:
			out = append(out, bson.E{Key: k, Value: e.Value()})
		}
	}
	if isCap {
		held = append(held, capped)
	}
	if len(held) == 0 {
		return opts, nil, nil
	}
	raw, err := bson.Marshal(out)
	if err != nil {
		return nil, nil, err
	}
	return raw, held, nil
}

// seconds reads an expireAfterSeconds value: any BSON number (MongoDB
// keeps what the user gave, an int32, int64 or double).
func seconds(v bson.RawValue) (int64, error) {
	if n, ok := v.AsInt64OK(); ok {
		return n, nil
	}
	return 0, fmt.Errorf("not a number: %s", v)
}
