package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	cliflags "github.com/mongoferry/mongoferry/internal/cli/flags"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// suspendCommand is `suspend` (on) or `resume` (off): spec.suspend.
func (p *plugin) suspendCommand(on bool) *cobra.Command {
	use, short, done := "resume TASK", "Start a suspended SyncTask's workers again; they continue from the checkpoint", "resumed"
	if on {
		use, short, done = "suspend TASK", "Stop a SyncTask's workers and keep its checkpoint (spec.suspend)", "suspended"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			task, err := p.get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if task.Spec.Suspend == on {
				fmt.Fprintf(cmd.OutOrStdout(), "synctask %s is already %s\n", task.Name, done)
				return nil
			}
			if err := p.patch(cmd.Context(), task, map[string]any{"spec": map[string]any{"suspend": on}}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "synctask %s %s\n", task.Name, done)
			return nil
		},
	}
}

// waitFlags are --wait and --timeout of a command that can wait for the
// operator to act on its request.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

// add registers --wait, described by usage, and --timeout, defaulting to
// timeout, on cmd.
func (w *waitFlags) add(cmd *cobra.Command, usage string, timeout time.Duration) {
	cmd.Flags().BoolVar(&w.wait, "wait", false, usage)
	cmd.Flags().DurationVar(&w.timeout, "timeout", timeout, "with --wait: how long to wait")
}

type cutoverFlags struct {
	waitFlags
	blockSourceWrites bool
	verify            string
	maxLag            cliflags.MaxLag
}

func (p *plugin) cutoverCommand() *cobra.Command {
	var f cutoverFlags
	cmd := &cobra.Command{
		Use:   "cutover TASK [--block-source-writes] [--verify hash] [--max-lag 5s] [--wait]",
		Short: "Cut a streaming SyncTask over to its target (spec.cutover), optionally waiting and showing each step",
		Long: `cutover sets spec.cutover.requested on a streaming task: its workers wait until
the lag is at most --max-lag (a duration: 5s, 1m), block user writes on the source when
--block-source-writes is set (MongoDB 6.0 and later), drain to the source's
newest position, verify (--verify) and finalize the target. With --wait it
prints each step as status.cutover reports it and ends when the condition
CutoverComplete is True (exit 0) or the cut-over failed (exit 1).`,
		Example: `  kubectl mongoferry cutover orders --block-source-writes --verify hash --max-lag 5s --wait`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return p.cutover(cmd, args[0], f)
		},
	}
	cmd.Flags().BoolVar(&f.blockSourceWrites, "block-source-writes", false, "block user writes on the source before the final drain (setUserWriteBlockMode)")
	cmd.Flags().StringVar(&f.verify, "verify", string(config.VerifyHash), "comparison after the final drain: none, count, hash or sample")
	f.maxLag.Seconds = config.DefaultCutoverMaxLagSeconds
	cmd.Flags().Var(&f.maxLag, "max-lag", "lag under which the cut-over proceeds: a duration of whole seconds from 1s to 1h (a bare number is seconds)")
	f.add(cmd, "wait until the cut-over completes or fails, showing its steps", 30*time.Minute)
	return cmd
}

