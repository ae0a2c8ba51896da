#!/usr/bin/env bash
# game/grid6 under variants of its own static program (tools/README.md, finding 26).
# Needs a greenwave built with `--features sumo` (GW=/path/to/greenwave), SUMO 1.28 on PATH,
# G=$SUMO_HOME/tools/game and bc. Writes the variant nets to ./nets and prints, per variant, the
# mean over seeds 1000-1004 of `greenwave sim --backend sumo --controller fixed-time`
# (the program as the net gives it: SUMO runs it).
set -euo pipefail
GW=${GW:-greenwave}
NET=$G/grid6/grid6.net.xml
mkdir -p nets
ns='<phase duration="42" state="GGrrGGrr"/>'   # phase 0: north-south green
ew='<phase duration="42" state="rrGGrrGG"/>'   # phase 2: east-west green
variant() { # name ns_green_s ew_green_s "offsets for 0/0 1/0 2/0 0/1 1/1 2/1"
  local out=nets/$1.net.xml offs=($4) ids=(0/0 1/0 2/0 0/1 1/1 2/1)
  sed -e "s|$ns|<phase duration=\"$2\" state=\"GGrrGGrr\"/>|" \
      -e "s|$ew|<phase duration=\"$3\" state=\"rrGGrrGG\"/>|" "$NET" > "$out"
  for k in 0 1 2 3 4 5; do
    sed -i "s|<tlLogic id=\"${ids[$k]}\" type=\"static\" programID=\"0\" offset=\"0\">|<tlLogic id=\"${ids[$k]}\" type=\"static\" programID=\"0\" offset=\"${offs[$k]}\">|" "$out"
  done
  # Every edit must have taken: six programs with the greens asked for, each offset set.
  [ "$(grep -c "<phase duration=\"$2\" state=\"GGrrGGrr\"/>" "$out")" = 6 ] &&
    [ "$(grep -c "<phase duration=\"$3\" state=\"rrGGrrGG\"/>" "$out")" = 6 ] ||
    { echo "$1: the greens were not edited" >&2; exit 1; }
  for k in 0 1 2 3 4 5; do
    grep -q "<tlLogic id=\"${ids[$k]}\" type=\"static\" programID=\"0\" offset=\"${offs[$k]}\">" "$out" ||
      { echo "$1: offset of ${ids[$k]} not set" >&2; exit 1; }
  done
  local sum=0
  for s in 1000 1001 1002 1003 1004; do
    d=$("$GW" sim --backend sumo --net "$out" --routes "$G/grid6/grid6.rou.xml" \
        --controller fixed-time --seed "$s" | awk '/^fixed-time/{print $2}')
    [ -n "$d" ] || { echo "$1: no delay printed for seed $s" >&2; exit 1; }
    sum=$(echo "$sum + $d" | bc -l)
  done
  printf '%s (N-S %s s, E-W %s s, offsets %s): %.2f s\n' "$1" "$2" "$3" "$4" "$(echo "$sum / 5" | bc -l)"
}
Z="0 0 0 0 0 0"
variant own 42 42 "$Z"
for g in 20 30 60 70 90; do variant "cycle-$g" "$g" "$g" "$Z"; done
for p in "55 35" "35 55" "38 46" "40 44" "44 40" "40 50" "36 42" "45 45"; do
  set -- $p; variant "split-$1-$2" "$1" "$2" "$Z"
done
variant checkerboard 42 42 "0 45 0 45 0 45"
variant progression-6s 42 42 "0 6 12 6 12 18"
variant progression-12s 42 42 "0 12 24 12 24 36"
variant rows-opposed 42 42 "0 0 0 45 45 45"
