#!/bin/bash
sync; echo 3 > /proc/sys/vm/drop_caches
cat "$1" > /dev/null
perf record -F 499 -a -g -o /var/tmp/s3prof/warm-$2.data >/dev/null 2>&1 & PP=$!
sleep 0.5
./nommap.sh "$1" 2>/dev/null | tr '\n' ' '; echo
kill -INT $PP; wait $PP
