#!/bin/sh
# Tables of hosts-bench.sh's results: prints markdown on stdout and writes OUTDIR/medians.csv.
#
#   bench/scripts/hosts-bench-summary.sh OUTDIR
#
# Every figure is the median over the rounds that succeeded (n/m says how many of m did); a
# ratio is ferry's median over the peer's. Start-up: wall ms (lower is better). Point to point:
# mpibench's per-round medians (ping-pong: half a round trip in us, and bytes / that time as
# MB/s; bw: MB/s of a window of messages), then the median over rounds.
set -eu
OUT=${1:?results directory}
cd "$OUT"

# One stream of rows: part,impl,shape,round,op,bytes,value (value: us or MB/s).
rows() {
  # start-up: wall time of successful runs, rc=0 only; failed ones are counted apart.
  [ -f runs.csv ] && awk -F, 'NR > 1 && $1 == "startup" {
      if ($5 == "0") printf "startup,%s,%s,%s,wall_ms,0,%.1f\n", $3, $4, $2, $6 / 1000
      else printf "startup,%s,%s,%s,failed,0,1\n", $3, $4, $2
    }' runs.csv
  for f in raw/p2p-*.csv raw/colo-*.csv; do
    [ -f "$f" ] || continue
    b=$(basename "$f" .csv)
    # p2p-IMPL-R or colo-IMPL-VARIANT-R
    awk -F, -v name="$b" '
      BEGIN { n = split(name, a, "-"); part = a[1]; imp = a[2]; round = a[n]
              shape = part == "p2p" ? "h1-h2" : a[3]; if (part == "colo") part = "colocated" }
      /^(pingpong|bw),/ {
        if ($1 == "pingpong") printf "%s,%s,%s,%s,pingpong_us,%s,%s\n", part, imp, shape, round, $3, $4
        printf "%s,%s,%s,%s,%s_MBps,%s,%s\n", part, imp, shape, round, $1, $3, $5
      }
      /^(msgrate|allreduce),/ { printf "%s,%s,%s,%s,%s_us,%s,%s\n", part, imp, shape, round, $1, $3, $4 }' "$f"
  done
}

