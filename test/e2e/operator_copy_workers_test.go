package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestOperatorCopyWorkers runs a SyncTask with fullSync.workers: 3 on a
// replica-set source under the operator: the controller runs the task's
// worker and a StatefulSet of two copy-only workers, whose pods (local
// processes of the ferry binary, the pod runner standing in for the
// StatefulSet controller and the kubelet) share the full copy's ranges
// with it; once the task streams, the copy workers are scaled to zero and
// their pods go. What a user sees: every process recorded ranges (the
// owner of each done record is its pod), status.progress counts every
// document the three copied, and the target equals the source.
func TestOperatorCopyWorkers(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const name = "copies"
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	const seedDocs = 1500
	docs := make([]any, seedDocs)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int64(i)}, {Key: "v", Value: i}, {Key: "pad", Value: strings.Repeat("o", 80)}}
	}
	if _, err := sc.Database("app").Collection("items").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	task := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name,
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:       config.ModeFullAndIncremental,
			Source:     syncv1alpha1.Source{URI: src.URI, Kind: config.KindReplicaSet},
			Target:     syncv1alpha1.Target{URI: dst.URI},
			Namespaces: config.Namespaces{Include: []string{`app\..*`}},
			Threads:    config.Threads{Readers: 2},
			// Ranges of about 50 documents and 150 documents a second,
			// 50 per process: the copy lasts about 10 seconds, time for
			// the copy workers' pods to start and claim ranges.
			FullSync:  config.FullSync{Workers: 3, Split: config.SplitAlways, RangeDocuments: 50},
			RateLimit: 150,
			Verify:    config.Verify{Mode: config.VerifyNone},
		},
	})

	copySet := func() *appsv1.StatefulSet {
		var sts appsv1.StatefulSet
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: controller.CopyWorkerName(name)}, &sts); err != nil {
			return nil
		}
		return &sts
	}
	waitFor(t, "the copy workers' StatefulSet with 2 pods", time.Minute, func() bool {
		sts := copySet()
		return sts != nil && sts.Spec.Replicas != nil && *sts.Spec.Replicas == 2
	})
	waitFor(t, "the task streaming", 4*time.Minute, func() bool {
		return task.get().Status.Phase == syncv1alpha1.PhaseStreaming
	})
	waitFor(t, "the copy workers scaled to zero and their pods gone", 2*time.Minute, func() bool {
		sts := copySet()
		if sts == nil || sts.Spec.Replicas == nil || *sts.Spec.Replicas != 0 {
			return false
		}
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "mongoferry-copy-worker"}); err != nil {
			t.Fatal(err)
		}
		return len(pods.Items) == 0
	})
	assertSameDocs(t, sc, "app.items", dc, "app.items")

	meta := dc.Database("mongoferry")
	byPod := map[string]int64{}
	ranges := 0
	for _, r := range rangeRecords(ctx, t, meta, name) {
		if r.Done {
			pod, _, _ := strings.Cut(r.Owner, "/")
			byPod[pod] += r.Docs
			ranges++
		}
	}
	t.Logf("%d ranges done; documents by pod %v", ranges, byPod)
	for _, pod := range []string{name + "-copy-0", name + "-copy-1"} {
		if byPod[pod] == 0 {
			t.Errorf("pod %s copied nothing: documents by pod %v", pod, byPod)
		}
	}
	// The task's worker names itself by its hostname, which is its pod's
	// name in Kubernetes; the pod runner's processes share this host's.
	if len(byPod) != 3 {
		t.Errorf("documents by owner %v, want the task's worker and the two copy workers", byPod)
	}
	st := task.get().Status
	if st.Progress == nil || st.Progress.Documents < seedDocs {
		t.Errorf("status.progress %+v, want every document the three processes copied (%d)", st.Progress, seedDocs)
	}
	evs := taskEvents(t, env.Client, ns, name)
	if !hasReason(evs, "CopyWorkersCreated") || !hasReason(evs, "CopyWorkersStopped") {
		t.Errorf("events %v, want CopyWorkersCreated and CopyWorkersStopped", evs)
	}
}
