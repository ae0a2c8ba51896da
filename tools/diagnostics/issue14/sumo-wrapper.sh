#!/bin/bash
export SUMO_HOME=/work/main/.ci/venv/lib/python3.11/site-packages/sumo
args=(); skip=0
for a in "$@"; do
  if [ $skip = 1 ]; then skip=0; continue; fi
  case "$a" in
    --waiting-time-memory) [ -n "$NO_WTM" ] && { skip=1; continue; } ;;
    --tripinfo-output.write-unfinished) [ -n "$NO_UNF" ] && continue ;;
    --additional-files) if [ -n "$NO_LOOPS" ]; then skip=1; continue; fi ;;
  esac
  args+=("$a")
done
exec /work/main/.ci/venv/lib/python3.11/site-packages/sumo/bin/sumo "${args[@]}"
