#!/bin/sh
# demo.sh - from a fresh Debian 12 machine: install what kvpool needs,
# build it, start the agent on its built-in defaults and run a demo
# workload of several worker processes sharing the pool.
set -eu
cd "$(dirname "$0")"
PKGS="build-essential ninja-build liburing-dev libatomic-ops-dev libjemalloc-dev libcmocka-dev"
PKGS="$PKGS libmicrohttpd-dev" # the agent's /metrics endpoint
PKGS="$PKGS python3"           # the Python binding (python/kvpool) and its demo
PKGS="$PKGS libucx-dev libhiredis-dev" # the remote tier (kvpoold --cluster): UCX, Redis
if ! dpkg -s $PKGS >/dev/null 2>&1; then
	SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PKGS
fi
./configure
ninja
# the agent on built-in defaults (pool "default"); already running is fine
if ! build/release/kvpool stat >/dev/null 2>&1 || \
   build/release/kvpool stat | grep -q 'agent DOWN'; then
	# its log: /run/kvpool (root) or $XDG_RUNTIME_DIR/kvpool; a user
	# without a runtime directory (a container) logs in build/
	if [ "$(id -u)" != 0 ] && [ -z "${XDG_RUNTIME_DIR:-}" ]; then
		build/release/kvpoold --log build/kvpoold.default.log
	else
		build/release/kvpoold
	fi
fi
build/release/kvpool_demo --procs 4 --seconds 10
# the same pool from Python (python/kvpool, ctypes over libkvpool.so.1)
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=python python3 python/demo.py
build/release/kvpool stat
echo "the agent keeps running: stop it with 'pkill kvpoold' (segment /dev/shm/kvpool.default)"
