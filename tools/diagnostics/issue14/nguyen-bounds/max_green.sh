#!/usr/bin/env bash
# sumo-rl/Nguyen: greenwave's actuated and max-pressure with a longer max green than the
# default (the larger of 60 s and the program's 30 s greens), seeds 1000-1004 (finding 19).
# Needs GW (a greenwave built with `--features sumo`), SUMO on PATH, N=<sumo_rl>/nets/Nguyen.
set -euo pipefail
GW=${GW:-greenwave}
for c in actuated max-pressure; do
  for g in 120 300; do
    tmp=$(mktemp -d)
    for s in 1000 1001 1002 1003 1004; do
      ( "$GW" sim --backend sumo --net "$N/nguyentl.net.xml" --routes "$N/nguyencontext.rou.xml" \
          --controller "$c" --max-green "$g" --seed "$s" 2>/dev/null | awk -v c="$c" '$1 == c {print $2}' > "$tmp/$s" ) &
      [ $((s % 2)) = 1 ] && wait
    done
    wait
    cat "$tmp"/* | tr '\n' ' '
    printf '\n%s --max-green %s: mean %.2f s\n' "$c" "$g" \
      "$(cat "$tmp"/* | awk '{ s += $1; n++ } END { if (n == 5) print s / n; else exit 1 }')"
    rm -r "$tmp"
  done
done
