package kubectlplugin

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

func (p *plugin) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "status TASK",
		Short:   "Show a SyncTask's progress: copy, lag and rates per shard, conditions, verification, cut-over",
		Example: `  kubectl mongoferry status orders -n shop`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			task, err := p.get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return WriteStatus(cmd.OutOrStdout(), task, p.opts.Now())
		},
	}
}

// barWidth is the number of cells of a progress bar.
const barWidth = 30

// WriteStatus writes a SyncTask's status for people: a summary, the copy's
// progress bar, one row per shard (worker), the conditions, the last
// verification and the cut-over, ages measured from now.
func WriteStatus(w io.Writer, task *syncv1alpha1.SyncTask, now time.Time) error {
	st := &task.Status
	b := &strings.Builder{}
	phase := string(st.Phase)
	if phase == "" {
		phase = "(not reconciled yet)"
	}
	fmt.Fprintf(b, "SyncTask %s/%s\n", task.Namespace, task.Name)
	fmt.Fprintf(b, "  Phase:      %s (mode %s%s)\n", phase, task.Spec.Mode, suspended(task))
	fmt.Fprintf(b, "  Source:     %s\n", config.Redact(task.Spec.Source.URI))
	fmt.Fprintf(b, "  Target:     %s\n", config.Redact(task.Spec.Target.URI))
	if st.StartedAt != nil {
		fmt.Fprintf(b, "  Started:    %s (%s ago)\n", st.StartedAt.UTC().Format(time.RFC3339), age(st.StartedAt.Time, now))
	}
	fmt.Fprintf(b, "  Copy:       %s\n", copyLine(st.Progress))
	if st.Phase == syncv1alpha1.PhaseStreaming || st.Phase == syncv1alpha1.PhaseCompleted || st.CheckpointTime != nil {
		fmt.Fprintf(b, "  Lag:        %s   Ops/s: %d   Bytes/s: %s\n", lagText(st.LagSeconds, st.LagUnknown, true), st.OpsPerSecond, config.FormatBytes(st.BytesPerSecond))
	}
	if st.CheckpointTime != nil {
		fmt.Fprintf(b, "  Checkpoint: %s (%s ago)\n", st.CheckpointTime.UTC().Format(time.RFC3339), age(st.CheckpointTime.Time, now))
	}
	if st.LastFailure != nil {
		fmt.Fprintf(b, "  Failed:     %s at %s: %s (failures: %d)\n", st.LastFailure.Reason, st.LastFailure.Time.UTC().Format(time.RFC3339), st.LastFailure.Message, st.Failures)
	}

	if len(st.Shards) > 0 {
		b.WriteString("\nShards:\n")
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tWORKER\tPHASE\tCOPIED\tLAG\tOPS/S\tHELD\tAPPLIED\tREPORTED\tLAST ERROR")
		for _, s := range st.Shards {
			reported := "-"
			if s.LastReportTime != nil {
				reported = age(s.LastReportTime.Time, now) + " ago"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\n", s.Name, s.Ordinal, orDash(string(s.Phase)), s.Documents,
				lagText(s.LagSeconds, s.LagUnknown, false), s.OpsPerSecond, s.HeldWrites, orDash(s.AppliedTimestamp), reported, orDash(s.LastError))
		}
		_ = tw.Flush()
	}

	if len(st.Conditions) > 0 {
		b.WriteString("\nConditions:\n")
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tSINCE\tMESSAGE")
		for _, c := range st.Conditions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, age(c.LastTransitionTime.Time, now), orDash(c.Message))
		}
		_ = tw.Flush()
	}

	b.WriteString("\nVerification:\n")
	fmt.Fprintf(b, "  Last:       %s\n", verificationLine(st.LastVerification, now))
	if st.StreamingVerification != nil {
		fmt.Fprintf(b, "  Streaming:  %s\n", streamingLine(st.StreamingVerification, now))
	}
	if r := st.VerifyRequest; r != nil {
		state := "not taken"
		if r.Accepted {
			state = "taken"
		}
		fmt.Fprintf(b, "  Requested:  %s (%s ago), %s: %s\n", r.Value, age(r.Time.Time, now), state, r.Message)
	}

	b.WriteString("\nCut-over:\n")
	writeCutover(b, task, now)
	_, err := io.WriteString(w, b.String())
	return err
}

func suspended(task *syncv1alpha1.SyncTask) string {
	if task.Spec.Suspend {
		return ", suspended"
	}
	return ""
}

// copyLine is the copy's progress bar with its figures.
func copyLine(pr *syncv1alpha1.CopyProgress) string {
	if pr == nil {
		return "not started"
	}
	var pct int
	_, _ = fmt.Sscanf(pr.Percent, "%d%%", &pct)
	pct = min(max(pct, 0), 100)
	full := pct * barWidth / 100
	bar := "[" + strings.Repeat("#", full) + strings.Repeat(".", barWidth-full) + "]"
	est := ""
	if pr.EstimatedDocuments > 0 {
		est = fmt.Sprintf(" of about %d", pr.EstimatedDocuments)
	}
	return fmt.Sprintf("%s %3d%%  %d documents%s, %s", bar, pct, pr.Documents, est, config.FormatBytes(pr.Bytes))
}

