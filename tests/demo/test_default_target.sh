#!/bin/sh
# tests/demo/test_default_target.sh - plain `ninja` (the default target,
# what demo.sh builds) links only libraries whose Debian package demo.sh
# installs: the README's first command works on a fresh Debian 12 machine.
# Programs that need more (bench_peers: LMDB, hiredis) live in 'ninja bench'.
set -u
cd "$(dirname "$0")/../.."
[ -f build.ninja ] || ./configure >/dev/null || exit 1
# the packages demo.sh installs (its PKGS="..." and PKGS="$PKGS ..." lines)
pkgs=$(sed -n 's/^PKGS="\(\$PKGS \)\{0,1\}\([^"]*\)".*/\2/p' demo.sh | tr '\n' ' ')
[ -n "$pkgs" ] || { echo "FAIL: no PKGS in demo.sh"; exit 1; }
# every -lNAME the default target's link commands use
libs=$(ninja -t commands | tr ' ' '\n' | sed -n 's/^-l\(.*\)/\1/p' | sort -u)
[ -n "$libs" ] || { echo "FAIL: no link command in the default target"; exit 1; }
bad=0
for l in $libs; do
	case $l in
	pthread|m|c|dl|rt) pkg=build-essential ;;
	atomic_ops) pkg=libatomic-ops-dev ;;
	jemalloc) pkg=libjemalloc-dev ;;
	uring) pkg=liburing-dev ;;
	cmocka) pkg=libcmocka-dev ;;
	microhttpd) pkg=libmicrohttpd-dev ;;
	ucp|ucs) pkg=libucx-dev ;;
	hiredis) pkg=libhiredis-dev ;;
	*) pkg= ;;
	esac
	if [ -z "$pkg" ]; then
		echo "FAIL: the default target links -l$l, a library demo.sh does not install" \
			"(move its program to BENCH_PROGRAMS in configure, or add its package" \
			"to demo.sh and to this table)"
		bad=1
	elif ! echo " $pkgs " | grep -q " $pkg "; then
		echo "FAIL: the default target links -l$l but demo.sh does not install $pkg"
		bad=1
	else
		echo "ok: -l$l ($pkg)"
	fi
done
[ $bad = 0 ]
