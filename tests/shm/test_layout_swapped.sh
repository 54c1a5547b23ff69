#!/bin/sh
# tests/shm/test_layout_swapped.sh - the layout test fails when two
# fields of the header are swapped.  test_layout.c is built with
# KVP_TEST_SWAP_HEADER (shm/kvp_shm.h: h_ssd_used_bytes and
# h_ssd_live_bytes, both 8 bytes, trade places; every size stays) and its
# layout checks must fail, both of them: the field list no longer tiles
# the header (a field sits before the one listed ahead of it), and the
# signature is not the one recorded for this ABI.  The normal build
# passes them (test_layout in the unit tests), so the define is what
# fails them; tests/shm/test_layout_swap.c shows the same build refused
# by a real agent (-EPROTO).
set -u
cd "$(dirname "$0")/../.."
cc=${KVP_CC:-cc}
tmp=$(mktemp -d /tmp/kvpt-swap.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
if ! $cc -std=c11 -D_GNU_SOURCE -O1 -DKVP_TEST_SWAP_HEADER -I. -o "$tmp/test_layout" \
	tests/shm/test_layout.c tests/agent/harness.c -lcmocka -latomic_ops -lpthread \
	-lmicrohttpd -lm 2>"$tmp/err"; then
	echo "FAIL: the swapped build does not compile:"; sed 's/^/    /' "$tmp/err"
	exit 1
fi
"$tmp/test_layout" >"$tmp/out" 2>&1
rc=$?
sed 's/^/    | /' "$tmp/out"
bad=0
[ $rc -ne 0 ] || { echo "FAIL: test_layout passed with two header fields swapped"; bad=1; }
for t in test_field_lists_tile test_signature_recorded; do
	if grep -q "FAILED  \] $t" "$tmp/out"; then
		echo "ok: $t fails on the swapped build"
	else
		echo "FAIL: $t did not fail on the swapped build"; bad=1
	fi
done
exit $bad
