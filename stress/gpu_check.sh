#!/bin/bash
# SPDX-License-Identifier: MIT
#
# gpu_check.sh - the GPU endpoints (issue 16) and the HBM tier on a machine
# with a GPU, in one run of a few minutes: build the agent, its GPU helper
# (kvpool-gpud), the CLI, the checks (tests/gpu/test_gpu.c) and the
# figures (stress/bench_gpu.c) with ninja, run the checks
# (tests/gpu/test_gpu.sh), then the figures on agents of their own.
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
LOGDIR=$ROOT/build/gpu_check
mkdir -p "$LOGDIR"
BIN=$ROOT/build/release
POOL=gpubw$$
. "$ROOT/tests/gpu/gpu_lib.sh"
trap gpu_cleanup EXIT
trap 'exit 130' INT TERM

FIGURES="bandwidth hbm_bandwidth"

echo "gpu_check: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%d GiB", $2 / 1048576 }' /proc/meminfo) RAM, $(uname -r)"

# ---- 1. CUDA ----

gpu_find_cudart "$CUDART_DIR"
if command -v nvidia-smi >/dev/null 2>&1; then
	timeout 20 nvidia-smi -L 2>&1 | sed 's/^/  /'
	info "driver $(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -n 1)"
else
	info "no nvidia-smi"
fi
command -v nvcc >/dev/null 2>&1 && info "$(nvcc --version | tail -n 2 | head -n 1)"
CUDA_OK=0
if [ -z "$CUDART" ]; then
	fail cuda "no libcudart.so.13 or .12${CUDART_DIR:+ in $CUDART_DIR} (nvcc on PATH, /usr/local/cuda, ldconfig)"
else
	CUDA_OK=1
	export KVPOOL_CUDART=$CUDART
	info "headers ${CUDA_INC:-none}, runtime $CUDART (KVPOOL_CUDART)"
	[ $EMU = 1 ] && info "emulated runtime: bandwidth figures mean nothing"
	pass cuda
fi

# ---- build: nothing of it needs CUDA ----

BUILD_OK=0
t=$(left 200)
if (./configure && timeout -k 5 "$t" ninja -C . build/release/kvpoold build/release/kvpool \
	build/release/kvpool-gpud build/release/test_gpu build/release/bench_gpu) >"$LOGDIR/build.log" 2>&1; then
	BUILD_OK=1
	pass build
else
	tail -n 15 "$LOGDIR/build.log" | sed 's/^/  /'
	fail build "./configure && ninja kvpoold kvpool kvpool-gpud test_gpu bench_gpu failed (build/gpu_check/build.log)"
fi

if [ $CUDA_OK = 0 ] || [ $BUILD_OK = 0 ]; then
	# shellcheck disable=SC2086 # a list of names
	skip_all "no CUDA or no build" checks $FIGURES
	echo "$NPASS passed, $NFAIL failed, $NSKIP skipped"
	[ $NFAIL -eq 0 ]
	exit $?
fi

# ---- 2. the checks (tests/gpu/test_gpu.sh): 200 s of the budget ----

out=$LOGDIR/checks.out
KVP_GPU_BUDGET=$(left 200) bash tests/gpu/test_gpu.sh ${CUDART_DIR:+--cudart "$CUDART_DIR"} 2>&1 | tee "$out" |
	grep -v '^[0-9]* passed, [0-9]* failed, [0-9]* skipped$'
NPASS=$((NPASS + $(grep -c '^PASS ' "$out")))
NFAIL=$((NFAIL + $(grep -c '^FAIL ' "$out")))
NSKIP=$((NSKIP + $(grep -c '^SKIP ' "$out")))
grep -q '^[0-9]* passed, [0-9]* failed, [0-9]* skipped$' "$out" ||
	fail checks "tests/gpu/test_gpu.sh ended without its count (above)"

# ---- 3. the figures (stress/bench_gpu.c), on agents of their own ----

gpu_sizes $EMU
EMU_ARG=
[ $EMU = 1 ] && EMU_ARG=--emulated
if [ "$(left 100)" -lt 40 ]; then
	skip bandwidth "out of time (the run's budget is ${BUDGET} s)"
elif start_agent "$POOL" --dram "$MAIN_DRAM" --max-value 16M --holds-per-client 2048; then
	# shellcheck disable=SC2086 # EMU_ARG: one word or none
	run_step bandwidth 100 "$BIN/bench_gpu" bandwidth "$POOL" $EMU_ARG
	stop_agent "$POOL"
else
	fail bandwidth "kvpoold --dram $MAIN_DRAM did not start (build/gpu_check/kvpoold.$POOL.log)"
fi
if [ "$(left 120)" -lt 40 ]; then
	skip hbm_bandwidth "out of time (the run's budget is ${BUDGET} s)"
elif start_agent "${POOL}g" --dram "$HBM_DRAM" --max-value 16M --holds-per-client 2048 \
	--hbm-gpu 0 --hbm-size "$HBM_SIZE"; then
	# shellcheck disable=SC2086 # EMU_ARG: one word or none
	run_step hbm_bandwidth 120 "$BIN/bench_gpu" hbm "${POOL}g" $EMU_ARG
	stop_agent "${POOL}g"
else
	fail hbm_bandwidth "kvpoold --hbm-gpu 0 --hbm-size $HBM_SIZE did not start (build/gpu_check/kvpoold.${POOL}g.log)"
fi

echo "gpu_check: $(($(date +%s) - T0)) s; logs in build/gpu_check/"
echo "$NPASS passed, $NFAIL failed, $NSKIP skipped"
[ $NFAIL -eq 0 ]
