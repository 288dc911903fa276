package envtestutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
)

func TestAssetsDirMissing(t *testing.T) {
	t.Run("repository without bin/k8s", func(t *testing.T) {
		t.Setenv("KUBEBUILDER_ASSETS", "")
		repo := t.TempDir()
		if err := os.WriteFile(filepath.Join(repo, "go.mod"), []byte("module example.com/x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		sub := filepath.Join(repo, "api", "v1")
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Chdir(sub)
		_, err := AssetsDir()
		want := "envtest control plane not found: [kube-apiserver etcd] missing in " + filepath.Join(repo, "bin", "k8s") +
			": run `make envtest-assets` in the repository to build them (or set KUBEBUILDER_ASSETS)"
		if err == nil || err.Error() != want {
			t.Fatalf("AssetsDir: %v\nwant: %s", err, want)
		}
	})
	t.Run("KUBEBUILDER_ASSETS without etcd", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "kube-apiserver"), []byte("#!/bin/sh\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		t.Setenv("KUBEBUILDER_ASSETS", dir)
		_, err := AssetsDir()
		want := "envtest control plane not found: [etcd] missing in " + dir + ": set KUBEBUILDER_ASSETS to a directory that holds them"
		if err == nil || err.Error() != want {
			t.Fatalf("AssetsDir: %v\nwant: %s", err, want)
		}
	})
}

func TestStart(t *testing.T) {
	env := Start(t)
	ns := env.Namespace(t)
	var list syncv1alpha1.SyncTaskList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatalf("list SyncTasks (is the CRD installed?): %v", err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("%d SyncTasks in a new namespace", len(list.Items))
	}
	if !strings.HasPrefix(env.Config.Host, "https://127.0.0.1:") {
		t.Errorf("API server at %q, want a loopback address", env.Config.Host)
	}
}
