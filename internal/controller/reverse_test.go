package controller

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// completeCutover writes what the workers' cut-over reports: the
// CutoverComplete condition and the target's position.
func completeCutover(t *testing.T, ns, name, targetPosition string) {
	t.Helper()
	task := getTask(t, ns, name)
	task.Status.Phase = syncv1alpha1.PhaseCompleted
	task.Status.Cutover = &syncv1alpha1.CutoverStatus{Step: "Complete", CaughtUp: true, SourcePosition: "1764045590,2", TargetPosition: targetPosition}
	meta.SetStatusCondition(&task.Status.Conditions, metav1.Condition{Type: syncv1alpha1.ConditionCutoverComplete, Status: metav1.ConditionTrue,
		Reason: "CutoverComplete", Message: "drained, verified and finalized", ObservedGeneration: task.Generation})
	if err := env.Client.Status().Update(testCtx(t), task); err != nil {
		t.Fatal(err)
	}
}

// TestReverseTask: once the cut-over is complete and spec.reverse asks
// for it, one reverse SyncTask exists, from the target back to the
// source with each side's Secrets, in mode incremental from the target's
// position at cut-over, with a checkpoint database of its own, linked by
// a label (not owned, so deleting the forward task keeps it), and the
// forward task's status and events name it.
func TestReverseTask(t *testing.T) {
	srcTLS := &syncv1alpha1.TLS{Enabled: true, CASecret: &syncv1alpha1.SecretKeyRef{Name: "src-ca", Key: "ca.crt"},
		CertificateKeySecret: &syncv1alpha1.SecretKeyRef{Name: "src-client", Key: "tls.pem"}}
	dstTLS := &syncv1alpha1.TLS{Enabled: true, CASecret: &syncv1alpha1.SecretKeyRef{Name: "dst-ca", Key: "ca.crt"}}
	cases := []struct {
		name, reverseName, position, wantStart string
		edit                                   func(*syncv1alpha1.SyncTask)
		wantNS                                 config.Namespaces
	}{
		{name: "plain", reverseName: "plain-reverse", position: "1764045600,7", wantStart: "1764045600,7",
			wantNS: config.Namespaces{Include: []string{`^shop\.`}, Exclude: []string{`^mongoferry\.`}},
			edit: func(st *syncv1alpha1.SyncTask) {
				st.Spec.Namespaces.Include = []string{`^shop\.`}
				st.Spec.Source.TLS, st.Spec.Target.TLS = srcTLS, dstTLS
			}},
		{name: "named", reverseName: "way-back", position: "1764045600:7", wantStart: "1764045600,7",
			wantNS: config.Namespaces{Rename: []config.Rename{{From: "shop_v2", To: "shop"}}, Exclude: []string{`^ck\.`}},
			edit: func(st *syncv1alpha1.SyncTask) {
				st.Spec.Reverse.TaskName = "way-back"
				st.Spec.Namespaces.Rename = []config.Rename{{From: "shop", To: "shop_v2"}}
				st.Spec.Checkpoint.Database = "ck"
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := setup(t, c.name, func(st *syncv1alpha1.SyncTask) {
				st.Spec.Reverse = &syncv1alpha1.Reverse{Enabled: true}
				st.Spec.Source.AuthSource = "admin"
				st.Spec.WorkerImage = "example.org/ferry:1"
				c.edit(st)
			})
			r, rec := newReconciler()
			reconcile(t, r, ns, c.name)
			var rev syncv1alpha1.SyncTask
			key := types.NamespacedName{Namespace: ns, Name: c.reverseName}
			if err := env.Client.Get(testCtx(t), key, &rev); !apierrors.IsNotFound(err) {
				t.Fatalf("a reverse task before the cut-over completed: %v", err)
			}
			completeCutover(t, ns, c.name, c.position)
			reconcile(t, r, ns, c.name)
			reconcile(t, r, ns, c.name) // nothing more
			if err := env.Client.Get(testCtx(t), key, &rev); err != nil {
				t.Fatalf("the reverse task: %v", err)
			}
			fwd := getTask(t, ns, c.name)
			s := rev.Spec
			if s.Mode != config.ModeIncremental || s.Incremental.StartAt != c.wantStart || s.Checkpoint.Database == fwd.Spec.Checkpoint.Database ||
				s.Reverse != nil || s.Cutover.Requested || s.WorkerImage != "example.org/ferry:1" {
				t.Errorf("reverse spec: mode %s, startAt %q, checkpoint %q, reverse %v, cutover %+v, image %q",
					s.Mode, s.Incremental.StartAt, s.Checkpoint.Database, s.Reverse, s.Cutover, s.WorkerImage)
			}
			wantSrc := syncv1alpha1.Source{URI: fwd.Spec.Target.URI, CredentialsSecret: "dst-creds", TLS: fwd.Spec.Target.TLS, Kind: config.KindAuto}
			wantDst := syncv1alpha1.Target{URI: fwd.Spec.Source.URI, CredentialsSecret: "src-creds", AuthSource: "admin", TLS: fwd.Spec.Source.TLS, Sharding: s.Target.Sharding}
			if !reflect.DeepEqual(s.Source, wantSrc) || !reflect.DeepEqual(s.Target, wantDst) {
				t.Errorf("reverse endpoints:\nsource %+v\nwant   %+v\ntarget %+v\nwant   %+v", s.Source, wantSrc, s.Target, wantDst)
			}
			if !reflect.DeepEqual(s.Namespaces, c.wantNS) {
				t.Errorf("reverse namespaces %+v, want %+v", s.Namespaces, c.wantNS)
			}
			if rev.Labels[syncv1alpha1.ReverseOfLabel] != c.name || len(rev.OwnerReferences) != 0 {
				t.Errorf("labels %v, owners %v: want linked by %s, not owned", rev.Labels, rev.OwnerReferences, syncv1alpha1.ReverseOfLabel)
			}
			if fwd.Status.ReverseTask != c.reverseName {
				t.Errorf("status.reverseTask = %q", fwd.Status.ReverseTask)
			}
			evs := drainEvents(rec)
			created := 0
			for _, e := range evs {
				if strings.HasPrefix(e, corev1.EventTypeNormal+" ReverseTaskCreated ") {
					created++
				}
			}
			if created != 1 {
				t.Errorf("events %q, want one ReverseTaskCreated", evs)
			}
			// The reverse task is a task the controller runs like any other.
			reconcile(t, r, ns, c.reverseName)
			if p := getTask(t, ns, c.reverseName).Status.Phase; p == "" {
				t.Errorf("the reverse task was not reconciled into a phase")
			}
		})
	}
}

