package verify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// ErrMode is returned by Run for a mode it cannot run (none or unknown).
var ErrMode = errors.New("no verification mode")

// DefaultMaxExamples is the number of example _ids kept per kind of
// difference when Options.MaxExamples is zero.
const DefaultMaxExamples = 10

// batchSize is the cursor batch size of every scan; the server also caps a
// batch at 16 MiB.
const batchSize = 10000

// progressEvery is the number of documents between two Progress calls of
// one scan.
const progressEvery = 1024

// Options tunes Run.
type Options struct {
	// Mode is count, hash or sample.
	Mode config.VerifyMode
	// SampleSize is the number of source documents compared per namespace
	// in sample mode; config.DefaultSampleSize when zero.
	SampleSize int
	// MaxExamples caps the example _ids kept per kind of difference (missing,
	// extra, changed) and namespace; DefaultMaxExamples when zero.
	MaxExamples int
	// Progress, when set, is called with the source namespace ("db.coll"),
	// the pass under way (Pass*), how many of the collection's documents
	// it has been through and about how many it will (0 until known). A
	// pass that reads both sides counts a document once, when both sides
	// were read that far: a 20,000-document collection shows 20,000
	// whether one side or both are read. It is called with 0, 0 when a
	// namespace or a pass starts (a hash mismatch starts PassDiff at 0),
	// then about every thousand documents, possibly from several
	// goroutines at once. Count mode reads no documents.
	Progress func(ns, pass string, done, total int64)
}

// Report is the result of Run.
type Report struct {
	// Mode is the mode that ran.
	Mode config.VerifyMode
	// Namespaces holds one result per collection, in the order given to
	// Run.
	Namespaces []NamespaceResult
}

// OK reports whether every compared namespace matched.
func (r *Report) OK() bool { return r.Differing() == 0 }

// Differing returns the number of namespaces that did not match.
func (r *Report) Differing() int {
	n := 0
	for _, ns := range r.Namespaces {
		if !ns.OK {
			n++
		}
	}
	return n
}

// NamespaceResult is the comparison of one collection.
type NamespaceResult struct {
	// Source and Target name the collection on each side.
	Source, Target catalog.Namespace
	// Skipped is true for namespaces that were not compared (views); Note
	// says why.
	Skipped bool
	// Note is a remark for the user, such as why a namespace was skipped.
	Note string
	// SourceCount and TargetCount are the documents on each side.
	SourceCount, TargetCount int64
	// SourceHash and TargetHash are the hex digests (hash mode).
	SourceHash, TargetHash string
	// Sampled is the number of source documents compared (sample mode).
	Sampled int64
	// Missing, Extra and Changed are example _ids, as canonical extended
	// JSON, of documents on the source only, on the target only, and on
	// both with different bytes; at most MaxExamples each.
	Missing, Extra, Changed []string
	// MissingCount, ExtraCount and ChangedCount are exact counts in hash
	// mode; in sample mode they count sampled documents (Extra is not
	// looked for).
	MissingCount, ExtraCount, ChangedCount int64
	// OK is true when the namespace matched (or was skipped).
	OK bool
}

