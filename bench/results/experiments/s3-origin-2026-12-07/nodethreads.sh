#!/bin/bash
NODE=$(pgrep -f s3_server.js | head -1)
snap() { for t in /proc/$NODE/task/*; do echo "$(basename $t) $(cat $t/comm | tr ' ' _) $(awk '{print $14+$15}' $t/stat)"; done | sort; }
snap > /tmp/before.txt
"$@"
snap > /tmp/after.txt
join <(cut -d' ' -f1,3 /tmp/before.txt) <(cut -d' ' -f1,2,3 /tmp/after.txt) | awk '{d=$4-$2; if (d>5) printf "%s %s %.2f\n",$1,$3,d/100}'
