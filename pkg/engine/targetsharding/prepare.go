package targetsharding

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// KeyFromConfig turns a target.shardKeys entry into a Key.
func KeyFromConfig(k config.ShardKey) (Key, error) {
	key := make(Key, 0, len(k.Fields))
	for _, f := range k.Fields {
		key = append(key, KeyField{Name: f, Hashed: f == k.Hashed})
	}
	if err := key.check(); err != nil {
		return nil, fmt.Errorf("target.shardKeys %s: %w", k.Namespace, err)
	}
	return key, nil
}

// Preparer shards each target collection before the copy writes to it,
// when the target is a sharded cluster.
type Preparer struct {
	// Source is the source's mongos (nil when the source is a replica
	// set: only target.shardKeys shard collections then).
	Source *mongo.Client
	// Target is the target's mongos; Major its server's major version.
	Target *mongo.Client
	Major  int
	// Endpoint is the task's target (sharding and shardKeys).
	Endpoint config.Endpoint
	Log      *slog.Logger
	// Run, when set, runs a command instead of the target's admin
	// database (tests record the commands).
	Run func(ctx context.Context, cmd bson.D) error

	mu      sync.Mutex
	cluster *Cluster
	plans   []Plan
}

// Plans returns the plans carried out so far, for status.
func (p *Preparer) Plans() []Plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Plan(nil), p.plans...)
}

// Prepare shards the target collection dst like the source's src (or as
// target.shardKeys says) and places its chunks; collation says the
// collection has a default collation. The collection exists on the target
// and is empty, so chunk moves carry no documents.
func (p *Preparer) Prepare(ctx context.Context, src, dst string, collation bool) (Plan, error) {
	cluster, err := p.readCluster(ctx)
	if err != nil {
		return Plan{}, err
	}
	req := Request{TargetNS: dst, Collation: collation, Keep: p.Endpoint.Sharding == config.ShardingKeep, Target: cluster}
	for _, k := range p.Endpoint.ShardKeys {
		if k.Namespace == dst {
			if req.Key, err = KeyFromConfig(k); err != nil {
				return Plan{}, err
			}
			req.Unique = k.Unique
		}
	}
	if p.Source != nil {
		l, ok, err := ReadLayout(ctx, p.Source, src)
		if err != nil {
			return Plan{}, fmt.Errorf("source: %w", err)
		}
		if ok {
			req.Source = &l
		}
	}
	ex, ok, err := ReadLayout(ctx, p.Target, dst)
	if err != nil {
		return Plan{}, fmt.Errorf("target: %w", err)
	}
	if ok {
		req.Existing = &ex
	}
	db, _, _ := strings.Cut(dst, ".")
	if req.Primary, err = ReadPrimary(ctx, p.Target, db); err != nil {
		return Plan{}, fmt.Errorf("target: %w", err)
	}
	plan, err := MakePlan(req)
	if err != nil {
		return plan, err
	}
	for _, c := range plan.Commands {
		if err := p.run(ctx, c.Cmd); err != nil {
			return plan, fmt.Errorf("shard target %s (%s): %s: %w", dst, c.Why, commandName(c.Cmd), err)
		}
	}
	for _, n := range plan.Notes {
		p.log().Warn(n, "ns", dst)
	}
	if plan.Placement != PlaceNone {
		p.log().Info("target collection sharded", "ns", dst, "key", plan.Key.String(), "placement", string(plan.Placement), "chunks", plan.Chunks, "commands", len(plan.Commands))
	}
	p.mu.Lock()
	p.plans = append(p.plans, plan)
	p.mu.Unlock()
	return plan, nil
}

func (p *Preparer) run(ctx context.Context, cmd bson.D) error {
	if p.Run != nil {
		return p.Run(ctx, cmd)
	}
	return p.Target.Database("admin").RunCommand(ctx, cmd).Err()
}

func (p *Preparer) log() *slog.Logger {
	if p.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Log
}

func (p *Preparer) readCluster(ctx context.Context) (Cluster, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cluster != nil {
		return *p.cluster, nil
	}
	c, err := ReadCluster(ctx, p.Target, p.Major)
	if err != nil {
		return Cluster{}, fmt.Errorf("target: %w", err)
	}
	p.cluster = &c
	return c, nil
}

// commandName is a command's name (its first field).
func commandName(cmd bson.D) string {
	if len(cmd) == 0 {
		return ""
	}
	return cmd[0].Key
}
