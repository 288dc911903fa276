// Package podrunner runs a namespace's pods as local processes (or, with
// podman, as containers of the image) for tests against an envtest control
// plane, standing in for the StatefulSet controller and the kubelet; what
// it does and leaves out: docs/architecture.md, "The kubelet stand-in".
// Start runs a Runner for one test and stops every process on t.Cleanup.
package podrunner
