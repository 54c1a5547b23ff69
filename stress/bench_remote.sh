#!/bin/sh
# stress/bench_remote.sh - the remote tier's figures, measured in one run
# on one link (two nodes: network namespaces joined by veth through a
# bridge, UCX over TCP, Redis in node 1; tests/cluster/cluster_env.sh):
#
#  1. remote get throughput, 1 MiB pages: node 2 reads, in batches of 64,
#     pages that only node 1 holds (each batch's pages are deleted on node
#     2 after it, so every batch crosses the link; the figure is what the
#     caller sees: directory, leases, transfer, the put into node 2's pool
#     and the copy out), against ucx_perftest -s 1 MiB between the same
#     two namespaces with the same UCX settings: ucp_am_bw (active
#     messages, what kvpool's owners send the bytes with) and ucp_get
#     (one get in flight, its default; and -O 4), the better median is the
#     reference.  Goal: >= 0.8x.
#  2. directory round trips per batch: the agent's counter around batches
#     of 1, 64, 500 and 2,000 keys (one mailbox call each).
#  3. local hits with the cluster on and off: the same pool size, 64 KiB
#     pages, batch gets of 256 keys that all hit locally (best of 3).
#
#   stress/bench_remote.sh [--quick] [--out FILE]
# --quick: small counts (the default test run's smoke run); the figures
# are then not the ones docs/performance.md quotes.
set -u
cd "$(dirname "$0")/.." || exit 2
quick=0 out=
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1 ;;
	--out) out=$2; shift ;;
	*) echo "usage: stress/bench_remote.sh [--quick] [--out FILE]"; exit 2 ;;
	esac
	shift
done
. tests/cluster/cluster_env.sh
kc_can_run || exit $?
command -v ucx_perftest >/dev/null || { echo "SKIP no ucx_perftest (ucx-utils)"; exit 77; }
command -v jq >/dev/null || { echo "SKIP no jq"; exit 77; }
[ -x "$KC_BIN/cluster_node" ] || { echo "SKIP $KC_BIN/cluster_node not built"; exit 77; }
trap kc_cleanup EXIT
trap 'exit 1' INT TERM
if [ $quick = 1 ]; then
	NPAGES=64 ROUNDS=1 PTN=200 HITR=20 DRAM=256M
else
	NPAGES=512 ROUNDS=5 PTN=2000 HITR=200 DRAM=1G
fi
say() { echo "$*"; [ -z "$out" ] || echo "$*" >>"$out"; }
field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
stat() { "$KC_BIN/kvpool" --pool "$(kc_pool "$1")" stat --json 2>/dev/null | jq -r "$2"; }
populated() { [ "$(stat "$1" .dram_bytes_populated)" = "$(stat "$1" .dram_bytes_total)" ]; }

