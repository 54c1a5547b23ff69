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
#  4. leases shorter than a transfer (node 3 grants 1 ms leases): renewed
#     while the bytes move; right bytes or FAILED, never wrong ones
#  5. node 3's agent killed mid-batch: node 2's reader gets clean statuses
#     (no wrong byte, no hang) and node 3 leaves the directory within the
#     TTL; restarted on its segment, it serves its pages again
#  6. garbage in a client's mailbox: every call answered, the agent lives
#  7. Redis stopped: node 2's local puts and hits keep working, remote
#     lookups answer MISS at once; Redis back: remote reads work again
#  8. garbage node entries of every kind (issue 25, 4): no agent dies, the
#     good nodes keep serving, each bad peer is logged once
#  9. a key deleted and put again within one publish interval (and across
#     passes) stays in the directory; a restarted agent takes its own name
#     back at once; a republish swaps the hash in whole (never empty)
# 10. Redis error replies (WRONGTYPE, OOM) are counted, logged once, and
#     nothing counts as published that was not
# 11. a second agent with the same --node: the clash is reported, the
#     first's entries are intact
# 12. a clean stop leaves the directory at once; kvpool check on each pool
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
kc_net 4 || { echo "cannot build the namespaces"; exit 1; }
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

echo "== 4. leases shorter than a transfer (node 3: 1 ms)"
# the owner renews a send's lease while the peer takes the bytes (a lease
# that lapsed between two renewals leaves bytes the CRC refuses): right
# bytes or FAILED, never wrong ones
kc_node 3 put m1 ls 0 10 4194304 >/dev/null
kc_node 2 wait m1 ls 0 10 5000 >/dev/null
r=$(kc_node 2 get m1 ls 0 10 4194304); echo "node2 $r"
[ "$(field wrong "$r")" = 0 ] && [ $(( $(field ok "$r") + $(field failed "$r") )) = 10 ] ||
	fail "1 ms leases: $r"

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

