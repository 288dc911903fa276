package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/test/internal/gobuild"
)

// TestCopyMemoryBoundedByMaxBytes copies 1 MiB documents (far more bytes
// than cache.maxBytes), split into ranges so that four readers fill the
// queues at once, and checks the worker's peak RSS, as the kernel reports
// it, stays within cache.maxBytes plus 100 MiB.
func TestCopyMemoryBoundedByMaxBytes(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	const docs, size = 192, 1 << 20
	payload := strings.Repeat("m", size-100)
	for start := 0; start < docs; start += 16 {
		batch := make([]any, 0, 16)
		for i := start; i < start+16; i++ {
			batch = append(batch, bson.D{{Key: "_id", Value: int32(i)}, {Key: "blob", Value: payload}})
		}
		insertDocs(t, sc, "big", "blobs", batch)
	}
	task := writeFile(t, fmt.Sprintf(`name: memory
mode: full
source: {uri: %q}
target: {uri: %q}
threads: {readers: 4, writers: 4}
cache: {maxBytes: 64MiB, batchSize: 1000, bucketNum: 4, bucketSize: 4}
fullSync: {rangeDocuments: 24, split: always}
verify: {mode: none}
`, src.URI, dst.URI))
	out, err := exec.Command(ferryBinary(t), "run", "-f", task, "--progress", "none", "--listen", "").CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`peakRSSBytes=(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no peakRSSBytes in the output:\n%s", out)
	}
	rss, _ := strconv.ParseInt(string(m[1]), 10, 64)
	buffered := regexp.MustCompile(`peakBufferedBytes=(\d+)`).FindSubmatch(out)
	t.Logf("copied %d MiB with cache.maxBytes 64MiB: peak RSS %d MiB, peak buffered %s bytes", docs*size>>20, rss>>20, buffered[1])
	if gobuild.Race {
		// The race detector's shadow memory multiplies the RSS: the bound
		// holds for the engine's own accounting of what it buffers.
		if peak, _ := strconv.ParseInt(string(buffered[1]), 10, 64); peak > 64<<20 {
			t.Errorf("peak buffered %d bytes, want at most cache.maxBytes 64MiB", peak)
		}
	} else if rss > 164<<20 {
		t.Errorf("peak RSS %d MiB, want under 164 MiB with cache.maxBytes 64MiB", rss>>20)
	}
	assertSameDocs(t, sc, "big.blobs", dc, "big.blobs")
}
