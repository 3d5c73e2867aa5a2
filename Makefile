# Mediator. `make help` lists the targets; `make dev` and `make test` are the two that matter.
SHELL := /bin/bash
# A recipe's pipeline fails when any part of it fails: `make stress` pipes the tests through
# grep, and without this it answered grep's status, 0 however the tests ended.
.SHELLFLAGS := -o pipefail -c
GO ?= go
LOCAL := $(GO) run ./localdev/cmd/mediatorlocal
FUNCTIONS := submit query nodes result cancel reap migrate

.PHONY: help dev test stress bench migrate build lint clean demo

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-10s %s\n", $$1, $$2}'

dev: ## PostgreSQL (local or DATABASE_URL), migrations, the API on 127.0.0.1:3000 (or $PORT), the reaper ticking
	$(LOCAL) serve

# then_stop runs $(1), then stops the throwaway cluster $(2) whatever $(1) did, and exits
# with $(1)'s status.
then_stop = status=0; $(1) || status=$$?; $(LOCAL) stop $(2) >/dev/null 2>&1 || true; exit $$status

test: ## every test, against a throwaway PostgreSQL (or DATABASE_URL)
	@$(call then_stop,$(GO) test -count=1 -timeout 20m ./...,test)

demo: ## a local stack and a simulated fleet play the CP2 gate, then a run survives a node restart
	$(GO) run ./localdev/cmd/demo

stress: ## the concurrent stress test at its long size (make test runs it at CI size)
	@$(call then_stop,$(GO) test -count=1 -timeout 30m -run 'TestStress' ./localdev/stress/ -long -v 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|stress_test',test)

bench: ## throughput, latency and wake cost beside pgbench and River, on a throwaway PostgreSQL (~2 min); table in localdev/bench/out/
	@$(call then_stop,(cd localdev/bench && $(GO) run . -out out),bench)

migrate: ## apply the migrations to the local database (the migrate function's code)
	$(LOCAL) migrate

build: ## build every function's bootstrap for this machine into bin/<function>/bootstrap
	@for f in $(FUNCTIONS); do \
		CGO_ENABLED=0 $(GO) build -tags lambda.norpc -o bin/$$f/bootstrap ./functions/$$f || exit 1; \
	done

lint: ## go vet and gofmt
	$(GO) vet ./...
	cd localdev/bench && $(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# SAM's makefile builder (BuildMethod: makefile) runs `make build-<LogicalId>` with
# ARTIFACTS_DIR set; each target leaves one static arm64 bootstrap there.
LAMBDA_BUILD = CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' -o $(ARTIFACTS_DIR)/bootstrap
build-SubmitFunction:
	$(LAMBDA_BUILD) ./functions/submit
build-QueryFunction:
	$(LAMBDA_BUILD) ./functions/query
build-NodesFunction:
	$(LAMBDA_BUILD) ./functions/nodes
build-ResultFunction:
	$(LAMBDA_BUILD) ./functions/result
build-CancelFunction:
	$(LAMBDA_BUILD) ./functions/cancel
build-ReapFunction:
	$(LAMBDA_BUILD) ./functions/reap
build-MigrateFunction:
	$(LAMBDA_BUILD) ./functions/migrate

clean: ## stop local clusters, remove their data and the build output
	-$(LOCAL) stop dev
	-$(LOCAL) stop test
	-$(LOCAL) stop demo
	-$(LOCAL) stop bench
	rm -rf .localdev bin .aws-sam localdev/bench/out
