# Everyday verbs over the CMake build. `make`, `make run`, `make test`, `make bench`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
MODEL ?= models/all-MiniLM-L6-v2

.PHONY: all build run test bench bench-serving setup clean asan format format-check

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

setup:
	bash scripts/setup

run: build
	@test -d $(MODEL) || bash scripts/setup
	$(BUILD)/hetserve serve --model $(MODEL)

test: build
	@test -d $(MODEL) || bash scripts/setup
	cd $(BUILD) && ctest --output-on-failure

bench: build
	@test -d $(MODEL) || bash scripts/setup
	bash bench/run.sh $(BUILD)

# The serving benchmarks alone (batching on/off and overhead; hybrid engines), each ~5-10 min.
bench-serving: build
	@test -d $(MODEL) || bash scripts/setup
	bash bench/serving.sh $(BUILD)
	bash bench/hybrid/run.sh $(BUILD)

asan:
	$(MAKE) BUILD=build-asan CMAKE_FLAGS="-DHS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug" test

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf $(BUILD) build-asan
