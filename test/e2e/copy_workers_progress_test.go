package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
)

// TestCopyWorkersEndAndProgress shares a full copy of 3,000 documents of
// about 1 KB (ranges of about 500, split: always on FerretDB) between the task's
// run and two copy-only processes, and checks what each says and when it
// ends:
//   - the copy is recorded done within 10 s of its last range's done
//     record (it used to wait minutes for a range taken over from a live
//     holder whose read was slow);
//   - every process shows the task's figures: the plan's estimate in
//     /status while it copies (a copy-only process showed 0), and in its
//     last line the documents and bytes of every range, whoever copied it
//     (the task's run counted other processes' documents without their
//     bytes; a copy-only process, only its own), next to its own share;
//   - the shares add up to the whole, each range copied once.
func TestCopyWorkersEndAndProgress(t *testing.T) {
	ctx := context.Background()
	src, dst := testserver.Start(t), testserver.Start(t, testserver.Options{OplogBytes: -1})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	const n = 3000
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int64(i)}, {Key: "pad", Value: strings.Repeat("p", 1000)}}
	}
	insertDocs(t, sc, "app", "big", docs)
	var totalBytes int64
	cur, err := sc.Database("app").Collection("big").Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for cur.Next(ctx) {
		totalBytes += int64(len(cur.Current))
	}
	task := "copy-progress"
	yaml := writeFile(t, fmt.Sprintf(`name: %s
mode: full
source: {uri: %q}
target: {uri: %q}
threads: {readers: 1}
cache: {batchSize: 100}
fullSync: {rangeDocuments: 500, split: always, workers: 3}
rateLimit: 900
verify: {mode: count}
`, task, src.URI, dst.URI))
	bin := ferryBinary(t)
	meta := dc.Database("mongoferry")

	procs := []*shardWorker{
		{pod: "task-run", addr: testutil.FreeAddr(t), logDir: t.TempDir()},
		{pod: "copy-0", addr: testutil.FreeAddr(t), logDir: t.TempDir(), args: []string{"--copy-only"}},
		{pod: "copy-1", addr: testutil.FreeAddr(t), logDir: t.TempDir(), args: []string{"--copy-only"}},
	}
	seen := make([][]fullsync.Status, len(procs))
	var mu sync.Mutex
	stop := make(chan struct{})
	var watchers sync.WaitGroup
	for i, p := range procs {
		p.start(t, bin, yaml)
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			for {
				if s, err := p.status(); err == nil && strings.HasPrefix(s.Copy.Stage, "copying") && s.Copy.Documents > 0 {
					mu.Lock()
					seen[i] = append(seen[i], s.Copy)
					mu.Unlock()
				}
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range procs {
				p.logTail(t, 20)
			}
		}
	})
	var recordedDone time.Time
	waitFor(t, "the copy recorded done", 3*time.Minute, func() bool {
		if copyDone(ctx, meta, task) {
			recordedDone = time.Now()
			return true
		}
		return false
	})
	for _, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("%s: %v, want exit 0", p.pod, err)
		}
	}
	close(stop)
	watchers.Wait()
	assertSameDocs(t, sc, "app.big", dc, "app.big")

	var lastDone time.Time
	var shares int64
	records := 0
	for _, r := range rangeRecords(ctx, t, meta, task) {
		if !r.Done {
			continue
		}
		records++
		if r.At.After(lastDone) {
			lastDone = r.At
		}
	}
	if wait := recordedDone.Sub(lastDone); wait > 10*time.Second {
		t.Errorf("the copy was recorded done %s after its last range's done record, want within 10s", wait.Round(time.Millisecond))
	} else {
		t.Logf("copy recorded done %s after its last range's done record", wait.Round(time.Millisecond))
	}
	for i, p := range procs {
		// While it copied, /status gave the plan's estimate.
		for _, c := range seen[i] {
			if c.EstimatedDocuments != n {
				t.Errorf("%s: /status while copying (%d documents) estimated %d, want the plan's %d", p.pod, c.Documents, c.EstimatedDocuments, n)
				break
			}
		}
		// Its last line: the task's documents and bytes, and its share.
		done := doneLine(t, p)
		t.Logf("%s: %s", p.pod, done)
		var docs, bytes, here int64
		for k, v := range map[string]*int64{"documents": &docs, "bytes": &bytes, "copiedHere": &here} {
			if _, err := fmt.Sscanf(field(done, k), "%d", v); err != nil {
				t.Fatalf("%s: no %s in %q", p.pod, k, done)
			}
		}
		if docs != n || bytes != totalBytes {
			t.Errorf("%s: done with %d documents and %d bytes, want the task's %d and %d", p.pod, docs, bytes, n, totalBytes)
		}
		if here == 0 {
			t.Errorf("%s copied nothing: the copy was not shared", p.pod)
		}
		shares += here
	}
	if planned := len(rangeStates(t, dst, task)); shares != n || records != planned {
		t.Errorf("the processes' shares add up to %d documents in %d done records, want %d in %d (one per planned range)", shares, records, n, planned)
	}
}

// doneLine is the last "msg=done" line of the worker's log.
func doneLine(t *testing.T, w *shardWorker) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.logDir, fmt.Sprintf("%s.%d.log", w.pod, w.runs)))
	if err != nil {
		t.Fatal(err)
	}
	line := ""
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, " msg=done ") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("%s logged no done line", w.pod)
	}
	return line
}

// field is the value of key=value in a log line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}
