#!/bin/bash
# bench-like warm no-mmap: drop all caches, read the target once, load it without mmap
sync; echo 3 > /proc/sys/vm/drop_caches
cat "$1" > /dev/null
( sleep 4; grep AnonHugePages /proc/meminfo > /tmp/ahp.txt ) &
./nommap.sh "$1" 2>/dev/null | tr '\n' ' '; cat /tmp/ahp.txt; grep -E "^(MemFree)" /proc/meminfo | tr '\n' ' '; echo
