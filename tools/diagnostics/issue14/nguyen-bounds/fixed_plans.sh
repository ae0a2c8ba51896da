#!/usr/bin/env bash
# sumo-rl/Nguyen under static programs that give junction 12's bottleneck links fixed
# priorities (tools/README.md, finding 19, "Why no controller gets near the bar on
# sumo-rl/Nguyen"). Needs a greenwave built with `--features sumo` (GW=/path/to/greenwave),
# SUMO 1.28 on PATH, N=<sumo_rl>/nets/Nguyen and bc. Writes the variant nets to ./nets and
# prints, per variant, the mean over seeds 1000-1004 of `greenwave sim --backend sumo
# --controller fixed-time` (the program as the net gives it: SUMO runs it). Two runs at once.
set -euo pipefail
GW=${GW:-greenwave}
NET=$N/nguyentl.net.xml
ROUTES=$N/nguyencontext.rou.xml
mkdir -p nets
# program NAME TL "phase durations, in the net's order: green1 yellow1 red1 green2 yellow2 red2"
program() { # prints the tlLogic's six phases with new durations
  local tl=$1 d=($2) states
  states=$(awk -v id="$tl" '$0 ~ "<tlLogic id=\"" id "\"" {on=1; next} on && /<\/tlLogic>/ {exit}
    on {match($0, /state="[^"]*"/); print substr($0, RSTART + 7, RLENGTH - 8)}' "$NET")
  local k=0
  for s in $states; do
    printf '        <phase duration="%s" state="%s"/>\n' "${d[$k]}" "$s"
    k=$((k + 1))
  done
  [ "$k" = 6 ] || { echo "light $tl: expected 6 phases, found $k" >&2; exit 1; }
}
variant() { # NAME "durations of light 8" "durations of light 12"
  local out=nets/$1.net.xml
  awk -v p8="$(program 8 "$2")" -v p12="$(program 12 "$3")" '
    /<tlLogic id="8" /  {print; print p8;  skip=1; next}
    /<tlLogic id="12" / {print; print p12; skip=1; next}
    skip && /<\/tlLogic>/ {skip=0}
    !skip {print}' "$NET" > "$out"
  run_seeds "$1" "$out"
}
run_seeds() { # NAME NET
  local tmp sum=0 s d
  tmp=$(mktemp -d)
  for s in 1000 1001 1002 1003 1004; do
    ( "$GW" sim --backend sumo --net "$2" --routes "$ROUTES" --controller fixed-time \
        --seed "$s" | awk '/^fixed-time/{print $2}' > "$tmp/$s" ) &
    [ $((s % 2)) = 1 ] && wait
  done
  wait
  for s in 1000 1001 1002 1003 1004; do
    d=$(cat "$tmp/$s")
    [ -n "$d" ] || { echo "$1: no delay printed for seed $s" >&2; exit 1; }
    sum=$(echo "$sum + $d" | bc -l)
    printf '%s ' "$d"
  done
  printf '\n%s: mean %.2f s\n' "$1" "$(echo "$sum / 5" | bc -l)"
  rm -r "$tmp"
}
OWN="30 2 1 30 2 1"
variant own "$OWN" "$OWN"
# Junction 12's link 0 (8to12 lane 0 -> 12to16, the 1,600 vehicles of 1to5's bottleneck) has
# green only in phase 1, the left turn 7to12 -> 12to13 (1,200) only in phase 2.
variant j12-phase1-hour "$OWN" "3600 2 1 30 2 1"
variant j12-phase1-3190s "$OWN" "3190 2 1 3600 2 1"
# Junction 8's phase 2 serves 7to8, which no vehicle of nguyencontext.rou.xml takes.
variant j8-phase1-j12-own "3600 2 1 30 2 1" "$OWN"
variant j8-phase1-j12-phase1-3190s "3600 2 1 30 2 1" "3190 2 1 3600 2 1"
for split in "45 15" "15 45" "40 20" "20 40"; do
  set -- $split
  variant "j12-split-$1-$2" "$OWN" "$1 2 1 $2 2 1"
done
# Longer cycles at the 3:1 split, and the best split with junction 8 held for 5to8.
for split in "60 20" "90 30" "120 40" "50 10"; do
  set -- $split
  variant "j12-split-$1-$2" "$OWN" "$1 2 1 $2 2 1"
done
variant j8-phase1-j12-split-45-15 "3600 2 1 30 2 1" "45 2 1 15 2 1"
# Still longer cycles at 3:1.
for split in "180 60" "300 100" "600 200"; do
  set -- $split
  variant "j12-split-$1-$2" "$OWN" "$1 2 1 $2 2 1"
done
