package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
)

// TestVerifyCommand runs `ferry verify` as a user would: after a good copy
// it exits 0; after one document is changed, one deleted and one added on
// the target it exits 2 and names the namespace and each _id, in hash and
// sample modes (count mode compares counts only, and these three changes
// leave the count as it was).
func TestVerifyCommand(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	insertDocs(t, sc, "app", "orders", mixedIDDocs(600))
	insertDocs(t, sc, "app", "untouched", mixedIDDocs(50))
	taskFile := writeFile(t, fmt.Sprintf("name: verify-cli\nmode: full\nsource: {uri: %q}\ntarget: {uri: %q}\nverify: {mode: none}\n", src.URI, dst.URI))
	bin := ferryBinary(t)
	if out, err := exec.Command(bin, "run", "-f", taskFile, "--progress", "none", "--listen", "").CombinedOutput(); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	verifyCmd := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"verify", "-f", taskFile}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			return out.String(), ee.ExitCode()
		case err != nil:
			t.Fatalf("verify: %v", err)
		}
		return out.String(), 0
	}
	if out, code := verifyCmd(); code != 0 || !strings.Contains(out, "every namespace matches (2 compared)") {
		t.Fatalf("verify after a good copy: exit %d\n%s", code, out)
	}

	ctx := context.Background()
	orders := dc.Database("app").Collection("orders")
	if _, err := orders.UpdateOne(ctx, bson.D{{Key: "_id", Value: int32(0)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: int32(-1)}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := orders.DeleteOne(ctx, bson.D{{Key: "_id", Value: "key-000002"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := orders.InsertOne(ctx, bson.D{{Key: "_id", Value: "stray"}, {Key: "n", Value: int32(7)}}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		mode string
		want []string
	}{
		{"hash", []string{"app.orders", "0", `"key-000002"`, `"stray"`, "missing", "extra", "changed"}},
		{"sample", []string{"app.orders", "0", `"key-000002"`}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			args := []string{"--mode", c.mode}
			if c.mode == "sample" {
				args = append(args, "--sample-size", "1000") // every document, so the sample holds the two
			}
			out, code := verifyCmd(args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (differences found)\n%s", code, out)
			}
			for _, w := range append(c.want, "1 of 2 compared namespaces differ") {
				if !strings.Contains(out, w) {
					t.Errorf("output does not contain %q:\n%s", w, out)
				}
			}
		})
	}
}
