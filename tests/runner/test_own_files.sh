#!/bin/sh
# tests/runner/test_own_files.sh - tests/run.sh judges only what its own run
# left: the segments and agent logs of another run (or of a test started by
# hand) that is still alive on this machine are neither removed nor blamed,
# and a sanitizer report in another run's log is not this run's failure.
#
# This script is that other party: it plants a live hand-run test's segment
# and log (t<pid>_*, /tmp/kvpt.t<pid>_*.log) and a live run's segment and
# log directory (r<pid>.*, /tmp/kvpt-run-<pid>.*), both logs carrying a
# sanitizer report, then runs `tests/run.sh --quick --only` on one small
# test and checks that run passes and leaves every planted file in place.
set -u
cd "$(dirname "$0")/../.."
me=$$
seg_hand=/dev/shm/kvpool.t${me}_0
seg_run=/dev/shm/kvpool.r$me.t1_0
log_hand=/tmp/kvpt.t${me}_0.log
dir_run=$(mktemp -d /tmp/kvpt-run-$me.XXXXXX) || exit 1
log_run=$dir_run/kvpt.r$me.t1_0.log
out=$(mktemp /tmp/kvpt-runner.XXXXXX) || exit 1
cleanup() { rm -f "$seg_hand" "$seg_run" "$log_hand" "$out"; rm -rf "$dir_run"; }
trap cleanup EXIT INT TERM

fail() { echo "FAIL: $*"; sed 's/^/  inner | /' "$out"; exit 1; }

: >"$seg_hand" && : >"$seg_run" || fail "cannot plant segments in /dev/shm"
for f in "$log_hand" "$log_run"; do
	printf '==1==ERROR: AddressSanitizer: heap-use-after-free (planted by %s)\n' \
		"$0" >"$f" || fail "cannot plant $f"
done

tests/run.sh --quick --only release/test_layout >"$out" 2>&1
rc=$?
[ $rc = 0 ] || fail "tests/run.sh exited $rc with another run's files around"
tail -n 1 "$out" | grep -q '^1 passed, 0 failed, 0 skipped, 0 ran (not assertions)$' ||
	fail "the last line is not '1 passed, 0 failed, 0 skipped, 0 ran (not assertions)'"
for f in "$seg_hand" "$seg_run" "$log_hand" "$log_run"; do
	[ -e "$f" ] || fail "tests/run.sh removed $f, which another live run owns"
done
echo "ok: another run's segments and logs kept, not blamed, not grepped"
