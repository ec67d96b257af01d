#!/bin/bash
PORT=$(python3 -c 'import json;print(json.load(open("/var/tmp/s3prof/s3.json"))["port"])')
NODE=$(pgrep -f s3_server.js | head -1)
rm -rf /var/tmp/s3prof/dl; mkdir -p /var/tmp/s3prof/dl
sync; echo 3 > /proc/sys/vm/drop_caches; find /var/tmp/s3prof/run/s3/data -type f -exec cat {} + > /dev/null
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
n0=$(cpu $NODE); t0=$(date +%s.%N)
args=()
for i in 1 2 3 4; do n=llama-0000$i-of-00004.gguf; args+=(-o /var/tmp/s3prof/dl/$n http://127.0.0.1:$PORT/bench/llama/$n); done
/usr/bin/time -f "curl cpu %U %S vol %w invol %c" curl -sSf --noproxy '*' --aws-sigv4 aws:amz:us-east-1:s3 --user S3RVER:S3RVER -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" "${args[@]}"
t1=$(date +%s.%N); n1=$(cpu $NODE); T=$(getconf CLK_TCK)
echo "wall $(echo "$t1 - $t0" | bc) node_cpu $(echo "($n1-$n0)/$T" | bc -l | cut -c1-5)"
