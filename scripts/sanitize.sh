#!/usr/bin/env bash
# Builds gguf-mount and its tests with AddressSanitizer + UndefinedBehaviorSanitizer (Debug,
# g++) into build-asan/ and runs the tests there. Any sanitizer report fails the test that
# triggered it (UBSan halts on the first error; LeakSanitizer checks every test process).
# Usage: scripts/sanitize.sh [ctest label regex]      (default: unit|cli|mount|remote)
# Mount tests skip themselves (exit 77) where /dev/fuse or fusermount3 is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
labels=${1:-"unit|cli|mount|remote"}
build=build-asan
flags="-fsanitize=address,undefined -fno-omit-frame-pointer"

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
ninja -C "$build" -j2

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
ctest --test-dir "$build" -L "$labels" --output-on-failure -j2 --timeout 600
