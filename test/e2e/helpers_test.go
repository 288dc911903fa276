package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/test/internal/gobuild"
)

// docsByID reads every document of a collection, keyed by the raw bytes of
// its _id (type byte included).
func docsByID(t *testing.T, c *mongo.Client, db, name string) map[string]bson.Raw {
	t.Helper()
	return docsMatching(t, c, db, name, bson.D{})
}

// docsMatching is docsByID of the documents that match filter.
func docsMatching(t *testing.T, c *mongo.Client, db, name string, filter bson.D) map[string]bson.Raw {
	t.Helper()
	coll := c.Database(db).Collection(name)
	cur, err := coll.Find(context.Background(), filter, options.Find().SetBatchSize(catalog.BatchSizeFor(context.Background(), coll, 8<<20, 10000)))
	if err != nil {
		t.Fatalf("read %s.%s: %v", db, name, err)
	}
	out := map[string]bson.Raw{}
	for cur.Next(context.Background()) {
		id := cur.Current.Lookup("_id")
		key := string(append([]byte{byte(id.Type)}, id.Value...))
		if _, dup := out[key]; dup {
			t.Fatalf("%s.%s: _id %s read twice", db, name, id)
		}
		out[key] = bytes.Clone(cur.Current)
	}
	if err := cur.Err(); err != nil {
		t.Fatalf("read %s.%s: %v", db, name, err)
	}
	return out
}

// assertSameDocs fails unless the target collection holds exactly the
// source collection's documents, byte for byte.
func assertSameDocs(t *testing.T, src *mongo.Client, srcNS string, dst *mongo.Client, dstNS string) {
	t.Helper()
	if diff := docsDiff(t, src, srcNS, dst, dstNS); diff != "" {
		t.Fatal(diff)
	}
}

// docsDiff compares a source collection with a target one: "" when they
// hold the same documents byte for byte, else the counts of missing,
// changed and extra documents with a few of them.
func docsDiff(t *testing.T, src *mongo.Client, srcNS string, dst *mongo.Client, dstNS string) string {
	t.Helper()
	sdb, srcColl := split(srcNS)
	ddb, dstColl := split(dstNS)
	return diffDocs(docsByID(t, src, sdb, srcColl), docsByID(t, dst, ddb, dstColl), srcNS+" -> "+dstNS)
}

// diffDocs compares documents by _id (as docsByID returns them).
func diffDocs(want, got map[string]bson.Raw, what string) string {
	var missing, changed, extra int
	var examples []string
	note := func(s string) {
		if len(examples) < 5 {
			examples = append(examples, s)
		}
	}
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			missing++
			note("missing " + w.String())
		case !bytes.Equal(g, w):
			changed++
			note(fmt.Sprintf("changed: got %s want %s", g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			extra++
			note("extra " + g.String())
		}
	}
	if missing+changed+extra == 0 {
		return ""
	}
	return fmt.Sprintf("%s: %d missing, %d changed, %d extra of %d (e.g. %s)", what, missing, changed, extra, len(want), strings.Join(examples, "; "))
}

func split(ns string) (string, string) {
	n := []rune(ns)
	for i, r := range n {
		if r == '.' {
			return string(n[:i]), string(n[i+1:])
		}
	}
	return ns, ""
}

// newTask returns a defaulted, validated full-copy task between servers.
func newTask(t *testing.T, name string, src, dst *testserver.Server, edit func(*config.Task)) *config.Task {
	t.Helper()
	task := &config.Task{Name: name, Spec: config.Spec{Mode: config.ModeFull,
		Source: config.Endpoint{URI: src.URI}, Target: config.Endpoint{URI: dst.URI}}}
	task.Threads = config.Threads{Readers: 3, Writers: 3}
	if edit != nil {
		edit(task)
	}
	task.SetDefaults()
	if err := task.Validate(); err != nil {
		t.Fatalf("task: %v", err)
	}
	return task
}

// runEngine runs a task in process and returns the engine's final status.
func runEngine(t *testing.T, task *config.Task, opts engine.Options) (engine.Status, error) {
	t.Helper()
	ctx := context.Background()
	e, err := engine.Open(ctx, task, opts)
	if err != nil {
		return engine.Status{}, err
	}
	defer e.Close()
	err = e.Run(ctx)
	return e.Status(), err
}

func insertDocs(t *testing.T, c *mongo.Client, db, coll string, docs []any) {
	t.Helper()
	for len(docs) > 0 {
		n := min(len(docs), 1000)
		if _, err := c.Database(db).Collection(coll).InsertMany(context.Background(), docs[:n], options.InsertMany().SetOrdered(false)); err != nil {
			t.Fatalf("seed %s.%s: %v", db, coll, err)
		}
		docs = docs[n:]
	}
}

var (
	ferryOnce sync.Once
	ferryPath string
	ferryErr  error
)

// ferryBinary builds cmd/ferry once per test run.
func ferryBinary(t *testing.T) string {
	t.Helper()
	ferryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ferry-e2e-")
		if err != nil {
			ferryErr = err
			return
		}
		ferryPath = filepath.Join(dir, "ferry")
		if err := gobuild.Command("./cmd/ferry", ferryPath); err != nil {
			ferryErr = fmt.Errorf("build ferry: %w", err)
		}
	})
	if ferryErr != nil {
		t.Fatal(ferryErr)
	}
	return ferryPath
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "task.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func indexModel(name string, unique bool) mongo.IndexModel {
	return mongo.IndexModel{Keys: bson.D{{Key: "email", Value: 1}}, Options: options.Index().SetName(name).SetUnique(unique)}
}

func optsNewest() *options.FindOneOptionsBuilder {
	return options.FindOne().SetSort(bson.D{{Key: "$natural", Value: -1}})
}

// startRun starts `ferry run -f yaml` with its status served on addr, its
// output discarded and its errors on the test's stderr.
func startRun(t *testing.T, bin, yaml, addr string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "run", "-f", yaml, "--progress", "none", "--listen", addr)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// phaseAt returns the phase the run serving its status on addr reports,
// "" when it does not answer.
func phaseAt(addr string) engine.Phase {
	s, err := getStatus(addr)
	if err != nil {
		return ""
	}
	return s.Phase
}
