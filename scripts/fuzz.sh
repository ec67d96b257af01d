#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang + ASan + UBSan into build-fuzz/, writes the seed
# corpora from tests/fixtures, and runs every target for SECONDS (default 60) on one core each.
# Exits non-zero if any target finds a crash, a timeout (> 5 s), a leak or an OOM (> 512 MiB).
# Findings go to build-fuzz/artifacts/TARGET/; reproduce one with
#   build-fuzz/fuzz/TARGET build-fuzz/artifacts/TARGET/crash-...
# Each target runs as one process on one thread (libFuzzer's default; -jobs=1 would fork a worker
# that logs to ./fuzz-0.log instead).
# Usage: scripts/fuzz.sh [SECONDS]          (FUZZ_TARGETS="fuzz_reader" limits the targets)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
targets=${FUZZ_TARGETS:-"fuzz_reader fuzz_split_set fuzz_byte_split"}
build=build-fuzz

need=()
command -v clang++ >/dev/null || need+=(clang)
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need+=(libclang-rt-dev)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "fuzz: installing ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGGUF_MOUNT_FUZZ=ON -DGGUF_MOUNT_BUILD_TESTS=OFF -DGGUF_MOUNT_WITH_FUSE=OFF >/dev/null
# shellcheck disable=SC2086
ninja -C "$build" -j2 $targets fuzz_make_seeds

rm -rf "$build/seeds"
"$build/fuzz/fuzz_make_seeds" tests/fixtures "$build/seeds/fuzz_reader" "$build/seeds/fuzz_split_set"
# fuzz_byte_split: names separated by newlines, then NUL and the bytes the pieces are cut from.
s="$build/seeds/fuzz_byte_split"
mkdir -p "$s"
head_of() { head -c 4096 tests/fixtures/tiny-llama/tiny-llama.gguf; }
{ printf 'm.gguf.part1of3\nm.gguf.part2of3\nm.gguf.part3of3\nREADME.md\0'; head_of; } >"$s/partof"
{ printf 'm.gguf-split-a\nm.gguf-split-b\nm.gguf-split-c\n\0'; head_of; } >"$s/letters"
{ printf 'x.gguf.part10of12\nx.gguf.part2of12\nx.gguf.part1of12\nx.gguf-split-aa\nx.gguf-split-ab\nx.gguf-split-b\n'
  printf 'y.gguf.part01of2\ny.gguf.part1of2\nm-00001-of-00002.gguf.part1of1\n.gguf.part1of1\nz.gguf-split-B\0'; } >"$s/mixed"

# Shard files of the targets go to a private folder (on tmpfs when there is one), removed at the
# end: libFuzzer exits without running the targets' own clean-up.
scratch_base=${TMPDIR:-/tmp}
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then scratch_base=/dev/shm; fi
scratch=$(mktemp -d "$scratch_base/gguf-mount-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

status=0
for t in $targets; do
  corpus="$build/corpus/$t"
  artifacts="$build/artifacts/$t/"
  log="$build/$t.log"
  mkdir -p "$corpus" "$artifacts"
  echo "fuzz: $t for ${seconds}s (log: $log)"
  rc=0
  "$build/fuzz/$t" "$corpus" "$build/seeds/$t" -dict=fuzz/gguf.dict -max_len=65536 \
    -max_total_time="$seconds" -timeout=5 -rss_limit_mb=512 -malloc_limit_mb=512 \
    -artifact_prefix="$artifacts" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "fuzz: $t: ${execs:-?} executions, exit status $rc"
  if [ "$rc" -ne 0 ]; then
    status=1
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|artifact_prefix|Test unit written)' "$log" | head -20 || true
    ls -1 "$artifacts" | sed "s|^|fuzz: finding: $artifacts|"
  fi
done
exit $status
