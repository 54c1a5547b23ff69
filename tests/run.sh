#!/bin/sh
# tests/run.sh - build every variant and run every test.
#
#   tests/run.sh            the default run (release + ASan/UBSan + TSan, short stress)
#   tests/run.sh --long     adds long stress soaks (minutes)
#   tests/run.sh --quick    release build only (for iterating)
#   tests/run.sh --only PAT only the runs whose name contains PAT (with the
#                           checks of what the run left)
#
# What the run left is checked at its end: no sanitizer report in the logs
# of the agents it started, no segment of its own in /dev/shm, and, in a
# git checkout, the working tree as it found it (git status and the
# contents of every file it lists; ./configure's build.ninja included, so
# a build.ninja that differs from what configure writes fails the run).
#
# Each run prints one line: PASS or FAIL (an assertion held or not), SKIP
# (it could not run here: a tool or package is missing; the line below says
# which) or RAN (a benchmark smoke run: it finished, its figures are not
# judged; it is FAIL if it does not finish).  A PASS may show, below it, the
# "SKIP ..." lines of checks it could not make here.  A test says "skip me"
# by exiting 77 (the automake/liburing convention).  The last line is always
#
#   P passed, F failed, S skipped, R ran (not assertions)
#
# (four counts, in that order) and the exit status is non-zero iff F > 0.
set -u
cd "$(dirname "$0")/.." || exit 2
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

# the working tree as the run found it: each path git status lists (an
# untracked file included), its status and its contents' hash; compared at
# the end.  GIT_OPTIONAL_LOCKS=0: a read-only look, no index refresh.
tree_state() {
	GIT_OPTIONAL_LOCKS=0 git status --porcelain --untracked-files=all |
	while IFS= read -r line; do
		path=${line#???}
		case $path in *" -> "*) path=${path#* -> } ;; esac
		printf '%s %s\n' "$(git hash-object -- "$path" 2>/dev/null || echo -)" "$line"
	done
}
in_git=0 tree_before=
if command -v git >/dev/null 2>&1 && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	in_git=1 tree_before=$(tree_state)
fi
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
summary() { echo "$passed passed, $failed failed, $skipped skipped, $ran ran (not assertions)"; }
passed=0 failed=0 skipped=0 ran=0
failures=""
ninja $targets || { failed=1; summary; exit 1; }

# step KIND NAME COMMAND...: run COMMAND, print its line and count it.
# KIND is "check" (exit 0: PASS) or "bench" (exit 0: RAN, not an
# assertion); exit 77 is SKIP, anything else FAIL.  Returns 0 for PASS or
# RAN, 1 otherwise (also when --only filters it out).  Every run has a
# time limit ($KVP_TEST_TIMEOUT seconds, default 1200: the longest run
# takes ~5 minutes on 2 cores): a hung one is stopped (SIGTERM, then
# SIGKILL 30 s later) and fails with its name, and the run goes on.
test_timeout=${KVP_TEST_TIMEOUT:-1200}
step() {
	kind=$1 name=$2; shift 2
	case $name in *"$only"*) ;; *) return 1 ;; esac
	start=$(date +%s.%N)
	log=$(mktemp /tmp/kvpool-test.XXXXXX)
	timeout -k 30 "$test_timeout" "$@" </dev/null >"$log" 2>&1
	rc=$?
	if [ $rc = 124 ] || [ $rc = 137 ]; then
		echo "TIMEOUT: stopped after ${test_timeout}s (KVP_TEST_TIMEOUT): it hung" >>"$log"
		rc=1
	fi
	if [ $rc = 0 ] && [ "$kind" = check ]; then passed=$((passed + 1)); status=PASS
	elif [ $rc = 0 ]; then ran=$((ran + 1)); status=RAN
	elif [ $rc = 77 ]; then skipped=$((skipped + 1)); status=SKIP
	else failed=$((failed + 1)); status=FAIL; failures="$failures $name"
	fi
	end=$(date +%s.%N)
	printf '%-4s %-44s %6.1fs\n' "$status" "$name" "$(awk "BEGIN{print $end - $start}")"
	if [ $status = FAIL ] || [ "${KVP_TEST_VERBOSE:-0}" = 1 ]; then
		sed 's/^/     | /' "$log"
	else	# why it was skipped, or which of its checks were
		grep -h '^[[:space:]]*SKIP' "$log" | sed 's/^[[:space:]]*/     | /'
	fi
	rm -f "$log"
	[ $status = PASS ] || [ $status = RAN ]
}
run() { step check "$@"; }   # an assertion
bench() { step bench "$@"; } # a benchmark smoke run
skip() { # name, why: a run that cannot happen here
	case $1 in *"$only"*) ;; *) return 0 ;; esac
	skipped=$((skipped + 1))
	printf '%-4s %-44s\n     | %s\n' SKIP "$1" "$2"
}

