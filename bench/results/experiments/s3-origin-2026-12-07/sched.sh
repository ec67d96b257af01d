#!/bin/bash
NODE=$(pgrep -f s3_server.js | head -1)
a=($(cat /proc/$NODE/task/$NODE/schedstat))
"$@"
b=($(cat /proc/$NODE/task/$NODE/schedstat))
echo "node main: run $(( (b[0]-a[0])/1000000 )) ms, runqueue wait $(( (b[1]-a[1])/1000000 )) ms, slices $(( b[2]-a[2] ))"
