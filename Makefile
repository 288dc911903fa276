# MongoFerry — see README.md. Every tool and test server is built into bin/
# from the Go module proxy when missing.

SHELL := /usr/bin/env bash -o pipefail
BIN   := $(CURDIR)/bin
# MONGOSHAKE is the MongoShake collector `make bench-peer` runs (empty: MongoFerry only).
MONGOSHAKE ?=
GO    ?= go
GOLANGCI_LINT_VERSION ?= v2.6.2
CONTROLLER_TOOLS_VERSION ?= v0.23.0
HELM_VERSION ?= v3.22.0
# The prometheus-operator release whose CRDs (ServiceMonitor, PodMonitor,
# PrometheusRule) the tests install: test/testdata/prometheus-operator-crds.
PROMETHEUS_OPERATOR_VERSION ?= v0.85.0
MONITORING_CRDS := test/testdata/prometheus-operator-crds
# envtest assets (kube-apiserver, etcd); internal/envtestutil finds them here.
K8S_ASSETS := $(BIN)/k8s

export PATH := $(BIN):$(PATH)

# Two modules: the root (the product) and test/ (the end-to-end suites and
# the dependencies only they use; docs/development.md, "Two modules"). The
# targets run go in each on its own: a go.work of the developer's would
# merge their requirements, so none is used.
TEST_MOD := test
export GOWORK := off

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z0-9_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Build

.PHONY: build
build: ferry ## Build the ferry CLI and the operator's manager into bin/.
	$(GO) build -o $(BIN)/manager ./cmd/manager

.PHONY: kubectl-plugin
kubectl-plugin: ## Build the kubectl plugin (kubectl mongoferry) into bin/; put bin/ on the PATH, or go install ./cmd/kubectl-mongoferry.
	$(GO) build -o $(BIN)/kubectl-mongoferry ./cmd/kubectl-mongoferry