# the Python of the binding's tests and install: Debian 12's own
# (/usr/bin/python3, the one python3-torch installs for) when there is one,
# whatever python3 comes first on PATH (a pyenv, a venv) otherwise
if [ -z "${PYTHON:-}" ]; then
	if [ -x /usr/bin/python3 ]; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi
export PYTHON
UNIT="test_layout test_index test_hold test_index_pool test_alloc test_ssd test_pool test_crash test_badinput test_ssd_tier test_drives test_pin test_crashpoints test_check"
UNIT="$UNIT test_metrics test_durability test_hostile test_files test_statuses test_index_limit test_evict test_distinct test_assert test_populate"
# stress/trace_replay's reference caches (LRU, Belady) and trace reader
UNIT="$UNIT test_trace"
# the GPU endpoints without a GPU (tests/agent/test_dev.c): no runtime,
# the toolkit's runtime without a driver, and the emulated runtime of
# tests/gpu/fakecudart.c (built here against the toolkit's headers; where
# there are none its cases are skipped: "no CUDA")
UNIT="$UNIT test_dev"
if fc=$(sh tests/gpu/build_fakecuda.sh build/gpu 2>/dev/null); then
	KVPT_FAKECUDA=$PWD/$fc
	export KVPT_FAKECUDA
fi
for v in $variants; do
	for t in $UNIT; do
		case $v in
		# TSan sees the threaded workloads (the index's races and
		# the hold protocol's included); forked children are
		# covered by the other variants
		tsan) case $t in test_pool|test_ssd|test_index|test_hold) ;; *) continue ;; esac ;;
		esac
		run "$v/$t" env TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
			ASAN_OPTIONS="detect_leaks=1" "build/$v/$t"
	done
done
# who owns what (docs/design.md): index state words written in index/
# only, nothing under shm/ index/ tiers/ includes agent/, no include cycle
# the pool tests again on 2 MiB pages (root: it reserves a huge page pool
# and mounts a hugetlbfs of its own; SKIP otherwise)
run "release/hugepages: pool tests on 2 MiB pages" tests/agent/test_hugepages.sh
run "structure: owners, includes, no cycles" tests/structure/test_structure.sh
# ... and it fails on an injected write of each shared word outside its
# owner, and on an injected call cycle between agent files
run "structure: fails on each injected defect" tests/structure/test_structure_inject.sh
# kvpoold's flags are one table (agent/options.c): README's synopsis is
# its output, and no doc gives kvpoold a flag the table lacks
run "agent: README's kvpoold flags = agent/options.c" tests/agent/test_options_doc.sh
# tiers/kvp_cuda.h (the runtime's ABI, written out) against the toolkit's
# headers, and the emulated runtime's own checks (SKIP: no CUDA headers)
run "gpu: tiers/kvp_cuda.h matches cuda_runtime_api.h" tests/gpu/test_cuda_abi.sh
run "gpu: the emulated runtime's self-test" tests/gpu/test_fakecuda.sh
# the GPU endpoints' and the HBM tier's checks (build/release/test_gpu,
# tests/gpu/test_gpu.c) on the emulated runtime: the device machine runs
# the same (stress/gpu_check.sh, then its figures) on the real one
if [ -n "${KVPT_FAKECUDA:-}" ]; then
	run "gpu: test_gpu on the emulated runtime" \
		tests/gpu/test_gpu.sh --cudart "$(dirname "$KVPT_FAKECUDA")"
else
	skip "gpu: test_gpu on the emulated runtime" \
		"no CUDA headers here: the emulated runtime is not built"
fi
# the tree passes its .clang-format (SKIP without clang-format: .ci/run installs it)
run "structure: the tree passes .clang-format" tests/structure/test_format.sh
# the layout signature sees order, not only sizes: a client built with two
# same-size header fields swapped refuses a real agent's segment
run "layout: test_layout fails with two fields swapped" tests/shm/test_layout_swapped.sh
run "layout: a client with two fields swapped gets -EPROTO" build/release/test_layout_swap
# the client as engines use it (tests/client/): kvpool.h from C++, header
# only and linked with libkvpool.so; the library exports exactly the API
# of kvpool.h, has a SONAME, and serves a real agent through dlopen()
run "client: kvpool.h compiles as C++17, -Werror" tests/client/test_cxx_header.sh
for v in $variants; do
	[ $v = tsan ] && continue # no thread of its own
	run "$v/client/test_cxx (C++, header only)" env ASAN_OPTIONS="detect_leaks=1" build/$v/test_cxx
