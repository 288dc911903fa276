// Package containers tests the operator's image as make image builds it
// (podman, no registry): its layout against the Dockerfile's, and the
// binaries under the chart's security context. Run by make
// test-containers (the last step of make test), which builds the image
// first; skipped unless MONGOFERRY_POD_RUNTIME=podman, failed instead
// under MONGOFERRY_CONTAINERS=required or when podman cannot run a
// container (TestSuiteNeverPassesSilently).
package containers
