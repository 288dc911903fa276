package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// Config sets up a run.
type Config struct {
	// Cycles is the number of faults injected; Seed draws them.
	Cycles int
	Seed   uint64
	// Ferry is the ferry binary; Dir receives the servers' storage and
	// every log.
	Ferry, Dir string
	// Docs is the number of documents each epoch's database starts with;
	// Rate the workload's writes per second.
	Docs, Rate int
	// Budget, when set, ends the run after the cycle during which it ran
	// out; the report says how many cycles ran.
	Budget time.Duration
	// Only, when set, keeps the faults whose kind contains one of these
	// words (to rerun one kind).
	Only []string
	// Logf reports progress.
	Logf func(format string, args ...any)
}

// The source's oplog is small so that an outage can outlast it: FerretDB
// trims a capped collection over its document cap at once (over its size
// only by a tenth per pass), and scans all of it on every tailer re-open.
const (
	oplogBytes = 4 << 20
	oplogDocs  = 5000
	// catchUpTimeout bounds how long the task may take to catch up after a
	// fault before the run fails as a MongoFerry fault.
	catchUpTimeout = 5 * time.Minute
)

// Harness runs the servers, the proxies, the workload and the worker.
type Harness struct {
	cfg        Config
	rng        *rand.Rand
	src, dst   *node
	proxies    map[bool]*toxiproxy.Proxy // by Fault.Source
	sc, dc     *mongo.Client
	statusAddr string

	epoch    int
	db, task string
	taskFile string
	load     *Load
	worker   *Worker

	rep *Report
}

// Run starts everything, runs the schedule and returns the figures. An
// error is a MongoFerry fault (a task that does not catch up while both
// servers answer, a missing OplogWindowLost) or a broken test bed;
// differences are in the report.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	h := &Harness{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 2)), proxies: map[bool]*toxiproxy.Proxy{},
		rep: newReport(cfg)}
	started := time.Now()
	defer func() { h.rep.Elapsed = time.Since(started) }()
	if err := h.setup(ctx); err != nil {
		return h.rep, err
	}
	defer h.teardown()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	for _, n := range []*node{h.src, h.dst} {
		onWedge := func() { h.rep.addWedge(n.name) }
		go n.watchdog(wctx, func() string { return "mongoferry" }, cfg.Dir, cfg.Logf, onWedge)
	}

	if err := h.newEpoch(ctx, nil); err != nil {
		return h.rep, err
	}
	if err := h.settle(ctx, time.Now()); err != nil {
		return h.rep, err
	}
	schedule := Schedule(cfg.Seed, cfg.Cycles)
	if len(cfg.Only) > 0 {
		schedule = slices.DeleteFunc(schedule, func(f Fault) bool {
			return !slices.ContainsFunc(cfg.Only, func(w string) bool { return strings.Contains(string(f.Kind), w) })
		})
	}
	for i, f := range schedule {
		if cfg.Budget > 0 && time.Since(started) > cfg.Budget {
			cfg.Logf("the time budget of %s ran out after %d cycles", cfg.Budget, i)
			break
		}
		if err := h.cycle(ctx, i, f); err != nil {
			return h.rep, fmt.Errorf("cycle %d (%s): %w", i+1, f.Kind, err)
		}
		h.rep.Completed = i + 1
	}
	return h.rep, nil
}

