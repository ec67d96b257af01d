#!/usr/bin/env bash
# Remote read benchmark (issue 11): a loopback nginx (127.0.0.1 only) serves generated shard sets;
# prints ratios against curl, aria2c -x8 and a local mount, measured in the same run.
#   bench/remote.sh            full: 2.5 GiB model in 8 shards, 3 runs, 100 GiB sparse set, merge URL and time-to-first-token rows (~9 min)
#   bench/remote.sh --quick    CI smoke test: 512 MiB model, 1 run, 12.5 GiB sparse set (< 60 s)
#   bench/remote.sh --help     every option (bench/remote.py)
# Writes bench/results/remote-<kernel>.{md,json} (remote-quick.* with --quick). Run as root (drops caches).
set -euo pipefail
cd "$(dirname "$0")/.."
case " $* " in *" -h "*|*" --help "*) exec /usr/bin/python3 bench/remote.py --help ;; esac
data=${GGUF_BENCH_DATA:-bench/data}/remote
case " $* " in *" --quick "*) data=$data/quick ;; esac
mkdir -p "$data/run"
: >"$data/run/mounts"; : >"$data/run/pids"
cleanup() {
  local m p
  while read -r m; do
    [ -n "$m" ] && grep -qs " $m " /proc/self/mountinfo && { fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || true; }
  done <"$data/run/mounts"
  while read -r p; do
    [ -n "$p" ] && kill -0 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null || true
  done <"$data/run/pids"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
need=()
for p in nginx-light aria2 curl fuse3 python3; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ] && ! { [ "${need[*]}" = nginx-light ] && command -v nginx >/dev/null; }; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "remote-bench: installing ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if [ ! -x build-bench/bench/bench_gen ] || [ "${GGUF_BENCH_NO_BUILD:-0}" != 1 ]; then
  cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGUF_MOUNT_BUILD_TESTS=OFF -DGGUF_MOUNT_BENCH=ON >/dev/null
  ninja -C build-bench -j2 gguf-mount bench_gen >/dev/null
fi
/usr/bin/python3 bench/remote.py --data "$data" "$@"
