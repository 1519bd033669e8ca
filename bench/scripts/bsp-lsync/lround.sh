#!/bin/bash
# Interleaved L measurement: per round and p, ferry before, ferry after, MPICH barrier.
# Prints: round p impl median q1 q3 (µs)
R=${R:-3}; PS=${PS:-"2 4 8"}; N=${N:-2000}
FB=/tmp/ferry-target-bsp-before/release/ferry
FA=/tmp/ferry-target-bsp-wt/release/ferry
for r in $(seq 1 $R); do
  for p in $PS; do
    echo "$r $p before $($FB run -n $p ./lsync_before $N | cut -d' ' -f2-)"
    echo "$r $p after $($FA run -n $p ./${AFTER:-lsync_after} $N | cut -d' ' -f2-)"
    m=$N; [ $p -gt 2 ] && m=200
    echo "$r $p mpich $(timeout 60 mpiexec.mpich -n $p ./lbar_mpich $m 2>/dev/null | cut -d' ' -f2-)"
  done
done
