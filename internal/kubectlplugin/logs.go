package kubectlplugin

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
)

// maxLogLine bounds one log line; a longer one is cut.
const maxLogLine = 1 << 20

func (p *plugin) logsCommand() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:     "logs TASK [-f]",
		Short:   "Print the logs of a SyncTask's worker pods, interleaved, each line prefixed with its pod",
		Example: `  kubectl mongoferry logs orders -f`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return p.logs(cmd.Context(), cmd.OutOrStdout(), args[0], follow)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted")
	return cmd
}

// logs copies every worker pod's log to out line by line, each line
// whole and prefixed with "[pod] ".
func (p *plugin) logs(ctx context.Context, out io.Writer, name string, follow bool) error {
	task, err := p.get(ctx, name)
	if err != nil {
		return err
	}
	var pods corev1.PodList
	if err := p.c.List(ctx, &pods, client.InNamespace(p.ns), client.MatchingLabels{syncv1alpha1.TaskLabel: task.Name}); err != nil {
		return fmt.Errorf("list the worker pods of %s: %w", name, err)
	}
	if len(pods.Items) == 0 {
		return fmt.Errorf("SyncTask %s has no worker pods (phase %s%s): nothing to show", name, orDash(string(task.Status.Phase)), suspended(task))
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	open := p.opts.Logs
	if open == nil {
		if open, err = p.apiLogs(); err != nil {
			return err
		}
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = make([]error, len(pods.Items))
	)
	for i := range pods.Items {
		pod := &pods.Items[i]
		container := ""
		if len(pod.Spec.Containers) > 0 {
			container = pod.Spec.Containers[0].Name
		}
		wg.Go(func() {
			rc, err := open(ctx, pod.Namespace, pod.Name, container, follow)
			if err != nil {
				errs[i] = fmt.Errorf("logs of pod %s: %w", pod.Name, err)
				return
			}
			defer func() { _ = rc.Close() }()
			sc := bufio.NewScanner(rc)
			sc.Buffer(make([]byte, 0, 64<<10), maxLogLine)
			prefix := "[" + pod.Name + "] "
			for sc.Scan() {
				mu.Lock()
				_, _ = io.WriteString(out, prefix+sc.Text()+"\n")
				mu.Unlock()
			}
			if err := sc.Err(); err != nil && ctx.Err() == nil {
				errs[i] = fmt.Errorf("logs of pod %s: %w", pod.Name, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// apiLogs opens logs through the API server's pods/log endpoint.
func (p *plugin) apiLogs() (LogOpener, error) {
	cfg, err := p.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, ns, pod, container string, follow bool) (io.ReadCloser, error) {
		return cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: follow}).Stream(ctx)
	}, nil
}
