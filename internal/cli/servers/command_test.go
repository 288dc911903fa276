package servers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestServersCommand: ferry servers starts two servers, prints a task file
// for them that ferry run accepts (its URIs answer), and on Ctrl-C stops
// them and exits 130.
func TestServersCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out testutil.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- serveUntilDone(ctx, &out, 8) }()

	var task *config.Task
	deadline := time.Now().Add(time.Minute)
	for task == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no task file printed within a minute:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
		text := out.String()
		start, end := strings.Index(text, "name: try\n"), strings.Index(text, "verify: {mode: hash}\n")
		if start < 0 || end < 0 {
			continue
		}
		var err error
		if task, err = config.Parse([]byte(text[start : end+len("verify: {mode: hash}\n")])); err != nil {
			t.Fatalf("the printed task file: %v\n%s", err, text)
		}
	}
	if err := task.Validate(); err != nil {
		t.Fatalf("the printed task file: %v", err)
	}
	ping := func(uri string) error {
		c, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(2 * time.Second))
		if err != nil {
			return err
		}
		defer func() { _ = c.Disconnect(context.Background()) }()
		return c.Ping(context.Background(), nil)
	}
	for _, uri := range []string{task.Source.URI, task.Target.URI} {
		if err := ping(uri); err != nil {
			t.Errorf("%s: %v", uri, err)
		}
	}

	cancel()
	if err := <-done; !errors.Is(err, exit.Interrupted) {
		t.Errorf("after Ctrl-C: %v, want exit 130", err)
	}
	if err := ping(task.Source.URI); err == nil {
		t.Error("the source still answers after Ctrl-C")
	}
}
