package holdback

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// Holder creates target collections and indexes with the options that
// change data held back, and keeps the records of what it held in the
// checkpoint database, under the task's name. Every method is safe to
// call again after a restart: records are written before the target is
// changed, by ID, so a repeated call writes the same record.
type Holder struct {
	target *mongo.Client
	// coll keeps the records; nil for a Holder from Passthrough.
	coll *mongo.Collection
	task string
	log  *slog.Logger
}

// NewHolder returns the Holder of task, keeping its records in database
// checkpointDB on target.
func NewHolder(target *mongo.Client, checkpointDB, task string, log *slog.Logger) *Holder {
	if target == nil {
		return Passthrough(nil)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Holder{target: target, coll: records(target, checkpointDB), task: task, log: log}
}

// Passthrough returns a Holder that holds nothing back: it creates what
// it is given and keeps no records. A task without replay (mode full)
// uses it: its copy is the whole sync, so the target is finished when the
// copy ends.
func Passthrough(target *mongo.Client) *Holder {
	return &Holder{target: target, log: slog.New(slog.DiscardHandler)}
}

func records(target *mongo.Client, db string) *mongo.Collection {
	return target.Database(db).Collection(checkpoint.HeldCollection)
}

// CreateCollection is catalog.CreateCollection with a collection-wide
// expireAfterSeconds and capped limits held back.
func (h *Holder) CreateCollection(ctx context.Context, c catalog.Collection, m *catalog.Mapper) error {
	if h.coll == nil {
		return catalog.CreateCollection(ctx, h.target, c, m)
	}
	opts, held, err := HoldOptions(c.Options)
	if err != nil {
		return fmt.Errorf("options of %s: %w", c.Source, err)
	}
	for _, x := range held {
		if err := h.record(ctx, c.Target, x); err != nil {
			return err
		}
	}
	c.Options = opts
	return catalog.CreateCollection(ctx, h.target, c, m)
}

// CreateIndexes is catalog.CreateIndexesBy with TTL expiries held back,
// and unique indexes whose build meets duplicate keys built non-unique
// (KindUnique; see there why the copied data may hold them).
func (h *Holder) CreateIndexes(ctx context.Context, c catalog.Collection, oneByOne bool) error {
	if h.coll == nil {
		return catalog.CreateIndexesBy(ctx, h.target, c, oneByOne)
	}
	specs := make([]bson.Raw, 0, len(c.Indexes))
	for _, spec := range c.Indexes {
		out, held, err := HoldIndex(spec)
		if err != nil {
			return fmt.Errorf("index of %s: %w", c.Source, err)
		}
		if held != nil {
			if err := h.record(ctx, c.Target, *held); err != nil {
				return err
			}
		}
		specs = append(specs, out)
	}
	c.Indexes = specs
	err := catalog.CreateIndexesBy(ctx, h.target, c, oneByOne)
	if !duplicateKey(err) {
		return err
	}
	// Build them one by one, to find the unique ones the data refuses.
	for _, spec := range specs {
		one := c
		one.Indexes = []bson.Raw{spec}
		err := catalog.CreateIndexesBy(ctx, h.target, one, true)
		if !duplicateKey(err) {
			if err != nil {
				return err
			}
			continue
		}
		plain, uerr := without(spec, "unique")
		if unique, _ := spec.Lookup("unique").BooleanOK(); !unique || uerr != nil {
			return err
		}
		held := Held{Kind: KindUnique, Spec: plain}
		held.Index, _ = spec.Lookup("name").StringValueOK()
		held.Key, _ = spec.Lookup("key").DocumentOK()
		if err := h.record(ctx, c.Target, held); err != nil {
			return err
		}
		h.log.Warn("a unique index met duplicate keys in the copied data; built without unique until cut-over", "ns", c.Target.String(), "index", held.Index)
		one.Indexes = []bson.Raw{plain}
		if err := catalog.CreateIndexesBy(ctx, h.target, one, true); err != nil {
			return err
		}
	}
	return nil
}

// record saves (or updates) one held option of target namespace ns.
func (h *Holder) record(ctx context.Context, ns catalog.Namespace, x Held) error {
	x.Task, x.NS, x.HeldAt = h.task, ns.String(), time.Now().UTC().Truncate(time.Millisecond)
	x.ID = recordID(x)
	_, err := h.coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: x.ID}}, x, options.Replace().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("record the held-back %s: %w", x, err)
	}
	h.log.Info("holding back until cut-over", "ns", x.NS, "held", x.String())
	return nil
}

