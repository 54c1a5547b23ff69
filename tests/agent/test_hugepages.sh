#!/bin/sh
# tests/agent/test_hugepages.sh - the pool on 2 MiB pages (kvpoold
# --hugepages on): reserve a small huge page pool and mount a hugetlbfs
# of our own, then run test_populate's huge page test and the existing
# pool tests (test_pool, test_pin) with every agent on that backing.
# Root only (it writes /proc/sys/vm/nr_hugepages and mounts): exit 77
# (skip) otherwise, or when the kernel cannot give the pages.  Everything
# is put back on exit: the mount, and nr_hugepages as it was.
#
#   tests/agent/test_hugepages.sh [BUILD_DIR]   (default build/release)
set -u
cd "$(dirname "$0")/../.." || exit 2
bin=${1:-build/release}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (nr_hugepages, mount)"; exit 77; }
sys=/proc/sys/vm/nr_hugepages
[ -w $sys ] || { echo "SKIP: $sys is not writable here"; exit 77; }
before=$(cat $sys)
# the largest agent these tests start: --dram 256M (about 330 MiB with its
# index): 512 pages (1 GiB) leave room for the two a test may run at once
want=$((before + 512))
mnt=$(mktemp -d /tmp/kvpt-huge-XXXXXX) || exit 2
cleanup() {
	umount "$mnt" 2>/dev/null
	rmdir "$mnt" 2>/dev/null
	echo "$before" >$sys
}
trap cleanup EXIT INT TERM
echo "$want" >$sys
got=$(cat $sys)
if [ "$got" -lt "$want" ]; then
	echo "SKIP: asked for $want huge pages, the kernel gave $got (memory too fragmented)"
	exit 77
fi
mount -t hugetlbfs -o pagesize=2M,mode=0700 none "$mnt" || {
	echo "SKIP: cannot mount hugetlbfs"
	exit 77
}
fail=0
echo "== test_populate (hugepages on $mnt)"
KVPT_HUGETLBFS=$mnt "$bin/test_populate" || fail=1
for t in test_pool test_pin; do
	echo "== $t with every agent on --hugepages on --hugetlbfs $mnt"
	KVPT_AGENT_ARGS="--hugepages on --hugetlbfs $mnt" "$bin/$t" || fail=1
done
# nothing of ours left on the mount
left=$(ls -A "$mnt")
[ -z "$left" ] || { echo "FAIL: left on $mnt: $left"; fail=1; }
exit $fail
