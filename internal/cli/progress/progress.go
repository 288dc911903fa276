// Package progress shows how a long command is getting on: a bar redrawn
// in place on a terminal or a log line every interval (Show), a periodic
// line for verification (Line), and the number formats they and the
// commands' summaries share (Count, Bytes).
package progress

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
)

// Mode is how a long command shows progress: the value of its --progress
// flag.
type Mode string

// Modes.
const (
	Auto Mode = "auto" // Bar on a terminal, Log otherwise
	Bar  Mode = "bar"
	Log  Mode = "log"
	None Mode = "none"
)

// Valid reports whether m is one of the modes.
func (m Mode) Valid() bool {
	switch m {
	case Auto, Bar, Log, None:
		return true
	}
	return false
}

func (m Mode) resolve(w io.Writer) Mode {
	if m != Auto {
		return m
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return Bar
	}
	return Log
}

// Show draws a bar on a terminal (redrawn in place) or logs a line
// every interval, until ctx ends. It returns a func that stops it and
// waits for the last line.
func Show(ctx context.Context, mode Mode, w io.Writer, log *slog.Logger, interval time.Duration, status func() engine.Status) func() {
	mode = mode.resolve(w)
	if mode == None {
		return func() {}
	}
	tick := 250 * time.Millisecond
	if mode == Log {
		tick = interval
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				if mode == Bar {
					fmt.Fprintf(w, "\r%s\n", barLine(status()))
				}
				return
			case <-t.C:
				s := status()
				if mode == Bar {
					fmt.Fprintf(w, "\r%s", barLine(s))
				} else {
					logProgress(log, s)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

func barLine(s engine.Status) string {
	const width = 30
	c := s.Copy
	var pct float64
	label := string(s.Phase)
	detail := ""
	switch {
	case s.Phase == engine.PhaseStreaming && s.Replay != nil:
		r := s.Replay
		pct = 100
		lag := "unknown"
		if r.LagKnown() {
			lag = r.LagText()
		}
		if !r.LagKnown() || r.LagSeconds > 0 {
			pct = 0
		}
		detail = fmt.Sprintf("lag %s  applied %s ops  %s ops/s  buffered %s  checkpoint %s  waiting on %s",
			lag, Count(Applied(r)), Count(int64(r.OpsPerSecond)), Bytes(r.BufferedBytes), CheckpointText(r, time.TimeOnly), waiting(r))
		if n := len(s.Shards); n > 0 {
			streaming := 0
			for _, sh := range s.Shards {
				if sh.Phase == engine.SubtaskStreaming {
					streaming++
				}
			}
			detail += fmt.Sprintf("  shards %d/%d streaming", streaming, n)
		}
	case s.Phase == engine.PhaseVerifying && s.Verify != nil && s.Verify.Running:
		if s.Verify.Total > 0 {
			pct = 100 * float64(s.Verify.Done) / float64(s.Verify.Total)
		}
		detail = fmt.Sprintf("verifying %s %s/%s", s.Verify.CurrentNS, Count(s.Verify.Done), Count(s.Verify.Total))
	default:
		pct = c.Percent
		eta := "-"
		if c.Percent < 100 {
			eta = etaText(c.ETASeconds)
		}
		detail = fmt.Sprintf("%s/%s docs (%s here)  %s/s  %s docs/s  ETA %s  %s",
			Count(c.Documents), Count(c.EstimatedDocuments), Count(c.CopiedThisRun), Bytes(int64(c.BytesPerSecond)), Count(int64(c.DocsPerSecond)), eta, c.Stage)
		detail += "  " + startupText(s)
		if active := copying(c); len(active) > 0 {
			// The namespace expected to finish last sets the pace.
			last := slices.MaxFunc(active, func(a, b fullsync.NamespaceStatus) int { return cmp.Compare(a.ETASeconds, b.ETASeconds) })
			detail += fmt.Sprintf("  (%d copying; %s %.0f%% ETA %s)", len(active), last.NS, last.Percent, etaText(last.ETASeconds))
		}
	}
	if co := s.Cutover; co != nil {
		detail = "cut-over " + co.Step + "  " + detail
	}
	filled := int(pct / 100 * width)
	filled = max(0, min(width, filled))
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	if filled > 0 && filled < width {
		bar = strings.Repeat("=", filled-1) + ">" + strings.Repeat(" ", width-filled)
	}
	line := fmt.Sprintf("%-9s [%s] %5.1f%%  %s", label, bar, pct, detail)
	return fmt.Sprintf("%-120s", line)
}

// waiting is what replay waits on, "nothing" when nothing is pending.
func waiting(r *replay.Status) string {
	if r.WaitingOn == "" {
		return "nothing"
	}
	return r.WaitingOn
}

// lagAttrs are a progress line's lag: lagSeconds when it is known,
// otherwise lag=unknown and why, never a 0 that reads as caught up.
func lagAttrs(r *replay.Status) []any {
	if !r.LagKnown() {
		return []any{"lag", "unknown", "lagUnknown", r.LagUnknown}
	}
	return []any{"lagSeconds", r.LagSeconds}
}

func logProgress(log *slog.Logger, s engine.Status) {
	c := s.Copy
	if co := s.Cutover; co != nil {
		log.Info("cut-over progress", "step", co.Step, "caughtUp", co.CaughtUp, "writesBlocked", co.WritesBlocked, "message", co.Message)
	}
	switch {
	case s.Phase == engine.PhaseStreaming && s.Replay != nil:
		r := s.Replay
		log.Info("progress", append([]any{"phase", s.Phase}, append(lagAttrs(r), "applied", Applied(r), "opsPerSecond", int64(r.OpsPerSecond),
			"bufferedBytes", r.BufferedBytes, "checkpoint", CheckpointText(r, time.RFC3339), "waitingOn", waiting(r))...)...)
		for _, sh := range s.Shards {
			if sh.Replay == nil {
				log.Info("shard progress", "shard", sh.Shard, "phase", sh.Phase)
				continue
			}
			log.Info("shard progress", append([]any{"shard", sh.Shard, "phase", sh.Phase}, append(lagAttrs(sh.Replay), "applied", Applied(sh.Replay),
				"opsPerSecond", int64(sh.Replay.OpsPerSecond), "fromMigrate", sh.Replay.Skipped["fromMigrate"], "checkpoint", CheckpointText(sh.Replay, time.RFC3339),
				"waitingOn", waiting(sh.Replay))...)...)
		}
	case s.Phase == engine.PhaseVerifying && s.Verify != nil && s.Verify.Running:
		log.Info("progress", "phase", s.Phase, "ns", s.Verify.CurrentNS, "done", s.Verify.Done, "total", s.Verify.Total)
	default:
		log.Info("progress", "phase", s.Phase, "stage", c.Stage, "percent", fmt.Sprintf("%.1f", c.Percent),
			"documents", c.Documents, "estimated", c.EstimatedDocuments, "bytes", c.Bytes,
			"copiedHere", c.CopiedThisRun, "copiedHereBytes", c.CopiedBytesThisRun, "docsPerSecond", int64(c.DocsPerSecond),
			"bytesPerSecond", int64(c.BytesPerSecond), "etaSeconds", int64(c.ETASeconds), "bufferedBytes", c.BufferedBytes,
			"startupSeconds", fmt.Sprintf("%.1f", s.StartupSeconds), "starting", s.Starting)
		for _, n := range copying(c) {
			log.Info("namespace progress", "ns", n.NS, "percent", fmt.Sprintf("%.1f", n.Percent), "documents", n.Documents,
				"estimated", n.EstimatedDocuments, "bytes", n.Bytes, "docsPerSecond", int64(n.DocsPerSecond), "etaSeconds", int64(n.ETASeconds))
		}
	}
}

// startupText says how long the task has been starting, or took to start
// (to its first copied document).
func startupText(s engine.Status) string {
	if s.Starting {
		return fmt.Sprintf("starting for %.1fs", s.StartupSeconds)
	}
	return fmt.Sprintf("start-up %.1fs", s.StartupSeconds)
}

// copying returns the namespaces being copied now: started in this run
// and not finished.
func copying(c fullsync.Status) []fullsync.NamespaceStatus {
	var out []fullsync.NamespaceStatus
	for _, n := range c.Namespaces {
		if !n.Done && n.DocsPerSecond > 0 {
			out = append(out, n)
		}
	}
	return out
}

// CheckpointText writes the replay checkpoint's time; a zero position is
// the start of the source's oplog (it was empty when the task started).
func CheckpointText(r *replay.Status, layout string) string {
	if r.AppliedTS.IsZero() {
		return "oplog start"
	}
	return r.AppliedTime.Format(layout)
}

// etaText writes seconds left as 1m5s, or "-" when unknown (negative).
func etaText(seconds float64) string {
	if seconds < 0 {
		return "-"
	}
	return (time.Duration(seconds) * time.Second).String()
}

// Count writes 1234567 as 1.23M.
func Count(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fG", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e4:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// Bytes writes 1572864 as 1.5MiB.
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// Applied is the number of operations r applied, of every kind.
func Applied(r *replay.Status) int64 {
	var n int64
	for _, v := range r.Applied {
		n += v
	}
	return n
}
