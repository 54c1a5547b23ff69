#!/bin/sh
# tests/structure/test_format.sh - the tree passes its .clang-format:
# clang-format (Debian 12's, 14) changes nothing in any C, C++ or header
# file git tracks.  Prints the files it would change and the first lines
# of the change; SKIP (77) when clang-format is not installed (.ci/run
# installs it; the README's --quick run needs only the build packages).
set -u
cd "$(dirname "$0")/../.."
cf=${KVP_CLANG_FORMAT:-clang-format}
command -v "$cf" >/dev/null 2>&1 || { echo "SKIP: $cf not installed (apt-get install clang-format)"; exit 77; }
tmp=$(mktemp -d /tmp/kvpt-fmt.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
bad=0 n=0
srcs=$(git ls-files '*.c' '*.h' '*.cc' 2>/dev/null) ||
	srcs=$(find . -path ./build -prune -o \( -name '*.c' -o -name '*.h' -o -name '*.cc' \) -print | sed 's|^\./||' | sort)
for f in $srcs; do
	n=$((n + 1))
	"$cf" --style=file "$f" >"$tmp/out" 2>"$tmp/err" || { echo "FAIL: $cf $f:"; cat "$tmp/err"; bad=1; continue; }
	if ! cmp -s "$f" "$tmp/out"; then
		echo "FAIL: $f is not formatted (clang-format -i $f):"
		diff -u "$f" "$tmp/out" | sed -n '3,14p' | sed 's/^/    /'
		bad=1
	fi
done
[ $bad = 0 ] && echo "ok: $n files pass .clang-format ($($cf --version | head -1))"
exit $bad
