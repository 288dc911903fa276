package engine

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
	"github.com/mongoferry/mongoferry/pkg/engine/topology"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TargetShardingStatus is how the copy sharded one target collection:
// the worker contract's entry, read by the controller.
type TargetShardingStatus = workerapi.TargetSharding

// openTargetSharding prepares the sharding of a sharded target's
// collections: when the target is a mongos, each collection the copy
// creates is sharded like the source's (or as target.shardKeys says)
// before the first document is written. It returns nil for a target that
// is not sharded, and refuses target.shardKeys there.
func (e *Engine) openTargetSharding(ctx context.Context) (*targetsharding.Preparer, error) {
	kind, err := topology.Hello(ctx, e.target)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	if kind != topology.KindMongos {
		if len(e.task.Target.ShardKeys) > 0 {
			return nil, fmt.Errorf("target.shardKeys: the target is not a sharded cluster (hello names no mongos): remove target.shardKeys, or point target.uri at the cluster's mongos")
		}
		return nil, nil
	}
	if o := options.Client().ApplyURI(e.task.Target.URI); o.RetryWrites != nil && !*o.RetryWrites {
		return nil, fmt.Errorf("target.uri: retryWrites=false on a sharded target: replay changes documents' shard-key values, which a sharded cluster accepts only as retryable writes (or in a transaction); remove retryWrites=false from target.uri")
	}
	p := &targetsharding.Preparer{Target: e.target, Major: e.dstProfile.Major, Endpoint: e.task.Target, Log: e.log}
	srcKind, err := topology.Hello(ctx, e.source)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	if srcKind == topology.KindMongos {
		p.Source = e.source
	}
	e.log.Info("sharded target: collections are sharded before the copy writes to them", "sourceSharded", p.Source != nil, "shardKeys", len(e.task.Target.ShardKeys))
	return p, nil
}

// shardTarget is the copy's ShardTarget hook: it shards the collection,
// and returns a router when the plan placed its chunks itself.
func (e *Engine) shardTarget(p *targetsharding.Preparer) func(ctx context.Context, coll catalog.Collection) (fullsync.Router, error) {
	return func(ctx context.Context, coll catalog.Collection) (fullsync.Router, error) {
		_, hasCollation := coll.Options.Lookup("collation").DocumentOK()
		plan, err := p.Prepare(ctx, coll.Source.String(), coll.Target.String(), hasCollation)
		if err != nil {
			return nil, err
		}
		if r := plan.Router(); r != nil {
			return r, nil
		}
		return nil, nil
	}
}

// targetShardingStatus lists how the copy sharded target collections.
func (e *Engine) targetShardingStatus() []TargetShardingStatus {
	if e.targetSharding == nil {
		return nil
	}
	var out []TargetShardingStatus
	for _, p := range e.targetSharding.Plans() {
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
func (e *Engine) replayShardKeys() replay.ShardKeys {
	if e.targetSharding == nil {
		return nil
	}
	return replay.TargetShardKeys{Router: e.target}
}