# The krew archives of the plugin (plugins/mongoferry.yaml), one per platform.
KREW_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
.PHONY: kubectl-plugin-archives
kubectl-plugin-archives: ## Build the plugin's krew archives into bin/krew/ and print their sha256 for plugins/mongoferry.yaml.
	mkdir -p $(BIN)/krew
	for p in $(KREW_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; exe=kubectl-mongoferry; [ $$os = windows ] && exe=$$exe.exe; \
	  dir=$$(mktemp -d); CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -o $$dir/$$exe ./cmd/kubectl-mongoferry || exit 1; \
	  cp LICENSE $$dir/; tar -C $$dir -czf $(BIN)/krew/kubectl-mongoferry_$${os}_$${arch}.tar.gz $$exe LICENSE; rm -rf $$dir; \
	done
	cd $(BIN)/krew && sha256sum *.tar.gz

.PHONY: ferry
ferry: ## Build only the ferry CLI into bin/ (what the demo and the benchmarks run).
	$(GO) build -o $(BIN)/ferry ./cmd/ferry

##@ Development

.PHONY: fmt
fmt: ## Run gofmt.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet in both modules.
	$(GO) vet ./...
	cd $(TEST_MOD) && $(GO) vet ./...

.PHONY: lint
lint: $(BIN)/golangci-lint ## Run golangci-lint in both modules.
	$(BIN)/golangci-lint run ./...
	cd $(TEST_MOD) && $(BIN)/golangci-lint run ./...

# The test tiers. The root module's packages hold unit tests, and tests
# that start a FerretDB server or the envtest control plane (through
# internal/testserver and internal/envtestutil, which skip under -short);
# the test/ module holds the end-to-end suites; the container suite
# (test-containers) runs the image and the operator's workers as real
# containers. make test runs every tier, as CI does.
UNIT_PKGS := ./...

.PHONY: test
test: ferretdb envtest-assets prometheus postgres-server container-tools verify-generated $(BIN)/golangci-lint $(BIN)/helm ## Run every check and test, as CI does: gofmt, vet, golangci-lint, the unit tier with -race, then every test (integration, end to end, the short chaos and simulation runs), then the container suite (make test-containers).
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed on:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	cd $(TEST_MOD) && $(GO) vet ./...
	$(BIN)/golangci-lint run ./...
	cd $(TEST_MOD) && $(BIN)/golangci-lint run ./...
	$(GO) test -short -race -count=1 -timeout 15m $(UNIT_PKGS)
	$(GO) test -count=1 -timeout 40m $(UNIT_PKGS)
	cd $(TEST_MOD) && $(GO) test -count=1 -timeout 40m ./...
	$(MAKE) --no-print-directory test-containers

.PHONY: test-unit
test-unit: ## Run the unit tier with -race: no server is started or built (go test -short skips those tests), for the inner loop.
	$(GO) test -short -race -count=1 -timeout 15m $(UNIT_PKGS)

.PHONY: test-integration
test-integration: ferretdb envtest-assets ## Run the root module's tests in full: unit, and those that start FerretDB or an envtest control plane.
	$(GO) test -count=1 -timeout 20m $(UNIT_PKGS)

.PHONY: test-e2e
test-e2e: ferretdb envtest-assets prometheus postgres-server $(BIN)/helm ## Run the test/ module's tests: end to end on FerretDB (one with a real Prometheus), the chart's, the short chaos and simulation runs.
	cd $(TEST_MOD) && $(GO) test -count=1 -timeout 40m ./...

.PHONY: test-race
test-race: ferretdb envtest-assets prometheus postgres-server $(BIN)/helm ## Run the integration and end-to-end tiers with -race (the unit tier has it in make test): every test that starts a server, and the ferry and manager processes they start, with the race detector on (hours; part of make test-long).
	$(GO) test -race -count=1 -timeout 90m $(UNIT_PKGS)
	cd $(TEST_MOD) && $(GO) test -race -count=1 -timeout 4h ./...

.PHONY: test-long
test-long: ## Run the long suites one after another: test-race, replay-invariant (REPLAY_SCHEDULES), chaos (CYCLES), sim-long (SIM_SEEDS) and memory-adversarial.
	$(MAKE) test-race
	$(MAKE) replay-invariant
	$(MAKE) chaos
	$(MAKE) sim-long
	$(MAKE) memory-adversarial

.PHONY: replay-invariant
replay-invariant: ## Run the checkpoint invariant's random schedules long: REPLAY_SCHEDULES (default 10000) random oplogs replayed with kills and failing writes, from REPLAY_FIRST (default 1); make test runs 150.
	REPLAY_INVARIANT_SCHEDULES=$${REPLAY_SCHEDULES:-10000} REPLAY_INVARIANT_FIRST=$${REPLAY_FIRST:-1} $(GO) test -count=1 -timeout 4h -run 'TestCheckpointInvariantUnderKills$$' -v ./pkg/engine/replay

.PHONY: sim-long
sim-long: ## Run the sharded-cluster simulation long: SIM_SEEDS schedules (default 20000) three times longer than make test's, from SIM_FIRST (default 1001), without and with a per-shard copy.
	cd $(TEST_MOD) && SHARDSIM_SEEDS=$${SIM_SEEDS:-20000} SHARDSIM_FIRST=$${SIM_FIRST:-1001} $(GO) test -count=1 -timeout 4h -run 'TestSim$$|TestSimCopy$$' -v ./shardsim

# The chaos suite: CYCLES faults from the seed SEED (make test runs 20 from
# seed 1). CHAOS_DIR keeps the servers' storage and every log when set;
# BUDGET (a duration such as 45m) stops after the cycle it runs out in.
CYCLES ?= 100
SEED ?= 1
BUDGET ?=
.PHONY: chaos
chaos: ferretdb ## Run the chaos suite long: CYCLES faults (default 100; 500 for the published run) from SEED; prints faults by kind, documents compared, differences, peak RSS and recovery times (docs/reliability.md).
	cd $(TEST_MOD) && CHAOS_CYCLES=$(CYCLES) CHAOS_SEED=$(SEED) CHAOS_BUDGET=$(BUDGET) $(GO) test -count=1 -timeout 12h -run 'TestChaos$$' -v ./chaos | grep --line-buffered -v '^{"level"'

# Native Go fuzzing, FUZZTIME per target (make test runs only the seeds).
FUZZTIME ?= 10m
FUZZ_TARGETS := ./pkg/engine/oplog:FuzzParse ./pkg/engine/oplog:FuzzTranslateDiff
.PHONY: fuzz
fuzz: ## Fuzz the oplog entry parser and the diff translator for FUZZTIME each (default 10m); a crasher lands in the package's testdata/fuzz and becomes a seed.
	for t in $(FUZZ_TARGETS); do \
	  $(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) -parallel $${FUZZ_PARALLEL:-2} "$${t%%:*}" || exit 1; \
	done

.PHONY: memory-adversarial
memory-adversarial: ferretdb ## Measure the worker's peak RSS with cache.maxBytes 64MiB on 16 MiB documents, 25,000-field documents and a 100,000-operation transaction (tens of minutes).
	cd $(TEST_MOD) && MONGOFERRY_ADVERSARIAL=1 $(GO) test -count=1 -timeout 2h -run 'TestMemoryAdversarialInput' -v ./e2e

.PHONY: helm-lint
helm-lint: $(BIN)/helm ## Lint the Helm chart (helm lint --strict) with its defaults and each values file under charts/mongoferry/ci (the test/chart tests do too).
	$(BIN)/helm lint --strict charts/mongoferry
	for f in charts/mongoferry/ci/*.yaml; do $(BIN)/helm lint --strict charts/mongoferry --values "$$f" || exit 1; done

.PHONY: demo
demo: ferry ferretdb ## Run a full sync end to end on two embedded servers.
	$(BIN)/ferry demo

.PHONY: demo-filter
demo-filter: ferry ferretdb ## Run the demo keeping only part of the live collection (namespaces.filters): no other document reaches the target.
	$(BIN)/ferry demo --filter

.PHONY: demo-sharded
demo-sharded: ferry ferretdb ## Run a sync from a 3-shard cluster stand-in with chunk migrations during a live load.
	$(BIN)/ferry demo --sharded

.PHONY: bench
bench: ferry ferretdb ## Run the benchmarks (figures go to docs/benchmarks.md).
	$(BIN)/ferry bench full

.PHONY: bench-peer
bench-peer: ferry ferretdb ## MongoShake's collector (MONGOSHAKE=path, built as docs/benchmarks.md says) beside MongoFerry on the same data.
	$(BIN)/ferry bench peer --peer-bin "$(MONGOSHAKE)"

.PHONY: bench-wire
bench-wire: ferry ## Run the replay benchmark over the wire protocol (in-process servers; targets for ddt with 16 writers).
	$(BIN)/ferry bench replay --wire --shape ddt --writers 16 --delay 0,1ms

##@ Operator

# The operator's image: the manager (entrypoint /manager) and the worker
# (/ferry) in one. Give it a tag: the tag is the version stamped into both
# binaries, and the manager starts its workers from this same image.
IMG ?= ghcr.io/mongoferry/mongoferry:dev
VERSION ?= $(lastword $(subst :, ,$(IMG)))
CONTAINER_TOOL ?= docker
# Extra flags for `make run`, for example RUN_ARGS=--log-level=debug.
RUN_ARGS ?=

.PHONY: install
install: manifests ## Install the SyncTask CRD into the cluster of the current kubeconfig.
	kubectl apply --server-side -f config/crd/bases

.PHONY: uninstall
uninstall: ## Remove the SyncTask CRD, and with it every SyncTask, from the cluster of the current kubeconfig.
	kubectl delete --ignore-not-found -f config/crd/bases

.PHONY: run
run: manifests ## Run the manager here against the cluster of the current kubeconfig (make install first); workers run from IMG.
	$(GO) run ./cmd/manager --log-format=text --metrics-bind-address=127.0.0.1:8080 --health-probe-bind-address=127.0.0.1:8081 --worker-image=$(IMG) $(RUN_ARGS)

.PHONY: docker-build
docker-build: ## Build the image IMG with both binaries (needs a Docker engine; CI does not run it).
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) --build-arg IMAGE=$(IMG) -t $(IMG) .

# Without Docker or a registry: podman and runc from Debian packages, the
# base assembled here in place of distroless (hack/build-image.sh).
.PHONY: image
image: container-tools ## Build the image IMG here with podman, no registry needed: static binaries, a distroless-like base from Debian's CA bundle and time zones, the Dockerfile's final stage (docs/containers.md).
	hack/build-image.sh $(IMG) $(VERSION)

.PHONY: container-tools
container-tools: ## Install podman, runc, ca-certificates and tzdata from Debian packages when missing (make image, make test-containers and so make test need them).
	@missing=""; \
	command -v podman >/dev/null || missing="$$missing podman"; \
	{ command -v runc >/dev/null || test -x /usr/sbin/runc; } || missing="$$missing runc"; \
	test -e /etc/ssl/certs/ca-certificates.crt || missing="$$missing ca-certificates"; \
	test -e /usr/share/zoneinfo/UTC || missing="$$missing tzdata"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing from Debian packages (apt-get install)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y $$missing || { apt-get update && apt-get install -y $$missing; } || \
	    { echo "container-tools: could not install$$missing: install them as root (apt-get install -y$$missing); make test runs the container suite and fails without them"; exit 1; }; \
	fi

.PHONY: postgres-server
postgres-server: ## Install PostgreSQL from Debian packages when missing (the PLAIN authentication test runs FerretDB on a password-protected PostgreSQL).
	@if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && ! command -v postgres >/dev/null; then \
	  echo "installing postgresql from Debian packages (apt-get install)"; \
	  apt-get install -y postgresql || { apt-get update && apt-get install -y postgresql; }; \
	fi

# The end-to-end tests make test-containers runs in container mode: the
# operator's (a replica set, a sharded source with chunks moving and a
# worker killed, TLS Secrets, the cut-over, no password anywhere it could
# leak) and the container-only ones (memory limit, SIGTERM during replay,
# endpoints, logs, the manager from the chart's Deployment).
# MONGOFERRY_CONTAINERS=required: a test that needs containers fails, and
# says why, where it would skip by hand (podman missing or unable to run a
# container, container mode not selected); each package first runs one
# container of IMG (podrunner.Preflight). The timeouts keep make test
# within CI's 90 minutes: the suite takes about 10 minutes (docs/containers.md).
CONTAINER_E2E ?= ^(TestOperator|TestOperatorShardedSource|TestOperatorTLSSecrets|TestOperatorWorkerTLS|TestOperatorCutover|TestSecretsNeverLeakOperator|TestContainer.*)$$
CONTAINER_ENV := MONGOFERRY_CONTAINERS=required MONGOFERRY_POD_RUNTIME=podman MONGOFERRY_POD_IMAGE=$(IMG)
.PHONY: test-containers
test-containers: ferretdb envtest-assets container-tools image $(BIN)/helm ## Run the container suite: the image's tests and the operator's end-to-end tests with workers as real containers of IMG under the pod spec's security context (podman; the last step of make test; docs/containers.md).
	cd $(TEST_MOD) && $(CONTAINER_ENV) $(GO) test -count=1 -timeout 10m -v ./containers | grep --line-buffered -v '^{"level"'
	cd $(TEST_MOD) && $(CONTAINER_ENV) $(GO) test -count=1 -timeout 35m -run '$(CONTAINER_E2E)' -v ./e2e | grep --line-buffered -v '^{"level"'

.PHONY: docker-push
docker-push: ## Push the image IMG.
	$(CONTAINER_TOOL) push $(IMG)

##@ Code generation

.PHONY: generate
generate: $(BIN)/controller-gen ## Generate deepcopy methods for api/ and pkg/config (zz_generated.deepcopy.go), and the task file's schema that ferry explain task prints (pkg/config/zz_generated.schema.go).
	$(BIN)/controller-gen object paths=./api/... paths=./pkg/config/...
	$(GO) run ./hack/gen-taskschema pkg/config pkg/config/zz_generated.schema.go

.PHONY: manifests
manifests: $(BIN)/controller-gen ## Generate the CRD YAML (config/crd/bases, and the chart's CRD templates from it), the manager's ClusterRole (config/rbac/role.yaml) from the markers, and the chart's Grafana dashboard from internal/dashboard.
	$(BIN)/controller-gen crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(BIN)/controller-gen rbac:roleName=mongoferry-manager paths=./internal/controller/... output:rbac:artifacts:config=config/rbac
	hack/chart-manifests.sh
	$(GO) run ./hack/gen-dashboard $(DASHBOARD)

# The chart's Grafana dashboard, built by internal/dashboard.
DASHBOARD := charts/mongoferry/dashboards/mongoferry-synctask.json

# The SyncTask API reference, generated from api/v1alpha1 by crd-ref-docs.
API_DOCS := docs/api-reference.md

.PHONY: api-docs
api-docs: ## Generate the SyncTask API reference (docs/api-reference.md) from the Go types in api/v1alpha1 with crd-ref-docs (hack/api-docs/gen.sh).
	hack/api-docs/gen.sh

# Regenerates into the working tree, then compares with a copy taken before:
# on a clean clone this is `git diff --exit-code` on the generated files, and
# locally it only fails when something really was stale (not merely uncommitted).
.PHONY: verify-generated
verify-generated: $(BIN)/controller-gen ## Fail if the committed deepcopy, CRD (also the chart's), RBAC, dashboard or API reference files differ from what the code generates.
	@before="$$(mktemp -d)"; trap 'rm -rf "$$before"' EXIT; \
	mkdir -p "$$before/config/crd" "$$before/config/rbac" "$$before/pkg/config" "$$before/chart"; \
	cp -R api "$$before/"; cp -R config/crd/bases "$$before/config/crd/"; \
	cp charts/mongoferry/templates/crd-*.yaml charts/mongoferry/templates/_manager-rules.tpl "$$before/chart/" 2>/dev/null || true; \
	cp config/rbac/role.yaml "$$before/config/rbac/" 2>/dev/null || true; \
	cp pkg/config/zz_generated.deepcopy.go pkg/config/zz_generated.schema.go "$$before/pkg/config/" 2>/dev/null || true; \
	cp $(DASHBOARD) "$$before/dashboard.json" 2>/dev/null || true; \
	cp $(API_DOCS) "$$before/api-reference.md" 2>/dev/null || true; \
	$(MAKE) --no-print-directory generate manifests api-docs >/dev/null; \
	stale=0; \
	diff -ruN "$$before/api" api || stale=1; \
	diff -ruN "$$before/config/crd/bases" config/crd/bases || stale=1; \
	diff -uN "$$before/config/rbac/role.yaml" config/rbac/role.yaml || stale=1; \
	diff -uN "$$before/pkg/config/zz_generated.deepcopy.go" pkg/config/zz_generated.deepcopy.go || stale=1; \
	diff -uN "$$before/pkg/config/zz_generated.schema.go" pkg/config/zz_generated.schema.go || stale=1; \
	diff -uN "$$before/dashboard.json" $(DASHBOARD) || stale=1; \
	diff -uN "$$before/api-reference.md" $(API_DOCS) || stale=1; \
	for f in "$$before"/chart/* charts/mongoferry/templates/crd-*.yaml charts/mongoferry/templates/_manager-rules.tpl; do \
	  [ -e "$$f" ] || continue; b="$$(basename "$$f")"; \
	  diff -uN "$$before/chart/$$b" "charts/mongoferry/templates/$$b" || stale=1; \
	done; \
	if [ -n "$$CI" ]; then git diff --exit-code -- api config/crd config/rbac/role.yaml pkg/config/zz_generated.deepcopy.go pkg/config/zz_generated.schema.go 'charts/mongoferry/templates/crd-*.yaml' charts/mongoferry/templates/_manager-rules.tpl $(DASHBOARD) $(API_DOCS) || stale=1; fi; \
	if [ $$stale = 1 ]; then echo "generated files were stale and have been regenerated (above): review and commit them (make generate manifests api-docs)"; exit 1; fi

##@ Test servers and tools

.PHONY: ferretdb
ferretdb: $(BIN)/ferretdb ## Build FerretDB v1.24.0 (test server) into bin/.
$(BIN)/ferretdb:
	hack/build-ferretdb.sh $@

.PHONY: envtest-assets
envtest-assets: kube-apiserver etcd ## Build the envtest control plane (kube-apiserver, etcd) into bin/k8s.

.PHONY: kube-apiserver
kube-apiserver: $(K8S_ASSETS)/kube-apiserver ## Build kube-apiserver (k8s.io/kubernetes, minor of k8s.io/api) into bin/k8s.
$(K8S_ASSETS)/kube-apiserver: hack/tools/kube-apiserver/go.mod
	hack/build-kube-apiserver.sh $@

.PHONY: etcd
etcd: $(K8S_ASSETS)/etcd ## Build etcd (go.etcd.io/etcd/server/v3) into bin/k8s.
$(K8S_ASSETS)/etcd: hack/tools/etcd/go.mod
	hack/build-etcd.sh $@

# The alert rules' unit tests (promtool test rules, test/chart) and the
# end-to-end test with a real Prometheus (test/e2e) use these; they build
# from github.com/prometheus/prometheus at the version test/go.mod uses, without
# the web UI's assets and with only the static, file and HTTP service
# discoveries (about 10 minutes on two cores with a cold build cache).
.PHONY: prometheus
prometheus: $(BIN)/prometheus $(BIN)/promtool ## Build the Prometheus server and promtool (github.com/prometheus/prometheus in test/go.mod) into bin/.
$(BIN)/prometheus $(BIN)/promtool &: hack/tools/prometheus/go.mod
	hack/build-prometheus.sh $(BIN)

.PHONY: test-rules
test-rules: prometheus $(BIN)/helm ## Run promtool check rules and promtool test rules on the chart's alerts (the test/chart tests do too).
	cd $(TEST_MOD) && $(GO) test -count=1 -run 'TestAlertRulesPromtool' -v ./chart

$(BIN)/controller-gen:
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: helm
helm: $(BIN)/helm ## Build Helm (helm.sh/helm/v3) into bin/ for the chart's tests.
# The ldflags are those of Helm's own Makefile: its version, and the
# Kubernetes version `helm template` and `helm lint` assume without a
# cluster (that of k8s.io/api in go.mod, which the envtest API server
# matches) instead of the v1.20 fallback.
HELM_K8S_MINOR = $(shell sed -n 's/^[[:space:]]*k8s.io\/api v0\.\([0-9]*\)\..*/\1/p' go.mod)
HELM_LDFLAGS = -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_K8S_MINOR) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_K8S_MINOR)
$(BIN)/helm:
	GOBIN=$(BIN) $(GO) install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# The committed copies are what the tests use; this refreshes them from the
# prometheus-operator module (example/prometheus-operator-crd) on the proxy.
.PHONY: monitoring-crds
monitoring-crds: ## Copy the prometheus-operator's ServiceMonitor, PodMonitor and PrometheusRule CRDs (PROMETHEUS_OPERATOR_VERSION) into test/testdata.
	@dir="$$($(GO) mod download -json github.com/prometheus-operator/prometheus-operator@$(PROMETHEUS_OPERATOR_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p')"; \
	test -n "$$dir" || { echo "cannot download github.com/prometheus-operator/prometheus-operator@$(PROMETHEUS_OPERATOR_VERSION)"; exit 1; }; \
	mkdir -p $(MONITORING_CRDS); \
	for k in servicemonitors podmonitors prometheusrules; do \
	  install -m 0644 "$$dir/example/prometheus-operator-crd/monitoring.coreos.com_$$k.yaml" $(MONITORING_CRDS)/; \
	done

$(BIN)/golangci-lint:
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
