# tests/cluster/cluster_env.sh - a cluster of kvpool nodes on this machine,
# for tests/cluster/test_cluster.sh and stress/bench_remote.sh (sourced).
#
# Each node is a network namespace of its own with one veth into a bridge
# that lives in a hub namespace of its own: every address is inside
# namespaces this file made (10.<a>.<b>.N/24, a subnet picked from the
# pid), nothing touches the host's network.  Node N runs its own kvpoold
# on its own pool ($KC_POOL<N>); Redis runs in node 1.  UCX is told to use
# TCP (UCX_TLS=tcp), so bytes between nodes cross the veth link, not
# shared memory.  kc_cleanup (trap it) removes all of it.
#
# Needs root, ip (iproute2), redis-server; kc_can_run says why not.
# a tag of this run: two runs under one test run (release, then ASan
# agents) must not share pool names, logs or counts
KC_TAG=${KVPT_RUN:+$KVPT_RUN.}c$$
KC_ID=$$
KC_NS=kvc$(( KC_ID % 100000 ))
KC_NET=10.$(( 100 + KC_ID % 100 )).$(( KC_ID / 100 % 250 ))
KC_REDIS_PORT=6391
KC_DIR=${KC_DIR:-$(mktemp -d /tmp/kvpt-cluster-$$.XXXXXX)}
KC_LOGDIR=${KVPT_LOG_DIR:-$KC_DIR}
KC_BIN=${KC_BIN:-build/release}
KC_NODES=0
export UCX_TLS=${KC_UCX_TLS:-tcp}
# UCX warns about every transport it cannot use here; errors still print
export UCX_LOG_LEVEL=${UCX_LOG_LEVEL:-error}

kc_pool() { echo "$KC_TAG.kc$1"; }
kc_ip() { echo "$KC_NET.$1"; }
kc_say() { echo "cluster: $*"; }

# 0 if this machine can run the cluster (else prints why and returns 77)
kc_can_run() {
	[ "$(id -u)" = 0 ] || { echo "SKIP not root: network namespaces need it"; return 77; }
	command -v ip >/dev/null || { echo "SKIP no ip (iproute2)"; return 77; }
	command -v redis-server >/dev/null || { echo "SKIP no redis-server"; return 77; }
	# /run/netns: ip makes it a mount of its own on first use; if this
	# run makes it, kc_cleanup takes it away again (a chroot's cleanup
	# cannot remove a mount point)
	[ -d /run/netns ] && KC_HAD_RUN_NETNS=1 || KC_HAD_RUN_NETNS=0
	ip netns add "${KC_NS}probe" 2>/dev/null || { echo "SKIP ip netns add is refused here"; kc_unrun; return 77; }
	# entering one remounts / (a chroot whose / is not a mount point
	# cannot: that is this machine's limit, not the test's)
	if ! ip netns exec "${KC_NS}probe" true 2>/dev/null; then
		ip netns del "${KC_NS}probe"
		kc_unrun
		echo "SKIP network namespaces cannot be entered here (ip netns exec failed: a chroot?)"
		return 77
	fi
	ip netns del "${KC_NS}probe"
	return 0
}
kc_unrun() {
	[ "${KC_HAD_RUN_NETNS:-1}" = 0 ] || return 0
	umount /run/netns 2>/dev/null
	rmdir /run/netns 2>/dev/null
	return 0
}

# kc_net N: the hub and N node namespaces
kc_net() {
	ip netns add "${KC_NS}h" || return 1
	ip -n "${KC_NS}h" link add br0 type bridge || return 1
	ip -n "${KC_NS}h" link set br0 up
	i=1
	while [ $i -le "$1" ]; do
		ip netns add "${KC_NS}n$i" || return 1
		ip link add "${KC_NS}v$i" type veth peer name "${KC_NS}b$i" || return 1
		ip link set "${KC_NS}v$i" netns "${KC_NS}n$i"
		ip link set "${KC_NS}b$i" netns "${KC_NS}h"
		ip -n "${KC_NS}h" link set "${KC_NS}b$i" master br0 up
		ip -n "${KC_NS}n$i" addr add "$(kc_ip $i)/24" dev "${KC_NS}v$i"
		ip -n "${KC_NS}n$i" link set "${KC_NS}v$i" up
		ip -n "${KC_NS}n$i" link set lo up
		i=$((i + 1))
	done
	KC_NODES=$1
}

# kc_in N CMD...: CMD in node N's namespace
kc_in() { n=$1; shift; ip netns exec "${KC_NS}n$n" "$@"; }

