package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// What links a task to its workers and to its reverse sync, and the
// record of a verification asked for on demand.

// VerifyRequest is an on-demand verification the controller passed on to
// the workers (POST /verify on each).
type VerifyRequest struct {
	// Value is the value of the sync.mongoferry.io/verify annotation acted
	// on: a new value asks again.
	Value string `json:"value"`
	// Time is when the workers were asked.
	Time metav1.Time `json:"time"`
	// Accepted is true when every worker took the request.
	// +optional
	Accepted bool `json:"accepted,omitempty"`
	// Message says what the workers answered, or why nothing was asked.
	// +optional
	Message string `json:"message,omitempty"`
}

// TaskLabel is on a task's worker pods (and the other objects made for
// it): its value names the SyncTask.
const TaskLabel = "sync.mongoferry.io/task"

// ReverseOfLabel is set on a SyncTask created for spec.reverse: its value
// names the task it reverses. The reverse task is linked by this label
// rather than owned, so that deleting the finished forward task leaves
// the way back running.
const ReverseOfLabel = "sync.mongoferry.io/reverse-of"

// ReverseTaskName is the name of the SyncTask created for spec.reverse:
// spec.reverse.taskName, else the task's name with the suffix -reverse.
func (t *SyncTask) ReverseTaskName() string {
	if t.Spec.Reverse != nil && t.Spec.Reverse.TaskName != "" {
		return t.Spec.Reverse.TaskName
	}
	return t.Name + config.ReverseSuffix
}
