#!/bin/sh
# tests/obs/test_scrape_json.sh - `kvpool stat --json` parses (jq) and
# says what /metrics says, for a known workload through the CLI on a pool
# with an SSD tier; the scrape passes `promtool check metrics` (where the
# prometheus package is installed); `kvpool
# top --count 2` prints two frames; `kvpool clients` lists a live client.
set -u
cd "$(dirname "$0")/../.."
. tests/obs/lib.sh
need jq jq
need curl curl

mkdir -p "$T/ssd"
start_agent --dram 64M --dram-unit 4K --dram-high 0 --dram-low 0 \
	--ssd-dir "$T/ssd" --ssd-segment 8M --staging 8M --staging-slot 1M --no-promote
head -c 300000 /dev/urandom >"$T/v"
for i in 1 2 3 4 5 6; do
	"$B/kvpool" --pool "$POOL" put "k$i" "$T/v" || fail "put k$i"
done
# every value demoted (--dram-high 0): DRAM entries go to 0
demoted() { [ "$(prom 'kvpool_medium_state{tier="SSD",state="entries"}')" = 6 ]; }
wait_for 30 demoted || {
	cat "$T/agent.log"
	"$B/kvpool" --pool "$POOL" stat
	fail "values were not demoted"
}
for i in 1 2 3; do
	"$B/kvpool" --pool "$POOL" get "k$i" "$T/out" || fail "get k$i"
	cmp -s "$T/v" "$T/out" || fail "k$i read back wrong"
done
"$B/kvpool" --pool "$POOL" get nope "$T/out" 2>/dev/null && fail "a miss succeeded"
"$B/kvpool" --pool "$POOL" exists k1 k2 k9 >/dev/null

# an engine adapter's counters (kvp_ns_count) in two namespaces, one
# named with what a label must escape: one series per namespace and event
ns_rows=0
if command -v python3 >/dev/null 2>&1; then
	KVPOOL_LIBRARY=$B/libkvpool.so.1 PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 python3 -c '
import sys, kvpool
with kvpool.Pool(sys.argv[1], namespace="m\\x \"q\"\nz") as a, kvpool.Pool(sys.argv[1], namespace="plain") as b:
    assert a.count("hit_keys", 3) and a.count("load_bytes", 1 << 33) and b.count("refused")
' "$POOL" || fail "Pool.count"
	ns_rows=2
else
	echo "SKIP namespace counters: python3 not installed"
fi
"$B/kvpool" --pool "$POOL" stat --json >"$T/stat.json" || fail "stat --json"
jq -e . "$T/stat.json" >/dev/null || fail "stat --json does not parse"
curl -sf "http://127.0.0.1:$MPORT/metrics" >"$T/scrape" || fail "scrape"
if command -v promtool >/dev/null 2>&1; then
	promtool check metrics <"$T/scrape" || fail "promtool check metrics"
else
	echo "SKIP promtool check: promtool not installed (apt-get install prometheus)"
fi