done
run "release/client/test_cxx_shared (-lkvpool)" build/release/test_cxx_shared
run "client: libkvpool.so exports kvpool.h only" tests/client/test_exports.sh
run "release/client/test_dlopen (dlopen)" build/release/test_dlopen
# the Python binding (python/kvpool, ctypes), the sglang backend and the
# vLLM tier (tests/python/test_vllm.py, against tests/python/vllm_fake.py: a
# model of vLLM's tiering manager) against real agents, from the source tree
# (tests/install runs them again from an installed package);
# PYTHONDONTWRITEBYTECODE: the run leaves the tree clean
if command -v "$PYTHON" >/dev/null 2>&1; then
	run "python: unittest (python/kvpool from the tree)" env PYTHONDONTWRITEBYTECODE=1 \
		PYTHONPATH="$PWD/python" "$PYTHON" -m unittest discover -s tests/python -t tests/python -v
else
	skip "python: unittest (python/kvpool from the tree)" "python3 not installed (apt-get install python3; demo.sh does)"
fi
# what engines load once installed (tests/install/): ninja install into a
# staging root, pkg-config, clients built from the installed headers
# only against the staged agent, its sd_notify, the unit, uninstall
run "install: DESTDIR install, pkg-config, notify" tests/install/test_install.sh
# a run judges only what it left (not the files of another run meanwhile)
run "runner: judges only its own segments and logs" tests/runner/test_own_files.sh
# and counts a skip as a skip, never as a pass
run "runner: counts skips apart from passes" tests/runner/test_summary.sh
# and stops a hung run, failing it by name (test_timeout.sh asks for this
# one: it never ends)
[ -n "${KVPT_RUNNER_HANG:-}" ] && run "runner: a run that hangs (self-test)" tail -f /dev/null
run "runner: a hung run fails by name" tests/runner/test_timeout.sh
# and fails when the run writes into the git working tree
run "runner: fails a run that dirties the tree" tests/runner/test_clean_tree.sh
# the README's first command: plain ninja needs only what demo.sh installs
run "demo: default target needs only demo.sh's packages" tests/demo/test_default_target.sh
# the SSD tier end to end on the pread/pwrite thread path (io_uring refused)
run "release/test_ssd_tier (pread thread path)" env KVP_SSD_FORCE_PREAD=1 build/release/test_ssd_tier
# ... and under TSan: there two workers finish requests beside the tier
# thread (a TSan report stops the agent and fails the test)
[ $quick = 1 ] || run "tsan/test_ssd_tier (pread thread path)" env KVP_SSD_FORCE_PREAD=1 \
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" build/tsan/test_ssd_tier
# observability: stat --json = /metrics (jq, promtool); a real Prometheus scrapes the agent
run "release/obs stat --json matches /metrics" tests/obs/test_scrape_json.sh
run "release/obs prometheus server scrapes kvpoold" tests/obs/test_prometheus.sh
# the metrics are one table (agent/metrics_table.c): the doc's tables are its output
run "release/obs docs/observability.md = the table of metrics" tests/obs/test_metrics_doc.sh
# the remote tier: three nodes (network namespaces, a veth each), Redis
# in one, UCX over TCP; the ASan+UBSan agents in the default run
run "release/cluster: three nodes over UCX + Redis" tests/cluster/test_cluster.sh
[ $quick = 1 ] || run "asan/cluster: three nodes over UCX + Redis" env KC_BIN=build/asan tests/cluster/test_cluster.sh
# what a hostile member of the cluster cannot do (one-sided access, forged
# messages, a peer that stops reading, an owner restarted mid-batch)
run "release/cluster: a hostile peer" tests/cluster/test_hostile_peer.sh
[ $quick = 1 ] || run "asan/cluster: a hostile peer" env KC_BIN=build/asan tests/cluster/test_hostile_peer.sh
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
	# benchmarks: their figures are not asserted, so they count as RAN
	bench "release/bench_core --quick" build/release/bench_core --quick
	bench "release/bench_ssd --quick" build/release/bench_ssd --quick
	bench "release/bench_start --quick" build/release/bench_start --quick
	# the cache-quality replay (~30 s): RAN; wrong bytes read back fail it
	bench "stress/trace_bench --quick (cache quality)" stress/trace_bench --quick
	# the eviction policy study (~10 s): every generator at 5/10/25% through
	# LRU, Belady and each candidate the pool can carry out
	bench "release/trace_matrix --quick (policy study)" build/release/trace_matrix --quick
	# the policy in the agent before issue 30 and now, through kvpoold, the
	# same traces at 5/10/25% (~1 min); wrong bytes fail it
	bench "stress/trace_policy --quick (policy through kvpoold)" stress/trace_policy --quick
	# the sglang adapter against the C calls it wraps (~15 s; wrong bytes fail it)
	bench "stress/bench_sglang.py --quick" env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=python \
		"$PYTHON" stress/bench_sglang.py --quick
	# the vLLM tier's row copies against memcpy, and its lookups (~30 s;
	# wrong bytes or a failed job fail it)
	bench "stress/bench_vllm.py --quick" env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=python \
		"$PYTHON" stress/bench_vllm.py --quick
	bench "stress/bench_python.py --quick" env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=python \
		"$PYTHON" stress/bench_python.py --quick
	# the remote tier against ucx_perftest on the same veth link (~30 s)
	bench "stress/bench_remote.sh --quick" stress/bench_remote.sh --quick
	# stress/bench: the run is RAN; that its results.json reads back with
	# figures in it is an assertion of its own (made only after a run
	# that finished: one failure is not counted twice)
	rm -f build/bench/results.json
	bench "stress/bench --quick (peers)" stress/bench --quick &&
		run "stress/bench --quick: results.json reads back" python3 -c '
