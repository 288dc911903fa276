// The SyncTask custom resource holds sections of Spec, and Kubernetes
// objects must be deep-copyable: `make generate` writes DeepCopy methods
// for the types of this package into zz_generated.deepcopy.go. The empty
// default ({}) on a SyncTask's sections lets the API server fill in their
// fields' defaults when a section is left out.

// +kubebuilder:object:generate=true

package config
