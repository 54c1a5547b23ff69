#!/bin/sh
# tests/client/test_exports.sh - libkvpool.so exports exactly the API of
# kvpool.h, and has a SONAME.  Three lists must be one: the calls kvpool.h
# declares (KVP_API), the global names of libkvpool.map, and what
# nm -D --defined-only lists for the library, each in the version node
# the map puts it in (KVPOOL_1.0, KVPOOL_1.1, ...).  The library is
# build/<variant>/libkvpool.so.$SO_VERSION (configure), its SONAME
# libkvpool.so.1, with the links libkvpool.so.1 and libkvpool.so (the
# name the dynamic loader and the linker look for).
# Usage: test_exports.sh [VARIANT|DIR...] (default: release); an argument
# with a '/' is a directory holding the library and its links (an
# installed libdir: tests/install/test_install.sh).
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
# the map's names, one "name;" a line, with their node: "name@@NODE"
awk '/^KVPOOL_[0-9.]+ *\{/ { node = $1 }
	/^[[:space:]]*[A-Za-z_][A-Za-z0-9_]*;/ { sub(/;.*/, ""); gsub(/[[:space:]]/, ""); print $0 "@@" node }' \
	libkvpool.map | sort >"$tmp/map.ver"
sed 's/@@.*//' "$tmp/map.ver" | sort >"$tmp/map"
# configure computes it from kvpool.h's KVPOOL_VERSION_*: read what it wrote
so_version=$(sed -n 's/.* --so-version=\([0-9.]*\) .*/\1/p' build.ninja | head -n1)
grep -q '^[[:space:]]*\*;' libkvpool.map || fail "libkvpool.map does not end with local: *;"
if ! cmp -s "$tmp/api" "$tmp/map"; then
	fail "libkvpool.map and the calls kvpool.h declares differ (< kvpool.h, > map):"
	diff "$tmp/api" "$tmp/map" | grep '^[<>]' | sed 's/^/    /'
fi
[ $now = 1 ] || echo "ok: kvpool.h declares $napi calls, libkvpool.map exports the same"

for v in "$@"; do
	case $v in
	*/*) d=${v%/} ;;
	*) d=build/$v ;;
	esac
	lib=$d/libkvpool.so.$so_version now=0
	[ -f "$lib" ] || { fail "$lib not built (ninja $v)"; continue; }
	# the SONAME, and the links a loader and a linker look for
	soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
	[ "$soname" = libkvpool.so.1 ] || fail "$lib: SONAME '$soname', want libkvpool.so.1"
	[ "$(readlink "$d/libkvpool.so.1")" = libkvpool.so.$so_version ] ||
		fail "$d/libkvpool.so.1 is not a link to libkvpool.so.$so_version"
	[ "$(readlink "$d/libkvpool.so")" = libkvpool.so.1 ] ||
		fail "$d/libkvpool.so is not a link to libkvpool.so.1"
	# what it defines: every dynamic symbol but the version node itself
	nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' >"$tmp/nm.raw"
	sed 's/@.*//' "$tmp/nm.raw" | sort >"$tmp/nm"
	if ! cmp -s "$tmp/api" "$tmp/nm"; then
		fail "$lib: nm -D --defined-only and kvpool.h's calls differ (< kvpool.h, > library):"
		diff "$tmp/api" "$tmp/nm" | grep '^[<>]' | sed 's/^/    /'
	fi
	sort "$tmp/nm.raw" >"$tmp/nm.ver"
	if ! cmp -s "$tmp/map.ver" "$tmp/nm.ver"; then
		fail "$lib: a call not in the version node the map gives it (< map, > library):"
		diff "$tmp/map.ver" "$tmp/nm.ver" | grep '^[<>]' | sed 's/^/    /'
	fi
	[ $now = 1 ] ||
		echo "ok: $lib: SONAME $soname, exports the $napi calls of kvpool.h, each in its map node"
done
[ $bad = 0 ]