func verificationLine(v *syncv1alpha1.Verification, now time.Time) string {
	if v == nil {
		return "none yet"
	}
	s := fmt.Sprintf("%s %s at %s (%s ago), %d namespace(s)", v.Mode, v.Result, v.Time.UTC().Format(time.RFC3339), age(v.Time.Time, now), v.Namespaces)
	if len(v.DifferingNamespaces) > 0 {
		s += ", differing: " + strings.Join(v.DifferingNamespaces, ", ")
	}
	if v.Message != "" {
		s += ": " + v.Message
	}
	return s
}

// streamingLine is a streaming verification pass in one line.
func streamingLine(v *syncv1alpha1.StreamingVerification, now time.Time) string {
	if v.Running || v.FinishedAt == nil {
		return fmt.Sprintf("pass %d running, %d/%d namespace(s), %d document(s) compared, %d recheck(s) pending",
			v.Passes+1, v.NamespacesDone, v.Namespaces, v.DocumentsCompared, v.PendingRechecks)
	}
	s := fmt.Sprintf("pass %d %s at %s (%s ago), %d document(s) compared, %d persisting", v.Passes, v.Result,
		v.FinishedAt.UTC().Format(time.RFC3339), age(v.FinishedAt.Time, now), v.DocumentsCompared, v.Persisting)
	if v.Message != "" {
		s += ": " + v.Message
	}
	return s
}

// writeCutover writes the cut-over's request, its steps (done, current,
// to come) and the reverse task.
func writeCutover(b *strings.Builder, task *syncv1alpha1.SyncTask, now time.Time) {
	co, st := task.Spec.Cutover, task.Status.Cutover
	if !co.Requested && st == nil {
		b.WriteString("  not requested (kubectl mongoferry cutover " + task.Name + ")\n")
		return
	}
	fmt.Fprintf(b, "  Requested:  %v (blockSourceWrites %v, verify %s, maxLagSeconds %d)\n", co.Requested, co.BlockSourceWrites, orDash(string(co.Verify)), co.MaxLagSeconds)
	if st == nil {
		b.WriteString("  Step:       waiting for the workers to start it\n")
		return
	}
	fmt.Fprintf(b, "  Steps:      %s\n", stepLine(st.Step, co.BlockSourceWrites))
	if st.StartedAt != nil {
		fmt.Fprintf(b, "  Started:    %s (%s ago)\n", st.StartedAt.UTC().Format(time.RFC3339), age(st.StartedAt.Time, now))
	}
	if st.FinishedAt != nil {
		fmt.Fprintf(b, "  Finished:   %s\n", st.FinishedAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(b, "  Caught up:  %v   Writes blocked: %v\n", st.CaughtUp, st.WritesBlocked)
	if st.SourcePosition != "" || st.TargetPosition != "" {
		fmt.Fprintf(b, "  Positions:  source %s, target %s\n", orDash(st.SourcePosition), orDash(st.TargetPosition))
	}
	if st.Verification != nil {
		fmt.Fprintf(b, "  Verified:   %s\n", verificationLine(st.Verification, now))
	}
	var shards []string
	for _, s := range task.Status.Shards {
		if s.Cutover != "" {
			shards = append(shards, s.Name+": "+s.Cutover)
		}
	}
	if len(shards) > 0 {
		fmt.Fprintf(b, "  Shards:     %s\n", strings.Join(shards, ", "))
	}
	if st.Message != "" {
		fmt.Fprintf(b, "  Message:    %s\n", st.Message)
	}
	if task.Status.ReverseTask != "" {
		fmt.Fprintf(b, "  Reverse:    SyncTask %s\n", task.Status.ReverseTask)
	}
}

// stepLine marks each step done (✓), current (▶) or to come, such as
// "✓ CatchingUp  ▶ Draining  · Verifying  · Finalizing  · Complete".
func stepLine(step string, blocking bool) string {
	cur := -1
	for i, s := range workerapi.CutoverSteps {
		if s == step {
			cur = i
		}
	}
	var parts []string
	for i, s := range workerapi.CutoverSteps {
		if s == workerapi.CutoverBlockingWrites && !blocking {
			continue
		}
		mark := "·"
		switch {
		case cur < 0:
		case i < cur || (i == cur && s == workerapi.CutoverComplete):
			mark = "✓"
		case i == cur:
			mark = "▶"
		}
		parts = append(parts, mark+" "+s)
	}
	line := strings.Join(parts, "  ")
	if cur < 0 {
		line = step + ": " + line
	}
	return line
}

// age is a short duration for people: 45s, 12m, 3h, 2d.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t).Round(time.Second)
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// lagText is a lag as the status shows it: "12s", or "unknown" (with why
// when long) while the worker has not read the source's newest position.
func lagText(seconds int64, unknown string, long bool) string {
	switch {
	case unknown == "":
		return fmt.Sprintf("%ds", seconds)
	case long:
		return "unknown (" + unknown + ")"
	}
	return "unknown"
}
