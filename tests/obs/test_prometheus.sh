#!/bin/sh
# tests/obs/test_prometheus.sh - a real Prometheus server (Debian package
# prometheus) on loopback, with a temporary config and storage directory,
# scrapes the agent every second; a kvpool series is read back through
# Prometheus's HTTP API (/api/v1/query).  Skipped (exit 77), saying so,
# only where the prometheus package (or jq, curl) is not installed.
set -u
cd "$(dirname "$0")/../.."
. tests/obs/lib.sh
need jq jq
need curl curl
PROM=${PROMETHEUS:-/usr/bin/prometheus}
if [ ! -x "$PROM" ]; then
	echo "SKIP: $PROM not installed (apt-get install prometheus)"
	exit 77
fi

start_agent --dram 64M
N=25
i=0
while [ $i -lt $N ]; do
	echo "value $i" | "$B/kvpool" --pool "$POOL" put "key$i" - || fail "put key$i"
	i=$((i + 1))
done

cat >"$T/prometheus.yml" <<CFG
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kvpool
    static_configs:
      - targets: ['127.0.0.1:$MPORT']
CFG

# a free port for Prometheus: the kernel's choice of an ephemeral port
# cannot be handed to it, so try a few (a port taken meanwhile makes it
# exit at once, and the next is tried)
PPORT=
for try in 1 2 3 4 5 6 7 8; do
	p=$((20000 + ($$ * 7 + try * 1013) % 30000))
	curl -s -o /dev/null "http://127.0.0.1:$p/" && continue # in use
	"$PROM" --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/data$try" \
		--web.listen-address="127.0.0.1:$p" --log.level=warn 2>>"$T/prom.log" &
	ppid=$!
	ready() { curl -sf "http://127.0.0.1:$p/-/ready" >/dev/null || ! kill -0 "$ppid" 2>/dev/null; }
	wait_for 60 ready
	if kill -0 "$ppid" 2>/dev/null && curl -sf "http://127.0.0.1:$p/-/ready" >/dev/null; then
		EXTRA_PIDS=$ppid
		PPORT=$p
		break
	fi
	kill "$ppid" 2>/dev/null
	wait "$ppid" 2>/dev/null
done
[ -n "$PPORT" ] || { cat "$T/prom.log"; fail "prometheus did not start"; }
echo "prometheus on 127.0.0.1:$PPORT scraping kvpoold on 127.0.0.1:$MPORT"

# query EXPR: the first result's value (empty if none yet)
query() {
	curl -sf -G "http://127.0.0.1:$PPORT/api/v1/query" --data-urlencode "query=$1" |
		jq -r '.data.result[0].value[1] // empty'
}
got_puts() { [ "$(query 'kvpool_ops_total{job="kvpool",op="put"}')" = "$N" ]; }
wait_for 60 got_puts || {
	cat "$T/prom.log"
	curl -s "http://127.0.0.1:$PPORT/api/v1/targets" | jq .
	fail "Prometheus never read kvpool_ops_total{op=\"put\"} = $N"
}
echo "ok: Prometheus reads kvpool_ops_total{op=\"put\"} = $N"
[ "$(query 'up{job="kvpool"}')" = 1 ] || fail "target not up"
v=$(query 'kvpool_medium_state{tier="DRAM",state="entries"}')
[ "$v" = "$N" ] || fail "DRAM entries through Prometheus: '$v', want $N"
v=$(query 'sum(kvpool_op_duration_seconds_count{op="put"})')
[ "$v" = "$N" ] || fail "put calls through Prometheus: '$v', want $N"
# a histogram quantile evaluates (the dashboard's latency panel)
v=$(query 'histogram_quantile(0.99, sum by (le) (kvpool_op_duration_seconds_bucket{op="put"}))')
[ -n "$v" ] && [ "$v" != NaN ] || fail "histogram_quantile of put latency: '$v'"
echo "ok: put p99 $v s, DRAM entries $N, through /api/v1/query"