// TestReverseTaskNotCreated: a task whose cut-over reported no target
// position, or whose reverse name is taken by another task, gets no
// reverse task and a warning that says what to do.
func TestReverseTaskNotCreated(t *testing.T) {
	cases := []struct {
		name, position, taken, want string
	}{
		{"no-position", "", "", "status.cutover.targetPosition is empty"},
		{"taken", "1764045600,7", "taken-reverse", "is not the reverse of this task: name the reverse task with spec.reverse.taskName"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := setup(t, c.name, func(st *syncv1alpha1.SyncTask) { st.Spec.Reverse = &syncv1alpha1.Reverse{Enabled: true} })
			if c.taken != "" {
				createTask(t, newTask(ns, c.taken))
			}
			r, rec := newReconciler()
			completeCutover(t, ns, c.name, c.position)
			reconcile(t, r, ns, c.name)
			if got := getTask(t, ns, c.name).Status.ReverseTask; got != "" {
				t.Errorf("status.reverseTask = %q", got)
			}
			evs := drainEvents(rec)
			if !hasEvent(evs, corev1.EventTypeWarning, "ReverseNotCreated") || !strings.Contains(strings.Join(evs, "\n"), c.want) {
				t.Errorf("events %q, want ReverseNotCreated saying %q", evs, c.want)
			}
		})
	}
}