kc_net 2 || exit 1
kc_redis_start || exit 1
KC_DRAM=$DRAM kc_agent 1 || exit 1
KC_DRAM=$DRAM kc_agent 2 || exit 1
kc_wait 120 populated 1 && kc_wait 120 populated 2 || { echo "pools not populated"; exit 1; }
say "# stress/bench_remote.sh $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) CPUs, $(uname -r), UCX_TLS=$UCX_TLS, veth"
redis_mem() { kc_redis info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p'; }
mem0=$(redis_mem)

# 1. throughput
best=0
# ucx_perftest's server listens on TCP port 13337 (its default)
pt_listening() { kc_in 1 ss -ltn 2>/dev/null | grep -q ':13337 '; }
# pt TEST [ARGS]: one ucx_perftest run of TEST, 1 MiB messages (MB/s)
pt() {
	t=$1; shift
	kc_in 1 timeout 120 ucx_perftest -t "$t" -s 1048576 -n "$PTN" "$@" >/dev/null 2>&1 &
	srv=$!
	kc_wait 10 pt_listening || { echo 0; return; }
	r=$(kc_in 2 timeout 120 ucx_perftest "$(kc_ip 1)" -t "$t" -s 1048576 -n "$PTN" "$@" 2>/dev/null |
		awk '/^Final:/ { print $(NF-3) }')
	wait $srv
	echo "${r:-0}"
}
# the median of a list of numbers
med() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
pts1= pts4= ptsa=
for _ in 1 2 3; do
	pts1="$pts1 $(pt ucp_get)"
	pts4="$pts4 $(pt ucp_get -O 4)"
	ptsa="$ptsa $(pt ucp_am_bw)"
done
# shellcheck disable=SC2086
pt1=$(med $pts1) pt4=$(med $pts4) pta=$(med $ptsa)
say "ucx_perftest 1 MiB, 3 runs each: ucp_am_bw:$ptsa MB/s (median $pta); ucp_get 1 in flight:$pts1 MB/s (median $pt1); ucp_get -O 4:$pts4 MB/s (median $pt4)"
ref=$(printf '%s\n' "$pt1" "$pt4" "$pta" | sort -n | tail -1)
r=$(kc_node 1 put b p 0 "$NPAGES" 1048576)
[ "$(field ok "$r")" = "$NPAGES" ] || { echo "node 1 put: $r"; exit 1; }
kc_node 2 wait b p 0 "$NPAGES" 10000 >/dev/null
# one reader process, ROUNDS + 1 rounds: round 0 is the warm-up (this
# process maps the arena page by page as it first reads it; the agent's
# own mapping too), reported apart
kc_node 2 bench b p 0 "$NPAGES" 1048576 64 $((ROUNDS + 1)) >"$KC_DIR/bench.out"
all=
while read -r r; do
	[ "$(field ok "$r")" = "$NPAGES" ] || { echo "remote gets: $r"; exit 1; }
	g=$(echo "$(field gbps "$r") * 1000" | bc)
	if [ "$(field round "$r")" = 0 ]; then
		say "kvpool remote get 1 MiB, batches of 64: warm-up round: $g MB/s"
		continue
	fi
	say "kvpool remote get 1 MiB, batches of 64: round $(field round "$r"): $g MB/s ($(field secs "$r") s in gets for $NPAGES pages)"
	all="$all $g"
done <"$KC_DIR/bench.out"
# shellcheck disable=SC2086
mid=$(med $all)
say "remote 1 MiB get: kvpool $mid MB/s (median of $ROUNDS rounds) vs ucx_perftest $ref MB/s (the best median) = $(echo "scale=2; $mid / $ref" | bc)x (goal >= 0.8x); vs ucp_am_bw: $(echo "scale=2; $mid / $pta" | bc)x; vs one get in flight: $(echo "scale=2; $mid / $pt1" | bc)x"

# 2. directory round trips per batch
kc_node 1 put b q 0 2565 4096 >/dev/null
kc_node 2 wait b q 0 2565 10000 >/dev/null
from=0
for n in 1 64 500 2000; do
	a=$(stat 2 .remote.dir_roundtrips)
	r=$(kc_node 2 get b q $from $n 4096 $n)
	b=$(stat 2 .remote.dir_roundtrips)
	say "directory round trips for a batch of $n keys ($(field ok "$r") fetched): $((b - a))"
	from=$((from + n))
done
fields=$(( $(kc_redis hlen kvpool:dir:node1) + $(kc_redis hlen kvpool:dir:node2) ))
mem1=$(redis_mem)
say "directory memory: $fields pages published, Redis used_memory grew $((mem1 - mem0)) bytes: $(( (mem1 - mem0) / fields )) bytes a page ($(( (mem1 - mem0) / fields )) MB per million pages)"
say "directory round trip (last lookup): $(stat 2 .remote.dir_rtt_ns) ns; publish lag bound (last/max): $(stat 1 .remote.publish_lag_ns)/$(stat 1 .remote.publish_lag_max_ns) ns"

# 3. local hits, cluster on and off
hits() {
	b=0
	for _ in 1 2 3; do
		r=$(kc_node 2 hits b h 0 256 65536 "$HITR")
		g=$(field gbps "$r")
		b=$(echo "if ($g > $b) $g else $b" | bc)
	done
	echo "$b"
}
kc_node 2 put b h 0 256 65536 >/dev/null
on=$(hits)
kc_agent_stop 2
kc_agent_stop 1
rm -f "/dev/shm/kvpool.$(kc_pool 2)"
ip netns exec "${KC_NS}n2" "$KC_BIN/kvpoold" --foreground --pool "$(kc_pool 2)" --metrics-addr off \
	--populate-threads 1 --dram "$DRAM" >>"$KC_LOGDIR/kvpt.$(kc_pool 2).log" 2>&1 &
KC_AGENT2=$!
kc_wait 30 populated 2 || { echo "node 2 without the cluster did not start"; exit 1; }
kc_node 2 put b h 0 256 65536 >/dev/null
off=$(hits)
say "local hits, 64 KiB x 256 per batch: cluster on $on GB/s, off $off GB/s ($(echo "scale=2; $on / $off" | bc)x)"
