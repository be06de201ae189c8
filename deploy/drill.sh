#!/usr/bin/env bash
# Leader drill against the docker-compose staging stack (make compose-drill; see deploy/README.md).
#
#   deploy/drill.sh [kill|stop]     kill: SIGKILL the leader of $QUEUE (a crash, the default)
#                                   stop: docker compose stop it (SIGTERM: a graceful handover)
#
# It finds the leader of $QUEUE (default orders) with `demo-worker status` run inside another worker
# container, takes the leader down, measures how long until another worker leads the queue with a
# running dispatcher (SLA: 30 s p95; a crash costs the lease TTL, 10 s), waits for the dead worker to
# be evicted from the registry (crash only), prints the status at each step, then starts the
# container again. Exit status 1 when the takeover misses the SLA or a step times out.
set -euo pipefail

cd "$(dirname "$0")/.."
COMPOSE=${COMPOSE:-docker compose}
QUEUE=${QUEUE:-orders}
SLA=${SLA:-30}
MODE=${1:-kill}
WORKERS=(demo-worker-1 demo-worker-2 demo-worker-3)

case "$MODE" in kill | stop) ;; *) echo "usage: $0 [kill|stop]" >&2; exit 2 ;; esac

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
running() { $COMPOSE ps --status running --services 2>/dev/null | grep -qx "$1"; }

# status VIA [args]: demo-worker status run inside container VIA (it reads etcd, Temporal and Redis
# directly, so it works whichever worker leads).
status() { $COMPOSE exec -T "$1" demo-worker status "${@:2}"; }

# row VIA: the status line of $QUEUE: "<queue> <leader> <token> ... <online/draining> <evicted>
# <active/done/failed>" (the last three columns: WORKERS ON/DRAIN, EVICTED, LOAD).
row() { status "$1" -queues "$QUEUE" 2>/dev/null | awk -v q="$QUEUE" '$1 == q'; }
leader_of() { row "$1" | awk '{ print $2 }'; }
workers_of() { row "$1" | awk '{ print $(NF-2) }'; }
evicted_of() { row "$1" | awk '{ print $(NF-1) }'; }

live_worker() {
	local w
	for w in "${WORKERS[@]}"; do
		if [ "$w" != "${1:-}" ] && running "$w"; then echo "$w"; return 0; fi
	done
	return 1
}

echo "== waiting for a leader of queue $QUEUE"
via=$(live_worker) || { echo "no demo worker is running: make compose-up first" >&2; exit 1; }
deadline=$((SECONDS + 180))
until leader=$(leader_of "$via") && [[ "$leader" == demo-worker-* ]]; do
	if ((SECONDS > deadline)); then echo "no leader of $QUEUE after 180 s" >&2; status "$via" || true; exit 1; fi
	sleep 2
done
status "$via"
echo
echo "== leader of $QUEUE: $leader; workers (online/draining): $(workers_of "$via")"
via=$(live_worker "$leader") || { echo "no other worker is running to take over" >&2; exit 1; }

start=$(now)
if [ "$MODE" = kill ]; then
	echo "== $(date -u +%T) crash: SIGKILL $leader"
	$COMPOSE kill -s SIGKILL "$leader" >/dev/null
else
	echo "== $(date -u +%T) graceful stop: docker compose stop $leader (SIGTERM, resign first)"
	$COMPOSE stop -t 20 "$leader" >/dev/null
fi

echo "== waiting for another worker to lead $QUEUE with a running dispatcher"
new=""
while :; do
	line=$(row "$via" || true)
	new=$(awk '{ print $2 }' <<<"$line")
	if [[ "$new" == demo-worker-* && "$new" != "$leader" && "$line" == *RUNNING* ]]; then break; fi
	if awk -v e="$(elapsed "$start")" -v s=$((SLA * 2)) 'BEGIN { exit !(e > s) }'; then
		echo "no takeover after $((SLA * 2)) s" >&2
		status "$via" || true
		exit 1
	fi
	sleep 0.5
done
took=$(elapsed "$start")
echo "== $new took over $QUEUE ${took}s after $leader went down (SLA ${SLA}s)"
status "$via"
verdict=0
if awk -v t="$took" -v s="$SLA" 'BEGIN { exit !(t > s) }'; then
	echo "!! takeover took longer than the SLA: see docs/runbook.md#batontakeoverslow" >&2
	verdict=1
fi

if [ "$MODE" = kill ]; then
	echo
	echo "== waiting for the leader to evict $leader from the registry (3 missed heartbeats, about 30 s)"
	deadline=$((SECONDS + 120))
	until [[ "$(evicted_of "$via")" == [1-9]* ]]; do
		if running "$leader"; then echo "(docker restarted $leader by its restart policy: the eviction cannot be seen)"; break; fi
		if ((SECONDS > deadline)); then echo "$leader not evicted after 120 s" >&2; verdict=1; break; fi
		sleep 2
	done
	echo "== workers of $QUEUE (online/draining): $(workers_of "$via"), evicted: $(evicted_of "$via") after $(elapsed "$start")s"
fi

echo
echo "== starting $leader again"
$COMPOSE start "$leader" >/dev/null
deadline=$((SECONDS + 60))
until [[ "$(workers_of "$via")" == 3/* ]]; do
	if ((SECONDS > deadline)); then echo "$leader did not register again within 60 s" >&2; verdict=1; break; fi
	sleep 2
done
status "$via"
cat <<EOF

What to look at now:
  Grafana    http://localhost:3000  (Baton: dispatcher ownership): Leaders per queue dipped to 0 for ${took}s,
             Takeovers by outcome shows the takeover (path terminate_first), Workers evicted shows $leader.
  Prometheus http://localhost:9090/alerts: nothing should be firing (BatonQueueNoLeader waits 1 minute).
  Temporal   http://localhost:8233: workflow dispatcher-staging-$QUEUE: the old run is TERMINATED
             ("baton: taken over by $new ...") before the new one started.
EOF
exit "$verdict"