func recordID(x Held) string {
	id := x.Task + "/" + x.NS + "/" + string(x.Kind)
	if x.Index != "" {
		id += "/" + x.Index
	}
	return id
}

// Dropped forgets what was held on a target collection the replay
// dropped.
func (h *Holder) Dropped(ctx context.Context, ns catalog.Namespace) error {
	return h.forget(ctx, bson.D{{Key: "ns", Value: ns.String()}})
}

// DroppedDatabase forgets what was held in a dropped target database.
func (h *Holder) DroppedDatabase(ctx context.Context, db string) error {
	prefix := bson.Regex{Pattern: "^" + regexp.QuoteMeta(db+"."), Options: ""}
	return h.forget(ctx, bson.D{{Key: "ns", Value: prefix}})
}

// DroppedIndexes forgets the held options of dropped indexes ("*": all
// but _id's).
func (h *Holder) DroppedIndexes(ctx context.Context, ns catalog.Namespace, names []string) error {
	filter := bson.D{{Key: "ns", Value: ns.String()}, {Key: "index", Value: bson.D{{Key: "$in", Value: names}}}}
	for _, n := range names {
		if n == "*" {
			filter = bson.D{{Key: "ns", Value: ns.String()}, {Key: "kind", Value: bson.D{{Key: "$in", Value: bson.A{KindTTLIndex, KindUnique}}}}}
		}
	}
	return h.forget(ctx, filter)
}

// Renamed moves what was held on from to to, after a replayed rename
// (what was held on to, replaced by the rename, is forgotten first).
// Safe to call again: once moved, from holds nothing.
func (h *Holder) Renamed(ctx context.Context, from, to catalog.Namespace) error {
	held, err := h.list(ctx, bson.D{{Key: "ns", Value: from.String()}})
	if err != nil || len(held) == 0 {
		return err // nothing held, or moved before a restart
	}
	if err := h.Dropped(ctx, to); err != nil {
		return err
	}
	for _, x := range held {
		if err := h.record(ctx, to, x); err != nil {
			return err
		}
	}
	return h.Dropped(ctx, from)
}

func (h *Holder) forget(ctx context.Context, filter bson.D) error {
	if h.coll == nil {
		return nil
	}
	filter = append(bson.D{{Key: "task", Value: h.task}}, filter...)
	if _, err := h.coll.DeleteMany(ctx, filter); err != nil {
		return fmt.Errorf("forget held-back options: %w", err)
	}
	return nil
}

func (h *Holder) list(ctx context.Context, filter bson.D) ([]Held, error) {
	if h.coll == nil {
		return nil, nil
	}
	return list(ctx, h.coll, append(bson.D{{Key: "task", Value: h.task}}, filter...))
}

func list(ctx context.Context, coll *mongo.Collection, filter bson.D) ([]Held, error) {
	cur, err := coll.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read held-back options: %w", err)
	}
	var out []Held
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read held-back options: %w", err)
	}
	return out, nil
}

// duplicateKey reports whether an index build failed on duplicate keys:
// mongod's DuplicateKey, or FerretDB v1's InternalError carrying SQLite's
// unique constraint failure.
func duplicateKey(err error) bool {
	return hasCode(err, sink.CodeDuplicateKey) || err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

func hasCode(err error, codes ...int) bool { return sink.HasCode(err, codes...) }
