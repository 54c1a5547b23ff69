#!/bin/sh
# tests/agent/test_options_doc.sh - kvpoold's flags are declared once, in
# agent/options.c's table, and the docs say what the table says:
#  1. README's "Agent flags" block is `kvpoold --synopsis`, byte for byte
#     (regenerate it with that command);
#  2. every flag on a kvpoold command line in README.md and docs/*.md
#     (`kvpoold --...`, `kvpoold [...]`, KVPOOLD_ARGS="...", joined over
#     trailing backslashes) is one the table has;
#  3. --help and --print-config name every flag of the table, each once.
set -u
cd "$(dirname "$0")/../.."
B=${KVP_BIN:-build/release}
T=$(mktemp -d /tmp/kvpt-optdoc.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
bad=0
fail() { echo "FAIL: $*"; bad=1; }

"$B/kvpoold" --synopsis >"$T/synopsis" || { echo "FAIL: kvpoold --synopsis"; exit 1; }
grep -o -- '--[a-z][a-z-]*' "$T/synopsis" | sort -u >"$T/flags"
[ "$(wc -l <"$T/flags")" -ge 30 ] || fail "kvpoold --synopsis names $(wc -l <"$T/flags") flags"

# 1. the README's block (the first code block after "## Agent flags")
awk '/^## Agent flags/ { s = 1; next }
	s == 1 && /^```$/ { s = 2; next }
	s == 2 && /^```$/ { exit }
	s == 2 { print }' README.md >"$T/readme_block"
if cmp -s "$T/synopsis" "$T/readme_block"; then
	echo "ok: README's Agent flags block is kvpoold --synopsis"
else
	fail "README's Agent flags block differs from kvpoold --synopsis (paste its output):"
	diff "$T/readme_block" "$T/synopsis" | sed 's/^/    /'
fi

# 2. flags on kvpoold command lines in the docs
for doc in README.md docs/*.md; do
	awk '{ while (/\\$/ && (getline nxt) > 0) { sub(/\\$/, ""); $0 = $0 " " nxt } print }' "$doc" |
		grep -e 'kvpoold --' -e 'kvpoold \[' -e 'KVPOOLD_ARGS="' |
		grep -o -- '--[a-z][a-z-]*' | sort -u | while IFS= read -r f; do
		case $f in --help | --print-config | --synopsis | --ucx-probe) continue ;; esac
		grep -qx -- "$f" "$T/flags" || echo "$doc: $f"
	done
done >"$T/unknown"
if [ -s "$T/unknown" ]; then
	fail "the docs give kvpoold flags its table lacks:"
	sed 's/^/    /' "$T/unknown"
else
	echo "ok: every kvpoold flag in README.md and docs/*.md is in the table"
fi

# 3. --help and --print-config: every flag, once each
"$B/kvpoold" --help >"$T/help" || fail "kvpoold --help"
"$B/kvpoold" --print-config >"$T/config" || fail "kvpoold --print-config"
while IFS= read -r f; do
	[ "$(grep -c -- "^  $f\( \|$\)" "$T/help")" = 1 ] || fail "--help does not list $f once"
	[ "$(grep -c -- "^# $f\( \|$\)" "$T/config")" = 1 ] || fail "--print-config does not list $f once"
done <"$T/flags"
# the config is all comments (the unit reads it as an EnvironmentFile)
grep -v '^#' "$T/config" | grep -q . && fail "--print-config prints a line that is not a comment"
[ "$(awk 'length > 79' "$T/help" "$T/config" "$T/synopsis" | wc -l)" = 0 ] ||
	fail "a line of --help, --print-config or --synopsis is wider than 79 columns"
[ $bad = 0 ] && echo "ok: $(wc -l <"$T/flags") flags, README and docs agree with agent/options.c"
exit $bad
