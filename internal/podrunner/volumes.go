package podrunner

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// mount is one of a container's volume mounts, written on this machine.
type mount struct {
	// path is the container's mountPath; dir is where its files are.
	path, dir string
	// readOnly: the mount's readOnly, and always for Secret, ConfigMap
	// and projected volumes (the kubelet mounts them read-only).
	readOnly bool
}

// mountVolumes writes the volumes a container mounts into podDir/volumes
// (Secret, ConfigMap and projected Secret and ConfigMap volumes with their
// items and modes, emptyDir as an empty directory; other kinds are left
// out) and returns where each mount path's files are, the longest path
// first. Files are written afresh at every container start.
func (r *Runner) mountVolumes(ctx context.Context, pod *corev1.Pod, c *corev1.Container, podDir string) ([]mount, error) {
	var out []mount
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			return nil, fmt.Errorf("volume mount %s: the pod has no volume of that name", m.Name)
		}
		if m.SubPath != "" || m.SubPathExpr != "" {
			return nil, fmt.Errorf("volume mount %s: subPath is not supported", m.Name)
		}
		v := pod.Spec.Volumes[i]
		dir := filepath.Join(podDir, "volumes", v.Name)
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		ok, err := r.writeVolume(ctx, pod.Namespace, v.VolumeSource, dir)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if ok {
			ro := m.ReadOnly || v.Secret != nil || v.ConfigMap != nil || v.Projected != nil
			out = append(out, mount{path: path.Clean(m.MountPath), dir: dir, readOnly: ro})
		}
	}
	slices.SortFunc(out, func(a, b mount) int { return len(b.path) - len(a.path) })
	return out, nil
}

// writeVolume writes one volume's files into dir; ok is false for a kind
// the runner leaves out.
func (r *Runner) writeVolume(ctx context.Context, ns string, v corev1.VolumeSource, dir string) (ok bool, err error) {
	switch {
	case v.EmptyDir != nil:
		// World-writable, as the kubelet creates it, so that a non-root
		// container can write to it.
		return true, os.Chmod(dir, 0o777) //nolint:gosec // G302: the kubelet creates emptyDir volumes 0777
	case v.Secret != nil:
		return true, r.writeKeys(ctx, ns, "Secret", v.Secret.SecretName, v.Secret.Items, v.Secret.DefaultMode, v.Secret.Optional, dir)
	case v.ConfigMap != nil:
		return true, r.writeKeys(ctx, ns, "ConfigMap", v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.DefaultMode, v.ConfigMap.Optional, dir)
	case v.Projected != nil:
		for _, s := range v.Projected.Sources {
			switch {
			case s.Secret != nil:
				err = r.writeKeys(ctx, ns, "Secret", s.Secret.Name, s.Secret.Items, v.Projected.DefaultMode, s.Secret.Optional, dir)
			case s.ConfigMap != nil:
				err = r.writeKeys(ctx, ns, "ConfigMap", s.ConfigMap.Name, s.ConfigMap.Items, v.Projected.DefaultMode, s.ConfigMap.Optional, dir)
			default:
				err = fmt.Errorf("a projected source other than secret or configMap is not supported")
			}
			if err != nil {
				return false, err
			}
		}
		return true, nil
	}
	return false, nil
}

// writeKeys writes the keys of a Secret or ConfigMap as files: the items
// listed (each at its path, with its mode), or every key.
func (r *Runner) writeKeys(ctx context.Context, ns, kind, name string, items []corev1.KeyToPath, defaultMode *int32, optional *bool, dir string) error {
	data := map[string][]byte{}
	var err error
	if kind == "Secret" {
		var s corev1.Secret
		if err = r.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s); err == nil {
			data = s.Data
		}
	} else {
		var cm corev1.ConfigMap
		if err = r.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cm); err == nil {
			for k, v := range cm.Data {
				data[k] = []byte(v)
			}
			for k, v := range cm.BinaryData {
				data[k] = v
			}
		}
	}
	switch {
	case apierrors.IsNotFound(err) && optional != nil && *optional:
		return nil
	case err != nil:
		return fmt.Errorf("%s %q: %w", strings.ToLower(kind), name, err)
	}
	mode := os.FileMode(0o644)
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode)
	}
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			if optional != nil && *optional {
				continue
			}
			return fmt.Errorf("couldn't find key %s in %s %s/%s", it.Key, kind, ns, name)
		}
		rel := path.Clean(it.Path)
		if path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("%s %s: item path %q leaves the volume", strings.ToLower(kind), name, it.Path)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, m); err != nil {
			return err
		}
		// WriteFile's mode passes through the umask.
		if err := os.Chmod(p, m); err != nil {
			return err
		}
	}
	return nil
}

// remap replaces each mount path in s by the directory its files are in:
// all pods share this machine's filesystem, where a real container sees
// its volumes at their mount paths in a mount namespace of its own.
func remap(s string, mounts []mount) string {
	for _, m := range mounts {
		s = strings.ReplaceAll(s, m.path, m.dir)
	}
	return s
}
