#!/bin/bash
NODE=$(pgrep -f s3_server.js | head -1)
sync; echo 3 > /proc/sys/vm/drop_caches; find /var/tmp/s3prof/run/s3/data -type f -exec cat {} + > /dev/null
a=$(awk '{print $14+$15}' /proc/$NODE/stat); t0=$(date +%s.%N)
"$@"
b=$(awk '{print $14+$15}' /proc/$NODE/stat); t1=$(date +%s.%N)
echo "  [$*] wall $(echo "$t1-$t0"|bc|cut -c1-5) node_cpu $(echo "($b-$a)/100"|bc -l|cut -c1-5)"
