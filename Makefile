# Baton's entry points. Every target installs what it needs on a clean Debian machine by itself.
SHELL := /bin/bash
GO ?= go
GOBIN := $(shell $(GO) env GOPATH)/bin
RACE_TIMEOUT ?= 10m
INTEGRATION_TIMEOUT ?= 25m

.PHONY: test unit manifests fuzz integration lint bench demo devstack drill smoke tools deps compose-up compose-drill compose-down sim sim-mutants

# Debian packages the integration tests, the benchmarks and the demo start for real. apt-get runs only
# for what is missing (root, or sudo without a password).
APT_PACKAGES := redis-server prometheus
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo -n)

## deps: install the servers that are started natively (redis-server) when they are missing.
deps:
	@missing=""; for p in $(APT_PACKAGES); do b=$$p; [ $$p = prometheus ] && b=promtool; command -v $$b >/dev/null 2>&1 || [ -x /usr/bin/$$b ] || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null && \
		for p in $$missing; do ($(SUDO) systemctl disable --now $$p || $(SUDO) service $$p stop) >/dev/null 2>&1 || true; done; \
	fi

## test: unit tests of the library (race detector on), the Kubernetes manifests' validation
## (deploy/kubernetes/validate, offline), short fuzzing, then the integration tests against real servers;
## ends with one summary of every failure (gotestsum) and the wall time of each phase.
## unit, manifests, fuzz and integration run one phase each. TEST_FLAGS adds go test flags, e.g. TEST_FLAGS='-run X'.
## FUZZTIME (default 10s) is per fuzz target, beyond each target's committed seed corpus.
FUZZTIME ?= 10s
GOTESTSUM_VERSION ?= v1.13.0
GOTESTSUM := $(or $(shell $(GO) env GOBIN),$(GOBIN))/gotestsum
export GO FUZZTIME RACE_TIMEOUT INTEGRATION_TIMEOUT GOTESTSUM

test: deps $(GOTESTSUM)
	scripts/test.sh unit manifests fuzz integration

unit manifests fuzz: $(GOTESTSUM)
	scripts/test.sh $@

integration: deps $(GOTESTSUM)
	scripts/test.sh integration

# Installed by version into GOPATH/bin, where a fresh machine has nothing: only the Go module proxy is needed.
$(GOTESTSUM):
	$(GO) install gotest.tools/gotestsum@$(GOTESTSUM_VERSION)

## lint: no committed binary or file over 1 MiB outside testdata, gofmt, go vet, staticcheck (installed
## with go install when missing) and govulncheck, every module (the library, integration/,
## deploy/kubernetes/validate).
STATICCHECK_VERSION ?= v0.8.2
lint:
	scripts/check-committed.sh
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd integration && $(GO) vet ./...
	cd deploy/kubernetes/validate && $(GO) vet ./...
	@# go.mod says what each module imports: a direct import listed as indirect (or one left over) fails.
	$(GO) mod tidy -diff
	cd integration && $(GO) mod tidy -diff
	cd deploy/kubernetes/validate && $(GO) mod tidy -diff
	@[ -x "$(GOBIN)/staticcheck" ] || command -v staticcheck >/dev/null 2>&1 || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	PATH="$(GOBIN):$$PATH" staticcheck ./...
	cd integration && PATH="$(GOBIN):$$PATH" staticcheck ./...
	cd deploy/kubernetes/validate && PATH="$(GOBIN):$$PATH" staticcheck ./...
	scripts/govulncheck.sh

## sim: the deterministic simulator's batches (integration/tests/sim TestSim...) for SIM_BUDGET each,
## without -race for speed; prints one summary line per batch. SIM_SEED=0x1f make sim replays one seed
## and writes its timeline to SIM_TRACE (or the test log). make test runs a small slice with -race.
SIM_BUDGET ?= 3m
sim:
	cd integration && SIM_BUDGET=$(SIM_BUDGET) $(GO) test -count=1 -timeout 0 -v -run '^TestSim' ./tests/sim/

## sim-mutants: puts each past bug of integration/sim/mutants back in a scratch worktree and runs the
## simulator on it; fails if one survives. SIM_BUDGET bounds each mutant (default 10m), MUTANT=name runs one.
sim-mutants:
	SIM_BUDGET=$${SIM_MUTANT_BUDGET:-10m} scripts/sim-mutants.sh

