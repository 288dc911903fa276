package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
)

// Verification on demand: a new value of the sync.mongoferry.io/verify
// annotation on a streaming task is passed on to its workers as
// POST /verify (the client and TLS of /status), once; the value, the time
// and what the workers answered go to status.verifyRequest, and an event
// tells it. The report itself comes back through /status into
// status.streamingVerification.

// verifyPath is the workers' endpoint that starts one verification pass.
const verifyPath = "/verify"

// requestVerification acts on a new value of the verify annotation and
// returns the status.verifyRequest to record; cur when there is nothing
// new. A request made during the copy waits until the task streams; one
// made when nothing streams (suspended, failed, completed) is recorded as
// not acted on.
func (r *SyncTaskReconciler) requestVerification(ctx context.Context, task *syncv1alpha1.SyncTask, cur *syncv1alpha1.VerifyRequest, workers []workerObservation) *syncv1alpha1.VerifyRequest {
	value := task.Annotations[syncv1alpha1.VerifyAnnotation]
	if value == "" || (cur != nil && cur.Value == value) {
		return cur
	}
	req := &syncv1alpha1.VerifyRequest{Value: value, Time: metav1.Now()}
	var running []workerObservation
	for _, w := range workers {
		if w.running && w.report != nil {
			running = append(running, w)
		}
	}
	switch phase := task.Status.Phase; {
	case phase == "" || phase == syncv1alpha1.PhasePending || phase == syncv1alpha1.PhaseFullSync:
		return cur // asked again once the copy is done
	case phase != syncv1alpha1.PhaseStreaming || len(running) == 0:
		req.Message = fmt.Sprintf("not acted on: the task is %s, and a verification on demand runs while its workers stream; set %s to a new value once they do",
			phase, syncv1alpha1.VerifyAnnotation)
		r.event(task, corev1.EventTypeWarning, "VerificationNotRequested", "Verify", "%s=%s: %s", syncv1alpha1.VerifyAnnotation, value, req.Message)
		return req
	}

	answers := make([]error, len(running))
	var wg sync.WaitGroup
	for i, w := range running {
		wg.Go(func() { answers[i] = r.postVerify(ctx, task, w) })
	}
	wg.Wait()
	var missing, failed []string
	for i, err := range answers {
		switch {
		case errors.Is(err, errNoVerifyEndpoint):
			missing = append(missing, running[i].pod)
		case err != nil:
			failed = append(failed, err.Error())
		}
	}
	switch {
	case len(missing) > 0:
		req.Message = fmt.Sprintf("the workers' image has no %s endpoint (%s answered 404 Not Found): nothing was verified; run a worker image with verification on demand, or ferry verify",
			verifyPath, strings.Join(missing, ", "))
		r.event(task, corev1.EventTypeWarning, "VerificationUnsupported", "Verify", "%s=%s: %s", syncv1alpha1.VerifyAnnotation, value, req.Message)
	case len(failed) > 0:
		req.Message = fmt.Sprintf("the workers did not take the request: %s; set %s to a new value to ask again", strings.Join(failed, "; "), syncv1alpha1.VerifyAnnotation)
		r.event(task, corev1.EventTypeWarning, "VerificationRequestFailed", "Verify", "%s=%s: %s", syncv1alpha1.VerifyAnnotation, value, req.Message)
	default:
		req.Accepted = true
		req.Message = fmt.Sprintf("%d worker(s) verify while streaming; the report goes to status.streamingVerification", len(running))
		r.event(task, corev1.EventTypeNormal, "VerificationRequested", "Verify", "%s=%s: %s", syncv1alpha1.VerifyAnnotation, value, req.Message)
	}
	return req
}

// errNoVerifyEndpoint is a worker's 404 to POST /verify: its image
// predates verification on demand.
var errNoVerifyEndpoint = errors.New("no " + verifyPath + " endpoint")

// postVerify asks one worker for a verification pass.
func (r *SyncTaskReconciler) postVerify(ctx context.Context, task *syncv1alpha1.SyncTask, w workerObservation) error {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	ctx, url := r.workerURL(ctx, task, w.pod, w.ip, metricsPort(task), verifyPath)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := r.workerClient().Do(req)
	if err != nil {
		return fmt.Errorf("%s: POST %s: %w", w.pod, verifyPath, err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxStatusBytes))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return errNoVerifyEndpoint
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("%s: POST %s: %s", w.pod, verifyPath, resp.Status)
	}
	return nil
}
