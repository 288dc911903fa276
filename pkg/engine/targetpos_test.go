package engine

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testutil"
)

// TestTargetPositionWarning: when the target's oplog cannot be read at
// cut-over, the warning speaks of the target's oplog only (it said it
// could not "read the source's oplog").
func TestTargetPositionWarning(t *testing.T) {
	target, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + testutil.FreeAddr(t) + "/?directConnection=true").
		SetServerSelectionTimeout(200 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = target.Disconnect(context.Background()) }()
	var logged bytes.Buffer
	d := &cutoverDriver{log: slog.New(slog.NewTextHandler(&logged, nil)), target: target}
	if ts, err := d.targetPosition(context.Background()); err != nil || !ts.IsZero() {
		t.Fatalf("targetPosition: %v, %v; want no position and no error", ts, err)
	}
	if out := logged.String(); !strings.Contains(out, "the target's oplog position is unknown") || strings.Contains(out, "source") {
		t.Errorf("warning:\n%s", out)
	}
}
