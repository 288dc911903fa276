package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/engine"
)

// canary is the servers' real password; no output, endpoint, argument or
// record of MongoFerry's may ever hold it.
const canary = "Canary7f3e9b2cPassw0rd"

// canaryScan collects everything a run of `ferry run` exposes: its output,
// its /status and /metrics responses while it runs, its command line, and
// the records it keeps in the target's checkpoint database.
type canaryScan struct {
	mu    sync.Mutex
	texts map[string]string // where -> what was read
	n     int
}

func (s *canaryScan) add(where, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	s.texts[fmt.Sprintf("%s #%d", where, s.n)] = text
}

// hits lists where the canary appeared.
func (s *canaryScan) hits() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for where, text := range s.texts {
		if i := strings.Index(text, canary); i >= 0 {
			out = append(out, fmt.Sprintf("%s: ...%s...", where, text[max(0, i-80):min(len(text), i+len(canary)+20)]))
		}
	}
	return out
}

// all is every text read from where (a name given to add).
func (s *canaryScan) all(where string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for w, text := range s.texts {
		if strings.HasPrefix(w, where+" #") {
			b.WriteString(text)
		}
	}
	return b.String()
}

// watch reads /status, /metrics and the process's command line every
// 100ms until stop is closed.
func (s *canaryScan) watch(addr string, pid int, stop <-chan struct{}) {
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		for _, path := range []string{"/status", "/metrics", "/healthz"} {
			if resp, err := client.Get("http://" + addr + path); err == nil {
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				s.add(path, string(b))
			}
		}
		if args, err := procstat.Cmdline(pid); err == nil {
			s.add("command line", strings.Join(args, " "))
		}
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestSecretsNeverLeak gives the servers a canary password, puts it in a
// task file (in a URI, a passwordFile and a passwordEnv) and runs `ferry
// run` through a success, a wrong password, a target that goes away while
// the task replays, and a verification failure, then `ferry cutover` of
// the replaying task and `ferry reverse` printing its reverse task. Every line of output,
// every /status, /metrics and /healthz response, the process's command
// line and every record in the target's checkpoint database are scanned
// for the canary: zero hits.
func TestSecretsNeverLeak(t *testing.T) {
	src := testserver.Start(t, testserver.Options{Username: "ferry", Password: canary})
	dst := testserver.Start(t, testserver.Options{Username: "ferry", Password: canary, OplogBytes: -1})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	docs := make([]any, 400)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: fmt.Sprintf("value-%d", i)}}
	}
	insertDocs(t, sc, "app", "orders", docs)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte(canary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongFile := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrongFile, []byte(canary+"-wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := ferryBinary(t)
	scan := &canaryScan{texts: map[string]string{}}
	srcURI := fmt.Sprintf("mongodb://ferry:%s@%s/?directConnection=true", canary, src.Addr)
	task := func(name, mode, target, extra string) string {
		return writeFile(t, fmt.Sprintf("name: %s\nmode: %s\nsource: {uri: %q}\ntarget: {uri: %q, username: ferry, %s}\n%s",
			name, mode, srcURI, dst.URI, target, extra))
	}
	// ferry starts `ferry <command> -f taskFile`, watches it, and returns
	// its exit code once during returns (then it is interrupted) or it
	// exits.
	ferry := func(name, command, taskFile string, env []string, args []string, during func(addr string)) int {
		addr := testutil.FreeAddr(t)
		if command != "reverse" {
			args = append([]string{"--progress", "log", "--progress-interval", "200ms", "--log-level", "debug", "--listen", addr}, args...)
		}
		cmd := exec.Command(bin, append([]string{command, "-f", taskFile}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var out, errOut testutil.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		watched := make(chan struct{})
		go func() { scan.watch(addr, cmd.Process.Pid, stop); close(watched) }()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if during != nil {
			during(addr)
			_ = cmd.Process.Signal(syscall.SIGINT)
		}
		var err error
		select {
		case err = <-exited:
		case <-time.After(3 * time.Minute):
			_ = cmd.Process.Kill()
			err = <-exited
			t.Errorf("%s: ferry %s did not finish within 3 minutes", name, command)
		}
		close(stop)
		<-watched
		scan.add(name+" stdout", out.String())
		scan.add(name+" stderr", errOut.String())
		t.Logf("%s: exit %v, %d bytes of output", name, err, len(out.String())+len(errOut.String()))
		return cmd.ProcessState.ExitCode()
	}
	run := func(name, taskFile string, env []string, args []string, during func(addr string)) int {
		return ferry(name, "run", taskFile, env, args, during)
	}

	t.Run("success", func(t *testing.T) {
		if code := run("success", task("canary-ok", "fullAndIncremental", "passwordFile: "+strconv.Quote(pwFile), "verify: {mode: hash}"),
			nil, []string{"--until-caught-up"}, nil); code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
		assertSameDocs(t, sc, "app.orders", dc, "app.orders")
	})
	t.Run("wrong password", func(t *testing.T) {
		if code := run("wrong password", task("canary-wrong", "full", "passwordFile: "+strconv.Quote(wrongFile), ""), nil, nil, nil); code == 0 {
			t.Fatal("exit code 0 with a wrong password")
		}
	})
	gone := task("canary-gone", "fullAndIncremental", "passwordEnv: FERRY_CANARY", "namespaces: {rename: [{from: app, to: app3}]}")
	t.Run("target goes away", func(t *testing.T) {
		code := run("target goes away", gone,
			[]string{"FERRY_CANARY=" + canary}, nil, func(addr string) {
				waitFor(t, "replay", 2*time.Minute, func() bool {
					s, err := getStatus(addr)
					return err == nil && s.Phase == engine.PhaseStreaming
				})
				dst.Kill()
				_, _ = sc.Database("app").Collection("orders").InsertOne(context.Background(), bson.D{{Key: "_id", Value: int32(10000)}})
				time.Sleep(8 * time.Second) // the worker retries and reports
				if err := dst.Restart(context.Background()); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Second)
			})
		t.Logf("exit code %d after SIGINT", code)
	})
	t.Run("verification failure", func(t *testing.T) {
		// A document the copy skips (onConflict: skip) differs on the
		// target, so verification fails.
		if _, err := dc.Database("app2").Collection("orders").InsertOne(context.Background(), bson.D{{Key: "_id", Value: int32(1)}, {Key: "v", Value: "different"}}); err != nil {
			t.Fatal(err)
		}
		code := run("verification failure", task("canary-verify", "full", "passwordFile: "+strconv.Quote(pwFile),
			"namespaces: {rename: [{from: app, to: app2}]}\nfullSync: {onConflict: skip}\nverify: {mode: hash}"), nil, nil, nil)
		if code != 2 {
			t.Fatalf("exit code %d, want 2 (verification found differences)", code)
		}
	})

	t.Run("cutover and reverse", func(t *testing.T) {
		// The task left streaming above, cut over (its summary goes to
		// stdout), then turned around: the reverse task printed for
		// review holds the forward task's source URI.
		if code := ferry("cutover", "cutover", gone, []string{"FERRY_CANARY=" + canary}, []string{"--verify", "count"}, nil); code != 0 {
			t.Fatalf("ferry cutover: exit code %d, want 0", code)
		}
		if code := ferry("reverse", "reverse", gone, nil, []string{"--from", time.Now().UTC().Format(time.RFC3339)}, nil); code != 0 {
			t.Fatalf("ferry reverse: exit code %d, want 0", code)
		}
		if !strings.Contains(scan.all("reverse stdout"), "name: canary-gone-reverse") {
			t.Errorf("ferry reverse printed no reverse task:\n%s", scan.all("reverse stdout"))
		}
	})

	// What the runs left in the target's checkpoint database.
	scan.add("checkpoint database", dumpDatabase(t, dc, "mongoferry"))
	// The scan does find the canary where it is: in a task file.
	control := &canaryScan{texts: map[string]string{}}
	b, _ := os.ReadFile(task("control", "full", "", ""))
	control.add("task file", string(b))
	if len(control.hits()) != 1 {
		t.Fatal("the scan does not see the canary in a task file")
	}
	if hits := scan.hits(); len(hits) > 0 {
		t.Errorf("the canary password appeared %d times:\n%s", len(hits), strings.Join(hits, "\n"))
	}
	t.Logf("scanned %d texts: 0 hits", len(scan.texts))
}

// dumpDatabase renders every document of a database.
func dumpDatabase(t *testing.T, c *mongo.Client, db string) string {
	t.Helper()
	ctx := context.Background()
	names, err := c.Database(db).ListCollectionNames(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, n := range names {
		cur, err := c.Database(db).Collection(n).Find(ctx, bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		for cur.Next(ctx) {
			b.WriteString(n + ": " + cur.Current.String() + "\n")
		}
		if err := cur.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}
