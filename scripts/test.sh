#!/usr/bin/env bash
# One command from a fresh clone: install dependencies, build, run every test
# (unit, CLI and real FUSE mount tests).
# Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure --timeout 600
