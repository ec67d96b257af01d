#!/usr/bin/env bash
# One command from a fresh clone: install dependencies, build, mount the bundled sample shards
# (tests/fixtures/kvzoo/t7, made with llama.cpp's gguf-split), read the merged file and check it
# against the sha256 of `gguf-split --merge`, then unmount.
# Usage: scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --build-only
echo "== building gguf-mount (not the tests; the first build takes several minutes on a small machine)"
GGUF_MOUNT_TARGETS=gguf-mount scripts/build.sh

src=tests/fixtures/kvzoo/t7
expected=188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f
mnt=$(mktemp -d /tmp/gguf-mount-demo.XXXXXX)
log=
cleanup() {
  if grep -qs " $mnt " /proc/mounts; then build/gguf-mount umount "$mnt" 2>/dev/null || build/gguf-mount umount --lazy "$mnt"; fi
  rmdir "$mnt" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT

echo "== source: $src"
ls -l "$src"
log=$(mktemp /tmp/gguf-mount-demo-log.XXXXXX)
echo "== build/gguf-mount $src $mnt --log-file $log   (the daemon's messages, where no syslog runs)"
build/gguf-mount "$src" "$mnt" --log-file "$log"
echo "== ls -l $mnt"
ls -l "$mnt"
echo "== sha256sum $mnt/kvzoo.gguf"
actual=$(sha256sum "$mnt/kvzoo.gguf" | cut -d' ' -f1)
echo "$actual"
if [ "$actual" = "$expected" ]; then
  echo "OK: the mounted kvzoo.gguf is byte-identical to llama.cpp's gguf-split --merge output"
  echo "== build/gguf-mount umount $mnt"
  build/gguf-mount umount "$mnt"
  echo "The binary is build/gguf-mount (scripts/install.sh puts gguf-mount on PATH)."
else
  echo "MISMATCH: expected $expected" >&2
  exit 1
fi
