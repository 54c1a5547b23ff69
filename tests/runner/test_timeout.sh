#!/bin/sh
# tests/runner/test_timeout.sh - tests/run.sh stops a run that hangs: with
# a limit of 3 s, a run that never ends is stopped, printed as FAIL with
# its name and the reason, counted as failed, and the run ends (well
# before the hung command would have).
set -u
cd "$(dirname "$0")/../.." || exit 1
out=$(mktemp /tmp/kvpt-runner.XXXXXX) || exit 1
trap 'rm -f "$out"' EXIT INT TERM

fail() { echo "FAIL: $*"; sed 's/^/  inner | /' "$out"; exit 1; }

t0=$(date +%s)
KVPT_RUNNER_HANG=1 KVP_TEST_TIMEOUT=3 tests/run.sh --quick \
	--only "a run that hangs" >"$out" 2>&1
rc=$?
t1=$(date +%s)
[ $rc != 0 ] || fail "tests/run.sh exited 0 for a run that hung"
grep -q '^FAIL runner: a run that hangs (self-test)' "$out" ||
	fail "no FAIL line naming the hung run"
grep -q 'TIMEOUT: stopped after 3s' "$out" || fail "the FAIL does not say it timed out"
tail -n 1 "$out" | grep -q '^0 passed, 1 failed, 0 skipped, 0 ran (not assertions)$' ||
	fail "the last line does not count one failure"
[ $((t1 - t0)) -lt 120 ] || fail "the run took $((t1 - t0)) s"
echo "ok: a hung run is stopped after its limit and fails by name"
