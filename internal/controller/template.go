package controller

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
)

// workerVolumes decodes spec.workerTemplate.volumes (kept schemaless in
// the CRD) into Pod volumes, and checks that every mount names one of
// them; an error is the task's InvalidSpec.
func workerVolumes(tpl *syncv1alpha1.WorkerTemplate) ([]corev1.Volume, error) {
	if tpl == nil {
		return nil, nil
	}
	vols := make([]corev1.Volume, 0, len(tpl.Volumes))
	names := map[string]bool{}
	for i, raw := range tpl.Volumes {
		var v corev1.Volume
		dec := json.NewDecoder(strings.NewReader(string(raw.Raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("spec.workerTemplate.volumes[%d]: not a Pod volume: %v; write it as in a Pod, for example {name: certs, secret: {secretName: mongo-tls}}", i, err)
		}
		if v.Name == "" {
			return nil, fmt.Errorf("spec.workerTemplate.volumes[%d]: name is required", i)
		}
		if names[v.Name] {
			return nil, fmt.Errorf("spec.workerTemplate.volumes[%d]: %q is listed twice", i, v.Name)
		}
		names[v.Name] = true
		vols = append(vols, v)
	}
	for i, m := range tpl.VolumeMounts {
		if !names[m.Name] {
			return nil, fmt.Errorf("spec.workerTemplate.volumeMounts[%d]: mounts %q, which volumes does not list: add it to volumes", i, m.Name)
		}
	}
	return vols, nil
}

// applyWorkerTemplate adds spec.workerTemplate to the worker pod: what the
// operator sets itself is already in pod and container and wins (its
// labels and annotations are written after the template's).
func applyWorkerTemplate(tpl *syncv1alpha1.WorkerTemplate, vols []corev1.Volume, labels, annotations map[string]string,
	pod *corev1ac.PodSpecApplyConfiguration, container *corev1ac.ContainerApplyConfiguration) (map[string]string, map[string]string) {
	if tpl == nil {
		return labels, annotations
	}
	if md := tpl.Metadata; md != nil {
		labels = merged(md.Labels, labels)
		annotations = merged(md.Annotations, annotations)
	}
	if len(tpl.NodeSelector) > 0 {
		pod.WithNodeSelector(tpl.NodeSelector)
	}
	for _, t := range tpl.Tolerations {
		pod.WithTolerations(convert[corev1ac.TolerationApplyConfiguration](t))
	}
	if tpl.Affinity != nil {
		pod.WithAffinity(convert[corev1ac.AffinityApplyConfiguration](tpl.Affinity))
	}
	if tpl.PriorityClassName != "" {
		pod.WithPriorityClassName(tpl.PriorityClassName)
	}
	if tpl.ServiceAccountName != "" {
		pod.WithServiceAccountName(tpl.ServiceAccountName)
	}
	for _, s := range tpl.ImagePullSecrets {
		pod.WithImagePullSecrets(corev1ac.LocalObjectReference().WithName(s.Name))
	}
	for _, v := range vols {
		pod.WithVolumes(convert[corev1ac.VolumeApplyConfiguration](v))
	}
	for _, e := range tpl.Env {
		container.WithEnv(convert[corev1ac.EnvVarApplyConfiguration](e))
	}
	for _, m := range tpl.VolumeMounts {
		container.WithVolumeMounts(convert[corev1ac.VolumeMountApplyConfiguration](m))
	}
	return labels, annotations
}

// merged is base with over written on top.
func merged(base, over map[string]string) map[string]string {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, over)
	return out
}

// convert turns a core/v1 value into its apply configuration: both have
// the same JSON form.
func convert[T any](v any) *T {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encode %T: %v", v, err)) // core/v1 types always encode
	}
	var out T
	if err := json.Unmarshal(raw, &out); err != nil {
		panic(fmt.Sprintf("decode %T into %T: %v", v, out, err))
	}
	return &out
}
