package targetsharding

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ErrShardedDifferently means a target collection is already sharded on
// another key than the one the task would shard it on.
var ErrShardedDifferently = errors.New("target collection is already sharded differently")

// chunksPerShard is how many chunks a pre-split gives each target shard:
// two, so a later added shard can take one from each without a split.
const chunksPerShard = 2

// Placement says how a planned collection's chunks reach the target's
// shards.
type Placement string

// Placements.
const (
	// PlaceNone: the collection is not sharded on the target.
	PlaceNone Placement = "unsharded"
	// PlaceKept: it was sharded already and is used as it is.
	PlaceKept Placement = "kept"
	// PlaceMoves: pre-split at the source's boundaries and placed with
	// explicit moveRange (moveChunk before 6.0) while it is empty.
	PlaceMoves Placement = "moveRange"
	// PlaceHashed: hashed key, initial chunks spread by shardCollection.
	PlaceHashed Placement = "hashedInitialChunks"
	// PlaceZones: the server creates and places the chunks of the zone
	// ranges when it shards the empty collection.
	PlaceZones Placement = "zones"
	// PlaceBalancer: no boundaries known; the balancer moves chunks as
	// the copy writes.
	PlaceBalancer Placement = "balancer"
)

// Request is what Plan needs to know about one collection.
type Request struct {
	// TargetNS is the collection's name on the target.
	TargetNS string
	// Source is how the source shards it; nil when it is not sharded
	// there (or the source is a replica set).
	Source *Layout
	// Key, when set, is target.shardKeys' key for it: it wins over the
	// source's. Unique goes with it.
	Key    Key
	Unique bool
	// Collation is set when the collection has a default collation
	// (shardCollection then needs collation {locale: "simple"}).
	Collation bool
	// Existing is how the target already shards it; nil when it does not.
	Existing *Layout
	// Keep uses an existing target sharding as it is
	// (target.sharding: keep).
	Keep bool
	// Target is the target cluster; Primary the target database's primary
	// shard (where shardCollection puts the first chunk).
	Target  Cluster
	Primary string
}

// Command is one command to run on the target's admin database.
type Command struct {
	Cmd bson.D
	// Why says what it is for, for logs and status.
	Why string
}

// Plan is how one target collection is sharded before the copy.
type Plan struct {
	NS        string
	Key       Key
	Placement Placement
	// Chunks is the number of chunks the commands leave (0 when the
	// server decides).
	Chunks   int
	Commands []Command
	// Notes explain what was not done and why (zones with no shard on the
	// target, no boundaries known); the task shows them.
	Notes []string
	// Bounds and Owners are the chunk layout the commands leave when the
	// plan decides it (placement moveRange): chunk j is [Bounds[j-1],
	// Bounds[j]) on shard Owners[j], the first from MinKey, the last to
	// MaxKey. Empty when the server or the balancer decides.
	Bounds []bson.Raw
	Owners []string
}

// MakePlan decides the commands that shard req.TargetNS like the source
// (or as target.shardKeys says) before the copy writes to it.
func MakePlan(req Request) (Plan, error) {
	p := Plan{NS: req.TargetNS, Placement: PlaceNone}
	key, unique := req.Key, req.Unique
	if key == nil && req.Source != nil {
		key, unique = req.Source.Key, req.Source.Unique
	}
	if ex := req.Existing; ex != nil {
		p.Key = ex.Key
		p.Placement = PlaceKept
		switch {
		case key == nil:
			p.Notes = append(p.Notes, fmt.Sprintf("%s is sharded on the target on %s and not on the source; used as it is", p.NS, ex.Key))
			return p, nil
		case key.Equal(ex.Key) && unique == ex.Unique:
			return p, nil
		case req.Keep:
			p.Notes = append(p.Notes, fmt.Sprintf("%s is sharded on the target on %s, not %s as the task would; used as it is (target.sharding: keep)", p.NS, ex.Key, key))
			return p, nil
		}
		return p, fmt.Errorf("%w: %s is sharded on the target on %s (unique: %t), the task would shard it on %s (unique: %t). "+
			"Drop the target collection, set target.shardKeys for it to %s, or set target.sharding: keep to copy into it as it is",
			ErrShardedDifferently, p.NS, ex.Key, ex.Unique, key, unique, ex.Key)
	}
	if key == nil {
		return p, nil
	}
	p.Key = key
	sameAsSource := req.Source != nil && key.Equal(req.Source.Key)
	var zones []Command
	if sameAsSource {
		zones, p.Notes = zoneCommands(req)
	} else if req.Source != nil && len(req.Source.Zones) > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("%s: the source's zone ranges are on %s, the target's key is %s: zones not applied", p.NS, req.Source.Key, key))
	}
	p.Commands = append(p.Commands, zones...)
	shard := bson.D{{Key: "shardCollection", Value: p.NS}, {Key: "key", Value: key.Doc()}}
	if unique {
		shard = append(shard, bson.E{Key: "unique", Value: true})
	}
	if req.Collation {
		shard = append(shard, bson.E{Key: "collation", Value: bson.D{{Key: "locale", Value: "simple"}}})
	}
	n := len(req.Target.Shards)
	switch {
	case len(zones) > 0:
		p.Placement = PlaceZones
		if key.Hashed() && !key[0].Hashed {
			shard = append(shard, bson.E{Key: "presplitHashedZones", Value: true})
		}
	case key.Hashed():
		p.Placement, p.Chunks = PlaceHashed, chunksPerShard*n
		shard = append(shard, bson.E{Key: "numInitialChunks", Value: int32(p.Chunks)})
	}
	p.Commands = append(p.Commands, Command{Cmd: shard, Why: "shard on " + key.String()})
	if p.Placement != PlaceNone {
		return p, nil
	}
	var bounds []bson.Raw
	if sameAsSource {
		bounds = splitPoints(req.Source.Chunks, chunksPerShard*n-1)
	}
	if len(bounds) == 0 {
		p.Placement = PlaceBalancer
		p.Notes = append(p.Notes, fmt.Sprintf("%s: no chunk boundaries to pre-split at (ranged key %s not sharded so on the source): the target's balancer splits and moves chunks as the copy writes", p.NS, key))
		return p, nil
	}
	p.Placement, p.Chunks = PlaceMoves, len(bounds)+1
	for _, b := range bounds {
		p.Commands = append(p.Commands, Command{Cmd: bson.D{{Key: "split", Value: p.NS}, {Key: "middle", Value: b}}, Why: "pre-split at a source chunk boundary"})
	}
	p.Bounds, p.Owners = bounds, owners(req, len(bounds)+1)
	p.Commands = append(p.Commands, moves(req, key, bounds, p.Owners)...)
	return p, nil
}

