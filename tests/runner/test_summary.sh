#!/bin/sh
# tests/runner/test_summary.sh - tests/run.sh counts what it checked apart
# from what it did not: a run that skips (exit 77) is counted as skipped,
# not passed, and does not fail the run; the last line is the four counts
# "P passed, F failed, S skipped, R ran (not assertions)".
#
# The skip is a real one: test_prometheus.sh pointed at a Prometheus
# binary that does not exist ($PROMETHEUS) skips, saying so.
set -u
cd "$(dirname "$0")/../.." || exit 1
out=$(mktemp /tmp/kvpt-runner.XXXXXX) || exit 1
trap 'rm -f "$out"' EXIT INT TERM

fail() { echo "FAIL: $*"; sed 's/^/  inner | /' "$out"; exit 1; }

PROMETHEUS=/nonexistent/prometheus tests/run.sh --quick \
	--only "prometheus server scrapes" >"$out" 2>&1
rc=$?
[ $rc = 0 ] || fail "tests/run.sh exited $rc for a run that only skipped"
grep -q '^SKIP release/obs prometheus server scrapes kvpoold' "$out" ||
	fail "no SKIP line for the skipped run"
# the reason: prometheus, or a tool checked before it (jq) on a machine
# with only the README's packages
grep -q '^     | SKIP: [^ ].* not installed' "$out" ||
	fail "the SKIP line does not say why"
tail -n 1 "$out" | grep -q '^0 passed, 0 failed, 1 skipped, 0 ran (not assertions)$' ||
	fail "the last line is not '0 passed, 0 failed, 1 skipped, 0 ran (not assertions)'"
echo "ok: a skip is counted as skipped, with its reason, and fails nothing"
