package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// streamLoad writes to shop.items on the source until ctx ends, at about
// rate operations per second: inserts of new documents, updates of the
// documents with _id 0-99 and deletes of those with _id 100-149. Documents
// with _id 150 and above are never touched.
func streamLoad(ctx context.Context, c *mongo.Client, rate int) {
	items := c.Database("shop").Collection("items")
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		switch n % 3 {
		case 0:
			_, _ = items.InsertOne(ctx, bson.D{{Key: "_id", Value: int32(10000 + n)}, {Key: "v", Value: int32(n)}, {Key: "pad", Value: strings.Repeat("x", 64)}})
		case 1:
			_, _ = items.UpdateOne(ctx, bson.D{{Key: "_id", Value: int32(n % 100)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: int32(n)}}}})
		case 2:
			if id := 100 + n/3; id < 150 {
				_, _ = items.DeleteOne(ctx, bson.D{{Key: "_id", Value: int32(id)}})
			}
		}
	}
}

// TestStreamingVerifyFindsCorruption: while a live load writes to the
// source and replay applies it, one target document is changed behind
// the replay's back. A streaming verification pass names that document
// (namespace and _id) and nothing else: documents that differed only
// because their change was in flight are rechecked once replay passed
// them and dropped. The real parts are two FerretDB servers and the
// engine's oplog replay between them.
func TestStreamingVerifyFindsCorruption(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	ctx := context.Background()
	items := make([]any, 600)
	for i := range items {
		items[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: int32(i)}, {Key: "pad", Value: strings.Repeat("y", 64)}}
	}
	insertDocs(t, sc, "shop", "items", items)
	notes := make([]any, 40)
	for i := range notes {
		notes[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("n%02d", i)}, {Key: "text", Value: "note"}}
	}
	insertDocs(t, sc, "shop", "notes", notes)

	task := newTask(t, "streamverify", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
		t.Cache.BatchSize = 100 // several batches per collection
	})
	opts := engineOpts()
	opts.CheckpointInterval = time.Second // ferry verify --streaming rechecks by the saved checkpoint
	e, stop := startEngine(t, task, opts)
	waitFor(t, "streaming", 60*time.Second, func() bool {
		s := e.Status()
		return s.Phase == engine.PhaseStreaming && s.Replay != nil
	})

	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { streamLoad(loadCtx, sc, 20) })
	defer func() { stopLoad(); wg.Wait() }()
	time.Sleep(2 * time.Second) // let some writes be in flight

	// The corruption: a document the load never touches, changed on the
	// target only.
	if _, err := dc.Database("shop").Collection("items").UpdateOne(ctx, bson.D{{Key: "_id", Value: int32(500)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: "corrupted"}}}}); err != nil {
		t.Fatal(err)
	}

	pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	st, err := e.VerifyStreaming(pctx)
	if err != nil {
		t.Fatalf("streaming verification: %v", err)
	}
	t.Logf("pass: %d documents compared, %d mismatches seen, %d resolved on recheck, %d rechecks, %d persisting: %+v",
		st.Compared, st.Mismatches, st.Resolved, st.Rechecked, st.Persisting, st.Findings)

	want := []verify.Finding{{Namespace: "shop.items", ID: `{"$numberInt":"500"}`, Kind: "changed"}}
	if st.Persisting != 1 || len(st.Findings) != 1 || st.Findings[0] != want[0] {
		t.Errorf("findings %d %+v, want exactly %+v", st.Persisting, st.Findings, want)
	}
	if st.OK || st.NotRechecked != 0 || st.Unsettled != 0 || st.PendingRechecks != 0 || st.Namespaces != 2 || st.NamespacesDone != 2 {
		t.Errorf("status %+v", st)
	}
	if st.Compared < 600 {
		t.Errorf("compared %d documents, want every one of the source's (at least 600)", st.Compared)
	}
	if st.Mismatches <= st.Persisting || st.Resolved == 0 {
		t.Errorf("no mismatch in flight was seen and resolved (mismatches %d, resolved %d): the load did not race the pass", st.Mismatches, st.Resolved)
	}

	// /status carries the pass into the worker contract.
	raw, err := json.Marshal(e.Status())
	if err != nil {
		t.Fatal(err)
	}
	var ws workerapi.Status
	if err := json.Unmarshal(raw, &ws); err != nil {
		t.Fatal(err)
	}
	if v := ws.StreamingVerify; v == nil || v.Running || v.Passes != 1 || len(v.Findings) != 1 || v.Findings[0].ID != want[0].ID {
		t.Errorf("/status streamingVerify %+v", ws.StreamingVerify)
	}

	// The same question from the command line, while the load goes on:
	// `ferry verify --streaming` rechecks by the task's saved checkpoint.
	taskFile := writeFile(t, fmt.Sprintf("name: %s\nsource: {uri: %q}\ntarget: {uri: %q}\ncache: {batchSize: 100}\n", task.Name, src.URI, dst.URI))
	cmd := exec.Command(ferryBinary(t), "verify", "--streaming", "-f", taskFile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("ferry verify --streaming: %v, want exit 2\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("ferry verify --streaming:\n%s%s", stderr.String(), stdout.String())
	for _, w := range []string{`changed  shop.items _id {"$numberInt":"500"}`, "1 document differs after every recheck"} {
		if !strings.Contains(stdout.String(), w) {
			t.Errorf("ferry verify --streaming output lacks %q", w)
		}
	}
	if n := strings.Count(stdout.String(), " _id "); n != 1 {
		t.Errorf("ferry verify --streaming named %d documents, want 1", n)
	}

	stopLoad()
	wg.Wait()
	if err := stop(); err != nil && ctx.Err() == nil && !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("engine: %v", err)
	}
}

// TestStreamingVerifyContinuous: with verify.continuous the worker runs a
// pass, rests intervalSeconds, and runs the next, each reported in
// /status; a pass asked for over HTTP (StartVerifyStreaming, behind POST
// /verify) while one runs is refused as busy, never run twice at once.
func TestStreamingVerifyContinuous(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc := src.MustClient(t)
	docs := make([]any, 100)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: int32(i)}}
	}
	insertDocs(t, sc, "shop", "items", docs)
	task := newTask(t, "streamverify-continuous", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
		t.Verify.Continuous, t.Verify.IntervalSeconds = true, 1
	})
	e, stop := startEngine(t, task, engineOpts())
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { streamLoad(loadCtx, sc, 10) })
	defer func() { stopLoad(); wg.Wait() }()

	busy := false
	waitFor(t, "two continuous passes", 2*time.Minute, func() bool {
		// A pass asked for is reserved before the call returns, so a
		// second call right after finds it running (or a continuous one).
		for range 2 {
			if err := e.StartVerifyStreaming(); errors.Is(err, verify.ErrPassRunning) {
				busy = true
			}
		}
		v := e.Status().StreamingVerify
		return v != nil && v.Passes >= 2
	})
	v := e.Status().StreamingVerify
	t.Logf("after %d passes: %+v", v.Passes, *v)
	if v.Persisting != 0 || len(v.Findings) != 0 || v.Error != "" {
		t.Errorf("continuous passes over a correct target under load reported %d persisting: %+v (%s)", v.Persisting, v.Findings, v.Error)
	}
	if !busy {
		t.Error("no pass was refused as already running")
	}
	stopLoad()
	wg.Wait()
	_ = stop()
}
