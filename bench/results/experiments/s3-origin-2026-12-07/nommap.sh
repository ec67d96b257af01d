#!/bin/bash
# warm --no-mmap load of $1; prints load_ms, user/sys of the loader
CL=/work/main/tests/clients
coproc N { /usr/bin/time -f "TIME %U %S %F %R %w %c" node /work/main/bench/first-token.mjs $CL no-mmap load-only 2>&1; }
read -r line <&${N[0]}
echo "$1" >&${N[1]}
while read -r line <&${N[0]}; do echo "$line" | grep -o '"load_ms":[0-9.]*\|TIME.*'; done
