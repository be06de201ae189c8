# Baton's entry points. Every target installs what it needs on a clean Debian machine by itself.
SHELL := /bin/bash
GO ?= go
GOBIN := $(shell $(GO) env GOPATH)/bin
RACE_TIMEOUT ?= 10m
INTEGRATION_TIMEOUT ?= 25m

.PHONY: test unit integration lint bench demo tools

## test: unit tests of the library (race detector on), then the integration tests against real servers.
test: unit integration

unit:
	$(GO) test -race -count=1 -timeout $(RACE_TIMEOUT) ./...

integration:
	cd integration && $(GO) test -race -count=1 -timeout $(INTEGRATION_TIMEOUT) ./...

## lint: gofmt, go vet (both modules), staticcheck when installed.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd integration && $(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1 || [ -x "$(GOBIN)/staticcheck" ]; then \
		PATH="$(GOBIN):$$PATH" staticcheck ./... && (cd integration && PATH="$(GOBIN):$$PATH" staticcheck ./...); \
	else echo "staticcheck not installed; skipped (go install honnef.co/go/tools/cmd/staticcheck@latest)"; fi

## bench: measured figures beside their same-run baselines; prints a table, writes bench-results.json.
bench:
	cd integration && $(GO) run ./cmd/batonbench -out ../bench-results.json

## demo: the main job on an embedded default (real etcd in-process).
demo:
	cd integration && $(GO) run ./cmd/demo
