# syntax=docker/dockerfile:1
# MongoFerry's image: the operator's manager (/manager, the entrypoint) and
# the sync worker (/ferry), static binaries on distroless, running as a
# non-root user with nothing to write (a read-only root filesystem works).
#
#   make docker-build IMG=registry.example.com/mongoferry:v0.1.0
#
# VERSION is stamped into both binaries; IMAGE becomes the manager's default
# --worker-image, so the manager starts its workers from this same image.
# cmd/manager's TestStaticBuild builds with the flags below and checks that
# the binaries are static.

ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS builder
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG IMAGE=
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
# .dockerignore lets in only the Go sources (api, cmd,
# internal, pkg) besides go.mod and go.sum.
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath \
      -ldflags "-s -w -X github.com/mongoferry/mongoferry/internal/version.Version=${VERSION} -X main.defaultWorkerImage=${IMAGE}" \
      -o /out/manager ./cmd/manager && \
    CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath \
      -ldflags "-s -w -X github.com/mongoferry/mongoferry/internal/version.Version=${VERSION}" \
      -o /out/ferry ./cmd/ferry

FROM gcr.io/distroless/static:nonroot
LABEL org.opencontainers.image.title="mongoferry" \
      org.opencontainers.image.description="MongoFerry: a Kubernetes operator and the ferry CLI that copy MongoDB data between deployments and keep it in sync" \
      org.opencontainers.image.source="https://github.com/mongoferry/mongoferry" \
      org.opencontainers.image.licenses="Apache-2.0"
WORKDIR /
COPY --from=builder /out/manager /out/ferry /
USER 65532:65532
ENTRYPOINT ["/manager"]
