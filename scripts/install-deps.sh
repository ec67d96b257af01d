#!/usr/bin/env bash
# Installs everything gguf-mount needs to build and test, from Debian's archive.
# Usage: scripts/install-deps.sh            (as root, or with sudo available)
#        scripts/install-deps.sh --build-only   what building gguf-mount needs (scripts/demo.sh):
#                                               no test servers, no node/npm, no npm packages
set -euo pipefail
build_only=0
[ "${1:-}" = --build-only ] && build_only=1

packages=(
  build-essential cmake ninja-build pkg-config git
  libfuse3-dev fuse3 libsystemd-dev
  libcxxopts-dev libspdlog-dev libfmt-dev
  libgtest-dev nlohmann-json3-dev libssl-dev help2man
  libcurl4-openssl-dev libxml2-dev libxxhash-dev
)
if [ "$build_only" -eq 0 ]; then
  packages+=(
    nginx-light openssl python3
    libnginx-mod-http-js  # njs: the S3 fleet tier signs with it (docs/fleet/s3.conf; its test skips without)
    acl  # setfacl: the POSIX ACL permission tests (skipped without it)
    docker-registry skopeo  # the OCI registry tests (tests/remote/oci_*): registry 2.8, layouts
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The real-client tests (tests/clients, ctest label "clients") need node >= 20 and npm. Keep a
# node that is already there (e.g. from NodeSource, which bundles npm); otherwise take Debian's.
if [ "$build_only" -eq 0 ] && ! command -v node >/dev/null 2>&1; then
  missing+=(nodejs)
fi
if [ "$build_only" -eq 0 ] && ! command -v npm >/dev/null 2>&1; then
  missing+=(npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all Debian dependencies are present"
else
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "$build_only" -eq 0 ] || exit 0

# The S3 test server (tests/remote/s3: s3rver behind a proxy that verifies Signature V4 with
# AWS's own signer), pinned by its package-lock.json. The remote tests skip S3 cases without it.
s3_tests="$(cd "$(dirname "$0")/.." && pwd)/tests/remote/s3"
if command -v npm >/dev/null 2>&1; then
  if [ ! -f "$s3_tests/node_modules/.package-lock.json" ] ||
     ! cmp -s "$s3_tests/package-lock.json" "$s3_tests/node_modules/.s3-lock-installed"; then
    echo "install-deps: npm ci in tests/remote/s3"
    (cd "$s3_tests" && npm ci --no-audit --no-fund --loglevel=error &&
       cp package-lock.json node_modules/.s3-lock-installed) ||
      echo "install-deps: npm ci in tests/remote/s3 failed: the S3 tests will be skipped, saying so" >&2
  fi
  # The real-client tests (tests/clients): node-llama-cpp with its prebuilt linux-x64 llama.cpp
  # and @huggingface/gguf, pinned by package-lock.json, which holds the linux-x64 build only (so
  # `npm install`, not `npm ci`; no install script runs, nothing else is downloaded).
  clients="$(cd "$(dirname "$0")/.." && pwd)/tests/clients"
  if [ ! -d "$clients/node_modules/node-llama-cpp" ] || [ ! -d "$clients/node_modules/@huggingface/gguf" ] ||
     ! cmp -s "$clients/package-lock.json" "$clients/node_modules/.clients-lock-installed"; then
    echo "install-deps: npm install in tests/clients"
    (cd "$clients" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --omit=optional --ignore-scripts \
        --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.clients-lock-installed) ||
      echo "install-deps: npm install in tests/clients failed: the real-client tests will be skipped, saying so" >&2
  fi
else
  echo "install-deps: npm not found: the S3 and real-client tests will be skipped" >&2
fi
if command -v node >/dev/null 2>&1; then
  major=$(node --version | sed 's/^v\([0-9]*\).*/\1/')
  if [ "$major" -lt 20 ]; then
    echo "install-deps: node $(node --version) is older than 20: the node-llama-cpp and @huggingface/gguf" \
         "client tests will be skipped (install node 20 or newer to run them)" >&2
  fi
fi