echo "== 8. garbage node entries in the directory (issue 25, item 4)"
# fake members whose node entries are garbage of every kind: random
# bytes, truncated and bit-flipped copies of a real worker address, huge
# values, wrong types, bad numbers and names.  Each carries node 2's real
# secret and protocol, so only the field under test is wrong.  No agent may
# die, the good nodes keep serving each other, and each bad peer is
# logged once.
real=$(kc_redis hget kvpool:node:node2 addr)
sec2=$(kc_redis hget kvpool:node:node2 secret)
proto2=$(kc_redis hget kvpool:node:node2 proto)
[ ${#real} -gt 40 ] || fail "node 2's address is not in the directory: '$real'"
alen=${#real}
nfake=0
fakes=
: >"$KC_DIR/fakes"
# fake NAME FIELD VALUE...: a member NAME whose node entry is node 2's
# with the given fields replaced (commands for one redis-cli, below:
# values are hex or words; redis-cli reads "\xHH" in double quotes)
fake() {
	fn=$1; shift
	{
		echo "del kvpool:node:$fn"
		echo "hset kvpool:node:$fn addr $real secret $sec2 proto $proto2" \
			"pool p capacity 4096 inc $((7000 + nfake))"
		[ $# = 0 ] || echo "hset kvpool:node:$fn $*"
		echo "sadd kvpool:members $fn"
	} >>"$KC_DIR/fakes"
	nfake=$((nfake + 1))
	fakes="$fakes $fn"
}
# flip HEX POS TABLE: HEX with the digit at POS (0-based) mapped through
# TABLE (a permutation of the 16 digits)
flip() {
	echo "$1" | awk -v p="$2" -v t="$3" '{ d = "0123456789abcdef";
		c = substr($0, p + 1, 1); i = index(d, c);
		print substr($0, 1, p) substr(t, i, 1) substr($0, p + 2) }'
}
randhex() { head -c "$1" /dev/urandom | od -An -v -tx1 | tr -d ' \n'; }
# (fewer than the 64 peers an agent keeps: an address UCX takes is a
# peer, if one nobody answers at)
for pos in 0 1 2 3 4 5 6 7 8 12 16 24 32 48 $((alen / 2)) $((alen - 2)) $((alen - 1)); do
	[ "$pos" -lt "$alen" ] || continue
	fake "flipa$pos" addr "$(flip "$real" "$pos" 89abcdef01234567)"
	[ "$pos" -gt 8 ] || fake "flipb$pos" addr "$(flip "$real" "$pos" 1032547698badcfe)"
done
for cut in 2 4 8 16 32 $((alen / 2)) $((alen - 8)) $((alen - 2)); do
	fake "trunc$cut" addr "$(echo "$real" | cut -c1-"$cut")"
done
fake rand16 addr "$(randhex 16)"
fake rand64 addr "$(randhex 64)"
fake rand512 addr "$(randhex 512)"
fake longer addr "${real}00ff00ff"
fake oddlen addr "${real}0"
fake nonhex addr "zz${real}"
fake upper addr "$(echo "$real" | tr a-f A-F)"
fake empty addr '""'
fake secshort secret abcd
fake seclong secret "${sec2}00"
fake secnonhex secret "$(echo "$sec2" | cut -c2-)g"
fake incword inc twelve
fake inctail inc 12abc
fake incneg inc -5
fake inczero inc 0
fake incbig inc 99999999999999999999999
fake incspace inc '" 12"'
fake capword capacity lots
fake caphuge capacity 184467440737095516160
fake protobin proto '"2\x00"'
fake protolong proto "$(randhex 40)"
fake poolbin pool '"a\tb"'
fake noaddr
echo "hdel kvpool:node:noaddr addr" >>"$KC_DIR/fakes"
cat >>"$KC_DIR/fakes" <<-'END'
	del kvpool:node:strtype kvpool:node:listtype
	set kvpool:node:strtype garbage
	rpush kvpool:node:listtype a b c
	sadd kvpool:members strtype listtype "bad name" "x%s%n" "ctl\x01"
END
longname=$(head -c 100 /dev/zero | tr '\0' n)
echo "sadd kvpool:members $longname" >>"$KC_DIR/fakes"
fakes="$fakes strtype listtype"
kc_redis <"$KC_DIR/fakes" >/dev/null
# fakex NAME FILE: an address of any bytes and any size (through -x)
fakex() {
	kc_redis del "kvpool:node:$1" >/dev/null
	kc_redis -x hset "kvpool:node:$1" addr <"$2" >/dev/null
	kc_redis hset "kvpool:node:$1" secret "$sec2" proto "$proto2" \
		inc 6999 >/dev/null
	kc_redis sadd kvpool:members "$1" >/dev/null
	nfake=$((nfake + 1))
	fakes="$fakes $1"
}
head -c 300 /dev/urandom >"$KC_DIR/bin"
fakex binary "$KC_DIR/bin"
randhex 600000 >"$KC_DIR/huge"
fakex huge "$KC_DIR/huge"
# every fake judged by every agent: one line per fake in each log
judged() {
	kill -0 "$(kc_agent_pid "$1")" 2>/dev/null || return 0
	for f in $fakes; do
		grep -q "peer $f[: ]" "$KC_LOGDIR/kvpt.$(kc_pool "$1").log" || return 1
	done
}
for n in 1 2 3; do
	kc_wait 60 judged "$n" || fail "node $n did not judge every fake entry (or died)"
done
# two markers judged later: every member was read again in between
for m in mark1 mark2; do
	: >"$KC_DIR/fakes"
	fake "$m" inc notanumber
	kc_redis <"$KC_DIR/fakes" >/dev/null
	for n in 1 2 3; do
		kc_wait 20 sh -c "grep -q 'peer $m: ' '$KC_LOGDIR/kvpt.$(kc_pool "$n").log'" ||
			fail "node $n did not judge $m"
	done
done
for n in 1 2 3; do
	kill -0 "$(kc_agent_pid "$n")" 2>/dev/null || fail "node $n's agent died of a garbage node entry"
done
for n in 1 2 3; do
	for f in $fakes; do
		c=$(grep -c "peer $f: node entry refused" "$KC_LOGDIR/kvpt.$(kc_pool "$n").log")
		[ "$c" -le 1 ] || fail "node $n logged the bad entry of $f $c times"
	done
done
echo "refused on node 2: $(grep -c 'node entry refused' "$KC_LOGDIR/kvpt.$(kc_pool 2).log") of $nfake fakes; bad peers now $(stat 2 bad_peers)"
[ "$(stat 2 bad_peers)" -gt 30 ] 2>/dev/null || fail "bad peers not counted: $(stat 2 bad_peers)"
r=$(kc_node 1 put m1 gb 0 20 65536); echo "node1 $r"
r=$(kc_node 2 wait m1 gb 0 20 10000); echo "node2 $r"
r=$(kc_node 2 get m1 gb 0 20 65536); echo "node2 $r"
[ "$(field ok "$r")" = 20 ] && [ "$(field wrong "$r")" = 0 ] || fail "node 2 reads node 1 among garbage: $r"
r=$(kc_node 2 put m1 gc 0 20 65536)
r=$(kc_node 3 wait m1 gc 0 20 10000); echo "node3 $r"
r=$(kc_node 3 get m1 gc 0 20 65536); echo "node3 $r"
[ "$(field ok "$r")" = 20 ] && [ "$(field wrong "$r")" = 0 ] || fail "node 3 reads node 2 among garbage: $r"
for f in $fakes mark1 mark2; do
	kc_redis del "kvpool:node:$f" >/dev/null
	kc_redis srem kvpool:members "$f" >/dev/null
done
kc_redis srem kvpool:members "bad name" "x%s%n" "$(printf 'ctl\001')" \
	"$longname" >/dev/null
[ "$(kc_redis scard kvpool:members)" -le 3 ] || fail "fakes left: $(kc_redis smembers kvpool:members | tr '\n' ' ')"

echo "== 9. delete and re-put within one publish interval (issue 25, item 5)"
# node 3 again with a 60 s TTL: it compares its hash's length with what it
# published only every 20 s, so a key the directory lost stays lost here
kc_agent_stop 3
KC_TTL=60000 KC_DRAM=512M kc_agent 3 --cluster-publish-ms 200 || fail "node 3's agent did not restart"
r=$(kc_node 3 put m1 rp 0 50 65536); echo "node3 $r"
r=$(kc_node 2 wait m1 rp 0 50 10000); echo "node2 $r"
[ "$(field remote "$r")" = 50 ] || fail "node 3's pages are not in the directory: $r"
p0=$(stat 3 published)
r=$(kc_node 3 reput m1 rp 0 50 65536); echo "node3 $r"
[ "$(field ok "$r")" = 50 ] || fail "re-put: $r"
# the passes that saw the re-puts are over once all 50 are published
pub3() { [ "$(stat 3 published)" -ge $((p0 + 50)) ]; }
kc_wait 10 pub3 || fail "node 3 did not publish its re-puts"
r=$(kc_node 2 wait m1 rp 0 50 3000); echo "node2 $r"
[ "$(field remote "$r")" = 50 ] || fail "a delete and re-put in one interval unpublished a present key: $r"
# many passes: deletes and re-puts spread over several of them
r=$(kc_node 3 reput m1 rp 0 50 65536 100); echo "node3 $r"
r=$(kc_node 2 wait m1 rp 0 50 5000); echo "node2 $r"
[ "$(field remote "$r")" = 50 ] || fail "re-puts across passes unpublished present keys: $r"
r=$(kc_node 2 get m1 rp 0 50 65536); echo "node2 $r"
[ "$(field ok "$r")" = 50 ] && [ "$(field wrong "$r")" = 0 ] || fail "re-put pages read from node 2: $r"
# killed and restarted at once on its segment: its claim on the name is
# still in Redis (60 s), and it is its own: it takes it back at once
kc_agent_stop 3 KILL
KC_TTL=60000 KC_DRAM=512M kc_agent 3 --cluster-publish-ms 200 || fail "node 3's agent did not restart"
up3() { [ "$(stat 3 state)" = up ]; }
kc_wait 10 up3 || fail "node 3 did not take its own name back: $(stat 3 state)"
[ "$(stat 3 name_clash)" = 0 ] || fail "node 3 saw its own claim as a clash"
# a republish (node 1's hash has a field it did not publish) replaces the
# hash in one step: never deleted, never empty
kc_redis monitor >"$KC_DIR/monitor" 2>&1 &
mon=$!
kc_wait 10 sh -c "grep -q OK '$KC_DIR/monitor'" || fail "redis-cli monitor did not start"
kc_redis hset kvpool:dir:node1 bogus 1 >/dev/null
nobogus() { [ "$(kc_redis hexists kvpool:dir:node1 bogus)" = 0 ]; }
kc_wait 10 nobogus || fail "node 1 did not republish"
kill "$mon"; wait "$mon" 2>/dev/null
grep -E '"(DEL|UNLINK|HDEL)" "kvpool:dir:node1"' "$KC_DIR/monitor" | head -3 | grep . &&
	fail "a republish deleted node 1's hash (readers saw it empty)"
grep -q '"RENAME" "kvpool:dir:node1:new" "kvpool:dir:node1"' "$KC_DIR/monitor" ||
	fail "node 1's republish did not swap in its new hash"
r=$(kc_node 2 get m1 gb 0 20 65536); echo "node2 $r"
[ "$(field ok "$r")" = 20 ] || fail "after node 1's republish: $r"

echo "== 10. Redis error replies (issue 25, item 7)"
log1=$KC_LOGDIR/kvpt.$(kc_pool 1).log
# WRONGTYPE: node 1's directory key is a string
l0=$(grep -c WRONGTYPE "$log1")
e0=$(stat 1 dir_errors)
kc_redis set kvpool:dir:node1 notahash >/dev/null
r=$(kc_node 1 put m1 wt 0 10 65536); echo "node1 $r"
errs1() { [ "$(stat 1 dir_errors)" -gt "$1" ]; }
kc_wait 10 errs1 "$e0" || fail "a WRONGTYPE reply was not counted as a directory error"
[ "$(grep -c WRONGTYPE "$log1")" -gt "$l0" ] || fail "a WRONGTYPE reply was not logged"
# it repairs its hash (replaces the string) and publishes
r=$(kc_node 2 wait m1 wt 0 10 20000); echo "node2 $r"
[ "$(field remote "$r")" = 10 ] || fail "node 1 did not publish after the WRONGTYPE: $r"
[ "$(grep -c WRONGTYPE "$log1")" -le $((l0 + 1)) ] || fail "WRONGTYPE logged more than once"
# OOM: Redis refuses every write; nothing counts as published
l0=$(grep -c OOM "$log1")
kc_redis config set maxmemory-policy noeviction >/dev/null
kc_redis config set maxmemory 1 >/dev/null
e0=$(stat 1 dir_errors)
p0=$(stat 1 published)
r=$(kc_node 1 put m1 oom 0 10 65536); echo "node1 $r"
kc_wait 10 errs1 $((e0 + 1)) || fail "OOM replies were not counted as directory errors"
p1=$(stat 1 published)
kc_redis config set maxmemory 0 >/dev/null
[ "$p1" = "$p0" ] || fail "pages counted as published while Redis refused them ($p0 -> $p1)"
[ "$(grep -c OOM "$log1")" = $((l0 + 1)) ] || fail "OOM not logged exactly once: $(grep -c OOM "$log1")"
r=$(kc_node 2 wait m1 oom 0 10 20000); echo "node2 $r"
[ "$(field remote "$r")" = 10 ] || fail "node 1 did not publish after the OOM: $r"

echo "== 11. two agents with the same --node (issue 25, item 7)"
addr1=$(kc_redis hget kvpool:node:node1 addr)
h1=$(kc_redis hlen kvpool:dir:node1)
kc_agent 4 --node node1 || fail "node 4's agent did not start"
clash4() { [ "$(stat 4 name_clash)" -ge "$1" ] 2>/dev/null; }
kc_wait 15 clash4 1 || fail "the second agent named node1 did not report a clash: $(stat 4 name_clash)"
grep -q "node name 'node1' is taken" "$KC_LOGDIR/kvpt.$(kc_pool 4).log" || fail "no clash in node 4's log"
[ "$(stat 4 state)" = clash ] || fail "node 4's state: $(stat 4 state)"
kc_node 4 put m1 imp 0 5 4096 >/dev/null
c=$(stat 4 name_clash)
kc_wait 15 clash4 $((c + 1)) || fail "node 4 does not keep retrying its claim"
[ "$(kc_redis hget kvpool:node:node1 addr)" = "$addr1" ] || fail "the second agent wrote node 1's node entry"
[ "$(kc_redis hlen kvpool:dir:node1)" = "$h1" ] || fail "node 1's directory changed under the clash: $h1 -> $(kc_redis hlen kvpool:dir:node1)"
r=$(kc_node 2 get m1 gb 0 20 65536); echo "node2 $r"
[ "$(field ok "$r")" = 20 ] && [ "$(field wrong "$r")" = 0 ] || fail "node 1's pages during the clash: $r"
kc_agent_stop 4
[ "$(kc_redis exists kvpool:node:node1 kvpool:dir:node1)" = 2 ] || fail "the second agent's stop removed node 1's entries"

echo "== 12. clean stop, check"
for n in 1 2; do
	kc_in "$n" "$KC_BIN/kvpool" --pool "$(kc_pool "$n")" check >"$KC_DIR/check$n" 2>&1 ||
		{ fail "kvpool check on node $n"; cat "$KC_DIR/check$n"; }
done
kc_agent_stop 1
[ "$(kc_redis exists kvpool:node:node1 kvpool:dir:node1 2>/dev/null)" = 0 ] ||
	fail "node 1's entries stayed after its clean stop"
kc_agent_stop 2
for n in 1 2 3 4; do
	grep -E "AddressSanitizer|runtime error|LeakSanitizer|ThreadSanitizer" "$KC_LOGDIR/kvpt.$(kc_pool "$n").log" &&
		fail "sanitizer report in node $n's log"
done
[ $fails = 0 ] || { echo "$fails failures"; exit 1; }
echo "all cluster checks passed"