# key in the JSON = series in the scrape (the pool is idle: same numbers)
bad=0
check() {
	j=$(jq -r ".$1" "$T/stat.json")
	p=$(awk -v s="$2" 'index($0, s " ") == 1 { print $2; exit }' "$T/scrape")
	if [ -z "$p" ] || [ "$(awk -v a="$j" -v b="$p" 'BEGIN { print (a == b) }')" != 1 ]; then
		echo "MISMATCH .$1 = $j, $2 = $p"
		bad=1
	else
		echo "ok  .$1 = $2 = $p"
	fi
}
check put 'kvpool_ops_total{op="put"}'
check get 'kvpool_ops_total{op="get"}'
check exists 'kvpool_ops_total{op="exists"}'
check put_bytes 'kvpool_op_bytes_total{op="put",tier="DRAM"}'
check get_ssd_bytes 'kvpool_op_bytes_total{op="get",tier="SSD"}'
check get_miss 'kvpool_resolve_total{tier="DRAM",status="miss"}'
check resolve_ok 'kvpool_resolve_total{tier="SSD",status="ok"}'
check resolve_failed 'kvpool_resolve_total{tier="SSD",status="failed"}'
check exists_hit_ssd 'kvpool_op_hits_total{op="exists",tier="SSD"}'
check entries 'kvpool_index_entries{state="ready"}'
check ssd_entries 'kvpool_medium_state{tier="SSD",state="entries"}'
check dram_entries 'kvpool_medium_state{tier="DRAM",state="entries"}'
check dram_bytes_total 'kvpool_medium_state{tier="DRAM",state="bytes_total"}'
check ssd_bytes_used 'kvpool_medium_state{tier="SSD",state="bytes_used"}'
check staging_pages_peak 'kvpool_medium_state{tier="SSD",state="staging_pages_peak"}'
check staging_pages_in_use 'kvpool_medium_state{tier="SSD",state="staging_pages_in_use"}'
check demotions 'kvpool_medium_events_total{tier="DRAM",event="demotion"}'
check busy_rejects 'kvpool_medium_events_total{tier="SSD",event="busy_reject"}'
check ssd_write_bytes 'kvpool_ssd_bytes_total{direction="write"}'
check latency.get_SSD.count 'kvpool_op_duration_seconds_count{op="get",tier="SSD"}'
check latency.put_DRAM.count 'kvpool_op_duration_seconds_count{op="put",tier="DRAM"}'
if [ $ns_rows = 2 ]; then
	[ "$(jq '.namespaces | length' "$T/stat.json")" = 2 ] || fail "namespace rows"
	check 'namespaces[] | select(.ns == "plain") | .refused' "kvpool_namespace_events_total{namespace=\"plain\",ns_id=\"$(jq -r '.namespaces[] | select(.ns == "plain") | .ns_id' "$T/stat.json")\",event=\"refused\"}"
	[ "$(jq '.namespaces[] | select(.ns != "plain") | .load_bytes' "$T/stat.json")" = 8589934592 ] || fail "load_bytes"
	# the escaped label: backslash, quote and newline as the format says
	grep -q '^kvpool_namespace_events_total{namespace="m\\\\x \\"q\\"\\nz",ns_id="[0-9a-f]*",event="hit_keys"} 3$' "$T/scrape" ||
		{ grep kvpool_namespace_ "$T/scrape"; fail "the escaped namespace label"; }
fi
[ $bad = 0 ] || fail "kvpool stat --json and /metrics disagree"
# the workload itself: 6 puts, 4 gets (3 off SSD, 1 miss), 3 SSD-resident
[ "$(jq .put "$T/stat.json")" = 6 ] || fail "put count"
[ "$(jq .resolve_ok "$T/stat.json")" = 3 ] || fail "resolve ok"
[ "$(jq .get_miss "$T/stat.json")" = 1 ] || fail "get miss"
[ "$(jq .exists_hit_ssd "$T/stat.json")" = 2 ] || fail "exists hits"

# kvpool top, non-interactively: two frames
"$B/kvpool" --pool "$POOL" top --count 2 --interval 0.2 >"$T/top" || fail "top"
[ "$(grep -c '^kvpool top' "$T/top")" = 2 ] || { cat "$T/top"; fail "top frames"; }
grep -q '^hit ratio' "$T/top" || fail "top: no hit ratio"
grep -q '^SSD ' "$T/top" || fail "top: no SSD line"
# the human table and the client table
"$B/kvpool" --pool "$POOL" stat | grep -q '^DRAM ' || fail "stat table"
"$B/kvpool" --pool "$POOL" clients | head -1 | grep -q 'leases' || fail "clients header"
if grep -q ' ERROR ' "$T/agent.log"; then cat "$T/agent.log"; fail "error lines in the log"; fi
echo "ok: stat --json matches /metrics"
