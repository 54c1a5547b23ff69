#!/bin/bash
# SPDX-License-Identifier: MIT
#
# gpu_check.sh - the GPU endpoints (issue 16) and the HBM tier on a machine
# with a GPU, in one run of a few minutes: build the agent, its GPU helper
# (kvpool-gpud), the CLI and stress/bench_gpu.c, start agents on private
# pools, run bench_gpu's checks, stop them.
#
#   stress/gpu_check.sh                  the real CUDA runtime (nvcc on PATH,
#                                        or /usr/local/cuda)
#   stress/gpu_check.sh --cudart DIR     DIR/libcudart.so.13 instead (e.g. the
#                                        emulator tests/gpu/fakecudart.c built
#                                        there): figures are not judged
#
# Every step prints one line, "PASS name", "FAIL name: why" or "SKIP name:
# why" (details on indented lines); no step stops the run; the last line
# counts them and the exit status is non-zero iff a step failed.  Logs
# (build, agents) go under build/gpu_check/.  Agents are stopped and their
# segments removed on any exit.
set -u

cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
CUDART_DIR=
EMU=0
while [ $# -gt 0 ]; do
	case "$1" in
	--cudart)
		[ $# -ge 2 ] || { echo "usage: $0 [--cudart DIR]" >&2; exit 2; }
		CUDART_DIR=$2
		EMU=1
		shift 2
		;;
	-h | --help)
		echo "usage: $0 [--cudart DIR]"
		exit 0
		;;
	*)
		echo "usage: $0 [--cudart DIR]" >&2
		exit 2
		;;
	esac
done

T0=$(date +%s)
BUDGET=290 # seconds for the whole run (the box gives us 5 minutes)
NPASS=0
NFAIL=0
NSKIP=0
LOGDIR=$ROOT/build/gpu_check
mkdir -p "$LOGDIR"
BIN=$ROOT/build/release
POOL=gpuchk$$
AGENT_PIDS=
AGENT_POOLS=
SSD_DIR=

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

cleanup() {
	local p
	for p in $AGENT_POOLS; do
		stop_agent "$p"
	done
	[ -n "$SSD_DIR" ] && rm -rf "$SSD_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_step "NAMES" TIMEOUT CMD...: run a bench_gpu command; its PASS, FAIL
# and SKIP lines are echoed and counted; a name it did not answer (it
# crashed, or timed out) is a FAIL
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
				fail "$n" "no result: bench_gpu exited $rc"
			fi
		fi
	done
	if [ $rc -ne 0 ] && [ $missing = 0 ] && ! grep -q '^FAIL ' "$out"; then
		fail "${names%% *}" "bench_gpu exited $rc with no FAIL line"
	fi
}

skip_all() {
	local why=$1 n
	shift
	for n in "$@"; do
		skip "$n" "$why"
	done
}

HBM_CHECKS="hbm_promote hbm_two_process hbm_helper_killed hbm_worker_killed hbm_bandwidth"
CHECKS="roundtrip_single statuses roundtrip_batch two_process worker_killed no_device ssd_path bandwidth pool_check $HBM_CHECKS registration"

echo "gpu_check: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%d GiB", $2 / 1048576 }' /proc/meminfo) RAM, $(uname -r)"

# ---- 1. CUDA ----

CUDA_INC=
CUDART=
CUDA_OK=0
if [ -n "$CUDART_DIR" ]; then
	CUDART_DIR=$(cd "$CUDART_DIR" 2>/dev/null && pwd)
	[ -n "$CUDART_DIR" ] && [ -f "$CUDART_DIR/libcudart.so.13" ] && CUDART=$CUDART_DIR/libcudart.so.13