# The implementations in the tables and the one ferry stands for in the ratios (hosts-bench.sh's
# IMPLS and FERRY_IMPL).
LIST=${IMPLS:-ferry mpich5 ompi5 mpich4 ompi4}
FERRY_IMPL=${FERRY_IMPL:-ferry}
rows | awk -F, -v list="$LIST" -v fi="$FERRY_IMPL" '
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] + 0 : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  {
    k = $1 SUBSEP $2 SUBSEP $3 SUBSEP $5 SUBSEP $6
    if ($5 == "failed") { failed[$1, $2, $3]++; next }
    v[k] = v[k] " " $7; cnt[k]++; keys[k] = 1
  }
  END {
    print "part,impl,shape,metric,bytes,median,rounds" > "medians.csv"
    for (k in keys) {
      split(k, p, SUBSEP); m[k] = median(v[k])
      printf "%s,%s,%s,%s,%s,%.3f,%d\n", p[1], p[2], p[3], p[4], p[5], m[k], cnt[k] >> "medians.csv"
    }
    nimp = split(list, imps, " ")

    print "## Start-up: empty MPI program, launch to exit (ms, median of rounds; ok/failed runs)\n"
    printf "| ranks x hosts |"; for (i = 1; i <= nimp; i++) printf " %s |", imps[i]
    print " ferry / faster of mpich5, ompi5 | ferry / fastest peer |"
    printf "|---|"; for (i = 1; i <= nimp + 2; i++) printf "---|"; print ""
    split("1x1 1x3 1x6 3x3 3x6 6x6", shapes, " ")
    for (s = 1; s <= 6; s++) {
      sh = shapes[s]; h = substr(sh, 1, index(sh, "x") - 1); n = substr(sh, index(sh, "x") + 1)
      any = 0; for (i = 1; i <= nimp; i++) if (("startup" SUBSEP imps[i] SUBSEP sh SUBSEP "wall_ms" SUBSEP 0) in m) any = 1
      if (!any) continue
      printf "| %d ranks, %d host%s |", n, h, (h > 1 ? "s" : "")
      best5 = 0; best = 0
      for (i = 1; i <= nimp; i++) {
        k = "startup" SUBSEP imps[i] SUBSEP sh SUBSEP "wall_ms" SUBSEP 0
        f = failed["startup", imps[i], sh] + 0
        if (k in m) {
          printf " %.0f (%d%s) |", m[k], cnt[k], f ? "/" f " failed" : ""
          if (imps[i] !~ /^ferry/) { if (!best || m[k] < best) best = m[k] }
          if (imps[i] ~ /^(mpich5|ompi5)/) { if (!best5 || m[k] < best5) best5 = m[k] }
        } else printf " %s |", f ? "failed (" f ")" : "-"
      }
      fk = "startup" SUBSEP fi SUBSEP sh SUBSEP "wall_ms" SUBSEP 0
      printf " %s | %s |\n", (fk in m) && best5 ? sprintf("%.2f", m[fk] / best5) : "-", (fk in m) && best ? sprintf("%.2f", m[fk] / best) : "-"
    }

    print "\n## Between two hosts (rank 0 on h1, rank 1 on h2, TCP over the veths)\n"
    print "Ratio: ferry over the better peer (latency: lower is better, <= 1.00 meets the goal; bandwidth: >= 1.00 meets it).\n"
    printf "| figure |"; for (i = 1; i <= nimp; i++) printf " %s |", imps[i]
    print " better peer | " fi " / better peer |"
    printf "|---|"; for (i = 1; i <= nimp + 2; i++) printf "---|"; print ""
    nrow = split("pingpong_us:8:8 B ping-pong latency (us),msgrate_us:8:8 B message rate (us a message),allreduce_us:8:8 B allreduce (us),allreduce_us:1048576:1 MiB allreduce (us),pingpong_us:1024:1 KiB ping-pong latency (us),pingpong_MBps:1048576:1 MiB ping-pong (MB/s),pingpong_MBps:16777216:16 MiB ping-pong (MB/s),bw_MBps:1048576:1 MiB streaming (MB/s),bw_MBps:16777216:16 MiB streaming (MB/s)", rowsdef, ",")
    for (r = 1; r <= nrow; r++) {
      split(rowsdef[r], d, ":"); lower = d[1] ~ /_us$/
      printf "| %s |", d[3]; bp = ""; bv = 0
      for (i = 1; i <= nimp; i++) {
        k = "p2p" SUBSEP imps[i] SUBSEP "h1-h2" SUBSEP d[1] SUBSEP d[2]
        if (k in m) {
          printf lower ? " %.1f |" : " %.0f |", m[k]
          if (imps[i] !~ /^ferry/ && (bp == "" || (lower ? m[k] < bv : m[k] > bv))) { bp = imps[i]; bv = m[k] }
        } else printf " - |"
      }
      fk = "p2p" SUBSEP fi SUBSEP "h1-h2" SUBSEP d[1] SUBSEP d[2]
      printf " %s | %s |\n", bp == "" ? "-" : bp, (fk in m) && bv ? sprintf("%.2f", m[fk] / bv) : "-"
    }

    print "\n## Two ranks on one host: alone (--hosts h1:2) and inside a job on two hosts (--hosts h1:2,h2:2)\n"
    print "Ranks 0 and 1 are both on h1 in either job. Ratio: multi-host job over single-host job (latency: <= 1.05 is within 5 %; bandwidth: >= 0.95).\n"
    print "| impl | figure | h1:2 alone | h1:2 + h2:2 | multi / single |"
    print "|---|---|---|---|---|"
    for (i = 1; i <= nimp; i++) {
      for (r = 1; r <= nrow; r++) {
        split(rowsdef[r], d, ":"); lower = d[1] ~ /_us$/
        ks = "colocated" SUBSEP imps[i] SUBSEP "single" SUBSEP d[1] SUBSEP d[2]
        km = "colocated" SUBSEP imps[i] SUBSEP "multi" SUBSEP d[1] SUBSEP d[2]
        if (!(ks in m) || !(km in m)) continue
        printf "| %s | %s | " (lower ? "%.2f | %.2f" : "%.0f | %.0f") " | %.3f |\n", imps[i], d[3], m[ks], m[km], m[ks] ? m[km] / m[ks] : 0
      }
    }
  }'
echo
echo "Rounds per figure are in medians.csv (column rounds); every run's exit status, wall time and"
echo "load average are in runs.csv; machine.txt has the command, commit, versions and load."
