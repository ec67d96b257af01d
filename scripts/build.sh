#!/usr/bin/env bash
# Configures and builds gguf-mount into build/ (Release with debug info).
# Usage: scripts/build.sh [extra cmake args...]
# GGUF_MOUNT_TARGETS="gguf-mount" builds only those ninja targets (default: everything, tests too).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
ninja -C build ${GGUF_MOUNT_TARGETS:-}
