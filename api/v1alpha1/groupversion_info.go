// Package v1alpha1 is the SyncTask API of MongoFerry (group
// sync.mongoferry.io, version v1alpha1).
//
// Parts: SyncTask and its spec (pkg/config's task model plus operator-only
// fields) with the validation rules users meet on `kubectl apply`
// (synctask_types.go); the source and target endpoints with credentials
// and TLS from Secrets (endpoint_types.go); the status (synctask_status.go);
// the condition and event reasons the controller and the kubectl plugin
// share (reasons.go); the labels and annotations that link objects to a
// task (links.go); the rendering of a spec into the workers' task file and
// TLS mounts (taskspec.go); the scheme registration (this file); and the
// generated deepcopy methods (zz_generated.deepcopy.go, `make generate`).
// The CRD in config/crd/bases is generated from these types by
// `make manifests`, and docs/api-reference.md by `make api-docs`.
//
// +kubebuilder:object:generate=true
// +groupName=sync.mongoferry.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the SyncTask API.
	GroupVersion = schema.GroupVersion{Group: "sync.mongoferry.io", Version: "v1alpha1"}

	// SchemeBuilder registers the API's types with a scheme. It is
	// apimachinery's builder rather than controller-runtime's (deprecated
	// there), so importing the API pulls in no controller code.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &SyncTask{}, &SyncTaskList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
