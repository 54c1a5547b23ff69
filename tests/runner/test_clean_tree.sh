#!/bin/sh
# tests/runner/test_clean_tree.sh - tests/run.sh fails a run that leaves
# the git working tree other than it found it, and names the files: one
# the run created, and one that was already untracked (or modified) and
# whose contents the run changed, which `git status` alone does not show.
#
# The writer is a real test of the run: test_prometheus.sh, with
# $PROMETHEUS pointing at a script that writes both files (then fails: the
# inner test fails too, which is not what is checked here).  Skipped
# outside a git checkout, where tests/run.sh skips the check itself.
set -u
cd "$(dirname "$0")/../.." || exit 1
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || {
	echo "SKIP: not a git checkout"
	exit 77
}
me=$$
planted=kvpt-planted.$me
created=kvpt-created.$me
out=$(mktemp /tmp/kvpt-runner.XXXXXX) || exit 1
writer=$(mktemp /tmp/kvpt-writer.XXXXXX) || exit 1
cleanup() {
	# the failed inner run kept its agents' logs: they are this test's
	logs=$(sed -n 's|^agent logs: \(/tmp/kvpt-run-[0-9]*\.[A-Za-z0-9]*\)$|\1|p' "$out")
	[ -z "$logs" ] || rm -rf "$logs"
	rm -f "$planted" "$created" "$out" "$writer"
}
trap cleanup EXIT INT TERM

fail() { echo "FAIL: $*"; sed 's/^/  inner | /' "$out"; exit 1; }

echo "planted before the run" >"$planted" || fail "cannot write $planted"
printf '#!/bin/sh\necho changed >>"%s/%s"\necho new >"%s/%s"\nexit 1\n' \
	"$PWD" "$planted" "$PWD" "$created" >"$writer" && chmod +x "$writer" ||
	fail "cannot write $writer"

PROMETHEUS=$writer tests/run.sh --quick --only "prometheus server scrapes" >"$out" 2>&1
rc=$?
[ $rc != 0 ] || fail "tests/run.sh exited 0 though the run wrote into the tree"
[ -e "$created" ] || fail "the writer did not run (the check was not exercised)"
grep -q '^FAIL the run changed the git working tree' "$out" ||
	fail "no FAIL line for the changed working tree"
for f in "$planted" "$created"; do
	grep -q "^     | $f\$" "$out" || fail "the FAIL line does not name $f"
done
n=$(sed -n '/^FAIL the run changed the git working tree/,/^[^ ]/p' "$out" | grep -c '^     | ')
[ "$n" = 2 ] || fail "it names $n files, not the 2 the run touched"
tail -n 1 "$out" | grep -q '^0 passed, 2 failed, 0 skipped, 0 ran (not assertions)$' ||
	fail "the last line is not '0 passed, 2 failed, 0 skipped, 0 ran (not assertions)'"
echo "ok: a run that writes into the tree fails, naming the new and the changed file"
