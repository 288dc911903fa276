package sourceshardcopy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"golang.org/x/sync/errgroup"

	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// ReadTable reads ns's ownership table through mongos (router):
// config.collections and config.chunks, as targetsharding.ReadLayout reads
// them. It reports false for a collection that is not sharded (copy it
// from its primary shard or through mongos, as a hashed one).
func ReadTable(ctx context.Context, router *mongo.Client, ns string) (*Table, bool, error) {
	l, ok, err := targetsharding.ReadLayout(ctx, router, ns)
	if err != nil || !ok {
		return nil, false, err
	}
	t, err := FromLayout(l)
	return t, err == nil, err
}

// ClockSkew is how far back of a table read the commits looked up in
// config.changelog begin: the config server's clock and this host's may
// differ; an earlier commit looked up costs a shard read again, not a
// document.
const ClockSkew = time.Minute

// Recipients returns the shards that migrations of ns committed into
// since since, from config.changelog's moveChunk.commit entries (through
// mongos).
func Recipients(ctx context.Context, router *mongo.Client, ns string, since time.Time) ([]string, error) {
	cur, err := router.Database("config").Collection("changelog").Find(ctx, bson.D{
		{Key: "what", Value: "moveChunk.commit"}, {Key: "ns", Value: ns}, {Key: "time", Value: bson.D{{Key: "$gte", Value: since}}}})
	if err != nil {
		return nil, fmt.Errorf("read config.changelog for %s: %w; the user needs read access to the config database (role clusterMonitor)", ns, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var out []string
	for cur.Next(ctx) {
		if to, ok := cur.Current.Lookup("details", "to").StringValueOK(); ok {
			out = append(out, to)
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read config.changelog for %s: %w", ns, err)
	}
	return out, nil
}

// ErrUnknownShard means a chunk moved to a shard that joined after the
// copy began: restart the copy so that it reads every shard.
var ErrUnknownShard = errors.New("shard not known to the copy")

// Passes runs the per-shard copy of one sharded collection
// (docs/sharded.md, "Per-shard copy", rule items 2 to 4): it reads the
// table O_0, runs pass 0 on every shard, then reads the table again
// after each pass and, while a chunk changed, runs the next pass on
// every shard a migration committed into (the owners in the new table of
// the changed chunks and the recipients config.changelog names). The
// shards' start positions must be recorded before Run.
type Passes struct {
	// NS is the collection; Shards every shard's name in config.shards.
	NS     string
	Shards []string
	// Read reads the ownership table (ReadTable through mongos).
	Read func(ctx context.Context) (*Table, error)
	// Recipients returns the shards migrations of NS committed into since
	// a time (Recipients through mongos); nil reads only the owners of
	// the changed chunks.
	Recipients func(ctx context.Context, since time.Time) ([]string, error)
	// Positions, when set, returns every shard's newest oplog ts, read
	// just before each table read, and Migrated says whether a shard's
	// oplog after a position holds a migration marker of NS into it
	// (Migrated through the shard's client): the markers name the
	// recipients too, without config.changelog.
	Positions func(ctx context.Context) (map[string]bson.Timestamp, error)
	Migrated  func(ctx context.Context, shard string, from bson.Timestamp) (bool, error)
	// Plan plans a shard's ranges for a pass (PlanShard); Copy copies
	// them with the pass's table until every one is recorded done, with
	// as many Copiers as the shard has workers.
	Plan func(ctx context.Context, shard string, pass int) ([]Range, error)
	Copy func(ctx context.Context, shard string, pass int, table *Table, ranges []Range) error
	// Save, when set, saves a pass before any copy begins and returns the
	// one to copy with (SavePass: the one saved first, which every worker
	// of the pass loads with LoadPass). A leader that restarts plans its
	// passes again: the saved ones win, table, read time and positions
	// included, so that the settling passes compare with the table pass 0
	// really filtered by.
	Save func(ctx context.Context, pass Pass) (Pass, error)
	Log  *slog.Logger
}

// Pass is one pass of a collection: the table its copiers filter by,
// when it was read and the shards' positions just before, and each
// shard's ranges.
type Pass struct {
	N         int
	Table     *Table
	ReadAt    time.Time
	Positions map[string]bson.Timestamp
	Ranges    map[string][]Range
}

// Result says what the passes did.
type Result struct {
	// Passes ran (1 when no chunk moved during pass 0); Shards are the
	// shards each pass read.
	Passes int
	Shards [][]string
}

// Run copies until a pass ends with the table unchanged.
func (p *Passes) Run(ctx context.Context) (Result, error) {
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cur, err := p.read(ctx)
	if err != nil {
		return Result{}, err
	}
	shards := slices.Clone(p.Shards)
	var res Result
	for n := 0; ; n++ {
		cur.N = n
		if cur, shards, err = p.pass(ctx, cur, shards, log); err != nil {
			return res, err
		}
		res.Passes, res.Shards = n+1, append(res.Shards, shards)
		next, err := p.read(ctx)
		if err != nil {
			return res, fmt.Errorf("after pass %d: %w", n, err)
		}
		changed := Changed(cur.Table, next.Table)
		if len(changed) == 0 {
			return res, nil
		}
		if shards, err = p.again(ctx, changed, cur.ReadAt, cur.Positions); err != nil {
			return res, err
		}
		cur = next
	}
}

// read reads the shards' positions, then the table: a pass as it starts.
func (p *Passes) read(ctx context.Context) (Pass, error) {
	out := Pass{ReadAt: time.Now()}
	if p.Positions != nil {
		var err error
		if out.Positions, err = p.Positions(ctx); err != nil {
			return out, fmt.Errorf("read the shards' oplog positions: %w", err)
		}
	}
	t, err := p.Read(ctx)
	if err != nil {
		return out, fmt.Errorf("read the ownership of %s: %w", p.NS, err)
	}
	out.Table = t
	return out, nil
}

// pass plans pass cur on every shard of shards in parallel, saves it
// (Save), then copies it on every shard in parallel. It returns the pass
// as saved and the shards it copied: those asked for and those a saved
// pass planned too.
func (p *Passes) pass(ctx context.Context, cur Pass, shards []string, log *slog.Logger) (Pass, []string, error) {
	plans := make([][]Range, len(shards))
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range shards {
		g.Go(func() error {
			var err error
			plans[i], err = p.Plan(gctx, s, cur.N)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return cur, shards, err
	}
	cur.Ranges = make(map[string][]Range, len(shards))
	for i, s := range shards {
		cur.Ranges[s] = plans[i]
	}
	if p.Save != nil {
		var err error
		if cur, err = p.Save(ctx, cur); err != nil {
			return cur, shards, err
		}
		for s := range cur.Ranges {
			if !slices.Contains(shards, s) {
				shards = append(shards, s)
			}
		}
		sort.Strings(shards)
	}
	log.Info("per-shard copy pass", "ns", p.NS, "pass", cur.N, "shards", shards)
	g, gctx = errgroup.WithContext(ctx)
	for _, s := range shards {
		g.Go(func() error {
			if err := p.Copy(gctx, s, cur.N, cur.Table, cur.Ranges[s]); err != nil {
				return fmt.Errorf("pass %d of %s on %s: %w", cur.N, p.NS, s, err)
			}
			return nil
		})
	}
	return cur, shards, g.Wait()
}

// again returns the shards the next pass reads: the owners of the changed
// chunks and the recipients of the commits since the last table read
// (config.changelog's and the oplog markers' after pos).
func (p *Passes) again(ctx context.Context, changed []Chunk, since time.Time, pos map[string]bson.Timestamp) ([]string, error) {
	set := map[string]bool{}
	for _, c := range changed {
		set[c.Shard] = true
	}
	if p.Recipients != nil {
		to, err := p.Recipients(ctx, since.Add(-ClockSkew))
		if err != nil {
			return nil, err
		}
		for _, s := range to {
			set[s] = true
		}
	}
	if p.Migrated != nil && pos != nil {
		for _, s := range p.Shards {
			into, err := p.Migrated(ctx, s, pos[s])
			if err != nil {
				return nil, err
			}
			if into {
				set[s] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		if !slices.Contains(p.Shards, s) {
			return nil, fmt.Errorf("a migration of %s went into shard %s, which the copy does not read: %w", p.NS, s, ErrUnknownShard)
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}
