package podrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Labels the StatefulSet controller puts on its pods.
const (
	revisionLabel = appsv1.ControllerRevisionHashLabelKey
	podNameLabel  = appsv1.StatefulSetPodNameLabel
	podIndexLabel = appsv1.PodIndexLabel
)

// syncStatefulSets plays the StatefulSet controller for the namespace.
func (r *Runner) syncStatefulSets(ctx context.Context) error {
	var sets appsv1.StatefulSetList
	if err := r.c.List(ctx, &sets, client.InNamespace(r.opts.Namespace)); err != nil {
		return err
	}
	if len(sets.Items) == 0 {
		return nil
	}
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.InNamespace(r.opts.Namespace)); err != nil {
		return err
	}
	byName := map[string]*corev1.Pod{}
	for i := range pods.Items {
		byName[pods.Items[i].Name] = &pods.Items[i]
	}
	for i := range sets.Items {
		if err := r.syncStatefulSet(ctx, &sets.Items[i], byName); err != nil {
			return fmt.Errorf("%s: %w", sets.Items[i].Name, err)
		}
	}
	return nil
}

// templateRevision names a pod template the way the real controller's
// revisions do: <name>-<hash>.
func templateRevision(sts *appsv1.StatefulSet) string {
	b, _ := json.Marshal(sts.Spec.Template)
	h := fnv.New32a()
	_, _ = h.Write(b)
	return sts.Name + "-" + rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

func (r *Runner) syncStatefulSet(ctx context.Context, sts *appsv1.StatefulSet, byName map[string]*corev1.Pod) error {
	if sts.DeletionTimestamp != nil {
		return nil
	}
	replicas := 1
	if sts.Spec.Replicas != nil {
		replicas = int(*sts.Spec.Replicas)
	}
	rev := templateRevision(sts)
	var current, ready, updated int32
	for ord := 0; ; ord++ {
		name := sts.Name + "-" + strconv.Itoa(ord)
		pod := byName[name]
		if ord >= replicas {
			if pod == nil {
				break // ordinals are dense: nothing above
			}
			if pod.DeletionTimestamp == nil && metav1.IsControlledBy(pod, sts) {
				r.opts.Logf("podrunner: StatefulSet %s scaled to %d: deleting pod %s", sts.Name, replicas, name)
				if err := r.c.Delete(ctx, pod); client.IgnoreNotFound(err) != nil {
					return err
				}
			}
			continue
		}
		switch {
		case pod == nil:
			if err := r.createPod(ctx, sts, ord, rev); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			continue
		case pod.DeletionTimestamp != nil:
			continue // recreated once it is gone
		case !metav1.IsControlledBy(pod, sts) || pod.Labels[revisionLabel] != rev:
			r.opts.Logf("podrunner: StatefulSet %s template changed: replacing pod %s", sts.Name, name)
			if err := r.c.Delete(ctx, pod); client.IgnoreNotFound(err) != nil {
				return err
			}
			continue
		}
		current++
		updated++
		if podReady(pod) {
			ready++
		}
	}
	want := sts.Status.DeepCopy()
	want.ObservedGeneration = sts.Generation
	want.Replicas, want.CurrentReplicas, want.UpdatedReplicas = current, updated, updated
	want.ReadyReplicas, want.AvailableReplicas = ready, ready
	want.CurrentRevision, want.UpdateRevision = rev, rev
	if equality.Semantic.DeepEqual(&sts.Status, want) {
		return nil
	}
	base := sts.DeepCopy()
	sts.Status = *want
	return client.IgnoreNotFound(r.c.Status().Patch(ctx, sts, client.MergeFrom(base)))
}

func (r *Runner) createPod(ctx context.Context, sts *appsv1.StatefulSet, ord int, rev string) error {
	name := sts.Name + "-" + strconv.Itoa(ord)
	t := sts.Spec.Template.DeepCopy()
	labels := map[string]string{}
	for k, v := range t.Labels {
		labels[k] = v
	}
	labels[revisionLabel] = rev
	labels[podNameLabel] = name
	labels[podIndexLabel] = strconv.Itoa(ord)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: sts.Namespace, Labels: labels, Annotations: t.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
		},
		Spec: t.Spec,
	}
	pod.Spec.Hostname = name
	pod.Spec.Subdomain = sts.Spec.ServiceName
	pod.Spec.NodeName = NodeName
	r.opts.Logf("podrunner: StatefulSet %s: creating pod %s (revision %s)", sts.Name, name, rev)
	return r.c.Create(ctx, pod)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
