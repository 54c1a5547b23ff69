# SPDX-License-Identifier: MIT
# tests/gpu/gpu_lib.sh - what the GPU scripts share (bash, sourced with
# the tree's root as the working directory): tests/gpu/test_gpu.sh (the
# functional checks) and stress/gpu_check.sh (the device machine's run:
# those checks, then the figures).
#
# Every step prints one line, "PASS name", "FAIL name: why" or "SKIP
# name: why" (details on indented lines), counted in NPASS, NFAIL, NSKIP.
# The caller sets ROOT, BIN (the programs), LOGDIR, BUDGET (seconds for
# its whole run) and T0 (its start, date +%s) before it uses them.
# Agents started here are stopped, and their segments removed, by
# gpu_cleanup (the callers trap EXIT with it).

NPASS=0
NFAIL=0
NSKIP=0
AGENT_PIDS=
AGENT_POOLS=

pass() {
	echo "PASS $1"
	NPASS=$((NPASS + 1))
}
fail() {
	echo "FAIL $1: $2"
	NFAIL=$((NFAIL + 1))
}
skip() {
	echo "SKIP $1: $2"
	NSKIP=$((NSKIP + 1))
}
info() {
	echo "  $*"
}
# seconds left of the budget, at most $1
left() {
	local l=$((BUDGET - ($(date +%s) - T0)))
	[ "$l" -gt "$1" ] && l=$1
	echo "$l"
}
skip_all() {
	local why=$1 n
	shift
	for n in "$@"; do
		skip "$n" "$why"
	done
}

# ---- the runtime ----

