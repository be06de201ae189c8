#!/bin/sh
# Registers the namespace the demo workers use once the Temporal frontend answers.
set -eu
ns=${NAMESPACE:-default}
addr=${TEMPORAL_ADDRESS:-temporal:7233}
i=0
until temporal operator cluster health --address "$addr" >/dev/null 2>&1; do
  i=$((i + 1))
  if [ "$i" -ge 60 ]; then echo "temporal at $addr not healthy after 120 s" >&2; exit 1; fi
  sleep 2
done
temporal operator namespace describe --namespace "$ns" --address "$addr" >/dev/null 2>&1 ||
  temporal operator namespace create --namespace "$ns" --retention 24h --address "$addr"
echo "namespace $ns ready"
