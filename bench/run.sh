#!/usr/bin/env bash
# gguf-mount benchmark, one command from a fresh clone:
#   bench/run.sh                 full run (~4 GiB model, 5 runs per cell; ~31 min on 2 vCPUs)
#   bench/run.sh --sections S,S  only those sections (bench/bench.py --help: matrix, startup, offline,
#                                llama, views, kv, oci (OCI registry rows, bench/oci.py); large, not in
#                                the default: a 8.5 GiB model)
#   bench/run.sh --quick         smoke test (512 MiB model, 3 runs; data in bench/data/quick)
#   bench/run.sh --data DIR      keep the generated data in DIR (default bench/data, git-ignored;
#                                or set GGUF_BENCH_DATA); data is generated once and reused
#   bench/run.sh --help          every option of the driver (bench/bench.py)
#   bench/run.sh --remote [--quick]  only the remote benchmark instead (bench/remote.sh: loopback
#                                nginx, ratios against curl / aria2c / a local mount)
# Installs what it needs from Debian (build dependencies, fuse3, gnuplot-nox, util-linux),
# builds a Release tree in build-bench/ with the bench helpers, then runs bench/bench.py, which
# writes bench/results/<kernel>.{md,json,png}. Run as root: cold rows need
# /proc/sys/vm/drop_caches and the daemon raises its readahead through /sys/class/bdi.
# Every mount the run makes is listed in DATA/run/; the EXIT trap below unmounts them and
# stops only the daemons this run started, even if the driver is killed.
set -euo pipefail
cd "$(dirname "$0")/.."
for a in "$@"; do
  if [ "$a" = --remote ]; then
    rest=()
    for b in "$@"; do [ "$b" = --remote ] || rest+=("$b"); done
    exec bench/remote.sh "${rest[@]}"
  fi
done

data=""
quick=0
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --data) data=${args[$((i + 1))]:-} ;;
    --data=*) data=${args[$i]#--data=} ;;
    --quick) quick=1 ;;
    -h|--help) exec /usr/bin/python3 bench/bench.py --help ;;
  esac
done
if [ -z "$data" ]; then
  data=${GGUF_BENCH_DATA:-bench/data}
  [ "$quick" -eq 0 ] || data=$data/quick
  args+=(--data "$data")
fi
mkdir -p "$data/run"

cleanup() {
  local m p
  if [ -f "$data/run/mounts" ]; then
    while read -r m; do
      [ -n "$m" ] || continue
      if grep -qs " $m " /proc/self/mountinfo; then fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || true; fi
    done <"$data/run/mounts"
  fi
  if [ -f "$data/run/pids" ]; then
    while read -r p; do
      [ -n "$p" ] && kill -0 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null || true
    done <"$data/run/pids"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

if [ "$(id -u)" -ne 0 ]; then
  echo "bench: not root: caches cannot be dropped (cold rows become warm-underlying) and the" >&2
  echo "bench: FUSE readahead stays at 128 KiB; the report says so." >&2
fi

# Dependencies (Debian 12).
scripts/install-deps.sh
need=()
for p in gnuplot-nox util-linux python3 fuse3 curl docker-registry; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "bench: installing ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# Release build with the bench helpers (bench_gen, bench_reader); tests are not needed.
cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGUF_MOUNT_BUILD_TESTS=OFF \
  -DGGUF_MOUNT_BENCH=ON >/dev/null
ninja -C build-bench gguf-mount bench_gen bench_reader >/dev/null

/usr/bin/python3 bench/bench.py "${args[@]}"