## bench: measured figures beside their same-run baselines; prints a table, writes bench-results.json
## (and docs/benchmarks.md on a full run). BENCH_FLAGS adds batonbench flags, e.g. BENCH_FLAGS='-only dispatch'.
BENCH_FLAGS ?=
bench: deps
	cd integration && $(GO) run ./tools/cmd/batonbench -out ../bench-results.json -doc ../docs/benchmarks.md $(BENCH_FLAGS)

## demo: the main job on an embedded default: real etcd, a real Temporal server (a child process), a local
## Redis, three demo workers over four queues, a crash and a graceful handover, explained as they happen.
DEMO_BIN := $(CURDIR)/.demo/bin
demo: deps
	@mkdir -p $(DEMO_BIN)
	$(GO) build -o $(DEMO_BIN)/demo-worker ./cmd/demo-worker
	cd integration && $(GO) build -o $(DEMO_BIN)/demo ./tools/cmd/demo && $(GO) build -o $(DEMO_BIN)/temporal-dev ./tools/cmd/temporal-dev
	TEMPORALX_SERVER_BIN=$(DEMO_BIN)/temporal-dev $(DEMO_BIN)/demo -bin $(DEMO_BIN)

## devstack: the dev servers (embedded etcd, a Temporal server, redis-server) on loopback until Ctrl-C, built into
## .demo/bin first, saying so: `go run` prints nothing while it compiles, which on a first use takes minutes. Baton's
## own Temporal server is built only without the Temporal CLI (or with -temporal=builtin). DEVSTACK_FLAGS passes
## flags, e.g. DEVSTACK_FLAGS='-fixed-ports -env-file /tmp/baton.env'. While it runs, from another shell,
## `.demo/bin/devstack restart temporal [-down 3s]` restarts only Temporal, on the same port and database.
DEVSTACK_FLAGS ?=
devstack: deps
	@mkdir -p $(DEMO_BIN)
	@echo "devstack: building integration/tools/cmd/devstack into .demo/bin (the first build on a machine downloads and" \
		"compiles its modules, etcd's and the Temporal SDK's: about 5 minutes; later builds take seconds)"
	cd integration && $(GO) build -o $(DEMO_BIN)/devstack ./tools/cmd/devstack
	@if ! command -v temporal >/dev/null 2>&1 || [[ "$(DEVSTACK_FLAGS)" == *builtin* ]]; then \
		echo "devstack: building Baton's own Temporal server (integration/tools/cmd/temporal-dev) into .demo/bin (no Temporal CLI" \
			"on PATH, or -temporal=builtin): the first build on a machine downloads and compiles the Temporal server's" \
			"modules: several minutes more; later builds take seconds"; \
		echo "cd integration && $(GO) build -o $(DEMO_BIN)/temporal-dev ./tools/cmd/temporal-dev"; \
		cd integration && $(GO) build -o $(DEMO_BIN)/temporal-dev ./tools/cmd/temporal-dev; \
	fi
	TEMPORALX_SERVER_BIN=$(DEMO_BIN)/temporal-dev exec $(DEMO_BIN)/devstack $(DEVSTACK_FLAGS)

## drill: chaos drill on loopback (3-member etcd, Temporal, Redis, 5 demo workers over 20 queues): faults one
## at a time for DRILL_DURATION while a producer signals 10 requests/s to 2 queues; a fault-by-fault table, the
## etcd ledger's verdict on every accepted request (lost, done twice, left pending), drill-report.json; exits
## non-zero on any violation.
DRILL_DURATION ?= 5m
DRILL_FLAGS ?=
drill: deps
	cd integration && $(GO) run ./tools/cmd/drill -duration $(DRILL_DURATION) -out ../drill-report.json $(DRILL_FLAGS)

## smoke: make bench and make drill, each cut to a few seconds of real measuring and one real fault (a
## takeover section of the bench; one SIGKILL in the drill, judged as strictly as a full drill), so that CI
## proves on every change that the rest of a newcomer's path builds and runs.
smoke:
	$(MAKE) bench BENCH_FLAGS='-only takeover -takeovers 5'
	$(MAKE) drill DRILL_DURATION=10s DRILL_FLAGS='-faults sigkill -cycles 1'

## compose-up: the staging stack (3-member etcd, Temporal + Postgres, Redis, Prometheus, Grafana, 3 demo
## workers) with docker compose; compose-drill kills (DRILL=stop: stops) the leader of QUEUE.
compose-up:
	docker compose up -d --build
	@echo "Grafana http://localhost:3000  Prometheus http://localhost:9090  Temporal UI http://localhost:8233"

compose-drill:
	bash deploy/drill.sh $(or $(DRILL),kill)

compose-down:
	docker compose down -v
