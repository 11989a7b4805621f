#!/usr/bin/env bash
# Builds pdkv and runs every test suite: C++ core (GoogleTest), C API (Catch2), header checks,
# the same suites under AddressSanitizer + UndefinedBehaviorSanitizer, the executor's suites under
# ThreadSanitizer, bounded fuzzing, the
# install/consumer check, the Rust, Go and Python bindings (all on the shared conformance
# vectors), transfers between P and D ranks driven from different languages, and the README's
# first command (scripts/run-demo.sh). Used by .ci/run. Exits non-zero on the first failing
# stage.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
# rustup installs cargo under ~/.cargo/bin, which a non-login CI shell may not have on PATH.
if [ -d "$HOME/.cargo/bin" ]; then export PATH="$HOME/.cargo/bin:$PATH"; fi

stage() { echo; echo "==== $* ===="; }

stage "release build + ctest"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/release -j "$JOBS"
ctest --test-dir build/release --output-on-failure -j "$JOBS"

stage "the README's first command: pdkv demo (6 processes, every byte verified)"
bash scripts/run-demo.sh | tail -n 13

stage "ASan + UBSan build + ctest"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPDKV_SANITIZE=ON -DPDKV_BUILD_BENCH=OFF >/dev/null
cmake --build build/asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j "$JOBS"

stage "ThreadSanitizer build + the executor's in-process suites (scripts/tsan.sh)"
bash scripts/tsan.sh build/tsan

if [ -f fuzz/CMakeLists.txt ]; then
  stage "fuzzing (${FUZZ_SECONDS}s per target)"
  bash scripts/fuzz.sh "$FUZZ_SECONDS"
fi

stage "install to a fresh prefix; C (pkg-config, CMake), Rust, Go and Python (pip) consumers from outside the repository, no pdkv variable set"
bash scripts/check-install.sh build/release

# The bindings' own suites run against this build with no LD_LIBRARY_PATH: Rust and Python load
# libpdkv from PDKV_LIB_DIR (the variable every binding shares), Go's cgo reads the build tree's
# pdkv.pc (headers from capi/include, the library with an rpath).
export PDKV_LIB_DIR="$ROOT/build/release/capi"
export PKG_CONFIG_PATH="$ROOT/build/release/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# Go 1.19 leaves pkg-config's output out of its build-cache keys: a package built once against
# another prefix (an install check, another checkout) would be linked with that prefix's -L flags.
# A cache per build tree keeps every cgo link pointing at this build.
export GOCACHE="$ROOT/build/release/go-cache"

if [ -f rust/Cargo.toml ]; then
  stage "Rust bindings (cargo test incl. bindgen drift + conformance, clippy, explain example)"
  (cd rust && cargo fmt --all -- --check \
     && (cd ../examples/engine/rust && cargo fmt -- --check) \
     && cargo test --offline --workspace \
     && cargo clippy --offline --workspace --all-targets -- -D warnings \
     && cargo run --offline -q -p pdkv --example explain >/dev/null \
     && cargo run --offline -q -p pdkv --example transfer >/dev/null)
fi

if [ -f go/go.mod ]; then
  stage "Go bindings (go vet, go test)"
  (cd go && export GOFLAGS=-mod=mod GOPROXY=off \
   && { unformatted=$(gofmt -l . ../examples/engine/go); [ -z "$unformatted" ] || { echo "gofmt needed: $unformatted"; false; }; } \
   && go vet ./... && go test -race ./... && go run ./examples/explain >/dev/null \
   && go run ./examples/transfer >/dev/null)
fi

if [ -d python/pdkv ]; then
  stage "Python bindings (pytest with and without numpy, mypy --strict of the package and its tests)"
  # numpy is optional for pdkv: CI runs the numpy paths (zero-copy numpy views, numpy id arrays;
  # setup.sh installs python3-numpy) and then the whole suite again with numpy hidden.
  if [ "${CI:-}" = true ]; then /usr/bin/python3 -c "import numpy" || { echo "CI needs python3-numpy"; false; }; fi
  (cd python && /usr/bin/python3 -m pytest -q tests \
   && PDKV_TEST_WITHOUT_NUMPY=1 /usr/bin/python3 -m pytest -q tests \
   && /usr/bin/python3 -m mypy pdkv tests)
fi

if [ -f rust/Cargo.toml ] && [ -f go/go.mod ] && [ -d python/pdkv ]; then
  stage "API reference from the sources, warnings fail (header, rustdoc, go doc, pydoc)"
  bash scripts/api-docs.sh build/release/api-docs
fi

if [ -f rust/Cargo.toml ] && [ -f go/go.mod ] && [ -d python/pdkv ]; then
  stage "cross-language transfers (P and D ranks in different languages and processes, every byte checked)"
  bash scripts/xlang-transfer.sh build/release
fi

stage "all suites passed"
