# PDPM — top-level targets. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/pdpm
export CCACHE_DIR ?= $(CACHE_DIR)/ccache
export CCACHE_BASEDIR := $(CURDIR)
# Debug info then names paths relative to the build; without this every
# clone in a new directory would miss the cache.
export CCACHE_NOHASHDIR := 1
export CCACHE_MAXSIZE ?= 5G
JOBS ?= $(shell nproc)
CTEST := ctest --output-on-failure --timeout 300 -j $(JOBS)
# Seconds each fuzzer runs in `make test`; `make fuzz` runs longer.
FUZZ_SECONDS ?= 20
FUZZ_LONG_SECONDS ?= 600

.PHONY: deps build build-asan build-tsan build-fuzz test test-core test-asan test-tsan \
        test-fuzz test-operator test-csi test-kv-linearizability test-hw test-hw-cluster e2e images fuzz bench \
        bench-net bench-hw bench-dsm bench-kv bench-fs lint format clean up

deps:
	@scripts/deps.sh

build: deps
	cmake --preset release -S core >/dev/null
	cmake --build build/release -j $(JOBS)

build-asan: deps
	cmake --preset asan -S core >/dev/null
	cmake --build build/asan -j $(JOBS)

build-tsan: deps
	cmake --preset tsan -S core >/dev/null
	cmake --build build/tsan -j $(JOBS)

# The suites (ctest labels) the sanitizer passes run. Each pass builds only
# what they run (the targets tests-<label>, core/CMakeLists.txt), and runs
# its long kill, soak and model tests at PDPM_TEST_SCALE=$(SANITIZER_TEST_SCALE)
# of their size (core/src/common/test_scale.h; docs/e2e.md "Times").
ASAN_LABELS := common pm net client pdkvs pdfs
TSAN_LABELS := common pm net client pdkvs
SANITIZER_TEST_SCALE ?= 0.25
empty :=
space := $(empty) $(empty)
# $(call label_regex,LABELS): the ctest -L expression matching exactly LABELS.
label_regex = '^($(subst $(space),|,$(strip $(1))))$$'
# $(call build_label_tests,PRESET,LABELS)
build_label_tests = cmake --preset $(1) -S core >/dev/null && \
  cmake --build build/$(1) -j $(JOBS) --target $(addprefix tests-,$(2))

build-fuzz: deps
	cmake --preset fuzz -S core >/dev/null
	cmake --build build/fuzz -j $(JOBS) --target fuzzers

# Everything: the whole core suite optimised, the PM, transport and client
# suites under ASan+UBSan and TSan (pDFS under ASan+UBSan too), each fuzzer for a bounded time, the operator,
# the CSI driver (csi-sanity), pDKVS linearizability under kill -9, the pm, net, pdkvs and cluster
# suites on real verbs and DAX in one hardware guest, and PDPM on a real single-node Kubernetes.
# One target after another (the first failure stops it); each one's time is
# printed at the end, pass or fail (docs/e2e.md "Times" has the figures).
TEST_TARGETS := test-core test-asan test-tsan test-fuzz test-operator test-csi \
  test-kv-linearizability test-hw e2e
test: deps
	@rc=0; times=(); \
	for target in $(TEST_TARGETS); do \
	  start=$$(date +%s); \
	  $(MAKE) --no-print-directory $$target || rc=$$?; \
	  times+=("$$(printf '%-24s %5d s' $$target $$(($$(date +%s) - start)))$$( ((rc == 0)) || echo '  FAILED')"); \
	  ((rc == 0)) || break; \
	done; \
	echo "=== make test: target times"; printf '  %s\n' "$${times[@]}"; exit $$rc

test-core: build
	cd build/release && $(CTEST)

test-asan: deps
	$(call build_label_tests,asan,$(ASAN_LABELS))
	cd build/asan && PDPM_TEST_SCALE=$(SANITIZER_TEST_SCALE) \
	  $(CTEST) -L $(call label_regex,$(ASAN_LABELS))

