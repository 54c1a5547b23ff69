#!/bin/sh
# tests/client/test_cxx_header.sh - kvpool.h compiles as C++17 without a
# warning (engines are C++, many build with -Werror): tests/client/
# test_cxx.cc, which includes it and calls every function, compiled by g++
# -std=c++17 -Wall -Wextra -Wpedantic -Werror at -O0 and -O2 (the
# optimizer's warnings), header only and with KVP_LINK_SHARED.  And with
# KVP_LINK_SHARED kvpool.h stands alone: copied into an empty directory,
# it compiles as C++17 and as C11 (the project's warning flags, -Werror)
# with nothing else of the tree, as a program linking -lkvpool sees it.
set -u
cd "$(dirname "$0")/../.."
cxx=${KVP_CXX:-g++} cc=${KVP_CC:-cc}
command -v "$cxx" >/dev/null 2>&1 || { echo "SKIP: no C++ compiler ($cxx): apt-get install g++"; exit 77; }
tmp=$(mktemp -d /tmp/kvpt-cxx.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
bad=0
flags="-std=c++17 -Wall -Wextra -Wpedantic -Werror"
for mode in "" -DKVP_LINK_SHARED; do
	for o in -O0 -O2; do
		what="$cxx $flags $o ${mode:-(header only)}"
		if $cxx $flags $o $mode -I. -c tests/client/test_cxx.cc -o "$tmp/t.o" 2>"$tmp/err"; then
			echo "ok: $what"
		else
			echo "FAIL: $what:"; sed 's/^/    /' "$tmp/err" | head -40; bad=1
		fi
	done
done
# kvpool.h alone: no shm/, no atomic_ops.h needed
mkdir "$tmp/inc"
cp kvpool.h "$tmp/inc/"
cat >"$tmp/alone.c" <<'SRC'
#define KVP_LINK_SHARED
#include <kvpool.h>
int use(void);
int use(void)
{
	static struct kvp_op op;
	static struct kvp_lease lease;
	struct kvp_client *c;
	int rc = kvp_open("default", "ns", &c);

	if (rc == 0) {
		rc = (int)kvp_get(c, op.key, op.klen, op.buf, op.len);
		kvp_lease_release(c, &lease);
		kvp_close(c);
	}
	return rc;
}
SRC
cp "$tmp/alone.c" "$tmp/alone.cc"
warn=$(sed -n 's/^warn = //p' build.ninja)
[ -n "$warn" ] || { echo "FAIL: no 'warn =' in build.ninja"; exit 1; }
if $cxx $flags -I"$tmp/inc" -c "$tmp/alone.cc" -o "$tmp/a.o" 2>"$tmp/err"; then
	echo "ok: kvpool.h alone (KVP_LINK_SHARED) as C++17"
else
	echo "FAIL: kvpool.h alone (KVP_LINK_SHARED) as C++17:"; sed 's/^/    /' "$tmp/err" | head -20; bad=1
fi
# shellcheck disable=SC2086
if $cc $warn -Werror -I"$tmp/inc" -c "$tmp/alone.c" -o "$tmp/a.o" 2>"$tmp/err"; then
	echo "ok: kvpool.h alone (KVP_LINK_SHARED) as C11"
else
	echo "FAIL: kvpool.h alone (KVP_LINK_SHARED) as C11:"; sed 's/^/    /' "$tmp/err" | head -20; bad=1
fi
[ $bad = 0 ]
