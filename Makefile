# tagi-ddp: the two commands a person needs are `make demo` and `make test`.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= 2
CMAKE_FLAGS ?=
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
ASAN_BUILD_DIR ?= build-asan

.PHONY: all deps configure build test test-unit demo demo-single bench clean \
	fuzz-build fuzz fuzz-smoke test-asan images images-demo docs

all: build

deps:
	@tools/install_deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

configure: $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

# The whole suite: unit, integration and (where a GPU exists) CUDA tests,
# then every fuzzer for 10 s (fuzz-smoke).
test: deps
	$(MAKE) build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)
	$(MAKE) fuzz-smoke

# Unit tests only (fast).
test-unit: deps
	$(MAKE) build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS) -LE integration

# The main job on the embedded default: a coordinator and 2 CPU workers on
# loopback train examples/fmnist_fnn.json (Fashion-MNIST from Debian's package).
demo: deps
	$(MAKE) build
	BIN=$(BUILD_DIR)/bin MODEL=$(BUILD_DIR)/fmnist_fnn.tagi tools/demo.sh

# The same job in one process, no service.
demo-single: deps
	$(MAKE) build
	$(BUILD_DIR)/bin/tagi-train examples/fmnist_fnn.json --out $(BUILD_DIR)/fmnist_fnn.tagi

bench: deps
	$(MAKE) build
	$(BUILD_DIR)/bin/engine_bench
	$(BUILD_DIR)/bin/cnn_bench

# libFuzzer targets (tests/fuzz), built by clang with ASan and UBSan; only
# the libraries the parsers live in, no gRPC.
$(FUZZ_BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(FUZZ_BUILD_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DTAGI_FUZZ=ON \
	  -DTAGI_BUILD_TESTS=OFF -DTAGI_BUILD_BENCH=OFF -DTAGI_ENABLE_CUDA=OFF

fuzz-build: deps $(FUZZ_BUILD_DIR)/CMakeCache.txt
	cmake --build $(FUZZ_BUILD_DIR) -j$(JOBS) --target fuzzers

# Every fuzzer for FUZZ_SECONDS; fails on any crash, leak, UB, timeout or OOM.
fuzz: fuzz-build
	tools/run_fuzzers.sh $(FUZZ_SECONDS) $(FUZZ_BUILD_DIR)

# Every fuzzer for 10 s (part of `make test`).
fuzz-smoke: fuzz-build
	tools/run_fuzzers.sh 10 $(FUZZ_BUILD_DIR)

# The whole project and suite under AddressSanitizer (with LeakSanitizer) and
# UndefinedBehaviorSanitizer, built by g++; integration tests run the
# instrumented binaries, which inherit these options. No leak suppressions
# are needed: add any to a suppressions file for third-party frames only.
SANITIZER_ENV = ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

$(ASAN_BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTAGI_SANITIZE=ON $(CMAKE_FLAGS)

test-asan: deps $(ASAN_BUILD_DIR)/CMakeCache.txt
	cmake --build $(ASAN_BUILD_DIR) -j$(JOBS)
	$(SANITIZER_ENV) ctest --test-dir $(ASAN_BUILD_DIR) --output-on-failure -j$(JOBS)

# Container images with podman (opt-in, not part of test: minutes, a few
# hundred MB, root, Debian's archive): a base made by mmdebstrap from the
# host's Debian suite, then the coordinator, a CPU worker and Prometheus from
# host-built binaries (deploy/podman/, tools/build_images.sh).
images: configure
	BUILD_DIR=$(BUILD_DIR) JOBS=$(JOBS) tools/build_images.sh

# The podman stack (deploy/podman/compose.yml) of those images runs a short
# Fashion-MNIST job to SUCCEEDED, Prometheus scraping it; then it is removed.
images-demo:
	tools/images_demo.sh

# The manual (docs/, mkdocs.yml) as a static site in $(BUILD_DIR)/site, built by
# Debian's mkdocs in strict mode (`make deps` installs it); no C++ build needed.
docs:
	@tools/build_docs.sh $(abspath $(BUILD_DIR))/site

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_BUILD_DIR) $(ASAN_BUILD_DIR)