// Run compares the target's copy of every collection with the source,
// one namespace after the other, reading both sides at once. On an error it
// returns the results of the namespaces compared so far with an error that
// names the namespace.
func Run(ctx context.Context, source, target *mongo.Client, colls []catalog.Collection, opts Options) (*Report, error) {
	switch opts.Mode {
	case config.VerifyCount, config.VerifyHash, config.VerifySample:
	default:
		return nil, fmt.Errorf("%w: mode %q: choose count, hash or sample", ErrMode, opts.Mode)
	}
	if opts.SampleSize <= 0 {
		opts.SampleSize = config.DefaultSampleSize
	}
	if opts.MaxExamples <= 0 {
		opts.MaxExamples = DefaultMaxExamples
	}
	v := &verifier{opts: opts, clients: [2]*mongo.Client{source, target}}
	rep := &Report{Mode: opts.Mode, Namespaces: make([]NamespaceResult, 0, len(colls))}
	for _, c := range colls {
		r := NamespaceResult{Source: c.Source, Target: c.Target}
		if !c.Copyable() {
			r.Skipped, r.OK = true, true
			r.Note = fmt.Sprintf("skipped: %s (no documents of its own)", c.Type)
			rep.Namespaces = append(rep.Namespaces, r)
			continue
		}
		p := &progress{fn: opts.Progress, ns: c.Source.String()}
		p.start(string(opts.Mode), 1, 0)
		var err error
		switch opts.Mode {
		case config.VerifyCount:
			err = v.count(ctx, c, &r)
		case config.VerifyHash:
			err = v.hash(ctx, c, &r, p)
		case config.VerifySample:
			err = v.sample(ctx, c, &r, p)
		}
		if err != nil {
			if c.Source == c.Target {
				return rep, fmt.Errorf("verify %s: %w", c.Source, err)
			}
			return rep, fmt.Errorf("verify %s (target %s): %w", c.Source, c.Target, err)
		}
		rep.Namespaces = append(rep.Namespaces, r)
	}
	return rep, nil
}

// side is the source or the target.
type side int

const (
	sourceSide side = iota
	targetSide
)

func (s side) String() string {
	if s == sourceSide {
		return "source"
	}
	return "target"
}

type verifier struct {
	opts    Options
	clients [2]*mongo.Client
	// noSample is set once the source refused $sample as unsupported.
	noSample atomic.Bool
}

// coll returns the collection of c on side s.
func (v *verifier) coll(c catalog.Collection, s side) *mongo.Collection {
	ns := c.Source
	if s == targetSide {
		ns = c.Target
	}
	return v.clients[s].Database(ns.DB).Collection(ns.Coll)
}

// query is the find query of side s of c: on the source, the documents
// c's filter keeps (namespaces.filters), every document without one; on
// the target, every document. The target's collection must hold the
// source's subset and nothing else: read through the filter, it would
// hide a document the replay failed to remove when it left the filter.
func query(c catalog.Collection, s side) any {
	if s == targetSide || c.Filter == nil {
		return bson.D{}
	}
	return c.Filter.Query()
}

// byID is the query of the documents of side s of c with the given _ids:
// those query reads.
func byID(c catalog.Collection, s side, keys []idKey) any {
	in := inFilter(keys)
	if s == targetSide || c.Filter == nil {
		return in
	}
	return bson.D{{Key: "$and", Value: bson.A{in, c.Filter.Query()}}}
}

func (v *verifier) count(ctx context.Context, c catalog.Collection, r *NamespaceResult) error {
	var counts [2]int64
	err := both(ctx, func(ctx context.Context, s side) error {
		n, err := v.coll(c, s).CountDocuments(ctx, query(c, s))
		if err != nil {
			return fmt.Errorf("count on %s: %w", s, err)
		}
		counts[s] = n
		return nil
	})
	if err != nil {
		return err
	}
	r.SourceCount, r.TargetCount = counts[sourceSide], counts[targetSide]
	r.OK = r.SourceCount == r.TargetCount
	return nil
}

// estimate adds factor times the source's document count, as the storage
// engine knows it, to the expected total. It runs in the background and its
// failure leaves the total unknown; stop cancels it and waits. A filtered
// collection's total stays unknown: the whole collection's count would
// overstate it.
func (v *verifier) estimate(ctx context.Context, c catalog.Collection, p *progress, factor int64) (stop func()) {
	if c.Filter != nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n := collStatsCount(ctx, v.coll(c, sourceSide)); n > 0 {
			p.total.Add(factor * n)
			p.report()
		}
	}()
	return func() { cancel(); <-done }
}