# gpu_find_cudart [DIR]: the CUDA runtime the run uses, into CUDART (empty
# when none): DIR/libcudart.so.13 (the emulator built there), else
# $KVPOOL_CUDART, else the toolkit's (nvcc's, $CUDA_HOME, $CUDA_PATH,
# /usr/local/cuda*, /usr) or the loader's (ldconfig), .so.13 or .so.12;
# CUDA_INC: the toolkit's headers where there are some (for the log)
gpu_find_cudart() {
	local d h l
	CUDART= CUDA_INC=
	if [ -n "${1:-}" ]; then
		d=$(cd "$1" 2>/dev/null && pwd)
		[ -n "$d" ] && [ -f "$d/libcudart.so.13" ] && CUDART=$d/libcudart.so.13
		return 0
	fi
	[ -n "${KVPOOL_CUDART:-}" ] && [ -f "$KVPOOL_CUDART" ] && CUDART=$KVPOOL_CUDART
	for h in $(command -v nvcc >/dev/null 2>&1 && dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")") \
		${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda /usr/local/cuda-13* /usr/local/cuda-12* /usr; do
		[ -f "$h/include/cuda_runtime_api.h" ] || continue
		CUDA_INC=$h/include
		if [ -z "$CUDART" ]; then
			for l in "$h"/lib64/libcudart.so.13 "$h"/targets/*/lib/libcudart.so.13 \
				"$h"/lib/x86_64-linux-gnu/libcudart.so.13 \
				"$h"/lib64/libcudart.so.12 "$h"/targets/*/lib/libcudart.so.12 \
				"$h"/lib/x86_64-linux-gnu/libcudart.so.12; do
				if [ -f "$l" ]; then
					CUDART=$(readlink -f "$l")
					CUDART=$(dirname "$CUDART")/$(basename "$l")
					break
				fi
			done
		fi
		break
	done
	if [ -z "$CUDART" ]; then
		CUDART=$(ldconfig -p 2>/dev/null | awk '/libcudart\.so\.1[32] / { print $NF; exit }')
	fi
	return 0
}

# ---- sizes: what this machine's memory allows ----

# gpu_sizes EMU: MAIN_DRAM (the checks, the bandwidth), REG_DRAM (the
# registration), SSD_DRAM (the SSD path), HBM_DRAM and HBM_SIZE (the HBM
# tier's agent: DRAM for what is copied there, its pool on the GPU)
gpu_sizes() {
	MEM_GIB=$(awk '/MemTotal/ { printf "%d", $2 / 1048576 }' /proc/meminfo)
	SHM_MIB=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { printf "%d", $4 / 1024 }')
	SHM_MIB=${SHM_MIB:-0}
	SHM_GIB=$((SHM_MIB / 1024))
	MAIN_DRAM=2G
	REG_DRAM=2G
	SSD_DRAM=512M
	[ "$MEM_GIB" -ge 32 ] && [ "$SHM_GIB" -ge 24 ] && MAIN_DRAM=8G
	[ "$MEM_GIB" -ge 64 ] && [ "$SHM_GIB" -ge 24 ] && REG_DRAM=16G
	if [ "$SHM_MIB" -lt 5120 ]; then
		# a small /dev/shm (a container's): what fits, main and SSD
		# pools side by side (a hugetlbfs mount, where kvpoold finds
		# one, is not counted)
		MAIN_DRAM=$((SHM_MIB * 2 / 5))M
		REG_DRAM=$MAIN_DRAM
		SSD_DRAM=$((SHM_MIB / 5))M
		info "small /dev/shm: the checks' sizes shrink with it (a pool needs 64M at least)"
	fi
	# a quarter of the HBM pool a bandwidth size, 512 MiB at most
	HBM_SIZE=2G
	HBM_DRAM=2G
	[ "$1" = 1 ] && HBM_SIZE=256M
	[ "$SHM_MIB" -lt 5120 ] && HBM_DRAM=$MAIN_DRAM
	info "RAM ${MEM_GIB} GiB, /dev/shm ${SHM_GIB} GiB free: DRAM tier ${MAIN_DRAM} (checks, bandwidth), ${REG_DRAM} (registration), ${SSD_DRAM} (SSD path), ${HBM_DRAM} with an HBM pool of ${HBM_SIZE} (HBM tier)"
}

# ---- agents ----

# start_agent POOL ARGS...: kvpoold daemonized (returns once ready); 0 or 1
start_agent() {
	local p=$1 out pid
	shift
	out=$(timeout -k 5 60 "$BIN/kvpoold" --pool "$p" --metrics-addr off \
		--reap-ms 50 --log "$LOGDIR/kvpoold.$p.log" "$@" 2>&1)
	pid=$(printf '%s\n' "$out" | sed -n 's/.*ready (pid \([0-9]*\)).*/\1/p' | head -n 1)
	if [ -z "$pid" ]; then
		info "kvpoold --pool $p $*: $(printf '%s' "$out" | tail -n 3 | tr '\n' ' ')"
		tail -n 5 "$LOGDIR/kvpoold.$p.log" 2>/dev/null | sed 's/^/    /'
		remove_segment "$p"
		return 1
	fi
	AGENT_PIDS="$AGENT_PIDS $pid"
	AGENT_POOLS="$AGENT_POOLS $p"
	info "kvpoold pid $pid on pool $p: $*"
	return 0
}

remove_segment() {
	local m
	rm -f "/dev/shm/kvpool.$1"
	awk '$3 == "hugetlbfs" { print $2 }' /proc/mounts 2>/dev/null |
		while read -r m; do
			rm -f "$m/kvpool.$1" 2>/dev/null
		done
}

# stop_agent POOL: SIGTERM, wait up to 30 s (then SIGKILL), remove its
# segment; 0 if it stopped on SIGTERM
stop_agent() {
	local p=$1 pid='' i=0 rc=0 a b np='' npo=''
	# shellcheck disable=SC2086 # a list of pids
	set -- $AGENT_PIDS
	for b in $AGENT_POOLS; do
		a=$1
		shift
		if [ "$b" = "$p" ]; then
			pid=$a
		else
			np="$np $a"
			npo="$npo $b"
		fi
	done
	AGENT_PIDS=$np
	AGENT_POOLS=$npo
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null
		while kill -0 "$pid" 2>/dev/null && [ $i -lt 300 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -KILL "$pid" 2>/dev/null
			rc=1
		fi
	fi
	remove_segment "$p"
	return $rc
}

gpu_cleanup() {
	local p
	for p in $AGENT_POOLS; do
		stop_agent "$p"
	done
}

# run_step "NAMES" TIMEOUT CMD...: run a check program's command; its
# PASS, FAIL and SKIP lines are echoed and counted; a name it did not
# answer (it crashed, or timed out) is a FAIL
run_step() {
	local names=$1 t rc n out=$LOGDIR/step.out missing=0
	shift
	t=$(left "$1")
	shift
	if [ "$t" -lt 10 ]; then
		for n in $names; do
			skip "$n" "out of time (the run's budget is ${BUDGET} s)"
		done
		return
	fi
	timeout -k 5 "$t" "$@" >"$out" 2>&1
	rc=$?
	cat "$out"
	NPASS=$((NPASS + $(grep -c '^PASS ' "$out")))
	NFAIL=$((NFAIL + $(grep -c '^FAIL ' "$out")))
	NSKIP=$((NSKIP + $(grep -c '^SKIP ' "$out")))
	for n in $names; do
		if ! grep -Eq "^(PASS|FAIL|SKIP) $n(:|\$)" "$out"; then
			missing=1
			if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
				fail "$n" "no result: timed out after $t s"
			else
				fail "$n" "no result: the check program exited $rc"
			fi
		fi
	done
	if [ $rc -ne 0 ] && [ $missing = 0 ] && ! grep -q '^FAIL ' "$out"; then
		fail "${names%% *}" "the check program exited $rc with no FAIL line"
	fi
}