// owners spreads chunks over the target's shards in contiguous blocks,
// the primary shard's first (its chunks need no move).
func owners(req Request, chunks int) []string {
	shards := make([]string, 0, len(req.Target.Shards))
	for _, s := range req.Target.Shards {
		shards = append(shards, s.Name)
	}
	if i := slices.Index(shards, req.Primary); i > 0 {
		shards = append([]string{req.Primary}, slices.Delete(shards, i, i+1)...)
	}
	out := make([]string, chunks)
	for j := range out {
		out[j] = shards[j*len(shards)/chunks]
	}
	return out
}

// splitPoints picks at most want of the source's chunk boundaries, spread
// evenly over its chunks (the source's balancer made them hold about as
// much each).
func splitPoints(chunks []Chunk, want int) []bson.Raw {
	if len(chunks) < 2 || want < 1 {
		return nil
	}
	all := make([]bson.Raw, 0, len(chunks)-1)
	for _, c := range chunks[1:] {
		all = append(all, c.Min)
	}
	if len(all) <= want {
		return all
	}
	out := make([]bson.Raw, 0, want)
	for j := 1; j <= want; j++ {
		out = append(out, all[j*(len(all)+1)/(want+1)-1])
	}
	return out
}

// moves places the pre-split chunks on their owners; the primary shard's
// stay where shardCollection put them.
func moves(req Request, key Key, bounds []bson.Raw, owners []string) []Command {
	edges := append(append([]bson.Raw{key.bound(bson.MinKey{})}, bounds...), key.bound(bson.MaxKey{}))
	var out []Command
	for j, to := range owners {
		if to == req.Primary {
			continue
		}
		lo, hi := edges[j], edges[j+1]
		cmd := bson.D{{Key: "moveRange", Value: req.TargetNS}, {Key: "min", Value: lo}, {Key: "max", Value: hi}, {Key: "toShard", Value: to}}
		if req.Target.Major > 0 && req.Target.Major < 6 {
			cmd = bson.D{{Key: "moveChunk", Value: req.TargetNS}, {Key: "bounds", Value: bson.A{lo, hi}}, {Key: "to", Value: to}}
		}
		out = append(out, Command{Cmd: cmd, Why: "place an empty chunk on " + to})
	}
	return out
}

// zoneCommands assigns the source's zone ranges whose zone a target shard
// belongs to, and notes the others.
func zoneCommands(req Request) ([]Command, []string) {
	have := map[string]bool{}
	for _, s := range req.Target.Shards {
		for _, z := range s.Zones {
			have[z] = true
		}
	}
	var cmds []Command
	missing := map[string]bool{}
	for _, z := range req.Source.Zones {
		if !have[z.Zone] {
			missing[z.Zone] = true
			continue
		}
		cmds = append(cmds, Command{Cmd: bson.D{{Key: "updateZoneKeyRange", Value: req.TargetNS}, {Key: "min", Value: z.Min}, {Key: "max", Value: z.Max}, {Key: "zone", Value: z.Zone}},
			Why: "pin a range to zone " + z.Zone})
	}
	if len(missing) == 0 {
		return cmds, nil
	}
	names := make([]string, 0, len(missing))
	for z := range missing {
		names = append(names, z)
	}
	slices.Sort(names)
	return cmds, []string{fmt.Sprintf("%s: no target shard is in zone %s, so its ranges were not applied; add target shards to it (addShardToZone), then updateZoneKeyRange, or leave it so",
		req.TargetNS, strings.Join(names, ", "))}
}
