#!/bin/bash
# run.sh TAG NET ROUTES CONTROLLER [gw args...]: one greenwave run with SUMO outputs in /tmp/h13/out/TAG.*
source /work/exp/env.sh
T=$1 NET=$2 R=$3 C=$4; shift 4
TLS=$(grep -o '<tlLogic id="[^"]*"' $NET | cut -d'"' -f2 | sort -u | tr '\n' ' ')
{
echo "<additional>"
echo "  <laneData id=\"ld\" freq=\"${H13FREQ:-3600}\" file=\"/tmp/h13/out/$T.lane.xml\" excludeEmpty=\"true\"/>"
echo "  <edgeData id=\"ed\" freq=\"${H13FREQ:-3600}\" file=\"/tmp/h13/out/$T.edge.xml\" excludeEmpty=\"true\"/>"
k=0; for id in $TLS; do echo "  <timedEvent type=\"SaveTLSStates\" source=\"$id\" dest=\"/tmp/h13/out/$T.tls$k.xml\"/>"; k=$((k+1)); done
echo "</additional>"
} > /tmp/h13/out/$T.add.xml
export SUMO_HOME=/tmp/h13/fake  # a copy of fake-sumo-home H13TAG=$T H13ADD=/tmp/h13/out/$T.add.xml${EXTRA:+,$EXTRA}
${GW:-/work/exp/bin/gw-pend} sim --backend sumo --net $NET --routes $R --controller $C --seconds ${SECS:-3600} "$@"