func (h *Harness) setup(ctx context.Context) error {
	start := func(name string, oplog int64) (*node, error) {
		dir := filepath.Join(h.cfg.Dir, name)
		s, err := testserver.StartProcess(ctx, testserver.Options{Dir: dir, OplogBytes: oplog, LogFile: filepath.Join(h.cfg.Dir, name+".log")})
		if err != nil {
			return nil, err
		}
		return &node{name: name, srv: s}, nil
	}
	var err error
	if h.src, err = start("source", -1); err != nil {
		return err
	}
	if h.dst, err = start("target", -1); err != nil {
		return err
	}
	if h.sc, err = h.src.srv.Client(ctx); err != nil {
		return err
	}
	if h.dc, err = h.dst.srv.Client(ctx); err != nil {
		return err
	}
	err = h.sc.Database("local").RunCommand(ctx, bson.D{{Key: "create", Value: "oplog.rs"}, {Key: "capped", Value: true},
		{Key: "size", Value: oplogBytes}, {Key: "max", Value: oplogDocs}}).Err()
	if err != nil {
		return fmt.Errorf("create the source's oplog: %w", err)
	}
	zerolog.SetGlobalLevel(zerolog.WarnLevel) // the toxics log every interruption
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	for _, side := range []bool{true, false} {
		n := h.dst
		if side {
			n = h.src
		}
		p := toxiproxy.NewProxy(api, n.name, "127.0.0.1:0", n.srv.Addr)
		if err := p.Start(); err != nil {
			return fmt.Errorf("start the %s proxy: %w", n.name, err)
		}
		h.proxies[side] = p
	}
	port, err := testutil.FreePort("127.0.0.1")
	h.statusAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	return err
}

func (h *Harness) teardown() {
	if h.load != nil {
		h.load.Stop()
		h.rep.addLoad(h.load)
	}
	if h.worker != nil {
		h.worker.Kill()
		h.rep.addWorker(h.worker)
	}
	for _, p := range h.proxies {
		p.Stop()
	}
	for _, c := range []*mongo.Client{h.sc, h.dc} {
		if c != nil {
			_ = c.Disconnect(context.Background())
		}
	}
	for _, n := range []*node{h.src, h.dst} {
		if n != nil {
			n.srv.Stop()
		}
	}
}

