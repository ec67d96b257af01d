#!/bin/bash
# usage: cold.sh GM  -> cold cat of s3 merged file through a mount; prints wall, daemon CPU, node CPU
GM=${1:-/work/main/build/gguf-mount}
PORT=$(python3 -c 'import json;print(json.load(open("/var/tmp/s3prof/s3.json"))["port"])')
NODE=$(pgrep -f s3_server.js | head -1)
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_ENDPOINT_URL_S3=http://127.0.0.1:$PORT AWS_REGION=us-east-1 AWS_SHARED_CREDENTIALS_FILE=/nonexist AWS_CONFIG_FILE=/nonexist
rm -rf /var/tmp/s3prof/cache; mkdir -p /var/tmp/s3prof/mnt
# keep origin data cached, drop rest
sync; echo 3 > /proc/sys/vm/drop_caches; cat /var/tmp/s3prof/run/s3/data/bench/* -r >/dev/null 2>&1; find /var/tmp/s3prof/run/s3/data -type f -exec cat {} + > /dev/null
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
n0=$(cpu $NODE)
$GM -f --log-level warn --cache-dir /var/tmp/s3prof/cache s3://bench/llama/llama-00001-of-00004.gguf /var/tmp/s3prof/mnt &
D=$!
for i in $(seq 200); do [ -e /var/tmp/s3prof/mnt/llama.gguf ] && break; sleep 0.05; done
d0=$(cpu $D)
[ -n "$PERF" ] && { [ "$PERFARGS" = pid ] && PERFARGS="-p $D"; perf record -F 1999 -g ${PERFARGS:--a} -o /var/tmp/s3prof/perf.data >/dev/null 2>&1 & PP=$!; sleep 0.3; }
t0=$(date +%s.%N)
${READER:-cat} /var/tmp/s3prof/mnt/llama.gguf > /dev/null
t1=$(date +%s.%N)
[ -n "$PERF" ] && { kill -INT $PP; wait $PP; }
d1=$(cpu $D); n1=$(cpu $NODE)
for t in /proc/$D/task/*; do echo "$(cat $t/comm) $(grep -h ctxt $t/status | awk "{print \$2}" | tr "\n" " ")"; done | awk "{v[\$1]+=\$2; n[\$1]+=\$3; c[\$1]++} END {for (k in v) print \"  thread\", k, c[k], \"vol\", v[k], \"invol\", n[k]}"
umount /var/tmp/s3prof/mnt; wait $D
T=$(getconf CLK_TCK)
echo "wall $(echo "$t1 - $t0" | bc) daemon_cpu $(echo "($d1-$d0)/$T" | bc -l | cut -c1-5) node_cpu $(echo "($n1-$n0)/$T" | bc -l | cut -c1-5)"