func (p *plugin) cutover(cmd *cobra.Command, name string, f cutoverFlags) error {
	ctx := cmd.Context()
	switch config.VerifyMode(f.verify) {
	case config.VerifyNone, config.VerifyCount, config.VerifyHash, config.VerifySample:
	default:
		return fmt.Errorf("--verify: %q is not one of none, count, hash, sample", f.verify)
	}
	task, err := p.get(ctx, name)
	if err != nil {
		return err
	}
	retry, oldGen, err := p.requestCutover(ctx, cmd.OutOrStdout(), task, f)
	if err != nil {
		return err
	}
	if !f.wait {
		return nil
	}
	newGen := task.Generation
	last := ""
	task, err = p.waitFor(ctx, name, f.timeout, "the cut-over to complete", func(t *syncv1alpha1.SyncTask) (bool, error) {
		if retry != "" {
			// The failed attempt's status stays until the operator has
			// acted on the new spec (or, for the same spec, the retry) and
			// the new attempt shows.
			acted := t.Status.ObservedGeneration >= newGen && (newGen != oldGen || t.Status.LastRetry == retry)
			if !acted || cutoverFailed(t) || t.Status.Phase == syncv1alpha1.PhaseFailed {
				return false, nil
			}
			retry = ""
		}
		if st := t.Status.Cutover; st != nil {
			line := st.Step
			if st.Message != "" {
				line += ": " + st.Message
			}
			if line != last {
				fmt.Fprintf(cmd.OutOrStdout(), "%s  %s\n", p.opts.Now().UTC().Format(time.TimeOnly), line)
				last = line
			}
			if st.Step == workerapi.CutoverFailed {
				return true, fmt.Errorf("the cut-over failed at %s: %s", t.Status.Cutover.Step, st.Message)
			}
		}
		if f := t.Status.LastFailure; t.Status.Phase == syncv1alpha1.PhaseFailed && f != nil && f.Reason == syncv1alpha1.ReasonCutoverFailed {
			return true, fmt.Errorf("the cut-over failed: %s", f.Message)
		}
		c := meta.FindStatusCondition(t.Status.Conditions, syncv1alpha1.ConditionCutoverComplete)
		switch {
		case c == nil:
			return false, nil
		case c.Status == "True":
			return true, nil
		case c.Reason == syncv1alpha1.ReasonCutoverFailed:
			return true, fmt.Errorf("the cut-over failed: %s", c.Message)
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	msg := "cut-over complete: the target holds everything the source wrote"
	if st := task.Status.Cutover; st != nil && st.TargetPosition != "" {
		msg += fmt.Sprintf("; a reverse sync would start at the target's position %s (kubectl mongoferry reverse %s)", st.TargetPosition, name)
	}
	fmt.Fprintln(cmd.OutOrStdout(), msg)
	return nil
}

// requestCutover sets spec.cutover.requested with the flags' settings, or,
// when the last cut-over failed, requests it again with a new retry value
// (returned with the generation it replaces, for the wait to tell the new
// attempt from the failed one). A task that is not streaming yet is
// refused.
func (p *plugin) requestCutover(ctx context.Context, out io.Writer, task *syncv1alpha1.SyncTask, f cutoverFlags) (retry string, oldGen int64, err error) {
	switch {
	case task.Spec.Cutover.Requested && cutoverFailed(task):
		// Requested again, perhaps with other flags: the new spec and a
		// new retry value make the operator run the failed task again.
		retry = p.opts.Now().UTC().Format(time.RFC3339Nano)
		oldGen = task.Generation
		err = p.patch(ctx, task, map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{syncv1alpha1.RetryAnnotation: retry}},
			"spec": map[string]any{"cutover": map[string]any{
				"requested": true, "blockSourceWrites": f.blockSourceWrites, "verify": f.verify, "maxLagSeconds": f.maxLag.Seconds}}})
		if err != nil {
			return "", 0, err
		}
		fmt.Fprintf(out, "synctask %s: the last cut-over failed; requested again (blockSourceWrites %v, verify %s, maxLagSeconds %d)\n", task.Name, f.blockSourceWrites, f.verify, f.maxLag.Seconds)
	case !task.Spec.Cutover.Requested:
		if task.Status.Phase != syncv1alpha1.PhaseStreaming || task.Spec.Suspend {
			return "", 0, fmt.Errorf("SyncTask %s is %s: a cut-over starts from a streaming task (the copy done, changes replaying); wait until kubectl mongoferry status %s shows phase Streaming%s",
				task.Name, phaseWords(task), task.Name, resumeHint(task))
		}
		err = p.patch(ctx, task, map[string]any{"spec": map[string]any{"cutover": map[string]any{
			"requested": true, "blockSourceWrites": f.blockSourceWrites, "verify": f.verify, "maxLagSeconds": f.maxLag.Seconds}}})
		if err != nil {
			return "", 0, err
		}
		fmt.Fprintf(out, "synctask %s: cut-over requested (blockSourceWrites %v, verify %s, maxLagSeconds %d)\n", task.Name, f.blockSourceWrites, f.verify, f.maxLag.Seconds)
	default:
		fmt.Fprintf(out, "synctask %s: a cut-over is already requested\n", task.Name)
	}
	return retry, oldGen, nil
}

// cutoverFailed reports whether the task's last cut-over failed.
func cutoverFailed(task *syncv1alpha1.SyncTask) bool {
	if st := task.Status.Cutover; st != nil && st.Step == workerapi.CutoverFailed {
		return true
	}
	if f := task.Status.LastFailure; task.Status.Phase == syncv1alpha1.PhaseFailed && f != nil && f.Reason == syncv1alpha1.ReasonCutoverFailed {
		return true
	}
	c := meta.FindStatusCondition(task.Status.Conditions, syncv1alpha1.ConditionCutoverComplete)
	return c != nil && c.Reason == syncv1alpha1.ReasonCutoverFailed
}

func phaseWords(task *syncv1alpha1.SyncTask) string {
	switch {
	case task.Spec.Suspend:
		return "suspended"
	case task.Status.Phase == "":
		return "not started yet"
	}
	return "in phase " + string(task.Status.Phase)
}

func resumeHint(task *syncv1alpha1.SyncTask) string {
	if task.Spec.Suspend {
		return " (resume it first: kubectl mongoferry resume " + task.Name + ")"
	}
	return ""
}

func (p *plugin) verifyCommand() *cobra.Command {
	var f waitFlags
	cmd := &cobra.Command{
		Use:   "verify TASK [--wait]",
		Short: "Verify a streaming SyncTask's target against its source now (the sync.mongoferry.io/verify annotation)",
		Long: `verify sets the sync.mongoferry.io/verify annotation to a new value; the
operator asks the task's workers for one verification pass while they stream.
With --wait it waits for a streaming pass that finished after the request
(status.streamingVerification) and prints it with the documents that still
differ (exit 1 when some do, or when the workers did not take the request).`,
		Example: `  kubectl mongoferry verify orders --wait`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return p.verify(cmd, args[0], f)
		},
	}
	f.add(cmd, "wait for the verification's report and print it", 30*time.Minute)
	return cmd
}

