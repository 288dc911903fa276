package e2e

import (
	"log/slog"
	"os"

	"github.com/mongoferry/mongoferry/pkg/engine"
)

func engineOpts() engine.Options {
	level := slog.LevelWarn
	if os.Getenv("MONGOFERRY_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return engine.Options{Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))}
}
