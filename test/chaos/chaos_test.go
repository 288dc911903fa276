package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mongoferry/mongoferry/test/internal/gobuild"
)

// TestChaos runs the chaos schedule: CHAOS_CYCLES faults (20 by default,
// `make chaos CYCLES=N` for more) drawn from CHAOS_SEED (1 by default),
// with the servers' storage and every log under CHAOS_DIR when set, for at
// most CHAOS_BUDGET (a duration) when set, only the fault kinds naming one
// of the comma-separated words of CHAOS_ONLY when set. It
// fails on any difference between source and target, on a task that does
// not catch up while both servers answer, and on a resume past the oplog
// window that does not stop with OplogWindowLost.
func TestChaos(t *testing.T) {
	cfg := Config{Cycles: 20, Seed: 1, Docs: 800, Rate: 24, Logf: t.Logf}
	if s := os.Getenv("CHAOS_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CHAOS_CYCLES=%q: want a positive number", s)
		}
		cfg.Cycles = n
	}
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
		cfg.Seed = n
	}
	if s := os.Getenv("CHAOS_BUDGET"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("CHAOS_BUDGET=%q: %v", s, err)
		}
		cfg.Budget = d
	}
	if s := os.Getenv("CHAOS_ONLY"); s != "" {
		cfg.Only = strings.Split(s, ",")
	}
	cfg.Dir = os.Getenv("CHAOS_DIR")
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.Ferry = buildFerry(t)
	rep, err := Run(context.Background(), cfg)
	var b strings.Builder
	rep.Write(&b)
	t.Log("\n" + b.String())
	if path := os.Getenv("CHAOS_REPORT"); path != "" {
		_ = os.WriteFile(path, []byte(b.String()), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	if rep.Differences > 0 {
		t.Errorf("%d differences between source and target", rep.Differences)
	}
}

func buildFerry(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ferry")
	if err := gobuild.Command("./cmd/ferry", out); err != nil {
		t.Fatalf("build ferry: %v", err)
	}
	return out
}