import json, sys
r = json.load(open("build/bench/results.json"))
sys.exit(0 if r.get("figures") else "results.json holds no figures")'
fi
# a hostile worker against the agent's parsers (tests/fuzz/fuzz_ring.c):
# the structured random driver under ASan/UBSan, and libFuzzer when clang is
# installed (.ci/run installs it)
if [ $quick = 0 ]; then
	run "asan/fuzz_ring (random scripts)" build/asan/fuzz_ring --seconds 10 --seed 7
	fuzz_secs=20
	[ $long = 1 ] && fuzz_secs=600
	# 'ninja fuzz' (configure's FUZZ_PROGRAMS: the same sources as
	# build/*/fuzz_ring, built by clang; not in 'ninja all'): skipped only
	# when clang or its libFuzzer runtime is missing; a build that fails
	# is a failure
	fuzz_name="libFuzzer fuzz_ring (${fuzz_secs} s)"
	mkdir -p build/fuzz/corpus
	if ! command -v clang >/dev/null 2>&1; then
		skip "$fuzz_name" "clang not installed (apt-get install clang libclang-rt-14-dev)"
	elif ! echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' |
		clang -fsanitize=fuzzer -x c - -o build/fuzz/probe >/dev/null 2>&1; then
		skip "$fuzz_name" "clang cannot link a libFuzzer target (apt-get install libclang-rt-14-dev)"
	else
		run "$fuzz_name" sh -c 'ninja fuzz && exec "$@"' sh build/fuzz/fuzz_ring \
			-max_total_time=$fuzz_secs -max_len=1024 -seed=7 \
			-artifact_prefix=build/fuzz/ build/fuzz/corpus tests/fuzz/seeds
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
	failures="$failures sanitizer-logs"
	for f in $sanlogs; do grep -h -A12 "runtime error\|ERROR: AddressSanitizer\|WARNING: ThreadSanitizer" "$f" | sed 's/^/     | /' | head -40; done
	failed=$((failed + 1))
fi
leftover=$(ls /dev/shm 2>/dev/null | grep "^kvpool\.$KVPT_RUN\." || true)
if [ -n "$leftover" ]; then
	echo "FAIL segments left behind in /dev/shm:" $leftover
	failures="$failures segments-left"
	failed=$((failed + 1))
fi
# the run leaves the working tree as it found it: whatever a test writes
# (logs, corpora, benchmark output, rewritten docs) goes under build/ or
# /tmp, and build.ninja is what ./configure writes
if [ $in_git = 1 ]; then
	{ [ -z "$tree_before" ] || printf '%s\n' "$tree_before"; } >"$KVPT_LOG_DIR/tree.before"
	tree_state >"$KVPT_LOG_DIR/tree.after"
	# the paths of the lines that differ ("< HASH XY PATH")
	changed=$(diff "$KVPT_LOG_DIR/tree.before" "$KVPT_LOG_DIR/tree.after" |
		sed -n 's/^[<>] [^ ]* ...//p' | sort -u)
	if [ -n "$changed" ]; then
		echo "FAIL the run changed the git working tree (git status, or a listed file's contents):"
		printf '%s\n' "$changed" | sed 's/^/     | /'
		case " $changed " in *build.ninja*)
			echo "     | build.ninja: commit what ./configure writes (it reads nothing of the machine)" ;;
		esac
		failures="$failures git-tree"
		failed=$((failed + 1))
	fi
elif [ -z "$only" ]; then
	# said once per whole run (a run of --only tests is some other
	# run's part: the runner's own tests count its lines)
	printf '%-4s %-44s\n     | %s\n' SKIP "git working tree left as found" "SKIP: not a git checkout"
	skipped=$((skipped + 1))
fi
# the agents' logs are kept for a failed run, removed after a clean one
if [ $failed = 0 ]; then rm -rf "$KVPT_LOG_DIR"; else echo "agent logs: $KVPT_LOG_DIR"; fi
[ -n "$failures" ] && echo "failed:$failures"
summary
[ $failed = 0 ]
