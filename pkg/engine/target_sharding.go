package engine

import (
	"context"
	"fmt"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
	"github.com/mongoferry/mongoferry/pkg/engine/topology"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TargetShardingStatus is how the copy sharded one target collection:
// the worker contract's entry, read by the controller.
type TargetShardingStatus = workerapi.TargetSharding

// targetSharding shards a sharded target's collections before the copy
// writes to them (targetsharding.Preparer) and tells the copy, replay and
// /status about it. A nil *targetSharding is a target that is not
// sharded: its methods then return nil.
type targetSharding struct {
	preparer *targetsharding.Preparer
	// target is the target's mongos, the router replay asks about shard
	// keys.
	target *mongo.Client
}

// openTargetSharding prepares the sharding of a sharded target's
// collections: when the target is a mongos, each collection the copy
// creates is sharded like the source's (or as target.shardKeys says)
// before the first document is written. It returns nil for a target that
// is not sharded, and refuses target.shardKeys there.
func openTargetSharding(ctx context.Context, task *config.Task, src, target *mongo.Client, dstProfile conn.Profile, log *slog.Logger) (*targetSharding, error) {
	kind, err := topology.Hello(ctx, target)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	if kind != topology.KindMongos {
		if len(task.Target.ShardKeys) > 0 {
			return nil, fmt.Errorf("target.shardKeys: the target is not a sharded cluster (hello names no mongos): remove target.shardKeys, or point target.uri at the cluster's mongos")
		}
		return nil, nil
	}
	if o := options.Client().ApplyURI(task.Target.URI); o.RetryWrites != nil && !*o.RetryWrites {
		return nil, fmt.Errorf("target.uri: retryWrites=false on a sharded target: replay changes documents' shard-key values, which a sharded cluster accepts only as retryable writes (or in a transaction); remove retryWrites=false from target.uri")
	}
	p := &targetsharding.Preparer{Target: target, Major: dstProfile.Major, Endpoint: task.Target, Log: log}
	srcKind, err := topology.Hello(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	if srcKind == topology.KindMongos {
		p.Source = src
	}
	log.Info("sharded target: collections are sharded before the copy writes to them", "sourceSharded", p.Source != nil, "shardKeys", len(task.Target.ShardKeys))
	return &targetSharding{preparer: p, target: target}, nil
}

// shardTarget is the copy's ShardTarget hook: it shards the collection,
// and returns a router when the plan placed its chunks itself.
func (t *targetSharding) shardTarget() func(ctx context.Context, coll catalog.Collection) (fullsync.Router, error) {
	if t == nil {
		return nil
	}
	return func(ctx context.Context, coll catalog.Collection) (fullsync.Router, error) {
		_, hasCollation := coll.Options.Lookup("collation").DocumentOK()
		plan, err := t.preparer.Prepare(ctx, coll.Source.String(), coll.Target.String(), hasCollation)
		if err != nil {
			return nil, err
		}
		if r := plan.Router(); r != nil {
			return r, nil
		}
		return nil, nil
	}
}

// status lists how the copy sharded target collections.
func (t *targetSharding) status() []TargetShardingStatus {
	if t == nil {
		return nil
	}
	var out []TargetShardingStatus
	for _, p := range t.preparer.Plans() {
		s := TargetShardingStatus{Namespace: p.NS, Placement: string(p.Placement), Chunks: p.Chunks, Commands: len(p.Commands), Notes: p.Notes}
		if p.Key != nil {
			s.Key = p.Key.String()
		}
		out = append(out, s)
	}
	return out
}

// replayShardKeys is what replay needs to know of a sharded target (see
// replay/shardkey.go); nil when the target is not sharded.
func (t *targetSharding) replayShardKeys() replay.ShardKeys {
	if t == nil {
		return nil
	}
	return replay.TargetShardKeys{Router: t.target}
}