// collStatsCount returns the documents of a collection from $collStats
// (summed over shards), or 0. It reads metadata: the count command behind
// EstimatedDocumentCount scans the whole collection on FerretDB.
func collStatsCount(ctx context.Context, coll *mongo.Collection) int64 {
	stage := bson.D{{Key: "$collStats", Value: bson.D{{Key: "count", Value: bson.D{}}}}}
	cur, err := coll.Aggregate(ctx, mongo.Pipeline{stage})
	if err != nil {
		return 0
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var n int64
	for cur.Next(ctx) {
		if c, ok := cur.Current.Lookup("count").AsInt64OK(); ok {
			n += c
		}
	}
	if cur.Err() != nil {
		return 0
	}
	return n
}

// scan streams every document of c on side s to fn, in large batches. The
// document is only valid during the call.
func (v *verifier) scan(ctx context.Context, c catalog.Collection, s side, p *progress, opts *options.FindOptionsBuilder, fn func(doc bson.Raw) error) error {
	if opts == nil {
		opts = options.Find()
	}
	cur, err := v.coll(c, s).Find(ctx, query(c, s), opts.SetBatchSize(catalog.BatchSizeFor(ctx, v.coll(c, s), 8<<20, batchSize)))
	if err != nil {
		return fmt.Errorf("scan %s: %w", s, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var n int64
	for cur.Next(ctx) {
		if err := fn(cur.Current); err != nil {
			return fmt.Errorf("scan %s: %w", s, err)
		}
		if n++; n == progressEvery {
			p.add(n)
			n = 0
		}
	}
	p.add(n)
	if err := cur.Err(); err != nil {
		return fmt.Errorf("scan %s: %w", s, err)
	}
	return nil
}

// both runs fn for the source and the target at once and returns the first
// error; the other side is cancelled then.
func both(ctx context.Context, fn func(ctx context.Context, s side) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, s := range []side{sourceSide, targetSide} {
		wg.Go(func() {
			if err := fn(ctx, s); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	return first
}

// Passes of a namespace's verification, as Options.Progress names them.
const (
	// PassCount counts the documents of both sides.
	PassCount = string(config.VerifyCount)
	// PassHash reads both sides and digests them.
	PassHash = string(config.VerifyHash)
	// PassDiff reads both sides again, after the digests differed, to
	// list the documents that differ.
	PassDiff = "diff"
	// PassSampleIDs reads the source's _ids to pick a sample (servers
	// without $sample); PassSample compares the sampled documents.
	PassSampleIDs = "sampleIds"
	PassSample    = string(config.VerifySample)
)

// progress counts the documents read for one namespace in its current
// pass.
type progress struct {
	fn func(ns, pass string, done, total int64)
	ns string
	mu sync.Mutex
	// pass is the pass under way; sides how many sides it reads (done and
	// total count reads, reported divided by sides).
	pass        string
	sides       int64
	done, total atomic.Int64
}

// start begins a pass that reads sides sides of about total documents
// each (0: not known yet).
func (p *progress) start(pass string, sides, total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.pass, p.sides = pass, sides
	p.done.Store(0)
	p.total.Store(total * sides)
	p.mu.Unlock()
	p.report()
}

func (p *progress) add(n int64) {
	if p == nil {
		return
	}
	p.done.Add(n)
	p.report()
}

func (p *progress) report() {
	if p == nil || p.fn == nil {
		return
	}
	p.mu.Lock()
	pass, sides := p.pass, max(p.sides, 1)
	p.mu.Unlock()
	p.fn(p.ns, pass, p.done.Load()/sides, p.total.Load()/sides)
}

// examples counts the documents of one kind of difference and keeps the
// first few _ids.
type examples struct {
	max   int
	count int64
	ids   []idKey
}

func (e *examples) add(k idKey) {
	e.count++
	if len(e.ids) < e.max {
		e.ids = append(e.ids, k)
	}
}

// addBytes is add for a key in a reused buffer: it is copied only when
// kept.
func (e *examples) addBytes(k []byte) {
	e.count++
	if len(e.ids) < e.max {
		e.ids = append(e.ids, idKey(k))
	}
}

func (e *examples) strings() []string {
	if len(e.ids) == 0 {
		return nil
	}
	out := make([]string, len(e.ids))
	for i, k := range e.ids {
		out[i] = k.String()
	}
	return out
}