func (p *plugin) verify(cmd *cobra.Command, name string, f waitFlags) error {
	ctx := cmd.Context()
	task, err := p.get(ctx, name)
	if err != nil {
		return err
	}
	if task.Status.Phase != syncv1alpha1.PhaseStreaming || task.Spec.Suspend {
		return fmt.Errorf("SyncTask %s is %s: a verification on demand runs while the workers stream (for a finished task, run ferry verify)", name, phaseWords(task))
	}
	asked := p.opts.Now().UTC()
	value := asked.Format(time.RFC3339Nano)
	if err := p.patch(ctx, task, map[string]any{"metadata": map[string]any{"annotations": map[string]any{syncv1alpha1.VerifyAnnotation: value}}}); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "synctask %s: verification requested (%s=%s)\n", name, syncv1alpha1.VerifyAnnotation, value)
	if !f.wait {
		return nil
	}
	previous := task.Status.StreamingVerification
	task, err = p.waitFor(ctx, name, f.timeout, "the verification's report", func(t *syncv1alpha1.SyncTask) (bool, error) {
		if r := t.Status.VerifyRequest; r != nil && r.Value == value && !r.Accepted {
			return true, fmt.Errorf("the workers did not take the request: %s", r.Message)
		}
		return newerPass(t.Status.StreamingVerification, previous, asked), nil
	})
	if err != nil {
		return err
	}
	v := task.Status.StreamingVerification
	fmt.Fprintf(cmd.OutOrStdout(), "verification: %s\n", streamingLine(v, p.opts.Now()))
	for _, fd := range v.Findings {
		fmt.Fprintf(cmd.OutOrStdout(), "  %s  %s _id %s\n", fd.Kind, fd.Namespace, fd.ID)
	}
	if v.Result != syncv1alpha1.VerificationPassed {
		return errors.New("the target differs from the source")
	}
	return nil
}

// newerPass reports whether v is a finished streaming pass that ended
// after the request made at asked, and after the pass seen before it.
func newerPass(v, previous *syncv1alpha1.StreamingVerification, asked time.Time) bool {
	if v == nil || v.Running || v.FinishedAt == nil || v.Result == "" {
		return false
	}
	if previous != nil && v.Passes <= previous.Passes {
		return false
	}
	return !v.FinishedAt.Time.Before(asked.Truncate(time.Second))
}

func (p *plugin) reverseCommand() *cobra.Command {
	var f waitFlags
	cmd := &cobra.Command{
		Use:   "reverse TASK [--wait]",
		Short: "After a completed cut-over, sync the target's changes back to the source (spec.reverse)",
		Long: `reverse sets spec.reverse.enabled on a task whose cut-over is complete: the
operator creates a SyncTask that replays the new deployment's changes onto the
old one from the target position recorded at cut-over, without a copy, so the
old deployment stays a way back. It prints the reverse task's name; --wait
waits until the operator has created it.`,
		Example: `  kubectl mongoferry reverse orders --wait
  kubectl mongoferry status orders-reverse`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return p.reverse(cmd, args[0], f)
		},
	}
	f.add(cmd, "wait until the operator has created the reverse task", 2*time.Minute)
	return cmd
}

func (p *plugin) reverse(cmd *cobra.Command, name string, f waitFlags) error {
	ctx := cmd.Context()
	task, err := p.get(ctx, name)
	if err != nil {
		return err
	}
	if !meta.IsStatusConditionTrue(task.Status.Conditions, syncv1alpha1.ConditionCutoverComplete) {
		state := "has not been requested"
		if c := meta.FindStatusCondition(task.Status.Conditions, syncv1alpha1.ConditionCutoverComplete); c != nil {
			state = fmt.Sprintf("is not complete (CutoverComplete is %s, %s)", c.Status, c.Reason)
		} else if task.Spec.Cutover.Requested {
			state = "is not complete"
		}
		return fmt.Errorf("SyncTask %s: its cut-over %s; a reverse sync starts from the target's position at a completed cut-over: run kubectl mongoferry cutover %s --wait first", name, state, name)
	}
	rev := task.ReverseTaskName()
	if task.Spec.Reverse == nil || !task.Spec.Reverse.Enabled {
		if err := p.patch(ctx, task, map[string]any{"spec": map[string]any{"reverse": map[string]any{"enabled": true}}}); err != nil {
			return err
		}
	}
	if f.wait {
		task, err = p.waitFor(ctx, name, f.timeout, "the reverse task "+rev, func(t *syncv1alpha1.SyncTask) (bool, error) {
			return t.Status.ReverseTask != "", nil
		})
		if err != nil {
			return err
		}
		rev = task.Status.ReverseTask
	}
	fmt.Fprintf(cmd.OutOrStdout(), "synctask %s: reverse sync enabled; reverse task: %s\n", name, rev)
	return nil
}