kc_redis_start() {
	ip netns exec "${KC_NS}n1" redis-server --bind "$(kc_ip 1)" --port $KC_REDIS_PORT --save '' \
		--appendonly no --protected-mode no --daemonize no \
		${KC_REDIS_PASS:+--requirepass "$KC_REDIS_PASS"} \
		>"$KC_DIR/redis.log" 2>&1 &
	KC_REDIS_PID=$!
	kc_wait 10 kc_redis_ping || { cat "$KC_DIR/redis.log"; return 1; }
}
kc_redis_ping() {
	kc_in 1 redis-cli -h "$(kc_ip 1)" -p $KC_REDIS_PORT ${KC_REDIS_PASS:+-a "$KC_REDIS_PASS" --no-auth-warning} \
		ping 2>/dev/null | grep -q PONG
}
kc_redis() {
	kc_in 1 redis-cli -h "$(kc_ip 1)" -p $KC_REDIS_PORT ${KC_REDIS_PASS:+-a "$KC_REDIS_PASS" --no-auth-warning} "$@"
}
kc_redis_stop() {
	[ -n "${KC_REDIS_PID:-}" ] || return 0
	kill "$KC_REDIS_PID" 2>/dev/null
	wait "$KC_REDIS_PID" 2>/dev/null
	KC_REDIS_PID=
}

# kc_agent N [ARGS...]: node N's agent (foreground, in the background);
# waits until it serves its segment
kc_agent() {
	n=$1; shift
	pw=
	[ -n "${KC_REDIS_PASS:-}" ] && {
		printf '%s\n' "$KC_REDIS_PASS" >"$KC_DIR/pw"
		chmod 600 "$KC_DIR/pw"
		pw="--cluster-password-file $KC_DIR/pw"
	}
	KC_STARTS=$(grep -c "serving pool '$(kc_pool "$n")'" "$KC_LOGDIR/kvpt.$(kc_pool "$n").log" 2>/dev/null)
	# shellcheck disable=SC2086
	ip netns exec "${KC_NS}n$n" "$KC_BIN/kvpoold" --foreground --pool "$(kc_pool "$n")" --node "node$n" \
		--cluster "redis://$(kc_ip 1):$KC_REDIS_PORT" $pw --metrics-addr off \
		--populate-threads 1 --dram "${KC_DRAM:-256M}" --cluster-ttl-ms "${KC_TTL:-1500}" "$@" \
		>>"$KC_LOGDIR/kvpt.$(kc_pool "$n").log" 2>&1 &
	eval "KC_AGENT$n=$!"
	kc_wait 30 kc_serving "$n"
}
# a start more than the log had before (kc_agent: KC_STARTS)
kc_serving() {
	[ "$(grep -c "serving pool '$(kc_pool "$1")'" "$KC_LOGDIR/kvpt.$(kc_pool "$1").log" 2>/dev/null)" -gt "${KC_STARTS:-0}" ]
}
kc_agent_pid() { eval "echo \${KC_AGENT$1:-}"; }
# kc_agent_stop N [SIG]: and wait for it
kc_agent_stop() {
	p=$(kc_agent_pid "$1")
	[ -n "$p" ] || return 0
	kill -"${2:-TERM}" "$p" 2>/dev/null
	wait "$p" 2>/dev/null
	eval "KC_AGENT$1="
}
# kc_node N OP ARGS...: the cluster test worker on node N's pool
kc_node() { n=$1; shift; op=$1; shift; kc_in "$n" "$KC_BIN/cluster_node" "$op" "$(kc_pool "$n")" "$@"; }

# kc_wait SECS CMD...: wait on a condition (CMD succeeds) with a deadline
# of SECS seconds, polled every 50 ms (tests/install's wait_for)
kc_wait() {
	end=$(( $(date +%s) + $1 )); shift
	while ! "$@"; do
		[ "$(date +%s)" -lt $end ] || return 1
		sleep 0.05
	done
}

kc_cleanup() {
	i=1
	while [ $i -le 8 ]; do
		kc_agent_stop $i KILL
		i=$((i + 1))
	done
	kc_redis_stop
	i=1
	while [ $i -le 8 ]; do
		ip netns del "${KC_NS}n$i" 2>/dev/null
		rm -f "/dev/shm/kvpool.$(kc_pool $i)"
		i=$((i + 1))
	done
	ip netns del "${KC_NS}h" 2>/dev/null
	kc_unrun
	[ -n "${KVPT_LOG_DIR:-}" ] || rm -rf "$KC_DIR"
	case $KC_DIR in /tmp/kvpt-cluster-*) rm -rf "$KC_DIR" ;; esac
}
