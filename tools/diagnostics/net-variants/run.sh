#!/bin/bash
# For each variant folder given: `greenwave sim` (every classic controller, 1,200 s), a short
# `train` (3,000 decisions: a smoke run, not a policy), `export`, `eval` (one seed) and
# `site`; prints each command's exit status and the tails of its output.
# GW picks the binary (a build with feature `sumo`; default ../../../target/release/greenwave).
# Needs SUMO_HOME, and ORT_DYLIB_PATH where the binary was built with `greenwave-runtime/ort`.
: "${SUMO_HOME:?set SUMO_HOME}"
GW=${GW:-$(dirname "$0")/../../../target/release/greenwave}
for d in "$@"; do
  S="--backend sumo --net $d/n.net.xml --routes $d/r.rou.xml"
  echo "=== $d"
  timeout 300 "$GW" sim $S --controller all --seconds 1200 > "$d/sim.out" 2> "$d/sim.err"
  echo "sim rc=$?"; tail -6 "$d/sim.out"; tail -3 "$d/sim.err"
  rm -rf "$d/run"
  timeout 600 "$GW" train $S --episode-seconds 1200 --steps 3000 --out "$d/run" --quiet \
    > "$d/train.out" 2> "$d/train.err"
  echo "train rc=$?"; tail -3 "$d/train.err"
  timeout 120 "$GW" export "$d/run" --out "$d/m.onnx" > "$d/export.out" 2> "$d/export.err"
  echo "export rc=$?"; tail -2 "$d/export.err"
  timeout 300 "$GW" eval $S --model "$d/m.onnx" --seeds 1 --seconds 1200 > "$d/eval.out" 2> "$d/eval.err"
  echo "eval rc=$?"; tail -7 "$d/eval.out"; tail -3 "$d/eval.err"
  timeout 60 "$GW" site $S --name "$(basename "$d")" --out "$d/site.toml" > "$d/site.out" 2> "$d/site.err"
  echo "site rc=$?"; tail -2 "$d/site.err"
done
