// Package kubectlplugin is `kubectl mongoferry`, the kubectl plugin for
// SyncTasks: status (plugin.go, status.go), suspend and resume, cutover,
// verify and reverse (actions.go, which set spec fields or annotations
// and wait on the status the operator writes), and logs (logs.go). It
// talks only to the Kubernetes API, with kubectl's connection flags.
package kubectlplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
)

// LogOpener opens a container's log, following it when follow is set.
type LogOpener func(ctx context.Context, namespace, pod, container string, follow bool) (io.ReadCloser, error)

// Options are what the command runs with besides its flags.
type Options struct {
	// Streams are standard input, output and error.
	Streams genericiooptions.IOStreams
	// Logs opens worker logs; the API server's pod log endpoint when nil.
	Logs LogOpener
	// Now is the clock of the status output; time.Now when nil.
	Now func() time.Time
}

// plugin is one invocation: the connection flags and what they resolve to.
type plugin struct {
	opts  Options
	flags *genericclioptions.ConfigFlags
	c     client.WithWatch
	ns    string
}

// NewCommand returns the kubectl mongoferry command with every subcommand.
func NewCommand(opts Options) *cobra.Command {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &plugin{opts: opts, flags: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use: "mongoferry",
		// Usage lines read "kubectl mongoferry ...", as the user types it.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl mongoferry"},
		Short:       "Watch and steer MongoFerry SyncTasks",
		Long: `kubectl mongoferry shows a SyncTask's progress and steers it: suspend and
resume it, cut over to the target, verify the target while it streams, start a
reverse sync after the cut-over, and read its workers' logs.

It uses kubectl's connection flags (--kubeconfig, --context, -n, ...) and needs
get, list, watch and patch on synctasks, and get and list on pods and pods/log
for logs.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return p.connect()
		},
	}
	root.SetOut(opts.Streams.Out)
	root.SetErr(opts.Streams.ErrOut)
	p.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(p.statusCommand(), p.suspendCommand(true), p.suspendCommand(false),
		p.cutoverCommand(), p.verifyCommand(), p.reverseCommand(), p.logsCommand())
	return root
}

// connect makes the API client from the connection flags.
func (p *plugin) connect() error {
	if err := p.clusterConfigured(); err != nil {
		return err
	}
	cfg, err := p.flags.ToRESTConfig()
	if err != nil {
		return err
	}
	ns, _, err := p.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := syncv1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	p.c, p.ns = c, ns
	return nil
}

// ErrNoCluster is the error of a command run with no cluster to talk to:
// no kubeconfig, no --server, not inside a pod. (client-go would try
// localhost:8080 and fail with a bare "connection refused".)
var ErrNoCluster = errors.New("no Kubernetes cluster is configured: no kubeconfig found ($KUBECONFIG, ~/.kube/config) and no --server given; " +
	"point KUBECONFIG or --kubeconfig at the cluster's kubeconfig (as kubectl uses it), or pass --server")

// clusterConfigured returns ErrNoCluster when the connection flags, the
// kubeconfig files and the pod's environment name no API server.
func (p *plugin) clusterConfigured() error {
	if f := p.flags.APIServer; f != nil && *f != "" {
		return nil
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return nil // in a pod: client-go's in-cluster configuration
	}
	raw, err := p.flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return nil // a broken kubeconfig: client-go's error says where
	}
	if len(raw.Clusters) == 0 {
		return ErrNoCluster
	}
	return nil
}

// get reads a SyncTask, with an error that names it and the namespace
// when it is not there.
func (p *plugin) get(ctx context.Context, name string) (*syncv1alpha1.SyncTask, error) {
	var task syncv1alpha1.SyncTask
	err := p.c.Get(ctx, types.NamespacedName{Namespace: p.ns, Name: name}, &task)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("SyncTask %q not found in namespace %q: list them with kubectl get synctasks -n %s", name, p.ns, p.ns)
	case err != nil:
		return nil, fmt.Errorf("read SyncTask %s: %w", name, err)
	}
	return &task, nil
}

// patch merges a JSON patch into a SyncTask's spec or metadata.
func (p *plugin) patch(ctx context.Context, task *syncv1alpha1.SyncTask, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if err := p.c.Patch(ctx, task, client.RawPatch(types.MergePatchType, data)); err != nil {
		return fmt.Errorf("update SyncTask %s: %w", task.Name, err)
	}
	return nil
}

// waitFor follows the task (a watch, so that no status change is missed,
// however short) until done says it is finished (an error stops the wait
// with it) or timeout passes.
func (p *plugin) waitFor(ctx context.Context, name string, timeout time.Duration, what string,
	done func(*syncv1alpha1.SyncTask) (bool, error)) (*syncv1alpha1.SyncTask, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	timedOut := func(task *syncv1alpha1.SyncTask) (*syncv1alpha1.SyncTask, error) {
		return task, fmt.Errorf("timed out after %s waiting for %s; the request stays in place: look again with kubectl mongoferry status %s", timeout, what, name)
	}
	for {
		task, err := p.get(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return timedOut(nil)
			}
			return nil, err
		}
		if ok, err := done(task); ok || err != nil {
			return task, err
		}
		w, err := p.c.Watch(ctx, &syncv1alpha1.SyncTaskList{}, client.InNamespace(p.ns),
			client.MatchingFields{"metadata.name": name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: task.ResourceVersion}})
		if err != nil {
			if ctx.Err() != nil {
				return timedOut(task)
			}
			return task, fmt.Errorf("watch SyncTask %s: %w", name, err)
		}
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Deleted:
				w.Stop()
				return nil, fmt.Errorf("SyncTask %s was deleted while waiting for %s", name, what)
			case watch.Added, watch.Modified:
				t, ok := ev.Object.(*syncv1alpha1.SyncTask)
				if !ok {
					continue
				}
				task = t
				if ok, err := done(task); ok || err != nil {
					w.Stop()
					return task, err
				}
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return timedOut(task)
		}
		// The watch ended (a server timeout, an expired version): read the
		// task again and watch from there.
	}
}
