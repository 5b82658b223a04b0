# Peloton build. `make test` is the one command that sets up and runs the whole suite.
SHELL := /bin/bash
GO ?= go
GOBIN_DIR := $(CURDIR)/.cache/bin
export PATH := $(GOBIN_DIR):$(PATH)

PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GRPC_GATEWAY_VERSION := v2.32.0
# staticcheck: `make test` runs it after vet; `make lint-tools` installs it.
STATICCHECK_VERSION := v0.8.2
PROTO_DIR := proto/peloton/api/v1
# Messages only Peloton's own packages read (stored records): Go code only,
# no services, no REST.
INTERNAL_PROTOS := proto/peloton/internal/history/v1/history.proto

# The Kubernetes parts the suite runs for real (hostmgr/kubernetes and its
# end-to-end tests): built from the module proxy once per machine, cached
# outside the clone (keyed by version) so every fresh clone, CI's included,
# reuses them. PELOTON_CACHE moves the cache.
# KUBE_VERSION must match the k8s.io/client-go v0.x release in go.mod.
KUBE_VERSION := v1.36.3
KWOK_VERSION := v0.8.0
PELOTON_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/peloton
export PELOTON_KUBE_BIN := $(PELOTON_CACHE)/kube/$(KUBE_VERSION)/bin
# helm, for deploy/helm's tests (lint, and the rendered chart applied to the
# test apiserver): built from the module proxy like the kube tools.
HELM_VERSION := v3.22.0
export PELOTON_HELM_BIN := $(PELOTON_CACHE)/helm/$(HELM_VERSION)/bin
# promtool, for the alert rules' unit tests (deploy/prometheus): Debian's.
export PELOTON_PROMTOOL := $(PELOTON_CACHE)/promtool/bin/promtool

.PHONY: all build test fuzz soak up proto proto-tools kube-tools kubelet-tools helm-tools promtool-tools browser-tools postgres-tools lint-tools ui clean dashboards

all: build

build:
	$(GO) build -o bin/peloton ./cmd/peloton
	$(GO) build -o bin/peloton-hostagent ./cmd/peloton-hostagent

# Every package, the end-to-end suite included (whole stack, embedded etcd,
# real processes), runs under the race detector: data races across the stack
# are exactly what a scheduler's tests must catch.
#
# The end-to-end package is named first: go test starts packages in the
# order given (two at a time on two cores), and it alone takes most of the
# suite's time, mostly waiting on real processes and clocks; started last,
# as ./... would, the suite lasted the time of every other package on one
# lane plus its own. Started first, the other packages run beside it.

## test sets up everything the suite needs and runs it all.
test: kube-tools kubelet-tools helm-tools promtool-tools browser-tools postgres-tools lint-tools
	$(GO) mod download
	$(GO) vet ./...
	$(GOBIN_DIR)/staticcheck ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.') 2>/dev/null); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	PELOTON_REQUIRE_POSTGRES=$(if $(filter 1,$(PELOTON_SKIP_POSTGRES)),,1) \
	  PELOTON_REQUIRE_KUBELET=$(if $(filter 1,$(PELOTON_SKIP_KUBELET)),,1) \
	  PELOTON_REQUIRE_NETNS=$(if $(filter 1,$(PELOTON_SKIP_NETNS)),,1) \
	  PELOTON_REQUIRE_CGROUPS=$(if $(filter 1,$(PELOTON_SKIP_CGROUPS)),,1) $(GO) test -race -count=1 -timeout 40m ./test/e2e/ ./...

## fuzz runs every fuzz target (each func Fuzz* in a _test.go file) with
## -fuzz for FUZZTIME (default 30s), one after another (hack/fuzz.sh): go
## test -fuzz takes one target per run. `make test` runs each target's seed
## corpus only. A failing input is written to the package's
## testdata/fuzz/<Target>/ and stays there as a seed once the defect is fixed.
FUZZTIME ?= 30s
fuzz:
	@FUZZTIME=$(FUZZTIME) GO=$(GO) bash hack/fuzz.sh

## soak runs the soak test (not part of test): random creates, kills,
## updates, scales, drains and kill -9 restarts of a `peloton up` for
## PELOTON_SOAK_DURATION (default 10m), checking the invariants throughout.
soak:
	$(GO) test -tags soak -count=1 -run TestSoak -timeout 60m -v ./test/e2e/

## dashboards writes deploy/grafana/*.json again from deploy/grafana/dashboards.go
## (a test fails while they differ).
dashboards:
	$(GO) generate ./deploy/grafana

## up runs a cluster on this machine until Ctrl-C. It builds the binary and
## execs it instead of `go run`, which exits 1 when interrupted even though
## peloton stopped cleanly and exited 0: make would then print "Error 1".
up:
	$(GO) build -o bin/peloton ./cmd/peloton
	exec bin/peloton up $(ARGS)

