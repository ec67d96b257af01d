#!/usr/bin/env bash
# Which page-cache folio sizes does the kernel give a file, and how much does one page fault
# map? Answers it with the kernel's own tracepoints (tracefs, root), for any files, e.g. the
# merged file on a gguf-mount mount against one of its shards on ext4:
#
#   bench/trace-folios.sh [--bytes N] MNT/model.gguf bench/data/shards8/model-00001-of-00008.gguf
#
# --bytes N: read and touch only the first N bytes of each FILE (whole files by default; a 4 GiB
# file makes ~1M order-0 insert events, more than the trace buffer holds on a FUSE file).
#
# For each FILE: drops the page cache, reads FILE once with read() (fills the cache the way a
# loader that reads does), then mmaps it and touches one byte per 4 KiB page (llama.cpp's
# mmap load; bench_reader would do the same) while recording
#   filemap:mm_filemap_add_to_page_cache  one event per folio inserted, with its order;
#   filemap:mm_filemap_map_pages          one event per fault-around, with the page range it
#                                         mapped;
#   filemap:mm_filemap_fault              one event per page fault that reached the file.
# Prints, per FILE, a histogram of folio sizes (bytes cached in folios of each size) and of the
# bytes mapped per fault-around. Uses a private tracefs instance, removed on exit.
set -euo pipefail

limit=0
if [ "${1:-}" = --bytes ]; then limit=${2:?--bytes needs N}; shift 2; fi
[ $# -ge 1 ] || { echo "usage: $0 [--bytes N] FILE..." >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "trace-folios: needs root (tracefs, drop_caches)" >&2; exit 1; }

tracefs=/sys/kernel/tracing
mounted_here=0
if [ ! -e "$tracefs/instances" ]; then
  mount -t tracefs nodev "$tracefs" || { echo "trace-folios: cannot mount tracefs on $tracefs" >&2; exit 1; }
  mounted_here=1
fi
inst="$tracefs/instances/gguf-folios-$$"
cleanup() {
  [ -d "$inst" ] && { echo 0 >"$inst/tracing_on" 2>/dev/null || true; rmdir "$inst" 2>/dev/null || true; }
  [ "$mounted_here" -eq 0 ] || umount "$tracefs" 2>/dev/null || true
}
trap cleanup EXIT
mkdir "$inst"
echo 65536 >"$inst/buffer_size_kb"  # per CPU; a 4 GiB file makes ~1M order-0 insert events

# One byte per page through a MAP_SHARED mapping, in order (no helper binary needed), of the
# first $2 bytes (0: all).
touch_pages() {
  python3 - "$1" "$2" <<'EOF'
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
if int(sys.argv[2]) > 0:
    size = min(size, int(sys.argv[2]))
m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
s = 0
for off in range(0, size, 4096):
    s += m[off]
m.close()
os.close(fd)
EOF
}

for f in "$@"; do
  dev=$(stat -c '%d' "$f")
  major=$((dev >> 8 & 0xfff)); minor=$(((dev & 0xff) | (dev >> 12 & 0xfff00)))
  ino=$(printf '%x' "$(stat -c '%i' "$f")")
  sync
  echo 3 >/proc/sys/vm/drop_caches
  echo >"$inst/trace"
  for e in mm_filemap_add_to_page_cache mm_filemap_map_pages mm_filemap_fault; do
    echo 1 >"$inst/events/filemap/$e/enable"
  done
  echo 1 >"$inst/tracing_on"
  if [ "$limit" -gt 0 ]; then
    head -c "$limit" "$f" >/dev/null
  else
    cat "$f" >/dev/null
  fi
  touch_pages "$f" "$limit"
  echo 0 >"$inst/tracing_on"
  echo "== $f (dev $major:$minor, inode 0x$ino, $(stat -c %s "$f") bytes, read: ${limit/#0/all})"
  awk -v dev="$major:$minor" -v ino="$ino" '
    /mm_filemap_add_to_page_cache/ && index($0, "dev " dev " ino " ino " ") {
      match($0, /order=[0-9]+/); o = substr($0, RSTART + 6, RLENGTH - 6) + 0
      folios[o]++; bytes[o] += 4096 * 2 ^ o; total += 4096 * 2 ^ o
    }
    /mm_filemap_map_pages/ && index($0, "dev=" dev " ino=" ino " ") {
      match($0, /ofs=[0-9]+-[0-9]+/); split(substr($0, RSTART + 4, RLENGTH - 4), r, "-")
      span = r[2] - r[1] + 1; maps[span]++; nmaps++; mapped += span
    }
    /mm_filemap_fault/ && index($0, "dev=" dev " ino=" ino " ") { faults++ }
    END {
      printf "folios inserted into the page cache (by read() and the faults):\n"
      for (o = 0; o <= 12; o++) if (folios[o])
        printf "  %6d KiB folios: %8d (%5.1f %% of the bytes)\n", 4 * 2 ^ o, folios[o], 100 * bytes[o] / total
      printf "page faults that reached the file (mm_filemap_fault): %d\n", faults
      printf "fault-around calls (mm_filemap_map_pages): %d, mapping on average %.0f KiB each\n",
        nmaps, nmaps ? mapped / nmaps / 1024 : 0
      n = 0; for (s in maps) if (maps[s] > n) { n = maps[s]; common = s }
      if (nmaps) printf "  most common span: %d KiB (%d calls)\n", common / 1024, n
    }' "$inst/trace"
  lost=$(awk '/entries-in-buffer/ {print}' "$inst/trace" | head -1)
  [ -z "$lost" ] || echo "  ($lost)"
done
