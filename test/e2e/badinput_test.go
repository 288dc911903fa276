package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// badInputPassword is the auth server's real password; no run may print it.
const badInputPassword = "CorrectHorse-Battery9"

// TestBadInput runs `ferry run` on task files that must be refused and
// checks what a user sees: a non-zero exit, a message that names the field
// or the problem, no password anywhere in the output, and no database
// created on any server (no checkpoint database, no copied data).
func TestBadInput(t *testing.T) {
	bin := ferryBinary(t)
	src, dst := testserver.Start(t), testserver.Start(t)
	auth := testserver.Start(t, testserver.Options{Username: "ferry", Password: badInputPassword})
	servers := map[string]*mongo.Client{"source": src.MustClient(t), "target": dst.MustClient(t), "auth": auth.MustClient(t)}
	docs := make([]any, 200)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "sku", Value: fmt.Sprintf("sku-%03d", i)}}
	}
	insertDocs(t, servers["source"], "app", "orders", docs)
	insertDocs(t, servers["auth"], "app", "orders", docs)
	closed := closedPort(t)

	task := func(source, target, extra string) string {
		return fmt.Sprintf("name: bad-input\nmode: full\nsource: {%s}\ntarget: {%s}\n%s", source, target, extra)
	}
	uri := func(addr string) string { return fmt.Sprintf(`uri: "mongodb://%s/?directConnection=true"`, addr) }
	srcURI, dstURI := uri(src.Addr), uri(dst.Addr)
	_, srcPort, _ := net.SplitHostPort(src.Addr)

	cases := []struct {
		name string
		yaml string
		env  []string
		want []string // in stderr
	}{
		{"unreachable source", task(uri(closed), dstURI, ""), nil,
			[]string{"source: deployment unreachable", "check source.uri's host and port"}},
		{"wrong target port", task(srcURI, uri(closed), ""), nil,
			[]string{"target: deployment unreachable", "check target.uri's host and port"}},
		{"malformed URI", task(srcURI, `uri: "mongodb://`+dst.Addr+`/?connectTimeoutMS=soon"`, ""), nil,
			[]string{"target.uri: is not a valid MongoDB URI", `invalid value for "connectTimeoutMS"`}},
		{"malformed URI with a password", task(`uri: "mongodb://ferry:Hunter/Zebra@`+auth.Addr+`/"`, dstURI, ""), nil,
			[]string{"source.uri: is not a valid MongoDB URI (mongodb://***@" + auth.Addr + "/)", "unescaped slash in password"}},
		{"invalid regular expression", task(srcURI, dstURI, `namespaces: {include: ['app\.(orders']}`), nil,
			[]string{`namespaces.include[0]: invalid regular expression "app\\.(orders": missing closing )`}},
		{"unknown field", task(srcURI, dstURI, "threads: {reader: 2}"), nil,
			[]string{"reader: unknown field"}},
		{"unknown top-level field", task(srcURI, dstURI, "namespace: {include: ['app\\..*']}"), nil,
			[]string{"namespace: unknown field"}},
		{"target equal to source", task(srcURI, uri("localhost:"+srcPort), ""), nil,
			[]string{"target.uri: names the same deployment as source.uri", "point target.uri at the destination"}},
		{"target equal to source at another address", task(srcURI, uri("[::ffff:127.0.0.1]:"+srcPort), ""), nil,
			[]string{"target.uri: source and target are the same deployment", "point target.uri at the destination"}},
		{"shard keys for a target that is not sharded", task(srcURI, dstURI+", shardKeys: [{namespace: app.orders, fields: [region]}]", ""), nil,
			[]string{"target.shardKeys: the target is not a sharded cluster", "remove target.shardKeys"}},
		{"wrong password in passwordEnv", task(srcURI, uri(auth.Addr)+", username: ferry, passwordEnv: FERRY_TARGET_PASSWORD", ""),
			[]string{"FERRY_TARGET_PASSWORD=WrongHunterZebra"},
			[]string{"target: authentication failed", "check target.username"}},
		{"passwordEnv not set", task(srcURI, uri(auth.Addr)+", username: ferry, passwordEnv: FERRY_TARGET_PASSWORD", ""), nil,
			[]string{"target.passwordEnv: environment variable FERRY_TARGET_PASSWORD is not set"}},
		{"wrong password in the URI", task(`uri: "mongodb://ferry:Wrong%40HunterZebra@`+auth.Addr+`/?directConnection=true"`, dstURI, ""), nil,
			[]string{"source: authentication failed", "mongodb://***@" + auth.Addr, "check source.username"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := databases(t, servers)
			stdout, stderr, code := runFerry(t, bin, writeFile(t, c.yaml), c.env)
			if code == 0 {
				t.Errorf("ferry run exited 0, want a failure\nstderr:\n%s", stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
			for _, secret := range []string{"Hunter", "Zebra", badInputPassword} {
				if strings.Contains(stdout+stderr, secret) {
					t.Errorf("output contains the password part %q:\nstdout:\n%s\nstderr:\n%s", secret, stdout, stderr)
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

	// The same checks would notice a write: a good task does write.
	t.Run("control", func(t *testing.T) {
		_, stderr, code := runFerry(t, bin, writeFile(t, task(srcURI, dstURI, "verify: {mode: count}")), nil)
		if code != 0 {
			t.Fatalf("ferry run exited %d:\n%s", code, stderr)
		}
		if got := databases(t, servers)["target"]; !slices.Contains(got, "app") || !slices.Contains(got, "mongoferry") {
			t.Fatalf("target databases after a good run: %v, want app and mongoferry", got)
		}
	})
}

// runFerry runs `ferry run` on a task file with extra environment
// variables and returns its output and exit code.
func runFerry(t *testing.T, bin, taskFile string, env []string) (stdout, stderr string, code int) {
	t.Helper()
	return ferryCommand(t, bin, env, "", "run", "-f", taskFile, "--progress", "none", "--listen", "")
}

// ferryCommand runs ferry with args, extra environment variables and
// stdin, and returns its output and exit code.
func ferryCommand(t *testing.T, bin string, env []string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ferry %s did not finish within 60s\nstderr:\n%s", args[0], errOut.String())
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("ferry %s: %v", args[0], err)
	}
	return out.String(), errOut.String(), code
}

// databases lists each server's database names, sorted.
func databases(t *testing.T, servers map[string]*mongo.Client) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for name, c := range servers {
		names, err := c.ListDatabaseNames(context.Background(), bson.D{})
		if err != nil {
			t.Fatalf("list %s databases: %v", name, err)
		}
		slices.Sort(names)
		out[name] = names
	}
	return out
}

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestChangeStreamOnServerWithoutIt: incremental.method changeStream on a
// server without change streams (FerretDB) fails clearly and writes
// nothing.
func TestChangeStreamOnServerWithoutIt(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	insertDocs(t, src.MustClient(t), "app", "c", []any{bson.D{{Key: "_id", Value: 1}}})
	task := newTask(t, "cs", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Incremental.Method = config.MethodChangeStream
	})
	_, err := runEngine(t, task, engineOpts())
	if err == nil || !strings.Contains(err.Error(), "change streams need a replica set") {
		t.Fatalf("run: %v, want an error saying change streams need a replica set", err)
	}
	names, _ := dst.MustClient(t).ListDatabaseNames(context.Background(), bson.D{})
	for _, n := range names {
		if n == "mongoferry" || n == "app" {
			t.Errorf("the refused task wrote database %s on the target", n)
		}
	}
}
