#!/bin/bash
PORT=$(python3 -c 'import json;print(json.load(open("/var/tmp/s3prof/s3.json"))["port"])')
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_ENDPOINT_URL_S3=http://127.0.0.1:$PORT AWS_REGION=us-east-1 AWS_SHARED_CREDENTIALS_FILE=/nonexist AWS_CONFIG_FILE=/nonexist
rm -rf /var/tmp/s3prof/cache
/usr/bin/time -f "prefetch cpu %U %S wall %e" ${GM:-/work/main/build/gguf-mount} prefetch --cache-dir /var/tmp/s3prof/cache s3://bench/llama/llama-00001-of-00004.gguf >/dev/null
