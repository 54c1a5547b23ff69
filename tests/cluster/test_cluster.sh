#!/bin/sh
# tests/cluster/test_cluster.sh - three nodes sharing pages (kvpoold
# --cluster): each node a network namespace with its own agent and pool,
# Redis (with a password, from a file) in node 1, UCX over TCP across the
# veth links (tests/cluster/cluster_env.sh).  Every wait has a deadline;
# every read checks its bytes (cluster_node: "wrong" counts differences).
#
#  1. a page put on node 1 is read on node 2 with the right bytes; only in
#     the namespace it was put in; probes count remote pages only when
#     asked (KVP_REMOTE_PROBE), and kvp_batch_locate says REMOTE;
#     lookup_pin fetches and pins
#  2. a 2,000-key batch on node 2 spanning local pages, node 1's DRAM and
#     node 1's SSD (node 1 has 48 MiB of DRAM for 96 MiB of pages): all
#     read, right bytes, one directory round trip for the batch
#  3. a stale directory entry (deleted on the owner, which publishes every
#     300 ms) reads as a MISS
#  4. a lease that runs out (node 3 grants 1 ms leases): FAILED, never
#     wrong bytes
#  5. node 3's agent killed mid-batch: node 2's reader gets clean statuses
#     (no wrong byte, no hang) and node 3 leaves the directory within the
#     TTL; restarted on its segment, it serves its pages again
#  6. garbage in a client's mailbox: every call answered, the agent lives
#  7. Redis stopped: node 2's local puts and hits keep working, remote
#     lookups answer MISS at once; Redis back: remote reads work again
#  8. a clean stop leaves the directory at once; kvpool check on each pool
set -u
cd "$(dirname "$0")/../.." || exit 2
. tests/cluster/cluster_env.sh
kc_can_run || exit $?
command -v redis-cli >/dev/null || { echo "SKIP no redis-cli"; exit 77; }
[ -x "$KC_BIN/cluster_node" ] || { echo "SKIP $KC_BIN/cluster_node not built"; exit 77; }
SSD=$(mktemp -d "/var/tmp/kvpt-kc-$$-XXXXXX")
trap 'kc_cleanup; rm -rf "$SSD"' EXIT
trap 'exit 1' INT TERM
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
# field NAME LINE: the value of NAME=... in a cluster_node line
field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
# stat N KEY: a counter of node N's remote tier (kvpool stat --json)
stat() { "$KC_BIN/kvpool" --pool "$(kc_pool "$1")" stat --json | jq -r ".remote.$2"; }

KC_REDIS_PASS=kvpt-$$-secret
kc_net 3 || { echo "cannot build the namespaces"; exit 1; }
kc_redis_start || { echo "redis did not start"; exit 1; }
KC_DRAM=48M kc_agent 1 --ssd-dir "$SSD" --ssd-size 512M --cluster-publish-ms 300 || { fail "node 1's agent did not start"; exit 1; }
kc_agent 2 || { fail "node 2's agent did not start"; exit 1; }
KC_DRAM=512M kc_agent 3 --remote-lease-ms 1 || { fail "node 3's agent did not start"; exit 1; }
# the password never reaches a command line (the file does)
args1=$(tr '\0' ' ' <"/proc/$(kc_agent_pid 1)/cmdline")
case $args1 in *kvpoold*) ;; *) fail "cannot read node 1's agent's command line: $args1" ;; esac
if echo "$args1" | grep -q "$KC_REDIS_PASS"; then
	fail "the directory's password is on kvpoold's command line"
fi
# all three see each other
peers2() { [ "$(stat 2 peers)" = 2 ]; }
kc_wait 15 peers2 ||
	fail "node 2 does not see 2 peers: $(stat 2 peers)"

