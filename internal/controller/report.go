package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// How workers report progress.
//
// The controller reads each worker pod's own /status (the JSON snapshot of
// workerapi.Status that `ferry run --listen` serves next to /metrics) on
// every reconcile, with a short timeout, and requeues every
// StatusPollInterval while workers run. It was chosen over the two
// alternatives:
//
//   - workers writing their own status.shards[] entry (server-side apply)
//     would need a ServiceAccount, a Role and an API token in every worker
//     pod, and a Kubernetes client in the engine, which is kept free of
//     Kubernetes; a worker that hangs also stops reporting that it hangs;
//   - the controller reading the checkpoint database would need the target's
//     credentials in the controller and a MongoDB connection per task, and
//     the checkpoint holds positions and copy ranges but not lag, rates,
//     errors or verification results.
//
// The worker's own snapshot is the source of truth, costs one small HTTP
// request per worker every few seconds, and needs no credentials or RBAC
// in the workers. The cost: the controller must reach the pods' IPs on the
// metrics port (a NetworkPolicy that isolates the workers must let the
// manager in), and a poll that fails is reported as such (Degraded,
// StatusUnavailable) rather than guessed at.

// StatusPollInterval is how often a task with running workers is
// reconciled, and so how fresh its status is.
const StatusPollInterval = 5 * time.Second

// statusTimeout bounds one /status request: a reconcile never waits long
// on the data plane.
const statusTimeout = 2 * time.Second

// maxStatusBytes caps a /status body.
const maxStatusBytes = 1 << 20

// workerObservation is one worker pod as one reconcile sees it.
type workerObservation struct {
	pod     string
	ip      string
	ordinal int
	// shard is the ShardStatus name: the name of the shard the pod's
	// ordinal replays for a sharded source, else the pod's name.
	shard string
	// running: the pod has an address, its worker container runs, and it
	// is not being deleted.
	running  bool
	ready    bool
	restarts int32
	lastExit *corev1.ContainerStateTerminated
	waiting  *corev1.ContainerStateWaiting
	// report is the worker's /status; nil when it could not be read
	// (pollErr says why) or the pod was not running.
	report  *workerapi.Status
	pollErr error
	// held is the writes the worker holds after chunk migrations, when its
	// /status tells (heldWrites in its shard's entry or replay snapshot).
	held int64
}

// observeWorkers lists a task's worker pods and reads the /status of each
// running one, in parallel.
func (r *SyncTaskReconciler) observeWorkers(ctx context.Context, task *syncv1alpha1.SyncTask) ([]workerObservation, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(task.Namespace), client.MatchingLabels(selectorLabels(task))); err != nil {
		return nil, fmt.Errorf("list worker pods: %w", err)
	}
	obs := make([]workerObservation, len(pods.Items))
	var wg sync.WaitGroup
	for i := range pods.Items {
		p := &pods.Items[i]
		o := &obs[i]
		o.pod = p.Name
		o.ip = p.Status.PodIP
		o.ordinal = podOrdinal(p.Name)
		o.shard = p.Name
		o.running = p.DeletionTimestamp == nil && p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				o.ready = c.Status == corev1.ConditionTrue
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != WorkerContainer {
				continue
			}
			o.restarts = cs.RestartCount
			// The exit of the current run when the container has stopped,
			// else that of the previous run.
			o.lastExit = cs.State.Terminated
			if o.lastExit == nil {
				o.lastExit = cs.LastTerminationState.Terminated
			}
			o.waiting = cs.State.Waiting
			if cs.State.Running == nil {
				o.running = false
			}
		}
		if !o.running {
			continue
		}
		wg.Go(func() {
			o.report, o.held, o.pollErr = r.pollStatus(ctx, task, p.Name, p.Status.PodIP, metricsPort(task))
		})
	}
	wg.Wait()
	slices.SortFunc(obs, func(a, b workerObservation) int { return a.ordinal - b.ordinal })
	return obs, nil
}

// nameWorkers names each worker's entry after the shard the plan gives
// its ordinal (its pod's name when none).
func nameWorkers(obs []workerObservation, plan shardPlan) {
	for i := range obs {
		if n := plan.nameOf(obs[i].ordinal); n != "" {
			obs[i].shard = n
		}
	}
}

// podOrdinal is the StatefulSet ordinal at the end of a pod's name, or -1.
func podOrdinal(name string) int {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return -1
	}
	return n
}

// pollStatus reads a worker's /status and the writes it holds.
func (r *SyncTaskReconciler) pollStatus(ctx context.Context, task *syncv1alpha1.SyncTask, pod, ip string, port int32) (*workerapi.Status, int64, error) {
	hc := r.workerClient()
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	ctx, url := r.statusURL(ctx, task, pod, ip, port)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w", url, err)
	}
	var s workerapi.Status
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w", url, err)
	}
	reportInSpecTerms(&s)
	return &s, s.HeldWrites(), nil
}

// workerClient is the HTTP client for the workers' status servers: the
// StatusClient, else one with the worker TLS, else plain HTTP.
func (r *SyncTaskReconciler) workerClient() *http.Client {
	switch {
	case r.StatusClient != nil:
		return r.StatusClient
	case r.WorkerTLS != nil:
		r.tlsClientOnce.Do(func() { r.tlsClient = r.WorkerTLS.HTTPClient(statusTimeout) })
		return r.tlsClient
	}
	return defaultStatusClient
}

var defaultStatusClient = &http.Client{Timeout: statusTimeout}
