# Mediator. `make help` lists the targets; `make dev` and `make test` are the two that matter.
SHELL := /bin/bash
# A recipe's pipeline fails when any part of it fails: `make stress` pipes the tests through
# grep, and without this it would answer grep's status, 0 however the tests end.
.SHELLFLAGS := -o pipefail -c
GO ?= go
LOCAL := $(GO) run ./localdev/cmd/mediatorlocal
# Every Lambda function, by its directory under functions/ (submit is SubmitFunction in
# template.yaml): make build and the build-<LogicalId> targets below come from this list.
FUNCTIONS := submit query nodes result cancel reap migrate

.PHONY: help prerequisites dev test stress bench bench-fleet bench-console screenshots migrate build cli lint clean demo

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-14s %s\n", $$1, $$2}'

prerequisites: ## what make dev, make test and make lint need besides Go: the install lines, and what this machine lacks
	@$(GO) run ./localdev/cmd/prerequisites

# AUTH=jwt (make dev AUTH=jwt) reaches mediatorlocal as an environment variable, as a make
# variable given on the command line does; FRESH, DEV_TOKEN_SECONDS and ISSUER_PORT likewise.
dev: ## PostgreSQL (local or DATABASE_URL), migrations, the API on 127.0.0.1:3000 (or $PORT), the reaper ticking; FRESH=1: an empty database; AUTH=jwt: a local OAuth 2.0 issuer, JWTs on the people's routes
	$(LOCAL) serve

# then_stop runs $(1), then stops the throwaway cluster $(2) whatever $(1) did, and exits
# with $(1)'s status.
then_stop = status=0; $(1) || status=$$?; $(LOCAL) stop $(2) >/dev/null 2>&1 || true; exit $$status

test: ## every test, against a throwaway PostgreSQL (or DATABASE_URL)
	@$(call then_stop,$(GO) test -count=1 -timeout 20m ./...,test)

demo: ## a local stack and real mediator agents (Linux) play placement, queueing, promotion, refusal, an agent's restart, two roles passing an output, drains
	$(GO) run ./localdev/cmd/demo

