// Package chart holds the tests of the Helm chart in charts/mongoferry; it
// has no code of its own.
//
// Parts: helm_test.go runs the Helm binary (built by `make helm` into bin/)
// and decodes what it renders; chart_test.go checks the rendered objects
// (lint, every values file under ci/, the CRD and RBAC against what
// controller-gen generates, the manager's Deployment, the opt-in monitoring
// objects); cluster_test.go applies them to a real API server (server-side
// dry run with the prometheus-operator CRDs installed) and runs the manager
// with the chart's RBAC; monitoring_test.go checks the alert rules and the
// Grafana dashboard against the metrics the code exports and the runbooks;
// observability_test.go checks that docs/observability.md shows every
// panel's queries.
package chart