// newEpoch starts a new task on a new database with the workload running;
// with a kill, the worker is killed in the starting stage it names and
// started again.
func (h *Harness) newEpoch(ctx context.Context, kill *Fault) error {
	if err := h.endEpoch(ctx); err != nil {
		return err
	}
	h.epoch++
	h.rep.Epochs++
	h.db, h.task = fmt.Sprintf("chaos%03d", h.epoch), fmt.Sprintf("chaos-%03d", h.epoch)
	load, err := Seed(ctx, h.sc.Database(h.db), h.cfg.Seed*1000+uint64(h.epoch), h.cfg.Docs, 2)
	if err != nil {
		return err
	}
	h.load = load
	h.taskFile = filepath.Join(h.cfg.Dir, h.task+".yaml")
	yaml := fmt.Sprintf(`name: %s
mode: fullAndIncremental
source: {uri: "mongodb://%s/?directConnection=true"}
target: {uri: "mongodb://%s/?directConnection=true"}
namespaces: {include: ['%s\..*']}
threads: {readers: 2, writers: 2}
fullSync: {rangeDocuments: 300, split: always}
cache: {batchSize: 200, maxBytes: 64MiB}
verify: {mode: none}
`, h.task, h.proxies[true].Listen, h.proxies[false].Listen, h.db)
	if err := os.WriteFile(h.taskFile, []byte(yaml), 0o600); err != nil {
		return err
	}
	h.load.Start(h.cfg.Seed*1000+uint64(h.epoch), h.cfg.Rate)
	if err := h.startWorker(); err != nil {
		return err
	}
	if kill == nil {
		return nil
	}
	want := map[Kind]string{KillPlanning: "planning", KillCopy: "copying", KillIndexes: "indexes"}[kill.Kind]
	order := map[string]int{"planning": 0, "copying": 1, "indexes": 2, "replay": 3}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s, err := h.worker.Status(ctx)
		if err == nil && order[stage(s)] >= order[want] && (stage(s) != "planning" || s.Phase == engine.PhaseFullSync || want == "planning") {
			break
		}
		if exited, _ := h.worker.Exited(); exited || time.Now().After(deadline) {
			return fmt.Errorf("the worker did not reach %s (last status %+v, err %v)", want, s, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	delay := kill.Delay
	if want == "planning" {
		delay /= 20
	}
	time.Sleep(delay)
	seen := "unknown"
	if s, err := h.worker.Status(ctx); err == nil {
		seen = stage(s)
	}
	h.worker.Kill()
	h.rep.addKill(kill.Kind, seen)
	time.Sleep(time.Duration(100+h.rng.IntN(400)) * time.Millisecond)
	return h.startWorker()
}

// endEpoch stops the workload and the worker and drops the epoch's
// database on both sides.
func (h *Harness) endEpoch(ctx context.Context) error {
	if h.epoch == 0 {
		return nil
	}
	h.load.Stop()
	h.rep.addLoad(h.load)
	h.worker.Kill()
	h.rep.addWorker(h.worker)
	for _, c := range []*mongo.Client{h.sc, h.dc} {
		if err := retry(ctx, func(ctx context.Context) error { return c.Database(h.db).Drop(ctx) }); err != nil {
			return fmt.Errorf("drop %s: %w", h.db, err)
		}
	}
	return nil
}

func (h *Harness) startWorker() error {
	w, err := startWorker(h.cfg.Ferry, h.taskFile, h.statusAddr, filepath.Join(h.cfg.Dir, h.task+".log"))
	if err != nil {
		return err
	}
	h.worker = w
	return nil
}

// restartWorker starts the worker again after a kill or an exit.
func (h *Harness) restartWorker() error {
	h.rep.addWorker(h.worker)
	return h.startWorker()
}

// cycle injects one fault, then settles: the task catches up and the
// databases are compared. A worker kill's cycle counts the shapes steps
// written from its start to its comparison, which replay met around the
// kill.
func (h *Harness) cycle(ctx context.Context, i int, f Fault) error {
	h.cfg.Logf("cycle %d/%d: %s (epoch %d)", i+1, h.cfg.Cycles, f.Kind, h.epoch)
	var before map[string]int64
	if !f.Kind.startsEpoch() {
		before, _ = h.load.ShapeSteps()
	}
	if err := h.fault(ctx, f); err != nil {
		return err
	}
	if f.Kind.isKill() {
		after, _ := h.load.ShapeSteps()
		h.rep.addKillShapes(after, before)
	}
	return nil
}

// fault injects one fault, then settles.
func (h *Harness) fault(ctx context.Context, f Fault) error {
	if f.Kind.startsEpoch() {
		if err := h.newEpoch(ctx, &f); err != nil {
			return err
		}
		return h.settle(ctx, time.Now())
	}
	time.Sleep(f.Delay)
	if err := h.ensureWorker(); err != nil {
		return err
	}
	switch f.Kind {
	case KillReplay:
		h.worker.Kill()
		h.rep.addFault(f.Kind)
		time.Sleep(time.Duration(100+h.rng.IntN(900)) * time.Millisecond)
		if err := h.restartWorker(); err != nil {
			return err
		}
	case KillCheckpoint:
		if err := h.killAtCheckpoint(ctx, f); err != nil {
			return err
		}
	case SourceRestart, TargetRestart:
		n := h.src
		if f.Kind == TargetRestart {
			n = h.dst
		}
		n.mu.Lock()
		n.srv.Kill()
		time.Sleep(f.Duration)
		err := n.srv.Restart(ctx)
		n.mu.Unlock()
		if err != nil {
			return fmt.Errorf("restart the %s server: %w", n.name, err)
		}
		h.rep.addFault(f.Kind)
	case Latency, Bandwidth, Reset, HalfOpen, Partition:
		if err := h.network(ctx, f); err != nil {
			return err
		}
	case WindowLost:
		return h.windowLost(ctx)
	}
	return h.settle(ctx, time.Now())
}

// killAtCheckpoint kills the worker at the moment of a checkpoint save: it
// waits for one save, then kills within tens of milliseconds of when the
// next is due (replay saves every 2s).
func (h *Harness) killAtCheckpoint(ctx context.Context, f Fault) error {
	first := time.Time{}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s, err := h.worker.Status(ctx)
		if err == nil && s.Replay != nil {
			switch at := s.Replay.CheckpointAt; {
			case first.IsZero():
				first = at
			case !at.Equal(first):
				offset := time.Duration(f.Delay.Milliseconds()%100-50) * time.Millisecond
				time.Sleep(time.Until(at.Add(2*time.Second + offset)))
				h.worker.Kill()
				h.rep.addFault(f.Kind)
				time.Sleep(time.Duration(100+h.rng.IntN(400)) * time.Millisecond)
				return h.restartWorker()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("the worker saved no checkpoint within 30s")
}

// network applies a toxic to the worker's link with one server for the
// fault's duration.
func (h *Harness) network(ctx context.Context, f Fault) error {
	p := h.proxies[f.Source]
	var toxics []string
	add := func(typ, stream, attrs string) {
		toxics = append(toxics, fmt.Sprintf(`{"name":"%s_%s","type":"%s","stream":"%s","attributes":%s}`, typ, stream, typ, stream, attrs))
	}
	switch f.Kind {
	case Latency:
		for _, s := range []string{"upstream", "downstream"} {
			add("latency", s, fmt.Sprintf(`{"latency":%d,"jitter":%d}`, f.Param, f.Param/2))
		}
	case Bandwidth:
		for _, s := range []string{"upstream", "downstream"} {
			add("bandwidth", s, fmt.Sprintf(`{"rate":%d}`, f.Param))
		}
	case Reset:
		add("reset_peer", "upstream", fmt.Sprintf(`{"timeout":%d}`, f.Param))
	case HalfOpen:
		// The server still receives and applies what the worker sends;
		// its replies vanish and the connection stays open.
		add("timeout", "downstream", `{"timeout":0}`)
	case Partition:
		add("timeout", "upstream", `{"timeout":0}`)
		add("timeout", "downstream", `{"timeout":0}`)
	}
	for _, t := range toxics {
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(t)); err != nil {
			return fmt.Errorf("add toxic %s: %w", t, err)
		}
	}
	h.rep.addFault(f.Kind)
	time.Sleep(f.Duration)
	p.Toxics.ResetToxics(ctx)
	return nil
}

// ensureWorker restarts a worker that exited on its own, as a pod's
// container is restarted, and counts the exit.
func (h *Harness) ensureWorker() error {
	if exited, _ := h.worker.Exited(); !exited {
		return nil
	}
	code := h.worker.ExitCode()
	h.rep.addExit(code)
	h.cfg.Logf("the worker exited on its own with code %d; starting it again (log %s)", code, filepath.Join(h.cfg.Dir, h.task+".log"))
	if code == 2 || code == 3 {
		return fmt.Errorf("the worker exited with code %d outside an oplog-window fault: see %s", code, filepath.Join(h.cfg.Dir, h.task+".log"))
	}
	return h.restartWorker()
}

// settle pauses the workload, repairs the documents whose writes failed,
// waits until the worker has applied the source's newest oplog entry, and
// compares the epoch's database; healed is when the fault ended.
func (h *Harness) settle(ctx context.Context, healed time.Time) error {
	h.load.Pause()
	defer h.load.Resume()
	n, err := retryN(ctx, h.load.Repair)
	if err != nil {
		return err
	}
	h.rep.Repaired += n
	var newest bson.Timestamp
	if err := retry(ctx, func(ctx context.Context) error {
		var err error
		newest, err = newestTS(ctx, h.sc)
		return err
	}); err != nil {
		return err
	}
	deadline := time.Now().Add(catchUpTimeout)
	wedges := h.rep.wedges()
	var last engine.Status
	for {
		if w := h.rep.wedges(); w != wedges {
			// The watchdog restarted a wedged server: the wait starts over.
			wedges, deadline = w, time.Now().Add(catchUpTimeout)
		}
		if err := h.ensureWorker(); err != nil {
			return err
		}
		s, err := h.worker.Status(ctx)
		if err == nil {
			last = s
			if s.Phase == engine.PhaseStreaming && s.Replay != nil && s.Replay.AppliedTS.Compare(newest) >= 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			return h.stalled(ctx, newest, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	recovered := time.Since(healed)
	h.rep.Recovery = append(h.rep.Recovery, recovered)
	var d Diff
	if err := retry(ctx, func(ctx context.Context) error {
		d, err = Compare(ctx, h.sc, h.dc, h.db)
		return err
	}); err != nil {
		return err
	}
	h.rep.addDiff(h.db, d)
	h.cfg.Logf("  caught up %s after the fault; %d documents compared, %d differences", recovered.Round(10*time.Millisecond), d.Compared, d.Differences())
	if d.Differences() > 0 {
		h.cfg.Logf("DIFFERENCES in %s: %s", h.db, d)
	}
	return nil
}

// stalled tells a wedged server from a MongoFerry fault once the task did
// not catch up in time.
func (h *Harness) stalled(ctx context.Context, newest bson.Timestamp, last engine.Status) error {
	var wedged []string
	for _, n := range []*node{h.src, h.dst} {
		if err := n.probe(ctx, h.db, 10*time.Second); err != nil {
			wedged = append(wedged, fmt.Sprintf("%s: %v", n.name, err))
		}
	}
	what := "both servers answer: a MongoFerry fault"
	if len(wedged) > 0 {
		what = "a server does not answer: " + strings.Join(wedged, "; ")
	}
	return fmt.Errorf("the task did not apply the source's newest entry %v within %s (%s); last status: phase %s, replay %+v, error %q; worker log %s",
		newest, catchUpTimeout, what, last.Phase, last.Replay, last.Error, filepath.Join(h.cfg.Dir, h.task+".log"))
}

// windowLost stops the worker for an outage during which the source's
// oplog moves past the task's checkpoint; the worker started again must
// stop with OplogWindowLost (exit code 3) and write nothing. A new epoch
// follows: the task would be resynced.
func (h *Harness) windowLost(ctx context.Context) error {
	h.worker.Kill()
	h.rep.addWorker(h.worker)
	var rec checkpoint.TaskRecord
	if err := retry(ctx, func(ctx context.Context) error {
		return h.dc.Database("mongoferry").Collection(checkpoint.TasksCollection).FindOne(ctx, bson.D{{Key: "_id", Value: h.task}}).Decode(&rec)
	}); err != nil {
		return fmt.Errorf("read the task's checkpoint: %w", err)
	}
	resume := rec.ResumeTS()
	filler := h.sc.Database("chaosfiller").Collection("f")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		oldest, err := oldestTS(ctx, h.sc)
		if err == nil && oldest.Compare(resume) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the source's oplog still holds the checkpoint %v after 2 minutes of filler writes (oldest %v, %v)", resume, oldest, err)
		}
		docs := make([]any, 2000)
		for i := range docs {
			docs[i] = bson.D{{Key: "x", Value: i}}
		}
		if _, err := filler.InsertMany(ctx, docs); err != nil {
			return fmt.Errorf("filler writes: %w", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	h.load.Pause()
	before, err := h.targetState(ctx)
	if err != nil {
		h.load.Resume()
		return err
	}
	if err := h.startWorker(); err != nil {
		h.load.Resume()
		return err
	}
	h.rep.addFault(WindowLost)
	started := time.Now()
	select {
	case <-h.worker.exited:
	case <-time.After(catchUpTimeout):
		h.load.Resume()
		return fmt.Errorf("the worker resumed from a checkpoint the source's oplog no longer holds and did not stop within %s", catchUpTimeout)
	}
	stopped := time.Since(started)
	code := h.worker.ExitCode()
	after, err := h.targetState(ctx)
	h.load.Resume()
	if err != nil {
		return err
	}
	log, _ := os.ReadFile(filepath.Join(h.cfg.Dir, h.task+".log"))
	if code != 3 || !bytes.Contains(log, []byte("OplogWindowLost")) {
		return fmt.Errorf("the worker exited with code %d, want 3 and OplogWindowLost: see %s", code, filepath.Join(h.cfg.Dir, h.task+".log"))
	}
	if before != after {
		i := 0
		for i < min(len(before), len(after)) && before[i] == after[i] {
			i++
		}
		_ = os.WriteFile(filepath.Join(h.cfg.Dir, h.task+"-before.txt"), []byte(before), 0o600)
		_ = os.WriteFile(filepath.Join(h.cfg.Dir, h.task+"-after.txt"), []byte(after), 0o600)
		h.rep.addDiff(h.db, Diff{Changed: 1, Examples: []string{fmt.Sprintf("the target changed although the task stopped with OplogWindowLost: before ...%s... after ...%s...",
			before[max(0, i-100):min(len(before), i+200)], after[max(0, i-100):min(len(after), i+200)])}})
	}
	h.rep.mu.Lock()
	h.rep.WindowLostStops = append(h.rep.WindowLostStops, stopped)
	h.rep.mu.Unlock()
	if err := retry(ctx, func(ctx context.Context) error { return h.sc.Database("chaosfiller").Drop(ctx) }); err != nil {
		return err
	}
	if err := h.newEpoch(ctx, nil); err != nil {
		return err
	}
	return h.settle(ctx, time.Now())
}

// targetState renders the epoch's database and the task's checkpoint
// records on the target.
func (h *Harness) targetState(ctx context.Context) (string, error) {
	var b strings.Builder
	err := retry(ctx, func(ctx context.Context) error {
		b.Reset()
		names, err := collections(ctx, h.dc, h.db)
		if err != nil {
			return err
		}
		for _, n := range names {
			docs, err := readAll(ctx, h.dc.Database(h.db).Collection(n))
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s:%d:", n, len(docs))
			keys := make([]string, 0, len(docs))
			for k := range docs {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				b.WriteString(docs[k].String())
			}
		}
		// The checkpoint: the task's position and its copy ranges (the
		// record's phase may say Failed).
		var rec struct {
			AppliedTS bson.Timestamp `bson:"appliedTS"`
		}
		if err := h.dc.Database("mongoferry").Collection(checkpoint.TasksCollection).FindOne(ctx, bson.D{{Key: "_id", Value: h.task}}).Decode(&rec); err != nil {
			return err
		}
		fmt.Fprintf(&b, "appliedTS:%v;", rec.AppliedTS)
		cur, err := h.dc.Database("mongoferry").Collection(checkpoint.RangesCollection).Find(ctx, bson.D{{Key: "task", Value: h.task}})
		if err != nil {
			return err
		}
		for cur.Next(ctx) {
			b.WriteString(cur.Current.String())
		}
		if err := cur.Err(); err != nil {
			return err
		}
		return nil
	})
	return b.String(), err
}

// newestTS returns the highest ts among the entries a task reads (not
// those of local and config, which the tailer leaves out). The oplog's
// last entry in $natural order is not always that on FerretDB: an entry is
// inserted after it takes its ts, and an insert into local.oplog.rs (the
// shapes writer's) is logged again there, under local, with a later ts.
func newestTS(ctx context.Context, c *mongo.Client) (bson.Timestamp, error) {
	filter := bson.D{{Key: "ns", Value: bson.D{{Key: "$nin", Value: bson.A{bson.Regex{Pattern: `^local\.`}, bson.Regex{Pattern: `^config\.`}}}}}}
	raw, err := c.Database("local").Collection("oplog.rs").FindOne(ctx, filter,
		options.FindOne().SetSort(bson.D{{Key: "ts", Value: -1}}).SetProjection(bson.D{{Key: "ts", Value: 1}})).Raw()
	if err != nil {
		return bson.Timestamp{}, err
	}
	t, i := raw.Lookup("ts").Timestamp()
	return bson.Timestamp{T: t, I: i}, nil
}

func oldestTS(ctx context.Context, c *mongo.Client) (bson.Timestamp, error) {
	raw, err := c.Database("local").Collection("oplog.rs").FindOne(ctx, bson.D{},
		options.FindOne().SetSort(bson.D{{Key: "$natural", Value: 1}}).SetProjection(bson.D{{Key: "ts", Value: 1}})).Raw()
	if err != nil {
		return bson.Timestamp{}, err
	}
	t, i := raw.Lookup("ts").Timestamp()
	return bson.Timestamp{T: t, I: i}, nil
}

// retry runs f until it succeeds, for a minute at most: the servers may be
// restarting.
func retry(ctx context.Context, f func(context.Context) error) error {
	_, err := retryN(ctx, func(ctx context.Context) (int, error) { return 0, f(ctx) })
	return err
}

func retryN(ctx context.Context, f func(context.Context) (int, error)) (int, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := f(octx)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return n, err
		}
		time.Sleep(500 * time.Millisecond)
	}
}
