# Sentinel: edge gateway with distributed rate limits and adaptive overload protection.
# `make help` lists the targets.

VERSION        ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GO             ?= go
BIN            := bin
STATICCHECK    := honnef.co/go/tools/cmd/staticcheck@v0.8.2
K6_VERSION     := v1.8.1
K6             ?= $(shell command -v k6 || echo $$($(GO) env GOPATH)/bin/k6)
LDFLAGS        := -s -w -X main.version=$(VERSION)
TEST_TIMEOUT   ?= 20m
# go-control-plane's generated marshalling code (the Envoy service's answers,
# rls/codec.go) is built under this tag only; without it the answers are
# written by reflection, the same bytes, slower (docs/performance.md).
export GOFLAGS := $(strip $(GOFLAGS) -tags=vtprotobuf)

.DEFAULT_GOAL := help
.PHONY: help build run cluster test test-faults test-chaos test-short model bench bench-compare bench-sidebyside bench-rls bench-waiters profile lint fmt vet check loadtest loadtest-overload k6 loadtest-k6 loadtest-overload-k6 docker clean

help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-20s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build the gateway and the demo backend into bin/.
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/sentinel .
	CGO_ENABLED=0 $(GO) build -o $(BIN)/demo-backend ./loadtest/backend

run: build ## Start the demo backend on :9000 and the gateway on :8080 (admin on 127.0.0.1:9090) with config.yaml.
	@$(BIN)/demo-backend -listen 127.0.0.1:9000 & backend=$$!; \
	trap 'kill $$backend 2>/dev/null' EXIT INT TERM; \
	$(BIN)/sentinel -config config.yaml

cluster: ## Redis, 3 gateways, the demo backend and Prometheus with the alert rules, on 127.0.0.1 (Ctrl-C stops; DURATION=2m stops by itself).
	bash deploy/cluster.sh $(DURATION)

test: ## Run every test (unit, integration with real redis-server, promtool rules) with -race; the fault suite last, on its own.
	$(GO) test -race -shuffle=on -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v '/test/faults$$')
	$(MAKE) --no-print-directory test-faults

# The fault suite measures promises of the gateway (busiest windows, sheds), not
# of the test machine: it runs after the other packages' tests, not beside them
# on the same two cores.
test-faults: ## Run the fault suite alone, verbose, with its figures (real redis-server and a 3-node cluster, 3 gateways; see docs/reliability.md).
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -v ./test/faults

# The randomized fault harness alone: SCHEDULES schedules drawn from every
# fault kind (CI draws 3 from the kinds the gateway is known to hold under);
# SEED=n replays the schedules from seed n, CHAOS_FAULTS narrows the kinds.
SCHEDULES      ?= $(if $(SEED),1,20)
CHAOS_FAULTS   ?= all
test-chaos: ## Run SCHEDULES=N randomized fault schedules (default 20, ~15 s each; SEED=n replays that one schedule; CHAOS_FAULTS=pause,flush,... narrows the faults; see docs/reliability.md).
	SEED=$(SEED) SCHEDULES=$(SCHEDULES) CHAOS_FAULTS=$(CHAOS_FAULTS) $(GO) test -race -count=1 -timeout 0 -v -run '^TestFaultRandomSchedules$$' ./test/faults

model: ## Check the model of the lease protocol exhaustively with spin (limit/model/lease.pml; needs spin and gcc), and that its known-wrong variants fail.
	$(GO) test -count=1 -v ./limit/model/

test-short: ## Run the tests without -race (faster local loop).
	$(GO) test -timeout $(TEST_TIMEOUT) ./...

bench: ## Run the Go benchmarks with allocation counts (BenchmarkSaturation is the overload scenario's phase (e)).
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=1s ./...

bench-compare: ## Sentinel vs nginx and HAProxy side by side with wrk, with the ratio to the bare fasthttp floor: proxy, refusal path, check API, 64 KiB and 10 MiB answers (with peak RSS); 3 interleaved rounds (ROUNDS=n), about 6 min.
	bash bench/compare.sh

bench-sidebyside: ## The bare fasthttp proxy, Sentinel at BASE (default HEAD) and the working tree serving at once, wrk visiting each in turn: medians of the ratios per round (ROW=proxy|refuse; about 2 min).
	bash bench/sidebyside.sh

bench-waiters: ## Requests waiting for their limit (max_wait): the gateway's memory per waiting request and other requests' latency while N=10000 wait (about 1 min).
	$(GO) build -o bin/sentinel .
	$(GO) run ./bench/waiters -sentinel bin/sentinel -n $(or $(N),10000)

bench-rls: ## The Envoy rate limit service on one redis-server: a hot descriptor, 100k and 1M at random, a flooded one; beside envoyproxy/ratelimit when ERL=path names its binary, interleaved (ROUNDS=n, DURATION=10s; about 1.5 min a round). API=check or API=proxy: the same rows on the check API or the proxy (per client address), Sentinel alone.
	$(GO) build -o bin/sentinel .
	$(GO) build -o bin/demo-backend ./loadtest/backend
	$(GO) run ./bench/rls -sentinel bin/sentinel -backend bin/demo-backend $(if $(ERL),-erl $(ERL)) $(if $(API),-api $(API)) -rounds $(or $(ROUNDS),1) -duration $(or $(DURATION),10s)

profile: ## CPU and allocation profiles of the proxy path under 10 s of wrk load (pprof -top in bin/profile-*.txt).
	bash bench/profile.sh

fmt: ## Format the code.
	gofmt -w $$(git ls-files '*.go')

vet: ## go vet.
	$(GO) vet ./...

lint: vet ## go vet, gofmt check and staticcheck (pinned).
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) ./...

check: lint test ## Lint and test.

loadtest: ## A 20 s open-loop run through a local gateway on config.yaml (see loadtest/README.md).
	bash loadtest/quick.sh

loadtest-overload: ## The overload scenario, phases (a)-(e), backend alone vs behind Sentinel, PASS/FAIL per target (< 4 min).
	bash loadtest/overload.sh

k6: ## Build k6 $(K6_VERSION) with go install when it is missing.
	@test -x "$(K6)" || $(GO) install go.k6.io/k6@$(K6_VERSION)
	@"$(K6)" version

loadtest-k6: k6 ## k6 scripts that prove enforcement: the limit holds (ratelimit.js), PREMIUM stays up under a FREE spike (overload_mix.js); ~80 s.
	K6="$(K6)" bash loadtest/k6.sh

loadtest-overload-k6: k6 ## The overload scenario, phases (a)-(e), with k6 (about 3.5 min).
	K6="$(K6)" bash loadtest/overload-k6.sh

docker: ## Build the container image, tagged sentinel:$(VERSION) and sentinel:dev (the tag the docs and deploy/compose.yaml run).
	docker build -t sentinel:$(VERSION) -t sentinel:dev --build-arg VERSION=$(VERSION) .

clean: ## Remove build output.
	rm -rf $(BIN)
