package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"sigs.k8s.io/yaml"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// newestTS is the ts of the newest entry of a server's oplog: the position
// a cut-over records on the target for a reverse sync.
func newestTS(t *testing.T, c *mongo.Client) bson.Timestamp {
	t.Helper()
	raw, err := c.Database("local").Collection("oplog.rs").FindOne(context.Background(), bson.D{}, optsNewest()).Raw()
	if err != nil {
		t.Fatalf("newest oplog entry: %v", err)
	}
	ts, i, _ := raw.Lookup("ts").TimestampOK()
	return bson.Timestamp{T: ts, I: i}
}

// idKey is an _id as docsByID keys it.
func idKey(t *testing.T, id any) string {
	t.Helper()
	typ, data, err := bson.MarshalValue(id)
	if err != nil {
		t.Fatal(err)
	}
	return string(append([]byte{byte(typ)}, data...))
}

// TestReverseCLI: after a forward sync caught up (the cut-over), the
// position of the new deployment's newest oplog entry is recorded and the
// application writes there. `ferry reverse --from POSITION -o FILE --run`
// replays those writes onto the old deployment, and nothing written before
// the position: the old deployment ends with the new one's documents
// except the one written before the cut-over's position. A position older
// than the new deployment's oplog stops with OplogWindowLost (exit 3)
// before anything is written.
func TestReverseCLI(t *testing.T) {
	ctx := context.Background()
	oldDep, newDep := testserver.Start(t), testserver.Start(t)
	oc, nc := oldDep.MustClient(t), newDep.MustClient(t)
	docs := make([]any, 200)
	for i := range docs {
		docs[i] = doc("_id", int32(i), "v", int32(0))
	}
	insertDocs(t, oc, "app", "c", docs)
	fwd := newTask(t, "rev-fwd", oldDep, newDep, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyHash
	})
	opts := engineOpts()
	opts.UntilCaughtUp = true
	if st, err := runEngine(t, fwd, opts); err != nil {
		t.Fatalf("forward run: %v (status %+v)", err, st)
	}
	assertSameDocs(t, oc, "app.c", nc, "app.c")

	app := nc.Database("app").Collection("c")
	if _, err := app.InsertOne(ctx, doc("_id", "before-cutover")); err != nil {
		t.Fatal(err)
	}
	pos := config.FormatPosition(newestTS(t, nc))
	// The application now writes to the new deployment.
	if _, err := app.InsertOne(ctx, doc("_id", "after-cutover", "v", int32(1))); err != nil {
		t.Fatal(err)
	}
	if _, err := app.UpdateOne(ctx, doc("_id", int32(5)), doc("$set", doc("v", int32(7)))); err != nil {
		t.Fatal(err)
	}
	if _, err := app.DeleteOne(ctx, doc("_id", int32(6))); err != nil {
		t.Fatal(err)
	}

	data, err := yaml.Marshal(fwd)
	if err != nil {
		t.Fatal(err)
	}
	fwdFile := writeFile(t, string(data))
	revFile := filepath.Join(t.TempDir(), "reverse.yaml")
	bin := ferryBinary(t)

	// The written task: its fields, and a start too old for the new
	// deployment's oplog refused before anything is written.
	if out, err := exec.Command(bin, "reverse", "-f", fwdFile, "--from", "1000,0", "-o", revFile).CombinedOutput(); err != nil {
		t.Fatalf("ferry reverse: %v\n%s", err, out)
	}
	rev, err := config.Load(revFile)
	if err != nil {
		t.Fatal(err)
	}
	if rev.Name != "rev-fwd-reverse" || rev.Mode != config.ModeIncremental || rev.Source.URI != newDep.URI || rev.Target.URI != oldDep.URI ||
		rev.Checkpoint.Database != "mongoferry_reverse" {
		t.Errorf("reverse task: name %s, mode %s, %s -> %s, checkpoint database %s", rev.Name, rev.Mode, rev.Source.URI, rev.Target.URI, rev.Checkpoint.Database)
	}
	if _, err := runEngine(t, rev, engineOpts()); !errors.Is(err, source.ErrOplogWindowLost) {
		t.Fatalf("reverse from 1000,0: %v, want OplogWindowLost", err)
	}
	if names, _ := oc.ListDatabaseNames(ctx, doc("name", "mongoferry_reverse")); len(names) != 0 {
		t.Errorf("a refused reverse task wrote its checkpoint database on the old deployment")
	}

	addr := testutil.FreeAddr(t)
	cmd := exec.Command(bin, "reverse", "-f", fwdFile, "--from", pos, "-o", revFile, "--run", "--listen", addr)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	})
	waitFor(t, "the writes after the cut-over on the old deployment", 2*time.Minute, func() bool {
		got := docsByID(t, oc, "app", "c")
		_, after := got[idKey(t, "after-cutover")]
		_, deleted := got[idKey(t, int32(6))]
		return after && !deleted && got[idKey(t, int32(5))].Lookup("v").Int32() == 7
	})
	want := docsByID(t, nc, "app", "c")
	delete(want, idKey(t, "before-cutover"))
	if d := diffDocs(want, docsByID(t, oc, "app", "c"), "old deployment"); d != "" {
		t.Errorf("the old deployment is not the new one's documents but the one written before the cut-over position:\n%s", d)
	}
	if names, _ := oc.ListDatabaseNames(ctx, doc("name", "mongoferry")); len(names) != 0 {
		t.Errorf("the forward task's checkpoint database was replayed onto the old deployment")
	}
}

