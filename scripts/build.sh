#!/usr/bin/env bash
# Configures and builds gguf-mount into build/ (Release with debug info).
# Usage: scripts/build.sh [extra cmake args...]
# GGUF_MOUNT_TARGETS="gguf-mount" builds only those ninja targets (default: everything, tests too).
# The libraries and the CLI compile as unity builds, one translation unit per wing (about half
# the CPU time; CMakeLists.txt, gguf_unity_wings); GGUF_MOUNT_UNITY=OFF (or the extra cmake arg
# -DCMAKE_UNITY_BUILD=OFF) compiles every file alone, as a plain `cmake -B build` does.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD="${GGUF_MOUNT_UNITY:-ON}" "$@" >/dev/null
# shellcheck disable=SC2086
ninja -C build ${GGUF_MOUNT_TARGETS:-}