## proto regenerates the committed Go, gateway and OpenAPI code from proto/:
## the cluster API (peloton.proto) and the federation API (federation.proto),
## each with its own REST rules and OpenAPI document, and the internal
## records (INTERNAL_PROTOS).
proto: proto-tools
	protoc -I proto -I /usr/include \
	  --go_out=. --go_opt=module=github.com/peloton-sched/peloton \
	  --go-grpc_out=. --go-grpc_opt=module=github.com/peloton-sched/peloton \
	  $(PROTO_DIR)/peloton.proto $(PROTO_DIR)/federation.proto
	protoc -I proto -I /usr/include --include_source_info --include_imports \
	  --descriptor_set_out=cmd/peloton/cli/apidoc.binpb $(PROTO_DIR)/peloton.proto
	$(call gateway,peloton,peloton_http.yaml,openapi.json)
	$(call gateway,federation,federation_http.yaml,federation_openapi.json)
	protoc -I proto -I /usr/include \
	  --go_out=. --go_opt=module=github.com/peloton-sched/peloton \
	  $(INTERNAL_PROTOS)

# gateway generates the REST gateway and the OpenAPI document of one proto
# file: $(1) its name, $(2) its HTTP rules, $(3) the document's name.
define gateway
	protoc -I proto -I /usr/include \
	  --grpc-gateway_out=. --grpc-gateway_opt=module=github.com/peloton-sched/peloton \
	  --grpc-gateway_opt=grpc_api_configuration=$(PROTO_DIR)/$(2) \
	  --openapiv2_out=$(PROTO_DIR) \
	  --openapiv2_opt=grpc_api_configuration=$(PROTO_DIR)/$(2) \
	  --openapiv2_opt=allow_merge=true,merge_file_name=$(1),json_names_for_fields=true \
	  $(PROTO_DIR)/$(1).proto
	mv $(PROTO_DIR)/$(1).swagger.json $(PROTO_DIR)/$(3)
endef

proto-tools:
	@command -v protoc >/dev/null || { echo "installing protobuf-compiler"; apt-get install -y -qq protobuf-compiler >/dev/null || { apt-get update -qq && apt-get install -y -qq protobuf-compiler; }; }
	@mkdir -p $(GOBIN_DIR)
	@test -x $(GOBIN_DIR)/protoc-gen-go || GOBIN=$(GOBIN_DIR) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@test -x $(GOBIN_DIR)/protoc-gen-go-grpc || GOBIN=$(GOBIN_DIR) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@test -x $(GOBIN_DIR)/protoc-gen-grpc-gateway || GOBIN=$(GOBIN_DIR) $(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
	@test -x $(GOBIN_DIR)/protoc-gen-openapiv2 || GOBIN=$(GOBIN_DIR) $(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)

## lint-tools installs staticcheck (STATICCHECK_VERSION) into .cache/bin
## from the Go module proxy; nothing when that version is already there.
lint-tools:
	@mkdir -p $(GOBIN_DIR)
	@$(GOBIN_DIR)/staticcheck -version 2>/dev/null | grep -qF '($(STATICCHECK_VERSION:v%=%))' || GOBIN=$(GOBIN_DIR) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## helm-tools builds helm once per machine (about three minutes; cached
## under PELOTON_CACHE/helm/<version>), for deploy/helm's tests.
helm-tools:
	@HELM_TOOLS_DIR=$(PELOTON_CACHE)/helm/$(HELM_VERSION) HELM_VERSION=$(HELM_VERSION) GO=$(GO) bash hack/helm-tools.sh

## promtool-tools takes promtool out of Debian's prometheus package, once
## per machine (nothing is installed; hack/promtool.sh), for the alert
## rules' unit tests.
promtool-tools:
	@PROMTOOL=$(PELOTON_PROMTOOL) bash hack/promtool.sh

## kube-tools builds kube-apiserver, kube-scheduler, kube-controller-manager,
## kubelet and kwok once (minutes the first time, nothing after).
kube-tools:
	@KUBE_TOOLS_DIR=$(PELOTON_CACHE)/kube/$(KUBE_VERSION) KUBE_VERSION=$(KUBE_VERSION) KWOK_VERSION=$(KWOK_VERSION) GO=$(GO) bash hack/kube-tools.sh

## kubelet-tools installs Debian's containerd, runc, CNI plugins, static
## busybox and iproute2 for the real-node tests when one is missing
## (PELOTON_SKIP_KUBELET=1 skips them).
kubelet-tools:
	@bash hack/kubelet-tools.sh

## browser-tools installs Debian's Chromium for the web UI's browser tests
## when it is missing (nothing when it is there; PELOTON_SKIP_BROWSER=1 skips).
browser-tools:
	@bash hack/chromium.sh

## postgres-tools installs Debian's PostgreSQL server for the history
## store's tests when it is missing (nothing when it is there;
## PELOTON_SKIP_POSTGRES=1 skips). The tests start servers of their own
## (internal/testing/pgtest); under `make test` they fail, rather than
## skip, when there is none.
postgres-tools:
	@bash hack/postgres.sh

## ui has nothing to build: the web UI (ui/static) is plain ES modules and
## CSS, embedded as they are by go:embed. The target exists so that nobody
## looks for a bundler.
ui:
	@echo "ui/static is served as written: nothing to build"

clean:
	rm -rf bin
