#!/bin/sh
# SPDX-License-Identifier: MIT
#
# stress/bench_drives.sh - two SSD drives against one (bench_ssd --only
# drives): makes two block devices, runs demotion and cold batch_get of
# 1 MiB values on the first alone and then on both, and cleans up.
#
# The devices: two loop devices (losetup --direct-io) on files in
# /var/tmp, ext4, mounted under /tmp/kvpool-bench-drives.PID.  On a machine
# with one disk both files share it, so, by default, each loop device is
# throttled (cgroup v1 blkio, read and write) to --mbps MB/s: each then
# stands for one drive of that bandwidth, and what is measured is whether
# the pool drives two devices at once.  --mbps 0: no throttle (both share
# the disk's bandwidth).  Root only.
#
#   stress/bench_drives.sh [--mbps N] [--size GiB] [--quick] [--bindir DIR]
set -eu

mbps=300 size=6 quick= bindir=build/release
while [ $# -gt 0 ]; do
	case $1 in
	--mbps) mbps=$2; shift ;;
	--size) size=$2; shift ;;
	--quick) quick=--quick ;;
	--bindir) bindir=$2; shift ;;
	*) echo "usage: $0 [--mbps N] [--size GiB] [--quick] [--bindir DIR]"; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || { echo "bench_drives: needs root (losetup, mount)"; exit 77; }
bench=$(cd "$bindir" && pwd)/bench_ssd
[ -x "$bench" ] || { echo "bench_drives: no $bench (ninja first)"; exit 2; }

top=/tmp/kvpool-bench-drives.$$
img=/var/tmp/kvpool-bench-drives.$$
cg=/sys/fs/cgroup/blkio/kvpool-bench-drives.$$
loops=
cleanup() {
	set +e
	for d in 0 1; do
		mountpoint -q "$top/d$d" && umount "$top/d$d"
	done
	for l in $loops; do losetup -d "$l"; done
	rm -f "$img.0" "$img.1"
	rm -rf "$top"
	if [ -d "$cg" ]; then
		echo $$ >/sys/fs/cgroup/blkio/cgroup.procs
		rmdir "$cg"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$top"
for d in 0 1; do
	truncate -s "${size}G" "$img.$d"
	l=$(losetup --find --show --direct-io=on "$img.$d")
	loops="$loops $l"
	mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$l"
	mkdir -p "$top/d$d"
	mount -o noatime "$l" "$top/d$d"
	mkdir -m 0700 "$top/d$d/kvpool"
done
echo "bench_drives: loop devices$loops on /var/tmp files, ext4, in $top"
if [ "$mbps" -gt 0 ]; then
	if mkdir "$cg" 2>/dev/null; then
		for l in $loops; do
			mm=$(lsblk -dno MAJ:MIN "$l" | tr -d ' ')
			bps=$((mbps * 1000000))
			echo "$mm $bps" >"$cg/blkio.throttle.read_bps_device"
			echo "$mm $bps" >"$cg/blkio.throttle.write_bps_device"
		done
		echo $$ >"$cg/cgroup.procs"
		echo "bench_drives: each device throttled to $mbps MB/s (blkio)"
	else
		echo "bench_drives: no blkio cgroup here: devices not throttled"
	fi
fi
"$bench" $quick --only drives --dir "$top/d0" \
	--drives "$top/d0/kvpool,$top/d1/kvpool"