echo "== 1. put on node 1, read on node 2"
r=$(kc_node 1 put m1 a 0 100 65536); echo "node1 $r"
t0=$(date +%s.%N)
r=$(kc_node 2 wait m1 a 0 100 5000); echo "node2 $r"
t1=$(date +%s.%N)
[ "$(field remote "$r")" = 100 ] || fail "node 2's probe does not see node 1's 100 pages as remote: $r"
echo "visible on node 2 $(echo "$t1 - $t0" | bc) s after the put returned (publish lag now: $(stat 1 publish_lag_ns) ns)"
r=$(kc_node 2 exists m1 a 0 100); echo "node2 $r"
[ "$(field prefix "$r")" = 0 ] || fail "exists_prefix counted remote pages without KVP_REMOTE_PROBE: $r"
r=$(kc_node 2 get m2 a 0 100 65536); echo "node2 ns m2 $r"
[ "$(field miss "$r")" = 100 ] || fail "a page left its namespace: $r"
r=$(kc_node 2 get m1 a 0 100 65536); echo "node2 $r"
[ "$(field ok "$r")" = 100 ] && [ "$(field wrong "$r")" = 0 ] || fail "remote get: $r"
r=$(kc_node 2 probe m1 a 0 100); echo "node2 $r"
[ "$(field dram "$r")" = 100 ] || fail "fetched pages are not kept on node 2: $r"
kc_node 1 put m1 p 0 50 100000 >/dev/null
kc_node 3 wait m1 p 0 50 5000 >/dev/null
r=$(kc_node 3 pin m1 p 0 50); echo "node3 $r"
[ "$(field pinned "$r")" = 50 ] || fail "lookup_pin did not fetch and pin 50 remote pages: $r"
[ "$(stat 2 bad_mailbox)" = 0 ] || fail "bad mailboxes counted for a good client"
# the Python binding: locate says REMOTE, a get fetches
kc_node 1 put m1 py 0 3 4096 >/dev/null
kc_node 2 wait m1 py 0 3 5000 >/dev/null
if command -v python3 >/dev/null; then
	r=$(kc_in 2 env PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 python3 -c "
import kvpool
keys = ['py-%08d-0123456789abcdef0123456789abcdef0123456789abcdef' % i for i in range(3)]
with kvpool.Pool('$(kc_pool 2)', namespace='m1', remote_probe=True) as p:
    t = p.batch_locate(keys + ['nowhere'])
    v = p.get_bytes(keys[0])
    print('locate', t == [kvpool.TIER_REMOTE] * 3 + [0], 'len', len(v), 'after', p.batch_locate(keys[:1]) == [kvpool.TIER_DRAM])
" 2>&1)
	echo "node2 python: $r"
	[ "$r" = "locate True len 4096 after True" ] || fail "python: $r"
fi

echo "== 2. a 2,000-key batch: local, remote DRAM, remote SSD"
r=$(kc_node 2 put m1 mix 0 500 65536); echo "node2 $r"
r=$(kc_node 1 put m1 mix 500 1500 65536); echo "node1 $r"
[ "$(field ok "$r")" = 1500 ] || fail "node 1 did not take 1500 pages: $r"
r=$(kc_node 1 probe m1 mix 500 1500); echo "node1 $r"
[ "$(field ssd "$r")" -gt 100 ] && [ "$(field dram "$r")" -gt 100 ] ||
	fail "node 1 should hold these pages in DRAM and on SSD: $r"
kc_node 2 wait m1 mix 0 2000 10000 >/dev/null
rt0=$(stat 2 dir_roundtrips)
r=$(kc_node 2 get m1 mix 0 2000 65536 2000); echo "node2 $r"
rt1=$(stat 2 dir_roundtrips)
[ "$(field ok "$r")" = 2000 ] && [ "$(field wrong "$r")" = 0 ] || fail "2,000-key batch: $r"
[ $((rt1 - rt0)) = 1 ] || fail "the batch took $((rt1 - rt0)) directory round trips, not 1"
echo "directory round trips for the batch: $((rt1 - rt0)); node 1 served $(stat 1 served) keys"

echo "== 3. a stale directory entry"
kc_node 1 put m1 st 0 20 65536 >/dev/null
kc_node 2 wait m1 st 0 20 5000 >/dev/null
for i in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19; do
	kc_in 1 "$KC_BIN/kvpool" --pool "$(kc_pool 1)" --ns m1 del "st-$(printf %08d $i)-0123456789abcdef0123456789abcdef0123456789abcdef" >/dev/null
done
r=$(kc_node 2 get m1 st 0 20 65536); echo "node2 $r"
[ "$(field miss "$r")" = 20 ] && [ "$(field wrong "$r")" = 0 ] || fail "deleted pages: $r"
echo "stale entries seen: $(stat 2 stale)"

echo "== 4. leases that run out (node 3: 1 ms)"
kc_node 3 put m1 ls 0 10 4194304 >/dev/null
kc_node 2 wait m1 ls 0 10 5000 >/dev/null
r=$(kc_node 2 get m1 ls 0 10 4194304); echo "node2 $r"
[ "$(field wrong "$r")" = 0 ] && [ "$(field ok "$r")" = 0 ] && [ "$(field failed "$r")" = 10 ] ||
	fail "expired leases: $r"

echo "== 5. node 3's agent killed mid-batch"
# node 3 again, with the default leases (a restart: it re-attaches)
kc_agent_stop 3
KC_DRAM=512M kc_agent 3 || fail "node 3's agent did not restart"
r=$(kc_node 3 put m1 kill 0 400 1048576); echo "node3 $r"
[ "$(field ok "$r")" = 400 ] || fail "node 3 did not take 400 pages: $r"
kc_node 2 wait m1 kill 0 400 5000 >/dev/null
f0=$(stat 2 fetched)
kc_node 2 get m1 kill 0 400 1048576 50 >"$KC_DIR/kill.out" 2>&1 &
reader=$!
# some pages have landed on node 2 (not only been leased on node 3)
fetched2() { [ "$(stat 2 fetched)" -gt $((f0 + 10)) ]; }
kc_wait 10 fetched2
t0=$(date +%s.%N)
kc_agent_stop 3 KILL
if ! kc_wait 30 sh -c "! kill -0 $reader 2>/dev/null"; then
	fail "node 2's reader hangs after node 3 died"
	kill "$reader"
fi
wait "$reader"
r=$(cat "$KC_DIR/kill.out"); echo "node2 $r"
[ "$(field wrong "$r")" = 0 ] && [ "$(field other "$r")" = 0 ] &&
	[ $(( $(field ok "$r") + $(field miss "$r") + $(field failed "$r") + $(field busy "$r") )) = 400 ] ||
	fail "reads during the kill: $r"
[ "$(field ok "$r")" -gt 0 ] && [ "$(field ok "$r")" -lt 400 ] ||
	fail "the kill was not mid-batch (the test proves nothing): $r"
gone3() { [ "$(kc_redis exists kvpool:node:node3 kvpool:dir:node3)" = 0 ]; }
if kc_wait 10 gone3; then
	echo "node 3 left the directory $(echo "$(date +%s.%N) - $t0" | bc) s after its death (TTL ${KC_TTL:-1500} ms)"
else
	fail "node 3's entries are still in the directory"
fi
r=$(kc_node 2 get m1 kill 0 400 1048576 50); echo "node2 after $r"
[ "$(field wrong "$r")" = 0 ] && [ "$(field failed "$r")" = 0 ] || fail "after node 3 left: $r"
# node 3's agent back on the same segment (kill -9 kept it, and its pages):
# it re-attaches, rejoins under a new incarnation, publishes them again
KC_DRAM=512M kc_agent 3 || fail "node 3's agent did not re-attach"
r=$(kc_node 2 wait m1 kill 300 100 10000); echo "node2 $r"
r=$(kc_node 2 get m1 kill 300 100 1048576 25); echo "node2 after the restart $r"
[ "$(field ok "$r")" = 100 ] && [ "$(field wrong "$r")" = 0 ] || fail "after node 3 came back: $r"

echo "== 6. garbage in a mailbox"
r=$(kc_node 2 hostile m1 x 7 60); echo "node2 $r"
[ "$(field answered "$r")" = 60 ] || fail "garbage mailboxes: $r"
[ "$(stat 2 bad_mailbox)" -gt 0 ] || fail "no bad mailbox counted"
kill -0 "$(kc_agent_pid 2)" || fail "node 2's agent died of garbage"
r=$(kc_node 2 get m1 a 0 10 65536); echo "node2 $r"
[ "$(field ok "$r")" = 10 ] || fail "node 2 after the garbage: $r"

echo "== 7. Redis stopped"
kc_redis_stop
r=$(kc_node 2 put m1 loc 0 100 65536); echo "node2 $r"
[ "$(field ok "$r")" = 100 ] || fail "local puts without Redis: $r"
r=$(kc_node 2 get m1 loc 0 100 65536); echo "node2 $r"
[ "$(field ok "$r")" = 100 ] && [ "$(field wrong "$r")" = 0 ] || fail "local hits without Redis: $r"
kc_node 1 put m1 nr 0 10 65536 >/dev/null
t0=$(date +%s.%N)
r=$(kc_node 2 get m1 nr 0 10 65536); echo "node2 $r"
dt=$(echo "$(date +%s.%N) - $t0" | bc)
[ "$(field miss "$r")" = 10 ] || fail "remote lookups without Redis: $r"
[ "$(echo "$dt < 3" | bc)" = 1 ] || fail "a remote lookup without Redis took $dt s"
kc_redis_start || fail "redis did not come back"
r=$(kc_node 2 wait m1 nr 0 10 15000); echo "node2 $r"
r=$(kc_node 2 get m1 nr 0 10 65536); echo "node2 $r"
[ "$(field ok "$r")" = 10 ] && [ "$(field wrong "$r")" = 0 ] || fail "remote reads after Redis came back: $r"

echo "== 8. clean stop, check"
for n in 1 2; do
	kc_in "$n" "$KC_BIN/kvpool" --pool "$(kc_pool "$n")" check >"$KC_DIR/check$n" 2>&1 ||
		{ fail "kvpool check on node $n"; cat "$KC_DIR/check$n"; }
done
kc_agent_stop 1
[ "$(kc_redis exists kvpool:node:node1 kvpool:dir:node1 2>/dev/null)" = 0 ] ||
	fail "node 1's entries stayed after its clean stop"
kc_agent_stop 2
for n in 1 2 3; do
	grep -E "AddressSanitizer|runtime error|LeakSanitizer|ThreadSanitizer" "$KC_LOGDIR/kvpt.$(kc_pool "$n").log" &&
		fail "sanitizer report in node $n's log"
done
[ $fails = 0 ] || { echo "$fails failures"; exit 1; }
echo "all cluster checks passed"
