package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// TestBadInputPlan runs `ferry run` on tasks whose fields are valid but
// that cannot run against the servers they name: a replaying task on a
// source without an oplog, namespaces that would merge two collections on
// the target, and namespaces that select nothing. Each must exit 1 before
// writing anything, with a message naming the cause and the fix.
func TestBadInputPlan(t *testing.T) {
	bin := ferryBinary(t)
	src, dst := testserver.Start(t), testserver.Start(t)
	standalone := testserver.Start(t, testserver.Options{OplogBytes: -1})
	servers := map[string]*mongo.Client{"source": src.MustClient(t), "target": dst.MustClient(t), "standalone": standalone.MustClient(t)}
	docs := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: fmt.Sprintf("v-%03d", i)}}
		}
		return out
	}
	for _, ns := range []string{"shop.customers", "shop.orders", "crm.customers", "crm.leads"} {
		db, coll := split(ns)
		insertDocs(t, servers["source"], db, coll, docs(20))
	}
	insertDocs(t, servers["standalone"], "app", "orders", docs(20))

	task := func(source *testserver.Server, mode, extra string) string {
		return fmt.Sprintf("name: bad-plan\nmode: %s\nsource: {uri: %q}\ntarget: {uri: %q}\n%s", mode, source.URI, dst.URI, extra)
	}
	cases := []struct {
		name string
		yaml string
		want []string // in stderr
	}{
		{"fullAndIncremental from a source without an oplog", task(standalone, "fullAndIncremental", ""),
			[]string{"mode: fullAndIncremental: no oplog to replay: the source has no local.oplog.rs", "nothing was written", "one-member replica set", "set mode: full"}},
		{"incremental from a source without an oplog", task(standalone, "incremental", ""),
			[]string{"mode: incremental with incremental.method: oplog: no oplog to replay", "set mode: full"}},
		{"a database renamed onto a selected one", task(src, "full", "namespaces: {rename: [{from: crm, to: shop}]}"),
			[]string{"crm.customers (by namespaces.rename[0]) and shop.customers (keeps its name) would both be written to shop.customers on the target",
				"nothing was written", "exclude one of them with namespaces.exclude, or rename one elsewhere"}},
		{"a collection renamed onto a selected one", task(src, "fullAndIncremental", "namespaces: {rename: [{from: crm.leads, to: shop.orders}]}"),
			[]string{"crm.leads (by namespaces.rename[0]) and shop.orders (keeps its name) would both be written to shop.orders on the target"}},
		{"an include the exclude removes", task(src, "full", `namespaces: {include: ['shop\.orders'], exclude: ['shop\..*']}`),
			[]string{"the task selects no collection: namespaces.include[0] `shop\\.orders` selects shop.orders, but namespaces.exclude[0] `shop\\..*` removes shop.orders",
				"nothing was written"}},
		{"an include that matches nothing, mode full", task(src, "full", `namespaces: {include: ['^shop\.']}`),
			[]string{"the task selects no collection: namespaces.include[0] `^shop\\.` selects no collection on the source", "(^ and $ are implied)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := databases(t, servers)
			_, stderr, code := runFerry(t, bin, writeFile(t, c.yaml), nil)
			if code != 1 {
				t.Errorf("ferry run exited %d, want 1\nstderr:\n%s", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
			after := databases(t, servers)
			for name := range servers {
				if !slices.Equal(before[name], after[name]) {
					t.Errorf("%s server's databases changed from %v to %v", name, before[name], after[name])
				}
			}
		})
	}
}

// TestSourceShardWithoutOplog: a replaying task on a sharded source one of
// whose shards keeps no oplog stops before writing, naming the shard.
func TestSourceShardWithoutOplog(t *testing.T) {
	c := testserver.StartCluster(t, 2)
	dst := testserver.Start(t)
	if err := c.DropOplog(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	task := &config.Task{Name: "shard-no-oplog", Spec: config.Spec{Mode: config.ModeFullAndIncremental, Source: c.Source(), Target: config.Endpoint{URI: dst.URI}}}
	task.SetDefaults()
	if err := task.Validate(); err != nil {
		t.Fatal(err)
	}
	_, err := runEngine(t, task, engineOpts())
	if err == nil || !strings.Contains(err.Error(), "no oplog to replay: shard "+c.Names[1]+" of the source has no local.oplog.rs") {
		t.Fatalf("run: %v, want an error naming shard %s and its missing oplog", err, c.Names[1])
	}
	if names, _ := dst.MustClient(t).ListDatabaseNames(context.Background(), bson.D{}); slices.Contains(names, config.DefaultDatabase) {
		t.Errorf("the refused task wrote on the target: databases %v", names)
	}
}

// TestChangedSelection: a completed task run again with another include
// stops before writing, says what changed and how to start over; `ferry
// reset` (after confirmation) drops its checkpoint, and the next run
// copies the new selection.
func TestChangedSelection(t *testing.T) {
	bin := ferryBinary(t)
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	for _, coll := range []string{"orders", "users"} {
		docs := make([]any, 30)
		for i := range docs {
			docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "coll", Value: coll}}
		}
		insertDocs(t, sc, "shop", coll, docs)
	}
	file := writeFile(t, "")
	write := func(include string) {
		yaml := fmt.Sprintf("name: changed\nmode: full\nsource: {uri: %q}\ntarget: {uri: %q}\nnamespaces: {include: [%s]}\nfullSync: {dropTarget: true}\nverify: {mode: count}\n",
			src.URI, dst.URI, include)
		if err := writeFileAt(file, yaml); err != nil {
			t.Fatal(err)
		}
	}
	collections := func() []string {
		names, err := dc.Database("shop").ListCollectionNames(context.Background(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(names)
		return names
	}

	write(`'shop\.orders'`)
	if _, stderr, code := runFerry(t, bin, file, nil); code != 0 {
		t.Fatalf("first run exited %d:\n%s", code, stderr)
	}
	write(`'shop\.orders', 'shop\.users'`)
	_, stderr, code := runFerry(t, bin, file, nil)
	if code != 1 {
		t.Errorf("run with a changed include exited %d, want 1:\n%s", code, stderr)
	}
	for _, w := range []string{"the task's namespaces changed since its checkpoint was written",
		"namespaces.include was [shop\\.orders], now [shop\\.orders, shop\\.users]", "nothing was written", "ferry reset -f", "give the task a new name"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not contain %q:\n%s", w, stderr)
		}
	}
	if got := collections(); !slices.Equal(got, []string{"orders"}) {
		t.Errorf("target collections after the refused run: %v, want [orders]", got)
	}

	stdout, stderr, code := ferryCommand(t, bin, nil, "n\n", "reset", "-f", file)
	if code != 1 || !strings.Contains(stderr, "not confirmed; nothing was dropped") || !strings.Contains(stdout, "phase Completed") {
		t.Errorf("reset answered no: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if _, stderr, code := runFerry(t, bin, file, nil); code != 1 {
		t.Errorf("run after an unconfirmed reset exited %d, want 1:\n%s", code, stderr)
	}
	stdout, stderr, code = ferryCommand(t, bin, nil, "", "reset", "-f", file, "--yes")
	if code != 0 || !strings.Contains(stdout, "dropped the checkpoint of task changed") {
		t.Fatalf("reset --yes: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if _, stderr, code := runFerry(t, bin, file, nil); code != 0 {
		t.Fatalf("run after the reset exited %d:\n%s", code, stderr)
	}
	assertSameDocs(t, sc, "shop.users", dc, "shop.users")
	assertSameDocs(t, sc, "shop.orders", dc, "shop.orders")
	if stdout, _, code := ferryCommand(t, bin, nil, "", "reset", "-f", file, "--yes"); code != 0 {
		t.Errorf("second reset exited %d:\n%s", code, stdout)
	}
	if stdout, _, code := ferryCommand(t, bin, nil, "", "reset", "-f", file, "--yes"); code != 0 || !strings.Contains(stdout, "nothing to reset") {
		t.Errorf("reset without a checkpoint: exit %d:\n%s", code, stdout)
	}
}

func writeFileAt(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

// TestReplayCollisionStops: a collection created on the source during
// replay whose target name another selected collection holds (crm.orders,
// renamed with crm to shop, onto shop.orders) stops replay with the
// collision error; its documents never reach the other collection.
func TestReplayCollisionStops(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	insertDocs(t, sc, "shop", "orders", []any{doc("_id", 1), doc("_id", 2)})
	insertDocs(t, sc, "crm", "leads", []any{doc("_id", 1)})
	task := newTask(t, "collide-later", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
		t.Namespaces = config.Namespaces{Rename: []config.Rename{{From: "crm", To: "shop"}}}
	})
	e, stop := startEngine(t, task, engineOpts())
	waitEngineCaughtUp(t, e, sc, 2*time.Minute)
	in := newInjector(t, sc)
	in.add("c", "crm.$cmd", o(doc("create", "orders")))
	in.add("i", "crm.orders", o(doc("_id", "intruder")))
	waitFor(t, "replay to stop", 2*time.Minute, func() bool { return e.Status().Phase == engine.PhaseFailed })
	err := stop()
	if !errors.Is(err, catalog.ErrNamespaceCollision) ||
		!strings.Contains(err.Error(), "shop.orders (keeps its name) and crm.orders (by namespaces.rename[0]) would both be written to shop.orders") {
		t.Fatalf("run: %v, want the collision of shop.orders and crm.orders", err)
	}
	if got, want := ids(t, dc, "shop.orders"), sortStrings([]string{`{"$numberInt":"1"}`, `{"$numberInt":"2"}`}); !slices.Equal(got, want) {
		t.Errorf("shop.orders on the target: %v, want %v", got, want)
	}
}
