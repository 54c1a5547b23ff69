#!/bin/sh
# tests/client/test_exports.sh - libkvpool.so exports exactly the API of
# kvpool.h, and has a SONAME.  Three lists must be one: the calls kvpool.h
# declares (KVP_API), the global names of libkvpool.map, and what
# nm -D --defined-only lists for the library, each in version KVPOOL_1.0.
# The library is build/<variant>/libkvpool.so.1.0.0, its SONAME
# libkvpool.so.1, with the links libkvpool.so.1 and libkvpool.so (the
# name the dynamic loader and the linker look for).
# Usage: test_exports.sh [VARIANT...] (default: release)
set -u
cd "$(dirname "$0")/../.."
for t in nm readelf; do
	command -v $t >/dev/null 2>&1 || { echo "SKIP: $t not installed (binutils)"; exit 77; }
done
[ $# -gt 0 ] || set -- release
tmp=$(mktemp -d /tmp/kvpt-exports.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
bad=0 now=0
fail() { echo "FAIL: $*"; bad=1 now=1; }

# the calls kvpool.h declares: "KVP_API <type> [*]name(" at the start of a line
grep -o '^KVP_API [^(]*(' kvpool.h | sed 's/($//; s/.*[ *]//' | sort >"$tmp/api"
napi=$(wc -l <"$tmp/api")
[ "$napi" -gt 0 ] || fail "no KVP_API declaration in kvpool.h"
# the map's names: between "global:" and "local:", one "name;" a line
sed -n '/global:/,/local:/p' libkvpool.map | sed -n 's/^[[:space:]]*\([A-Za-z_][A-Za-z0-9_]*\);.*/\1/p' |
	sort >"$tmp/map"
grep -q '^[[:space:]]*\*;' libkvpool.map || fail "libkvpool.map does not end with local: *;"
if ! cmp -s "$tmp/api" "$tmp/map"; then
	fail "libkvpool.map and the calls kvpool.h declares differ (< kvpool.h, > map):"
	diff "$tmp/api" "$tmp/map" | grep '^[<>]' | sed 's/^/    /'
fi
[ $now = 1 ] || echo "ok: kvpool.h declares $napi calls, libkvpool.map exports the same"

for v in "$@"; do
	d=build/$v lib=build/$v/libkvpool.so.1.0.0 now=0
	[ -f "$lib" ] || { fail "$lib not built (ninja $v)"; continue; }
	# the SONAME, and the links a loader and a linker look for
	soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
	[ "$soname" = libkvpool.so.1 ] || fail "$lib: SONAME '$soname', want libkvpool.so.1"
	[ "$(readlink "$d/libkvpool.so.1")" = libkvpool.so.1.0.0 ] ||
		fail "$d/libkvpool.so.1 is not a link to libkvpool.so.1.0.0"
	[ "$(readlink "$d/libkvpool.so")" = libkvpool.so.1 ] ||
		fail "$d/libkvpool.so is not a link to libkvpool.so.1"
	# what it defines: every dynamic symbol but the version node itself
	nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' >"$tmp/nm.raw"
	sed 's/@.*//' "$tmp/nm.raw" | sort >"$tmp/nm"
	if ! cmp -s "$tmp/api" "$tmp/nm"; then
		fail "$lib: nm -D --defined-only and kvpool.h's calls differ (< kvpool.h, > library):"
		diff "$tmp/api" "$tmp/nm" | grep '^[<>]' | sed 's/^/    /'
	fi
	unver=$(grep -v '@@KVPOOL_1\.0$' "$tmp/nm.raw")
	[ -z "$unver" ] || fail "$lib: not in version KVPOOL_1.0: $(echo $unver)"
	[ $now = 1 ] ||
		echo "ok: $lib: SONAME $soname, exports the $napi calls of kvpool.h, each @@KVPOOL_1.0"
done
[ $bad = 0 ]
