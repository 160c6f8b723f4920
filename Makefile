# Everyday verbs over the CMake build. `make`, `make run`, `make test`, `make bench`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
MODEL ?= models/all-MiniLM-L6-v2

.PHONY: all build run test bench bench-tokenizer bench-serving bench-remote setup clean asan tsan fuzz format format-check quantized \
	soak soak-quick image

all: build

# Every verb that builds runs scripts/setup first: on a fresh machine nothing (not even CMake or
# jansson) is installed yet, so setup must come before CMake configures. Setup is idempotent and
# takes about a second when everything is there.
setup:
	bash scripts/setup

# The stamp is the generated build file, written only when configuring succeeded: a configure that
# failed (say, before setup had installed a dependency) leaves CMakeCache.txt behind, and keying on
# it made every later `make` skip configuring and fail in an empty build folder.
$(BUILD)/Makefile: | setup
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: setup $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/hetserve serve --model $(MODEL)

test: build
	cd $(BUILD) && ctest --output-on-failure

# The default model quantized for int8 lanes (configs/precision-split.yaml and others use it):
# hetserve quantize with the committed calibration set, about 20 s on 2 cores.
QUANTIZED ?= $(MODEL)-int8
quantized: build
	@test -f $(QUANTIZED)/quant.json || $(BUILD)/hetserve quantize --model $(MODEL) --out $(QUANTIZED)

bench: build
	bash bench/run.sh $(BUILD)

# Single-thread tokenizer throughput against HF tokenizers (PY: a python with `tokenizers`).
bench-tokenizer: build
	bash bench/tokenizer.sh $(BUILD)

# The serving benchmarks alone (batching on/off and overhead; hybrid engines), each ~5-10 min.
bench-serving: build
	bash bench/serving.sh $(BUILD)
	bash bench/hybrid/run.sh $(BUILD)

# A router and workers on loopback: hop cost, router decisions per second, 1/2/3 workers (~1 min).
bench-remote: build
	bash bench/remote.sh $(BUILD)

# Soak test with faults, not in CI (tests/soak/run.sh, tools/soak/hetsoak.c): the real server on
# 127.0.0.1 under load swinging between 0.5x and 3x of its measured capacity, with injected
# engine failures, slow batches and hangs and misbehaving clients, until SOAK_REQUESTS requests
# are sent; SOAK_MAX_S bounds the whole run. Fails when a response is lost or doubled, the
# server dies or does not exit 0 on SIGTERM, its RSS grows, or a failover cap is broken.
# Summary in bench/out/soak/. `make soak-quick`: 20,000 requests, about a minute.
SOAK_REQUESTS ?= 1000000
SOAK_MAX_S ?= 3600
soak: build
	SOAK_REQUESTS=$(SOAK_REQUESTS) SOAK_MAX_S=$(SOAK_MAX_S) bash tests/soak/run.sh $(BUILD)

soak-quick:
	$(MAKE) soak SOAK_REQUESTS=20000

asan:
	$(MAKE) BUILD=build-asan CMAKE_FLAGS="-DHS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug" test

# The whole suite under ThreadSanitizer, but for the single-threaded numerical checks that take
# an hour there and exercise no thread of ours (the golden sentences, quantization searches).
TSAN_SKIP ?= test_golden|test_quant
# The whole suite under ThreadSanitizer. Suppressions (tests/tsan.supp) cover third-party code
# only, each with its reason; the CUDA engine is left out (nvcc code is not instrumented).
tsan:
	$(MAKE) BUILD=build-tsan CMAKE_FLAGS="-DHS_TSAN=ON -DHS_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo" \
		build
	cd build-tsan && TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1" \
		PYTEST_ADDOPTS="-k 'not int8_and_f32_lanes'" ctest --output-on-failure -E "$(TSAN_SKIP)" 

# libFuzzer over every tests/fuzz harness (or FUZZERS="tokenizer http"), FUZZ_SECONDS each, one
# after the other, with clang in build-fuzz/; prints the executions of each. New inputs collect
# in build-fuzz/fuzz-corpus/, crashes in build-fuzz/fuzz-artifacts/ (see tests/fuzz/README.md).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZERS ?=
fuzz:
	bash scripts/setup --fuzz
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DHS_FUZZ=ON -DHS_CUDA=OFF \
		-DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzzers
	bash tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZERS)

# The container image of deploy/Dockerfile, built with podman from a Debian base that debootstrap
# makes here (no image registry needed): scripts/image says how; tests/deploy/test_image.py runs it.
image:
	bash scripts/image

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

format-check: setup
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf $(BUILD) build-asan $(FUZZ_BUILD)
