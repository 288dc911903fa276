package run

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// writeCutoverSummary prints how a cut-over ended: its step, the
// positions it recorded, the verification and how long it took.
func writeCutoverSummary(w io.Writer, s engine.Status) {
	c := s.Cutover
	pos := func(ts *workerapi.Timestamp) string {
		if ts == nil {
			return "-"
		}
		return fmt.Sprintf("%d,%d (%s)", ts.T, ts.I, time.Unix(int64(ts.T), 0).UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "cut-over:         %s\n", c.Step)
	fmt.Fprintf(w, "source drained to %s\n", pos(c.SourcePosition))
	fmt.Fprintf(w, "target position   %s  (a reverse sync starts here)\n", pos(c.TargetPosition))
	switch v := c.Verify; {
	case v == nil:
		fmt.Fprintf(w, "verification      none\n")
	case v.OK:
		fmt.Fprintf(w, "verification      %s: the target equals the source\n", v.Mode)
	default:
		fmt.Fprintf(w, "verification      %s: differences in %s\n", v.Mode, strings.Join(v.Differing, ", "))
	}
	if c.WritesBlocked {
		fmt.Fprintf(w, "source writes     blocked; they stay blocked (unblock with db.adminCommand({setUserWriteBlockMode: 1, global: false}))\n")
	}
	if c.FinishedAt != nil {
		fmt.Fprintf(w, "took              %s\n", c.FinishedAt.Sub(c.StartedAt).Round(time.Second))
	}
	if c.Message != "" {
		fmt.Fprintf(w, "message           %s\n", c.Message)
	}
}

// logCutoverSummary logs what writeCutoverSummary prints, as one record
// (--log-format json: stdout and stderr hold records only).
func logCutoverSummary(log *slog.Logger, s engine.Status) {
	c := s.Cutover
	attrs := []any{"step", c.Step, "writesBlocked", c.WritesBlocked}
	if ts := c.SourcePosition; ts != nil {
		attrs = append(attrs, "sourcePosition", fmt.Sprintf("%d,%d", ts.T, ts.I))
	}
	if ts := c.TargetPosition; ts != nil {
		attrs = append(attrs, "targetPosition", fmt.Sprintf("%d,%d", ts.T, ts.I))
	}
	if v := c.Verify; v != nil {
		attrs = append(attrs, "verify", v.Mode, "verifyOK", v.OK)
		if len(v.Differing) > 0 {
			attrs = append(attrs, "differing", v.Differing)
		}
	}
	if c.FinishedAt != nil {
		attrs = append(attrs, "took", c.FinishedAt.Sub(c.StartedAt).Round(time.Second).String())
	}
	if c.Message != "" {
		attrs = append(attrs, "message", c.Message)
	}
	log.Info("cut-over summary", attrs...)
}

// logVerifyReport logs the verification report, one record per namespace
// (WriteTable's rows and differences), at level WARN for one that
// differs.
func logVerifyReport(log *slog.Logger, r *verify.Report) {
	for _, ns := range r.Namespaces {
		attrs := []any{"ns", ns.Source.String(), "mode", r.Mode}
		if ns.Target != ns.Source {
			attrs = append(attrs, "targetNs", ns.Target.String())
		}
		if ns.Note != "" {
			attrs = append(attrs, "note", ns.Note)
		}
		if ns.Skipped {
			log.Info("verification: skipped", attrs...)
			continue
		}
		attrs = append(attrs, "sourceDocuments", ns.SourceCount, "targetDocuments", ns.TargetCount)
		switch r.Mode {
		case config.VerifyHash:
			attrs = append(attrs, "sourceHash", ns.SourceHash, "targetHash", ns.TargetHash)
		case config.VerifySample:
			attrs = append(attrs, "sampled", ns.Sampled)
		}
		if ns.OK {
			log.Info("verification: the namespace matches", attrs...)
			continue
		}
		attrs = append(attrs, "missing", ns.MissingCount, "extra", ns.ExtraCount, "changed", ns.ChangedCount,
			"missingIds", ns.Missing, "extraIds", ns.Extra, "changedIds", ns.Changed)
		log.Warn("verification: the namespace differs", attrs...)
	}
}