test-tsan: deps
	$(call build_label_tests,tsan,$(TSAN_LABELS))
	cd build/tsan && PDPM_TEST_SCALE=$(SANITIZER_TEST_SCALE) TSAN_OPTIONS=halt_on_error=1 \
	  $(CTEST) -L $(call label_regex,$(TSAN_LABELS))

test-fuzz: build-fuzz
	scripts/run-fuzzers.sh build/fuzz $(FUZZ_SECONDS) $(JOBS)

# The Kubernetes operator against a real kube-apiserver and etcd (envtest).
test-operator: deps
	scripts/operator-test.sh

# The CSI driver (docs/csi.md): unit tests of its argument checks, then
# csi-sanity against it serving a live local cluster through real pdfs-fuse
# mounts (about 70 s once the Go modules are cached). Prints each phase's time.
test-csi: build
	scripts/csi-test.sh build/release

# PDPM on a real single-node Kubernetes started and stopped here (e2e/k8s,
# docs/e2e.md): the images, the charts' lint and unit tests, helm install, a
# PDPMCluster, Redis clients through the gateway, a server pod killed under
# writes, the monitor leader killed, scaling, helm upgrade, Retain. Prints
# each phase's time.
e2e: build
	e2e/k8s/run.sh build/release

# The images (docs/images.md), built without a container daemon into the
# cache directory; prints their sizes.
images: build
	scripts/deps.sh e2e
	images/build.sh build/release $(CACHE_DIR)/images/out

# pDKVS linearizability (e2e/linearizability, docs/pdkvs.md): concurrent
# Redis clients while pdkvs-gateway, or a PM server of the cluster behind
# the gateways, is killed and restarted; the history checked with porcupine.
test-kv-linearizability: build
	cd e2e/linearizability && \
	  PDKVS_GATEWAY=$(CURDIR)/build/release/src/pdkvs/gateway/pdkvs-gateway \
	  PDPM_MONITOR=$(CURDIR)/build/release/src/monitor/pdpm-monitor \
	  PDPM_SERVER=$(CURDIR)/build/release/src/server/pdpm-server \
	  go test -count=1 -timeout 8m -v ./...

# The pm, net and pdkvs suites and the cluster suite's kill -9 and restart
# tests (a monitor and three servers on devdax and verbs), in one boot of a
# QEMU guest with soft-RoCE and an emulated NVDIMM (e2e/hw, docs/hw.md).
# Fails loudly where QEMU cannot run unless PDPM_SKIP_HW=1.
test-hw: build
	e2e/hw/run.sh build/release

# The cluster part of test-hw alone (debugging; PDPM_HW_CLUSTER_FILTER).
test-hw-cluster: build
	PDPM_HW_LABELS=cluster e2e/hw/run.sh build/release

bench-hw: build
	e2e/hw/run.sh build/release --bench

fuzz: build-fuzz
	scripts/run-fuzzers.sh build/fuzz $(FUZZ_LONG_SECONDS) $(JOBS)

bench: bench-net bench-dsm bench-kv bench-fs

bench-net: build
	scripts/bench-net.sh build/release

bench-kv: build
	scripts/bench-kv.sh build/release

bench-dsm: build
	scripts/bench-dsm.sh build/release

# pDFS through its FUSE mount and through pDFSLib, against tmpfs, libfuse's
# passthrough of tmpfs and GlusterFS replica 2 on tmpfs, all in the same run
# (docs/benchmarks.md "File system"). Needs root.
bench-fs: build
	scripts/deps.sh bench
	scripts/bench-fs.sh build/release

# A local cluster (monitor + three servers on file-backed PM, docs/cli.md)
# in ${XDG_DATA_HOME:-~/.local/share}/pdpm, and a round trip through it.
up: build
	scripts/cluster-up.sh build/release

lint: deps
	scripts/lint.sh

format: deps
	find core/src -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf build
