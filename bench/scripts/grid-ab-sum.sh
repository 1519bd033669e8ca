#!/bin/sh
# grid-ab-sum.sh OUT: per variant and size: best (min of per-round medians) MB/s; CPU s/GiB per round.
OUT=$1
cat $OUT/load.txt
for f in $OUT/*.csv; do n=$(basename $f .csv); v=${n%-*}; grep -v '^#' $f | grep -v '^bytes' | sed "s/^/$v,/"; done | awk -F, '
 { k=$1 SUBSEP $2; if (!(k in best) || $5+0 < best[k]) best[k]=$5+0; vs[$1]=1; ss[$2]=1 }
 END { printf "%-14s", "MB/s"; for (s in ss) sizes[++n]=s+0; for(i=1;i<=n;i++)for(j=i+1;j<=n;j++)if(sizes[j]<sizes[i]){t=sizes[i];sizes[i]=sizes[j];sizes[j]=t}
   for(i=1;i<=n;i++) printf " %9d", sizes[i]; print ""
   for (v in vs) { printf "%-14s", v; for(i=1;i<=n;i++) printf " %9.0f", sizes[i]/best[v SUBSEP sizes[i]]; print "" } }' | sort
for f in $OUT/*.csv; do
  b=${f%.csv}
  bytes=$(grep -v '^#' "$f" | grep -v '^bytes' | awk -F, '{ s += 2 * $1 * ($2 * $3 + 1) } END { printf "%.0f", s }')
  awk -v name="$(basename "$b")" -v bytes="$bytes" '
    /ferry-cpu:/ { n = split($0, a, ":"); ranks = ranks sprintf(" %.2f", (a[n-2] + a[n-1]) * 2^30 / bytes); wall = wall sprintf(" %.1f", a[n]) }
    /ferry relay:.*cpu=/ { match($0, /cpu=[0-9.]+/); relay += substr($0, RSTART + 4, RLENGTH - 4) * 2^30 / bytes; seen = 1 }
    END { printf "cpu s/GiB %-14s ranks%s relay %s (wall s%s)\n", name, ranks, seen ? sprintf("%.2f", relay) : "-", wall }
  ' "$b.err"
done
