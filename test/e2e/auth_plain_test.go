package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
)

// TestPlainAuthentication copies from a FerretDB that accepts only PLAIN
// authentication (its data in a PostgreSQL server that asks for a
// password, to which FerretDB hands the PLAIN credentials) with the
// credentials in the task file: username, passwordEnv and authMechanism
// PLAIN. The copy matches the source, and the password appears in no
// output and no record on the target. Without authMechanism (the
// driver's SCRAM) the same task fails, naming the fields to check.
func TestPlainAuthentication(t *testing.T) {
	pg := testserver.StartPostgres(t, "ferry", canary)
	src := testserver.Start(t, testserver.Options{PostgreSQL: pg.URL(), Username: "ferry", Password: canary, OplogBytes: -1})
	dst := testserver.Start(t, testserver.Options{OplogBytes: -1})
	sc, dc := src.MustClient(t), dst.MustClient(t)

	// The source requires authentication: a client without it reads nothing.
	anon, err := mongo.Connect(options.Client().ApplyURI(src.URI))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = anon.Disconnect(context.Background()) }()
	if _, err := anon.Database("app").ListCollectionNames(context.Background(), bson.D{}); err == nil {
		t.Fatal("the source answered a client that did not authenticate")
	}

	docs := make([]any, 300)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: fmt.Sprintf("value-%d", i)}}
	}
	insertDocs(t, sc, "app", "orders", docs)

	bin := ferryBinary(t)
	env := []string{"FERRY_PLAIN_PASSWORD=" + canary}
	task := func(name, mechanism string) string {
		return writeFile(t, fmt.Sprintf("name: %s\nmode: full\nsource: {uri: %q, username: ferry, passwordEnv: FERRY_PLAIN_PASSWORD%s}\ntarget: {uri: %q}\n",
			name, src.URI, mechanism, dst.URI))
	}

	stdout, stderr, code := ferryCommand(t, bin, env, "", "run", "-f", task("plain", ", authMechanism: PLAIN"),
		"--progress", "log", "--progress-interval", "200ms", "--log-level", "debug", "--listen", "")
	if code != 0 {
		t.Fatalf("ferry run exited %d\nstderr:\n%s", code, stderr)
	}
	assertSameDocs(t, sc, "app.orders", dc, "app.orders")
	outputs := map[string]string{"stdout": stdout, "stderr": stderr}

	_, stderr, code = ferryCommand(t, bin, env, "", "run", "-f", task("scram", ""), "--progress", "none", "--listen", "")
	if code == 0 {
		t.Fatal("ferry run without authMechanism PLAIN succeeded against a PLAIN-only server")
	}
	outputs["stderr without PLAIN"] = stderr
	t.Logf("without authMechanism: %s", lastLine(stderr))

	recs, err := dc.Database("mongoferry").ListCollectionNames(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for _, coll := range recs {
		cur, err := dc.Database("mongoferry").Collection(coll).Find(context.Background(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		var all []bson.Raw
		if err := cur.All(context.Background(), &all); err != nil {
			t.Fatal(err)
		}
		for _, d := range all {
			outputs["mongoferry."+coll] += d.String()
		}
	}
	for where, text := range outputs {
		if strings.Contains(text, canary) {
			t.Errorf("the password appears in %s", where)
		}
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