// TestReverseOntoBlockedSource: after a cut-over that blocked the old
// deployment's writes, the reverse sync writes to that deployment. Its
// user has no bypassWriteBlockingMode privilege, so its writes are
// refused: the task stops at once with ErrTargetWritesBlocked, which
// names both fixes, and the old deployment is unchanged. Once its writes
// are unblocked (one of the fixes), the same reverse task replays the new
// deployment's writes onto it. wiresim.WriteBlockProxy stands in for
// MongoDB 6.0's write blocking in front of the old deployment (FerretDB),
// refusing writes as MongoDB does (a write error per statement tried).
func TestReverseOntoBlockedSource(t *testing.T) {
	ctx := context.Background()
	oldDep, newDep := testserver.Start(t), testserver.Start(t)
	proxy, oldApp := writeBlockProxy(t, oldDep.Addr)
	docs := make([]any, 200)
	for i := range docs {
		docs[i] = doc("_id", int32(i), "v", int32(0))
	}
	insertDocs(t, oldApp, "app", "c", docs)
	fwd := newTask(t, "rev-blocked", oldDep, newDep, func(t *config.Task) {
		t.Source.URI = proxy.URI()
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
		t.Cutover = config.Cutover{Requested: true, BlockSourceWrites: true, Verify: config.VerifyCount, MaxLagSeconds: 5}
	})
	st, err := runEngine(t, fwd, engineOpts())
	if err != nil || st.Cutover == nil || st.Cutover.Step != workerapi.CutoverComplete || !st.Cutover.WritesBlocked || st.Cutover.TargetPosition == nil {
		t.Fatalf("forward cut-over: %v, %+v; want Complete with writes blocked and a target position", err, st.Cutover)
	}
	// The application now writes to the new deployment.
	nc, oc := newDep.MustClient(t), oldDep.MustClient(t)
	if _, err := nc.Database("app").Collection("c").InsertOne(ctx, doc("_id", "after-cutover")); err != nil {
		t.Fatal(err)
	}
	rev, err := fwd.Reverse(config.FormatPosition(bson.Timestamp{T: st.Cutover.TargetPosition.T, I: st.Cutover.TargetPosition.I}))
	if err != nil {
		t.Fatal(err)
	}
	opts := engineOpts()
	opts.UntilCaughtUp = true
	_, err = runEngine(t, rev, opts)
	if !errors.Is(err, engine.ErrTargetWritesBlocked) {
		t.Fatalf("reverse onto the blocked deployment: %v, want ErrTargetWritesBlocked", err)
	}
	t.Logf("the reverse task stopped with: %v", err)
	for _, part := range []string{"bypassWriteBlockingMode", "setUserWriteBlockMode: 1, global: false", "not applied"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not say %q", err, part)
		}
	}
	if n, err := oc.Database("app").Collection("c").CountDocuments(ctx, doc("_id", "after-cutover")); err != nil || n != 0 {
		t.Errorf("the blocked deployment took the reverse sync's write: %d (%v)", n, err)
	}
	// The user unblocks the old deployment's writes and runs the task again.
	if err := oldApp.Database("admin").RunCommand(ctx, doc("setUserWriteBlockMode", int32(1), "global", false)).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := runEngine(t, rev, opts); err != nil {
		t.Fatalf("reverse after unblocking: %v", err)
	}
	if n, err := oc.Database("app").Collection("c").CountDocuments(ctx, doc("_id", "after-cutover")); err != nil || n != 1 {
		t.Errorf("the new deployment's write on the old one: %d (%v), want 1", n, err)
	}
	assertSameDocs(t, nc, "app.c", oc, "app.c")
}
