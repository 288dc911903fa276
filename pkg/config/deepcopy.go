// The SyncTask custom resource embeds Spec, and Kubernetes objects must be
// deep-copyable: `make generate` writes DeepCopy methods for the types of
// this package into zz_generated.deepcopy.go. The empty default ({}) on the
// sections of Spec lets the API server fill in their fields' defaults when a
// section is left out of a SyncTask.

// +kubebuilder:object:generate=true

package config