stress: ## the concurrent stress test at its long size (make test runs it at CI size)
	@$(call then_stop,$(GO) test -count=1 -timeout 30m -run 'TestStress' ./localdev/stress/ -long -v 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|stress_test',test)

bench: ## throughput, latency and wake cost beside pgbench and River, on a throwaway PostgreSQL (~2 min); table in localdev/bench/out/
	@$(call then_stop,(cd localdev/bench && $(GO) run . -out out),bench)

bench-fleet: ## 10,000 nodes heartbeating at their real cadence while runs flow, the handlers in a process of their own, on a throwaway PostgreSQL (~3 min); table in localdev/bench/out/fleet.md
	@$(call then_stop,(cd localdev/bench && $(GO) run . -fleet -out out),bench)

bench-console: ## the web console in headless Chromium: time to the first render of the fleet at 1,000 and 10,000 nodes and of a run, and the requests each view makes (~2 min); table in localdev/bench/out/console.md
	@$(call then_stop,$(GO) run ./localdev/cmd/console -bench localdev/bench/out,console)

screenshots: ## a seeded local stack with real agents (Linux), its console's views rendered by headless Chromium to shared/console/screenshots/
	@$(call then_stop,$(GO) run ./localdev/cmd/console -screenshots shared/console/screenshots,console)

migrate: ## apply the migrations to the local database (the migrate function's code)
	$(LOCAL) migrate

build: ## build every function's bootstrap for this machine (or GOOS/GOARCH) into bin/<function>/
	@for f in $(FUNCTIONS); do $(call build_function,$$f,bin/$$f) || exit 1; done

cli: ## the command line, bin/mediator (or: go install ./cmd/mediator)
	$(GO) build -o bin/mediator ./cmd/mediator

lint: ## go vet, gofmt, the OpenAPI document, cfn-lint on the templates, and no line citing what lies outside the repository
	$(GO) vet ./...
	cd localdev/bench && $(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) run ./localdev/cmd/openapicheck
	@# Every finding fails, warnings included; the templates suppress no check.
	@if command -v cfn-lint >/dev/null; then echo "cfn-lint template.yaml infra/*.yaml"; cfn-lint template.yaml infra/*.yaml; \
	else echo "cfn-lint is not installed (pip install cfn-lint): the CloudFormation templates were not linted"; fi
	@# The repository stands alone: no file, tracked or about to be, cites a spec or a shared
	@# folder outside it. (The pattern is written so that it does not match itself.)
	@cited=$$(git ls-files --cached --others --exclude-standard -z | xargs -0 -r grep -nsIE 'SPEC[.]md|[.][.]/shared' --); \
	if [ -n "$$cited" ]; then echo "lines citing what lies outside the repository:"; echo "$$cited"; exit 1; fi

# build_function is the one recipe that builds functions/$(1) into $(2)/bootstrap, for make
# build, SAM and the emulator tests alike: without cgo (a static binary, cross-compiled with no
# C toolchain), without the RPC handler only the retired go1.x runtime used (lambda.norpc),
# with no build paths in it and stripped. GOOS and GOARCH are this machine's unless the command
# line or the environment names others.
GOOS ?= $(shell $(GO) env GOOS)
GOARCH ?= $(shell $(GO) env GOARCH)
build_function = CGO_ENABLED=0 GOOS=$(GOOS) GOARCH=$(GOARCH) $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' -o $(2)/bootstrap ./functions/$(1)

# RDS's CA bundle (https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem), which a
# direct connection to Aurora verifies the database by (DB_SSLROOTCERT): when this file exists,
# every function's package carries it as rds-global-bundle.pem beside its bootstrap, which
# Lambda unpacks to /var/task. Absent, the packages carry none, and a stack deployed with
# DatabaseSslRootCert=/var/task/rds-global-bundle.pem stops at start-up saying the file is missing.
RDS_CA_BUNDLE ?= certs/rds-global-bundle.pem
ship_ca_bundle = if [ -f '$(RDS_CA_BUNDLE)' ]; then cp '$(RDS_CA_BUNDLE)' $(1)/rds-global-bundle.pem; fi

# SAM's makefile builder (BuildMethod: makefile) runs `make build-<LogicalId>` with
# ARTIFACTS_DIR set. Each function in FUNCTIONS has one such target, named by its logical id in
# template.yaml (submit → build-SubmitFunction), which leaves a linux/arm64 bootstrap there, and
# the CA bundle above when there is one. The id is made by make itself, one patsubst per letter
# for the first one: no shell's dialect is involved, and macOS's /bin/bash (3.2) has no
# ${name^}, which would leave every target named build-Function there.
alphabet := a A b B c C d D e E f F g G h H i I j J k K l L m M n N o O p P q Q r R s S t T u U v V w W x X y Y z Z
capitalise = $(call capitalise_with,$(1),$(alphabet))
capitalise_with = $(if $(2),$(call capitalise_with,$(patsubst $(word 1,$(2))%,$(word 2,$(2))%,$(1)),$(wordlist 3,$(words $(2)),$(2))),$(1))
logical_id = $(call capitalise,$(1))Function
LAMBDA_TARGETS := $(foreach f,$(FUNCTIONS),build-$(call logical_id,$(f)))
.PHONY: $(LAMBDA_TARGETS)
$(LAMBDA_TARGETS): GOOS = linux
$(LAMBDA_TARGETS): GOARCH = arm64
$(foreach f,$(FUNCTIONS),$(eval build-$(call logical_id,$(f)): ; $$(call build_function,$(f),$$(ARTIFACTS_DIR)) && $$(call ship_ca_bundle,$$(ARTIFACTS_DIR))))

clean: ## stop local clusters, remove their data and the build output
	-$(LOCAL) stop dev
	-$(LOCAL) stop test
	-$(LOCAL) stop demo
	-$(LOCAL) stop bench
	-$(LOCAL) stop console
	rm -rf .localdev bin .aws-sam localdev/bench/out
