package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
)

// TestMemoryAdversarialInput runs `ferry run` with cache.maxBytes 64MiB on
// inputs built to blow a buffer: documents of 16 MiB (the BSON limit, less
// a little), documents of 25,000 fields (FerretDB v1.24 takes time growing
// with the square of the field count to store one: 1.6 s for 20,000 fields
// here, past the client's 2-minute timeout for 100,000), and a transaction
// of 100,000 operations (a partialTxn chain injected into the source's oplog, the
// shape MongoDB logs a large transaction in; FerretDB has no transactions).
// The worker's peak RSS, as the kernel reports it, stays under maxBytes
// plus 100 MiB, and the target ends equal to the source. FerretDB stores
// and replays these slowly (the transaction is replayed at a few hundred
// operations a second), so the test runs only with MONGOFERRY_ADVERSARIAL=1
// (make memory-adversarial); its figures are in docs/reliability.md.
func TestMemoryAdversarialInput(t *testing.T) {
	if os.Getenv("MONGOFERRY_ADVERSARIAL") != "1" {
		t.Skip("takes tens of minutes on FerretDB: run it with make memory-adversarial (MONGOFERRY_ADVERSARIAL=1)")
	}
	const limit = (64 + 100) << 20
	cases := []struct {
		name  string
		mode  string
		seed  func(t *testing.T, c *mongo.Client)
		after func(t *testing.T, c *mongo.Client) // source writes during replay
	}{
		{"16 MiB documents", "full", func(t *testing.T, c *mongo.Client) {
			blob := strings.Repeat("b", 16<<20-200)
			for i := 0; i < 10; i++ {
				insertDocs(t, c, "adv", "c", []any{bson.D{{Key: "_id", Value: int32(i)}, {Key: "blob", Value: blob}}})
			}
		}, nil},
		{"25,000-field documents", "full", func(t *testing.T, c *mongo.Client) {
			for i := 0; i < 6; i++ {
				d := make(bson.D, 0, 25_001)
				d = append(d, bson.E{Key: "_id", Value: int32(i)})
				for f := 0; f < 25_000; f++ {
					d = append(d, bson.E{Key: "f" + strconv.Itoa(f), Value: int32(f)})
				}
				insertDocs(t, c, "adv", "c", []any{d})
			}
		}, nil},
		{"100,000-operation transaction", "fullAndIncremental", func(t *testing.T, c *mongo.Client) {
			insertDocs(t, c, "adv", "c", []any{bson.D{{Key: "_id", Value: "first"}}})
		}, func(t *testing.T, c *mongo.Client) {
			in := newInjector(t, c)
			pad := strings.Repeat("t", 200)
			var prev bson.Timestamp
			const perEntry, entries = 1000, 100
			for e := 0; e < entries; e++ {
				ops := make(bson.A, 0, perEntry)
				for k := 0; k < perEntry; k++ {
					ops = append(ops, ins("adv.c", doc("_id", int32(e*perEntry+k), "pad", pad)))
				}
				o := doc("applyOps", ops, "partialTxn", true)
				if e == entries-1 {
					o = doc("applyOps", ops, "count", int64(entries*perEntry))
				}
				prev = in.add("c", "admin.$cmd", append([]bson.E{{Key: "o", Value: o}}, txn(9, prev)...)...)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := testserver.Start(t, testserver.Options{OplogBytes: 256 << 20})
			dst := testserver.Start(t, testserver.Options{OplogBytes: -1})
			sc, dc := src.MustClient(t), dst.MustClient(t)
			c.seed(t, sc)
			task := writeFile(t, fmt.Sprintf(`name: adversarial
mode: %s
source: {uri: %q}
target: {uri: %q}
threads: {readers: 4, writers: 4}
cache: {maxBytes: 64MiB, batchSize: 1000, bucketNum: 4, bucketSize: 4}
verify: {mode: none}
`, c.mode, src.URI, dst.URI))
			args := []string{"run", "-f", task, "--progress", "none", "--listen", "", "--until-caught-up"}
			out, err := exec.Command(ferryBinary(t), args...).CombinedOutput()
			if err == nil && c.after != nil {
				// The copy is done and the checkpoint saved: the transaction
				// comes after it, and the next run replays it.
				c.after(t, sc)
				out, err = exec.Command(ferryBinary(t), args...).CombinedOutput()
			}
			if err != nil {
				t.Fatalf("run: %v\n%s", err, tail(out))
			}
			m := regexp.MustCompile(`peakRSSBytes=(\d+)`).FindSubmatch(out)
			if m == nil {
				t.Fatalf("no peakRSSBytes in the output:\n%s", tail(out))
			}
			rss, _ := strconv.ParseInt(string(m[1]), 10, 64)
			t.Logf("%s with cache.maxBytes 64MiB: peak RSS %d MiB (limit %d MiB)", c.name, rss>>20, limit>>20)
			if rss > limit {
				t.Errorf("peak RSS %d MiB, want under %d MiB", rss>>20, limit>>20)
			}
			if c.after == nil {
				assertSameDocs(t, sc, "adv.c", dc, "adv.c")
			} else if n, err := dc.Database("adv").Collection("c").CountDocuments(context.Background(), bson.D{}); err != nil || n != 100_001 {
				t.Errorf("the target holds %d documents (%v), want the first one and the transaction's 100,000", n, err)
			}
		})
	}
}

func tail(b []byte) string {
	if len(b) > 4000 {
		return "..." + string(b[len(b)-4000:])
	}
	return string(b)
}
