#!/bin/sh
# tests/run.sh - build every variant and run every test.
#
#   tests/run.sh            the default run (release + ASan/UBSan + TSan, short stress)
#   tests/run.sh --long     adds long stress soaks (minutes)
#   tests/run.sh --quick    release build only (for iterating)
#   tests/run.sh --only PAT only the runs whose name contains PAT (with the
#                           checks of what the run left)
#
# Ends with "N passed, N failed" and exits non-zero if anything failed.
set -u
cd "$(dirname "$0")/.."
long=0 quick=0 only=
while [ $# -gt 0 ]; do
	case $1 in
	--long) long=1 ;;
	--quick) quick=1 ;;
	--only) [ $# -ge 2 ] || { echo "tests/run.sh: --only needs a pattern"; exit 2; }
		only=$2; shift ;;
	*) echo "usage: tests/run.sh [--long|--quick] [--only PATTERN]"; exit 2 ;;
	esac
	shift
done

./configure >/dev/null || exit 1
# -Werror in CI: the build reads KVP_CFLAGS when it runs (build.ninja bakes
# in nothing of the environment); ninja does not rebuild for a change of
# it, which a CI checkout, building from scratch, never sees
if [ "${CI:-}" = true ] || [ "${KVP_WERROR:-}" = 1 ]; then
	case " ${KVP_CFLAGS:-} " in
	*" -Werror "*) ;;
	*) KVP_CFLAGS="${KVP_CFLAGS:+$KVP_CFLAGS }-Werror" ;;
	esac
	export KVP_CFLAGS
fi
# This run's own files: the tests name every pool they create
# "$KVPT_RUN.<name>" and their agents log in $KVPT_LOG_DIR (see
# tests/agent/harness.h), so the checks at the end judge only what this
# run left, never the segments or logs of another run on the machine.
# The tag carries this shell's pid: a segment whose run is gone is stale.
KVPT_RUN=r$$
KVPT_LOG_DIR=$(mktemp -d /tmp/kvpt-run-$$.XXXXXX) || exit 1
export KVPT_RUN KVPT_LOG_DIR
# segments of test runs whose process is gone (an interrupted run) are
# stale: remove them (tagged r<run pid>.*, or t<test pid>_* of a test run by
# hand); one tagged with our own pid can only be a dead run's
for f in /dev/shm/kvpool.r*.* /dev/shm/kvpool.t*_*; do
	[ -e "$f" ] || continue
	n=${f#/dev/shm/kvpool.}
	case $n in
	r[0-9]*.*) pid=${n#r}; pid=${pid%%.*} ;;
	t[0-9]*_*) pid=${n#t}; pid=${pid%%_*} ;;
	*) continue ;;
	esac
	case $pid in *[!0-9]*) continue ;; esac
	if [ "$pid" = $$ ] || ! kill -0 "$pid" 2>/dev/null; then rm -f "$f"; fi
done
# and SSD directories of test runs that were killed (kvpt_tmpdir names them
# /var/tmp/kvpt-<tag>-<pid>-XXXXXX)
for d in /var/tmp/kvpt-*-*-*; do
	[ -d "$d" ] || continue
	pid=$(echo "$d" | sed 's/.*-\([0-9][0-9]*\)-[^-]*$/\1/')
	kill -0 "$pid" 2>/dev/null || rm -rf "$d"
done
# the default run also builds 'bench' (the peer benchmark: LMDB, hiredis,
# which .ci/run installs); --quick needs only the README's packages
if [ $quick = 1 ]; then variants="release" targets="release"
else variants="release asan tsan" targets="release asan tsan bench"; fi
# shellcheck disable=SC2086
ninja $targets || { echo "0 passed, 1 failed"; exit 1; }

passed=0 failed=0
failures=""
run() { # name, command...
	name=$1; shift
	case $name in *"$only"*) ;; *) return 0 ;; esac
	start=$(date +%s.%N)
	log=$(mktemp /tmp/kvpool-test.XXXXXX)
	if "$@" >"$log" 2>&1; then
		passed=$((passed + 1)); status=PASS
	else
		failed=$((failed + 1)); status=FAIL; failures="$failures $name"
	fi
	end=$(date +%s.%N)
	printf '%-4s %-44s %6.1fs\n' "$status" "$name" "$(awk "BEGIN{print $end - $start}")"
	if [ $status = FAIL ] || [ "${KVP_TEST_VERBOSE:-0}" = 1 ]; then sed 's/^/     | /' "$log"; fi
	rm -f "$log"
}

UNIT="test_layout test_index test_alloc test_ssd test_pool test_crash test_badinput test_ssd_tier test_pin test_crashpoints test_check"
UNIT="$UNIT test_metrics test_durability test_hostile test_files test_statuses test_index_limit"
for v in $variants; do
	for t in $UNIT; do
		case $v in
		# TSan sees the threaded workloads; forked children are
		# covered by the other variants
		tsan) case $t in test_pool|test_ssd) ;; *) continue ;; esac ;;
		esac
		run "$v/$t" env TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
			ASAN_OPTIONS="detect_leaks=1" "build/$v/$t"
	done