fi
for h in $(command -v nvcc >/dev/null 2>&1 && dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")") \
	${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda /usr/local/cuda-13* /usr/local/cuda-12* /usr; do
	if [ -f "$h/include/cuda_runtime_api.h" ]; then
		CUDA_INC=$h/include
		if [ -z "$CUDART" ] && [ -z "$CUDART_DIR" ]; then
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
	fi
done
if [ -z "$CUDART" ] && [ -z "$CUDART_DIR" ]; then
	CUDART=$(ldconfig -p 2>/dev/null | awk '/libcudart\.so\.1[32] / { print $NF; exit }')
fi
if command -v nvidia-smi >/dev/null 2>&1; then
	timeout 20 nvidia-smi -L 2>&1 | sed 's/^/  /'
	info "driver $(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -n 1)"
else
	info "no nvidia-smi"
fi
command -v nvcc >/dev/null 2>&1 && info "$(nvcc --version | tail -n 2 | head -n 1)"
if [ -z "$CUDA_INC" ]; then
	fail cuda "no cuda_runtime_api.h (nvcc on PATH, /usr/local/cuda)"
elif [ -z "$CUDART" ]; then
	fail cuda "no libcudart.so.13 or .12${CUDART_DIR:+ in $CUDART_DIR}"
else
	CUDA_OK=1
	export KVPOOL_CUDART=$CUDART
	info "headers $CUDA_INC, runtime $CUDART (KVPOOL_CUDART)"
	[ $EMU = 1 ] && info "emulated runtime: bandwidth figures mean nothing"
	pass cuda
fi

# ---- build ----

BUILD_OK=0
t=$(left 200)
if (./configure && timeout -k 5 "$t" ninja -C . build/release/kvpoold build/release/kvpool \
	build/release/kvpool-gpud) >"$LOGDIR/build.log" 2>&1; then
	BUILD_OK=1
	pass build
else
	tail -n 15 "$LOGDIR/build.log" | sed 's/^/  /'
	fail build "./configure && ninja kvpoold kvpool kvpool-gpud failed (build/gpu_check/build.log)"
fi

BENCH_OK=0
if [ $CUDA_OK = 1 ] && [ $BUILD_OK = 1 ]; then
	WARN=$(sed -n 's/^warn = //p' build.ninja)
	[ -n "$WARN" ] || WARN="-std=c11 -D_GNU_SOURCE -Wall -Wextra"
	# shellcheck disable=SC2086 # WARN is a list of flags
	if timeout -k 5 120 ${KVP_CC:-cc} $WARN -O2 -g ${KVP_CFLAGS:-} -I. -I"$CUDA_INC" \
		-o "$BIN/bench_gpu" stress/bench_gpu.c tests/agent/harness.c \
		"$CUDART" -Wl,-rpath,"$(dirname "$CUDART")" -latomic_ops -lpthread -ldl \
		>"$LOGDIR/bench_build.log" 2>&1; then
		BENCH_OK=1
		n=$(grep -c 'warning:' "$LOGDIR/bench_build.log")
		[ "$n" -gt 0 ] && info "$n compiler warnings (build/gpu_check/bench_build.log)"
		pass bench_build
	else
		grep -m 10 -E 'error|undefined' "$LOGDIR/bench_build.log" | sed 's/^/  /'
		fail bench_build "cc stress/bench_gpu.c failed (build/gpu_check/bench_build.log)"
	fi
else
	skip bench_build "no CUDA or no build"
fi

if [ $BENCH_OK = 0 ]; then
	# shellcheck disable=SC2086 # a list of names
	skip_all "not built" $CHECKS
	echo "$NPASS passed, $NFAIL failed, $NSKIP skipped"
	[ $NFAIL -eq 0 ]
	exit $?
fi

# ---- sizes: what this machine's memory allows ----

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
	# a small /dev/shm (a container's): what fits, main and SSD pools
	# side by side (a hugetlbfs mount, where kvpoold finds one, is not
	# counted)
	MAIN_DRAM=$((SHM_MIB * 2 / 5))M
	REG_DRAM=$MAIN_DRAM
	SSD_DRAM=$((SHM_MIB / 5))M
	info "small /dev/shm: the checks' sizes shrink with it (a pool needs 64M at least)"
fi
# the HBM tier's agent: its pool on the GPU (a quarter of it a bandwidth
# size, 512 MiB at most), DRAM for what is copied there
HBM_SIZE=2G
HBM_DRAM=2G
[ $EMU = 1 ] && HBM_SIZE=256M
[ "$SHM_MIB" -lt 5120 ] && HBM_DRAM=$MAIN_DRAM
info "RAM ${MEM_GIB} GiB, /dev/shm ${SHM_GIB} GiB free: DRAM tier ${MAIN_DRAM} (checks, bandwidth), ${REG_DRAM} (registration), ${SSD_DRAM} (SSD path), ${HBM_DRAM} with an HBM pool of ${HBM_SIZE} (HBM tier)"
EMU_ARG=
REG_ENV=
if [ $EMU = 1 ]; then
	EMU_ARG=--emulated
	# the emulator registers at once unless told to take its time
	REG_ENV=FAKECUDA_REG_US_PER_MIB=1000
fi

# ---- 2. the checks, on one agent ----

if start_agent "$POOL" --dram "$MAIN_DRAM" --max-value 16M --holds-per-client 2048; then
	run_step "roundtrip_single statuses roundtrip_batch" 90 "$BIN/bench_gpu" roundtrip "$POOL"
	run_step two_process 60 "$BIN/bench_gpu" two-process "$POOL"
	run_step worker_killed 90 "$BIN/bench_gpu" killed "$POOL"
	# no device visible (the emulator's own switch too)
	run_step no_device 30 env CUDA_VISIBLE_DEVICES= FAKECUDA_DEVICES=0 "$BIN/bench_gpu" nodev "$POOL"
	# the SSD path: its own agent, demoting every value at once
	SSD_DIR=$(mktemp -d /var/tmp/kvpgpu-XXXXXX 2>/dev/null || mktemp -d "$ROOT/build/gpu_check/ssd-XXXXXX")
	chmod 700 "$SSD_DIR"
	if start_agent "${POOL}s" --dram "$SSD_DRAM" --max-value 16M --dram-high 0 --dram-low 0 \
		--ssd-dir "$SSD_DIR" --stop-flush-secs 0; then
		run_step ssd_path 60 "$BIN/bench_gpu" ssd "${POOL}s"
		stop_agent "${POOL}s"
	else
		skip ssd_path "no agent with an SSD tier in $SSD_DIR (its log above)"
	fi
	rm -rf "$SSD_DIR"
	SSD_DIR=
	run_step bandwidth 100 "$BIN/bench_gpu" bandwidth "$POOL" $EMU_ARG
	if out=$(timeout 30 "$BIN/kvpool" --pool "$POOL" check 2>&1); then
		pass pool_check
	else
		printf '%s\n' "$out" | tail -n 10 | sed 's/^/  /'
		fail pool_check "kvpool check found something (above)"
	fi
	if stop_agent "$POOL"; then
		pass agent_stop
	else
		fail agent_stop "kvpoold did not stop within 30 s of SIGTERM"
	fi
else
	fail agent "kvpoold --dram $MAIN_DRAM did not start (build/gpu_check/kvpoold.$POOL.log)"
	skip_all "no agent" roundtrip_single statuses roundtrip_batch two_process worker_killed no_device ssd_path bandwidth pool_check
fi

# ---- 3. the HBM tier: its own agent, a helper (kvpool-gpud) on GPU 0 ----

if [ "$(left 120)" -lt 40 ]; then
	# shellcheck disable=SC2086 # a list of names
	skip_all "out of time (the run's budget is ${BUDGET} s)" $HBM_CHECKS
elif [ ! -x "$BIN/kvpool-gpud" ]; then
	# shellcheck disable=SC2086 # a list of names
	skip_all "no $BIN/kvpool-gpud" $HBM_CHECKS
elif start_agent "${POOL}g" --dram "$HBM_DRAM" --max-value 16M --holds-per-client 2048 \
	--hbm-gpu 0 --hbm-size "$HBM_SIZE"; then
	# shellcheck disable=SC2086 # EMU_ARG: one word or none
	run_step "$HBM_CHECKS" 120 "$BIN/bench_gpu" hbm "${POOL}g" $EMU_ARG
	grep -E 'WARN|ERROR' "$LOGDIR/kvpoold.${POOL}g.log" | grep -v 'killed by signal 9' |
		head -n 5 | sed 's/^/  agent: /'
	stop_agent "${POOL}g" || fail hbm_agent_stop "kvpoold --hbm-gpu 0 did not stop within 30 s of SIGTERM"
else
	fail hbm_agent "kvpoold --hbm-gpu 0 --hbm-size $HBM_SIZE did not start (build/gpu_check/kvpoold.${POOL}g.log)"
	# shellcheck disable=SC2086 # a list of names
	skip_all "no agent" $HBM_CHECKS
fi

# ---- registration of a large DRAM tier (a fresh pool) ----

if [ "$(left 100)" -lt 60 ]; then
	skip registration "out of time (the run's budget is ${BUDGET} s)"
elif start_agent "${POOL}r" --dram "$REG_DRAM" --max-value 16M; then
	run_step registration 150 env $REG_ENV "$BIN/bench_gpu" register "${POOL}r" $EMU_ARG
	stop_agent "${POOL}r"
else
	fail registration "kvpoold --dram $REG_DRAM did not start"
fi

echo "gpu_check: $(($(date +%s) - T0)) s; logs in build/gpu_check/"
echo "$NPASS passed, $NFAIL failed, $NSKIP skipped"
[ $NFAIL -eq 0 ]
