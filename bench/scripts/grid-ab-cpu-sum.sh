#!/bin/sh
# grid-ab-cpu-sum.sh OUT: per variant and size, the best round (lowest per-round median one-way time)
# as MB/s, the 8 B one-way time, and per run CPU s/GiB carried: ranks (each), relay,
# kernel threads, machine softirq, machine busy (the last two include other work).
OUT=$1
cat "$OUT/load.txt"
for f in "$OUT"/*.csv; do n=$(basename "$f" .csv); v=${n%-*}; grep -v '^#' "$f" | grep -v '^bytes' | sed "s/^/$v,/"; done | awk -F, '
 { k = $1 SUBSEP $2; if (!(k in best) || $5 + 0 < best[k]) best[k] = $5 + 0; vs[$1] = 1; ss[$2] = 1 }
 END {
   for (s in ss) sizes[++n] = s + 0
   for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (sizes[j] < sizes[i]) { t = sizes[i]; sizes[i] = sizes[j]; sizes[j] = t }
   printf "%-10s %9s", "best", "8B us"; for (i = 1; i <= n; i++) if (sizes[i] >= 1048576) printf " %8dK", sizes[i] / 1024; print "  (MB/s)"
   for (v in vs) {
     printf "%-10s %9.1f", v, best[v SUBSEP 8]
     for (i = 1; i <= n; i++) if (sizes[i] >= 1048576) printf " %9.0f", sizes[i] / best[v SUBSEP sizes[i]]
     print ""
   }
 }' | sort
for f in "$OUT"/*.csv; do
  b=${f%.csv}
  bytes=$(grep -v '^#' "$f" | grep -v '^bytes' | awk -F, '{ s += 2 * $1 * ($2 * $3 + 1) } END { printf "%.0f", s }')
  cpu=$(cat "$b.cpu" 2>/dev/null || echo "0 0 0")
  awk -v name="$(basename "$b")" -v bytes="$bytes" -v cpu="$cpu" '
    /ferry-cpu:/ { n = split($0, a, ":"); ranks = ranks sprintf(" %.2f", (a[n-2] + a[n-1]) * 2^30 / bytes); wall = wall sprintf(" %.1f", a[n]) }
    /ferry relay:.*cpu=/ { match($0, /cpu=[0-9.]+/); relay += substr($0, RSTART + 4, RLENGTH - 4) * 2^30 / bytes; seen = 1 }
    END { split(cpu, c, " "); g = 2^30 / bytes
          printf "cpu s/GiB %-10s ranks%s relay %s kthreads %.2f softirq %.2f busy %.2f (wall s%s, %.2f GiB)\n", name, ranks, seen ? sprintf("%.2f", relay) : "-", c[1] * g, c[2] * g, c[3] * g, wall, bytes / 2^30 }
  ' "$b.err"
done