done
# a run judges only what it left (not the files of another run meanwhile)
run "runner: judges only its own segments and logs" tests/runner/test_own_files.sh
# the README's first command: plain ninja needs only what demo.sh installs
run "demo: default target needs only demo.sh's packages" tests/demo/test_default_target.sh
# the SSD tier end to end on the pread/pwrite thread path (io_uring refused)
run "release/test_ssd_tier (pread thread path)" env KVP_SSD_FORCE_PREAD=1 build/release/test_ssd_tier
# observability: stat --json = /metrics (jq, promtool); a real Prometheus scrapes the agent
run "release/obs stat --json matches /metrics" tests/obs/test_scrape_json.sh
run "release/obs prometheus server scrapes kvpoold" tests/obs/test_prometheus.sh
[ $quick = 1 ] || run "tsan/test_metrics" env TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" build/tsan/test_metrics
run "release/stress_pool DRAM only, kills" build/release/stress_pool --no-ssd --procs 4 \
	--seconds 15 --seed 1 --kill-every 300
# the chaos stress of issue 4: 8 workers, 60 s, a worker killed every 2 s,
# the agent kill -9'd and restarted twice
run "release/stress_pool chaos" build/release/stress_pool --procs 8 --seconds 60 --seed 2 \
	--kill-every 2000 --agent-restart-every 20000
if [ $quick = 0 ]; then
	run "asan/stress_pool chaos" build/asan/stress_pool --procs 3 --seconds 15 --seed 3 \
		--kill-every 700 --agent-restart-every 6000
	run "tsan/stress_pool threads chaos" env TSAN_OPTIONS="halt_on_error=1" \
		build/tsan/stress_pool --threads --procs 3 --seconds 12 --seed 4 \
		--agent-restart-every 5000
	run "release/bench_core --quick (not asserted)" build/release/bench_core --quick
	run "release/bench_ssd --quick (not asserted)" build/release/bench_ssd --quick
	run "stress/bench --quick (peers; not asserted, JSON checked)" stress/bench --quick
fi
# a hostile worker against the agent's parsers (tests/fuzz/fuzz_ring.c):
# the structured random driver under ASan/UBSan, and libFuzzer when clang is
# installed (.ci/run installs it)
if [ $quick = 0 ]; then
	run "asan/fuzz_ring (random scripts)" build/asan/fuzz_ring --seconds 10 --seed 7
	fuzz_secs=20
	[ $long = 1 ] && fuzz_secs=600
	if command -v clang >/dev/null 2>&1; then
		# 'ninja fuzz' (configure's FUZZ_PROGRAMS: the same sources as
		# build/*/fuzz_ring, built by clang); not in 'ninja all'
		if ninja fuzz >build/fuzz.log 2>&1; then
			mkdir -p build/fuzz/corpus
			run "libFuzzer fuzz_ring (${fuzz_secs} s)" build/fuzz/fuzz_ring \
				-max_total_time=$fuzz_secs -max_len=1024 -seed=7 \
				-artifact_prefix=build/fuzz/ build/fuzz/corpus tests/fuzz/seeds
		else
			echo "SKIP libFuzzer fuzz_ring: clang cannot build it (build/fuzz.log)"
		fi
	else
		echo "SKIP libFuzzer fuzz_ring: clang not installed"
	fi
fi
if [ $long = 1 ]; then
	run "release/stress_pool long chaos" build/release/stress_pool --procs 8 --seconds 600 \
		--seed 5 --kill-every 2000 --agent-restart-every 60000
	run "tsan/stress_pool long threads chaos" env TSAN_OPTIONS="halt_on_error=1" \
		build/tsan/stress_pool --threads --procs 4 --seconds 120 --seed 6 \
		--agent-restart-every 30000
fi
# agents run by the tests log to $KVPT_LOG_DIR/kvpt.<pool>.log: a sanitizer
# report there is a failure even when the test itself coped with the dead agent
sanlogs=$(grep -l "runtime error\|ERROR: AddressSanitizer\|WARNING: ThreadSanitizer" \
	"$KVPT_LOG_DIR"/*.log 2>/dev/null || true)
if [ -n "$sanlogs" ]; then
	echo "FAIL sanitizer reports in agent logs:"
	for f in $sanlogs; do grep -h -A12 "runtime error\|ERROR: AddressSanitizer\|WARNING: ThreadSanitizer" "$f" | sed 's/^/     | /' | head -40; done
	failed=$((failed + 1))
fi
leftover=$(ls /dev/shm 2>/dev/null | grep "^kvpool\.$KVPT_RUN\." || true)
if [ -n "$leftover" ]; then
	echo "FAIL segments left behind in /dev/shm:" $leftover
	failed=$((failed + 1))
fi
# the agents' logs are kept for a failed run, removed after a clean one
if [ $failed = 0 ]; then rm -rf "$KVPT_LOG_DIR"; else echo "agent logs: $KVPT_LOG_DIR"; fi
[ -n "$failures" ] && echo "failed:$failures"
echo "$passed passed, $failed failed"
[ $failed = 0 ]
