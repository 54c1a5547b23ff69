#!/bin/bash
# SPDX-License-Identifier: MIT
#
# test_gpu.sh - the GPU endpoints (issue 16) and the HBM tier, checked on a
# device: start agents on private pools, run build/release/test_gpu's
# checks on them (tests/gpu/test_gpu.c), stop them.
#
#   tests/gpu/test_gpu.sh               the real CUDA runtime
#                                       ($KVPOOL_CUDART, or the toolkit's:
#                                       stress/gpu_check.sh on a machine
#                                       with a GPU)
#   tests/gpu/test_gpu.sh --cudart DIR  DIR/libcudart.so.13 instead: the
#                                       emulator (tests/gpu/fakecudart.c,
#                                       built there by build_fakecuda.sh;
#                                       the default test run)
#
# The programs are built by ninja (build/release: kvpoold, kvpool,
# kvpool-gpud, test_gpu); none needs CUDA to build.  Every check prints
# one line, "PASS name", "FAIL name: why" or "SKIP name: why" (details on
# indented lines); no check stops the run; the last line counts them and
# the exit status is non-zero iff a check failed (77: no CUDA runtime to
# run them on).  Logs (agents, steps) go under build/gpu_check/.  Agents
# are stopped and their segments removed on any exit.  $KVP_GPU_BUDGET:
# seconds for the whole run (default 290).
set -u

cd "$(dirname "$0")/../.." || exit 2
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
BUDGET=${KVP_GPU_BUDGET:-290}
LOGDIR=$ROOT/build/gpu_check
BIN=$ROOT/build/release
POOL=gpuchk$$
SSD_DIR=
mkdir -p "$LOGDIR" || exit 2
. "$ROOT/tests/gpu/gpu_lib.sh"

cleanup() {
	gpu_cleanup
	[ -n "$SSD_DIR" ] && rm -rf "$SSD_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

HBM_CHECKS="hbm_promote hbm_two_process hbm_helper_killed hbm_worker_killed"
CHECKS="roundtrip_single statuses roundtrip_batch two_process worker_killed no_device ssd_path pool_check $HBM_CHECKS registration"

gpu_find_cudart "$CUDART_DIR"
if [ -z "$CUDART" ]; then
	echo "SKIP: no CUDA runtime${CUDART_DIR:+ (no libcudart.so.13 in $CUDART_DIR)} (KVPOOL_CUDART, nvcc, /usr/local/cuda, ldconfig)"
	exit 77
fi
export KVPOOL_CUDART=$CUDART
info "runtime $CUDART (KVPOOL_CUDART)"
[ $EMU = 1 ] && info "emulated runtime: its helper is slow (HBM copies), its device is host memory"
for p in kvpoold kvpool kvpool-gpud test_gpu; do
	if [ ! -x "$BIN/$p" ]; then
		# shellcheck disable=SC2086 # a list of names
		skip_all "not built: $BIN/$p (ninja)" $CHECKS
		echo "$NPASS passed, $NFAIL failed, $NSKIP skipped"
		exit 1
	fi
done
gpu_sizes $EMU
EMU_ARG=
REG_ENV=
if [ $EMU = 1 ]; then
	EMU_ARG=--emulated
	# the emulator registers at once unless told to take its time
	REG_ENV=FAKECUDA_REG_US_PER_MIB=1000
fi

# ---- the checks, on one agent ----

if start_agent "$POOL" --dram "$MAIN_DRAM" --max-value 16M --holds-per-client 2048; then
	run_step "roundtrip_single statuses roundtrip_batch" 90 "$BIN/test_gpu" roundtrip "$POOL"
	run_step two_process 60 "$BIN/test_gpu" two-process "$POOL"
	run_step worker_killed 90 "$BIN/test_gpu" killed "$POOL"
	# no device visible (the emulator's own switch too)
	run_step no_device 30 env CUDA_VISIBLE_DEVICES= FAKECUDA_DEVICES=0 "$BIN/test_gpu" nodev "$POOL"
	# the SSD path: its own agent, demoting every value at once
	SSD_DIR=$(mktemp -d /var/tmp/kvpgpu-XXXXXX 2>/dev/null || mktemp -d "$LOGDIR/ssd-XXXXXX")
	chmod 700 "$SSD_DIR"
	if start_agent "${POOL}s" --dram "$SSD_DRAM" --max-value 16M --dram-high 0 --dram-low 0 \
		--ssd-dir "$SSD_DIR" --stop-flush-secs 0; then
		run_step ssd_path 60 "$BIN/test_gpu" ssd "${POOL}s"
		stop_agent "${POOL}s"
	else
		skip ssd_path "no agent with an SSD tier in $SSD_DIR (its log above)"
	fi
	rm -rf "$SSD_DIR"
	SSD_DIR=
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
	skip_all "no agent" roundtrip_single statuses roundtrip_batch two_process worker_killed no_device ssd_path pool_check
fi

# ---- the HBM tier: its own agent, a helper (kvpool-gpud) on GPU 0 ----

if [ "$(left 120)" -lt 40 ]; then
	# shellcheck disable=SC2086 # a list of names
	skip_all "out of time (the run's budget is ${BUDGET} s)" $HBM_CHECKS
elif start_agent "${POOL}g" --dram "$HBM_DRAM" --max-value 16M --holds-per-client 2048 \
	--hbm-gpu 0 --hbm-size "$HBM_SIZE"; then
	# shellcheck disable=SC2086 # EMU_ARG: one word or none
	run_step "$HBM_CHECKS" 120 "$BIN/test_gpu" hbm "${POOL}g" $EMU_ARG
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
	# shellcheck disable=SC2086 # REG_ENV: one word or none
	run_step registration 150 env $REG_ENV "$BIN/test_gpu" register "${POOL}r" $EMU_ARG
	stop_agent "${POOL}r"
else
	fail registration "kvpoold --dram $REG_DRAM did not start"
fi

echo "test_gpu: $(($(date +%s) - T0)) s; logs in build/gpu_check/"
echo "$NPASS passed, $NFAIL failed, $NSKIP skipped"
[ $NFAIL -eq 0 ]
