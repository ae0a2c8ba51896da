#!/bin/bash
# Makes the net variants of the robustness sweep (README.md here) in OUT (default ./variants):
# one seeded netgenerate net and randomTrips.py demand (1,200 s) per variant.
# Needs SUMO 1.28 from PyPI: SUMO_HOME set and python3 with it on PATH.
set -u
: "${SUMO_HOME:?set SUMO_HOME}"
OUT=${OUT:-variants}
NG="$SUMO_HOME/bin/netgenerate"
RT="python3 $SUMO_HOME/tools/randomTrips.py"
grid2="--grid --grid.number 2 --grid.length 200 --grid.attach-length 150 --default.lanenumber 2 -j traffic_light"
one="--grid --grid.number 1 --grid.attach-length 200 --default.lanenumber 2 -j traffic_light"
mk() { # NAME NETGENERATE-ARGS... -- RANDOMTRIPS-ARGS...
  local name=$1; shift
  local nargs=(); while [ "$1" != "--" ]; do nargs+=("$1"); shift; done; shift
  mkdir -p "$OUT/$name"
  $NG "${nargs[@]}" --seed 5 -o "$OUT/$name/n.net.xml" > "$OUT/$name/gen.log" 2>&1 \
    || { echo "$name: netgenerate failed"; return; }
  $RT -n "$OUT/$name/n.net.xml" -r "$OUT/$name/r.rou.xml" -o "$OUT/$name/t.trips.xml" \
    -e 1200 --seed 5 --validate "$@" >> "$OUT/$name/gen.log" 2>&1 || echo "$name: trips failed"
  echo "$name ok"
}
mk nema $grid2 --tls.default-type NEMA -- -p 2.5
mk delay $grid2 --tls.default-type delay_based -- -p 2.5
mk ror --grid --grid.number 1 --grid.attach-length 200 --default.lanenumber 2 -j traffic_light_right_on_red -- -p 2
mk aow $one --tls.layout alternateOneWay -- -p 2
mk incoming $grid2 --tls.layout incoming -- -p 2.5
mk leftgreen $one --turn-lanes 1 --turn-lanes.length 60 --tls.left-green.time 6 -- -p 1.5
mk allred $grid2 --tls.allred.time 2 --tls.yellow.time 4 -- -p 2.5
mk peds $one --sidewalks.guess --crossings.guess -- -p 2 --pedestrians --persontrips --trip-attributes 'departPos="random"'
mk bikes $one --bikelanes.guess -- -p 2 --vehicle-class bicycle --vclass bicycle
mk oneway --rand --rand.iterations 40 --rand.bidi-probability 0.4 --rand.min-angle 30 -j traffic_light --tls.guess -- -p 1.5
mk spider6 --spider --spider.arm-number 6 --spider.circle-number 2 --spider.space-radius 150 -j traffic_light -- -p 1.5
mk joined --rand --rand.iterations 50 --rand.min-distance 40 --rand.max-distance 120 -j traffic_light --tls.join --tls.join-dist 30 -- -p 1.5
mk minor --grid --grid.number 1 --grid.attach-length 200 -L 3 --tls.minor-left.max-speed 50 -j traffic_light --turn-lanes 1 -- -p 1.5
mk longgreen $grid2 --tls.cycle.time 120 -- -p 2.5
mk halfoff $grid2 --tls.half-offset "A0,B1" --tls.quarter-offset "B0" -- -p 2.5
# Left-hand traffic (2026-12-06): the same kinds of junction driven on the left.
mk lh_grid $grid2 --lefthand -- -p 2.5
mk lh_one_turn $one --lefthand --turn-lanes 1 --turn-lanes.length 60 --tls.left-green.time 6 -- -p 1.5
mk lh_peds $one --lefthand --sidewalks.guess --crossings.guess -- -p 2 --pedestrians --persontrips --trip-attributes 'departPos="random"'
mk lh_opp $one --lefthand --turn-lanes 1 --turn-lanes.length 80 --tls.layout opposites -- -p 1.5
mk lh_ror --grid --grid.number 1 --grid.attach-length 200 --default.lanenumber 2 --lefthand -j traffic_light_right_on_red -- -p 2
mk lh_rand --rand --rand.iterations 40 --rand.min-angle 30 --lefthand -j traffic_light --tls.guess -- -p 1.5
