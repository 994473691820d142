# tagi-ddp: the two commands a person needs are `make demo` and `make test`.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= 2
CMAKE_FLAGS ?=

.PHONY: all deps configure build test test-unit demo demo-single bench clean

all: build

deps:
	@tools/install_deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

configure: $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

# The whole suite: unit, integration and (where a GPU exists) CUDA tests.
test: deps
	$(MAKE) build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

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

clean:
	rm -rf $(BUILD_DIR)
