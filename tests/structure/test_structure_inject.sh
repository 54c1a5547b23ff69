#!/bin/sh
# tests/structure/test_structure_inject.sh - test_structure.sh can fail:
# on a copy of the tree (sources, and the release build's agent objects,
# their times kept), it must pass as it is, then fail, naming the file,
# on each injected defect, one at a time:
#  - a write of each shared word outside its owner (the index state word,
#    and every row of test_structure.sh's table of owners, each family of
#    words in a row), as an atomic store, a CAS, an add, a memset or
#    memcpy, a plain assignment or a pointer kept;
#  - a field added to a shared type's field list (shm/kvp_shm.h) that no
#    row of the table owns;
#  - a call cycle between two agent files: a file that an agent file
#    calls is made to call it back (an extern reference compiled into its
#    object, with the build's own command).
# SKIP (77) without the release build's objects (tests/run.sh builds
# them first), or without ninja or nm.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
objdir=build/release/obj
for t in ninja nm tar; do
	command -v $t >/dev/null 2>&1 || { echo "SKIP: $t not installed"; exit 77; }
done
[ -f "$objdir/agent/loop.o" ] || { echo "SKIP: no release objects in $objdir (run ninja)"; exit 77; }
tmp=$(mktemp -d /tmp/kvpt-inject.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
tree=$tmp/tree
mkdir -p "$tree"
srcs=$(git ls-files 2>/dev/null) ||
	srcs=$(find . -path ./build -prune -o -type f -print | sed 's|^\./||')
# tar keeps the files' times: the objects stay newer than their sources
echo "$srcs" | tar cf - -T - | tar xf - -C "$tree" || exit 1
mkdir -p "$tree/$objdir/agent"
cp -p "$objdir"/agent/*.o "$tree/$objdir/agent/" || exit 1
fail=0

check() { # check <what> <expected text>...: the structure test fails here
	what=$1
	shift
	if sh "$tree/tests/structure/test_structure.sh" >"$tmp/out" 2>&1; then
		echo "FAIL: $what: the structure test passed"
		sed 's/^/    /' "$tmp/out"
		fail=1
		return
	fi
	for want in "$@"; do
		if ! grep -qF -- "$want" "$tmp/out"; then
			echo "FAIL: $what: the structure test failed without naming \"$want\":"
			sed 's/^/    /' "$tmp/out"
			fail=1
			return
		fi
	done
	echo "ok: $what: $(grep -F -- "${SHOW:-$1}" "$tmp/out" | head -1 | sed 's/^ *//' | cut -c1-110)"
}

# the copy passes as it is
if ! sh "$tree/tests/structure/test_structure.sh" >"$tmp/out" 2>&1 ||
	grep -q '^SKIP' "$tmp/out"; then
	echo "FAIL: the copy of the tree does not pass the structure test as it is:"
	sed 's/^/    /' "$tmp/out"
	exit 1
fi

# inject <file> <what> <statement>: the statement, in a function of its
# own at the end of file, must make the test fail naming the file
inject() {
	f=$1 what=$2 stmt=$3
	cp -p "$tree/$f" "$tmp/keep"
	printf '\nstatic void\nkvp__inject(struct kvp_seg *s)\n{\n\t%s\n}\n' "$stmt" >>"$tree/$f"
	line=$(($(wc -l <"$tmp/keep") + 5))
	check "$what (in $f)" "$f:$line:"
	cp -p "$tmp/keep" "$tree/$f"
}
inject agent/loop.c "index state word, CAS" 'kvp_cas(&s->meta[0], 0, 1);'
inject agent/loop.c "client slot word, store" 'kvp_store_release(&s->clients[0].cs_state, 0);'
inject shm/kvp_ring.h "client slot word, in another owner" 'kvp_store_relaxed(&s->clients[0].cs_pid, 0);'
inject agent/loop.c "hold slot, store" 'kvp_store_release(&s->holds[3], 0);'
inject agent/loop.c "hold high-water mark, store" 'kvp_store_relaxed(&s->clients[1].cs_hold_hwm, 0);'
inject agent/loop.c "request ring word, CAS" 'kvp_cas(&s->rings[0].rq_state, 0, 1);'
inject shm/client_read_int.h "request field, store" 'kvp_store_relaxed(&s->rings[0].rq_result, 0);'
inject agent/loop.c "staging span word, store" 'kvp_store_release(&s->spans[0].sp_state, 0);'
inject agent/loop.c "span holder bits, memset" 'memset(s->spans[0].sp_holders, 0, 8);'
inject agent/loop.c "lease word, CAS" 'kvp_cas(&s->leases[0].ls_state, 0, 1);'
inject agent/loop.c "mailbox word, store" 'kvp_store_release(&((struct kvp_rbox *)s->base)->rb_state, 0);'
inject agent/loop.c "mailbox answer ready word, store" 'kvp_istore_release(&((struct kvp_rbox_ans *)s->base)->ra_ready, 1);'
inject agent/loop.c "DRAM page map, plain assignment" 's->pages[0].pg_state = 0;'
inject agent/loop.c "DRAM header, store" 'kvp_store_relaxed(&s->dram->dh_damaged, 0);'
inject agent/loop.c "allocator claim, store" 'kvp_istore_release(&s->clients[0].cs_alloc_claim, 0);'
inject shm/client_write_int.h "index count share, store" 'kvp_store_release(&s->clients[0].cs_ix_resv, 0);'
inject agent/loop.c "index count, CAS" 'kvp_cas(&s->hdr->h_ix_used, 1, 0);'
inject agent/loop.c "client slot word, pointer kept" 'kvp_aword_t *p = &s->clients[0].cs_state; (void)p;'
inject agent/loop.c "lease word, pointer kept" 'kvp_aword_t *p = &s->leases[0].ls_state; (void)p;'
# the client slot's other words (shm/kvp_slot.h)
inject agent/metrics.c "client namespace id, store" 'kvp_store_relaxed(&s->clients[0].cs_ns_id, 0);'
inject agent/metrics.c "client namespace name, memset" 'memset(s->clients[0].cs_ns, 0, 8);'
inject shm/client_read_int.h "client call number, store" 'kvp_store_relaxed(&s->clients[0].cs_call_seq, 0);'
inject agent/cluster_fetch.c "client futex, add" 'kvp_ifetch_add(&s->clients[0].cs_io_futex, 1);'
# counters and histograms (shm/kvp_ctr.h)
inject agent/reaper.c "client counter, store" 'kvp_store_relaxed(&s->clients[0].cs_ctr[3], 0);'
inject shm/client_int.h "client histogram, plain assignment" 's->clients[0].cs_hist[0][1] = 0;'
inject agent/evict.c "agent counter, add" 'kvp_fetch_add(&s->hdr->h_actr[2], 1);'
inject shm/client_int.h "retired histogram, add" 'kvp_fetch_add(&s->hdr->h_hist_retired[0][0], 1);'
# the doorbell (shm/kvp_wake.h)
inject shm/client_read_int.h "evictor futex, add" 'kvp_ifetch_add(&s->hdr->h_evict_wake, 1);'
inject agent/populate.c "space futex, add" 'kvp_ifetch_add(&s->hdr->h_space_seq, 1);'
inject shm/client_write_int.h "putter request, CAS" 'kvp_cas(&s->hdr->h_evict_req, 0, 1);'
inject shm/client_write_int.h "index pressure hint, store" 'kvp_store_release(&s->hdr->h_hint[0], 1);'
inject agent/rings.c "delete count, add" 'kvp_fetch_add(&s->hdr->h_delete_seq, 1);'
inject agent/evict.c "evictor verdict, store" 'kvp_store_relaxed(&s->hdr->h_evict_stuck, 0);'
# the staging arena's count (shm/kvp_span.h)
inject agent/staging.c "staging count, add" 'kvp_fetch_add(&s->hdr->h_staging_used, 1);'
inject agent/recover.c "staging peak, store" 'kvp_store_relaxed(&s->hdr->h_staging_peak, 0);'
# index entries (index/kvp_index.h)
inject agent/victim.c "entry location, store" 'kvp_store_relaxed(&s->entries[0].e_loc, 0);'
inject agent/giveback.c "entry SSD copy, store" 'kvp_store_relaxed(&s->entries[0].e_ssd, 0);'
inject shm/client_int.h "entry use word, pointer kept" 'kvp_aword_t *u = &s->entries[0].e_use; (void)u;'
inject agent/recover.c "entry key, store" 'kvp_store_relaxed(&s->entries[0].e_key[0], 0);'
inject shm/client_write_int.h "entry length, plain assignment" 's->entries[0].e_len = 0;'
# namespace rows (shm/client_stat_int.h)
inject shm/client_int.h "namespace row, CAS" 'kvp_cas(&s->ns_stats[0].ns_id, 0, 1);'
inject agent/metrics.c "namespace counter, add" 'kvp_fetch_add(&s->ns_stats[0].ns_ctr[0], 1);'
# the header's agent words (agent/segment.c, tier.c, drives.c, ops.c,
# metrics_http.c)
inject agent/check.c "header identity, plain assignment" 's->hdr->h_abi_major = 0;'
inject agent/reaper.c "geometry copy, memcpy" 'memcpy(&s->hdr->h_geom[0], &s->g, 8);'
inject agent/kvpoold.c "incarnation, add" 'kvp_fetch_add(&s->hdr->h_incarnation, 1);'
inject agent/segment.c "SSD tier flag, in another agent file" 's->hdr->h_ssd_enabled = 1;'
inject agent/drives.c "SSD usage, store" 'kvp_store_relaxed(&s->hdr->h_ssd_used_bytes, 0);'
inject agent/tier.c "drive state, store" 'kvp_store_relaxed(&s->hdr->h_drive_state[0], 0);'
inject agent/rings.c "read stage histogram, add" 'kvp_fetch_add(&s->hdr->h_io_hist[0][0], 1);'
inject agent/kvpoold.c "metrics port, store" 'kvp_store_relaxed(&s->hdr->h_metrics_port, 0);'
# the HBM tier (agent/hbm.c)
inject shm/client_dev_int.h "GPU slot word, store" 'kvp_store_release(&s->hdr->h_gpu[0].gs_state, 0);'
inject shm/client_dev_int.h "GPU slot, pointer kept" 'struct kvp_gpu_slot *g = &s->hdr->h_gpu[0]; (void)g;'
inject agent/evict.c "HBM map word, store" 'kvp_store_release(&s->hbm[0], 0);'
# the remote tier (agent/cluster_int.h; its doorbell: shm/kvp_rbox.h)
inject agent/cluster_dir.c "cluster state, store" 'kvp_store_release(&s->cluster->cl_state, 0);'
inject agent/cluster_mailbox.c "cluster counter, add" 'kvp_fetch_add(&s->cluster->cl_ctr[0], 1);'
inject agent/cluster.c "cluster node name, memcpy" 'memcpy(s->cluster->cl_node, "x", 1);'
inject shm/client_remote_int.h "cluster doorbell, add" 'kvp_ifetch_add(&s->cluster->cl_wake, 1);'
inject agent/cluster_mailbox.c "mailbox answer, plain assignment" '((struct kvp_rbox_ans *)s->base)->ra_status = 0;'

# a field no row owns: added to the header's field list
cp -p "$tree/shm/kvp_shm.h" "$tmp/keep"
sed 's/X(kvp_shm_header, h_gpu)/X(kvp_shm_header, h_gpu) X(kvp_shm_header, h_injected_word)/' \
	"$tmp/keep" >"$tree/shm/kvp_shm.h"
if cmp -s "$tmp/keep" "$tree/shm/kvp_shm.h"; then
	echo "FAIL: no X(kvp_shm_header, h_gpu) in shm/kvp_shm.h to add a field after"
	fail=1
else
	SHOW='struct kvp_shm_header' check "a shared field with no owner (in shm/kvp_shm.h)" \
		"shared words with no owner" "struct kvp_shm_header: h_injected_word"
fi
cp -p "$tmp/keep" "$tree/shm/kvp_shm.h"

# a call cycle: agent file X calls Y (an edge of the link graph); Y is
# made to reference a function X defines, and recompiled
: >"$tmp/defs"
for o in "$tree/$objdir"/agent/*.o; do
	f=agent/$(basename "$o" .o).c
	nm -g --defined-only "$o" | awk -v F="$f" '$2 == "T" && $3 != "main" { print $3, F }' >>"$tmp/defs"
done
sort -k1,1 "$tmp/defs" >"$tmp/defs.s"
pair=
for o in "$tree/$objdir"/agent/*.o; do
	f=agent/$(basename "$o" .o).c
	pair=$(nm -u "$o" | awk '{ print $NF }' | sort -u | join - "$tmp/defs.s" |
		awk -v F="$f" '$2 != F { print F, $2; exit }')
	[ -n "$pair" ] && break
done
set -- $pair
x=${1:-} y=${2:-}
sym=$(awk -v F="$x" '$2 == F { print $1; exit }' "$tmp/defs.s")
if [ -z "$x" ] || [ -z "$y" ] || [ -z "$sym" ]; then
	echo "FAIL: no call between two agent files found to reverse"
	exit 1
fi
cmd=$(ninja -t commands "$objdir/${y%.c}.o" | tail -1)
cp -p "$tree/$y" "$tmp/keep"
printf '\nextern char kvp__inject_ref __asm__("%s");\nchar *kvp__inject_cycle(void);\nchar *\nkvp__inject_cycle(void)\n{\n\treturn &kvp__inject_ref;\n}\n' "$sym" >>"$tree/$y"
if ! (cd "$tree" && sh -c "$cmd") >"$tmp/cc" 2>&1; then
	echo "FAIL: $y with a call back into $x does not compile:"
	sed 's/^/    /' "$tmp/cc"
	fail=1
else
	SHOW=' -[' check "call cycle $x -> $y -> $x ($sym)" \
		"a call cycle between agent files" "$x" "$y"
fi
cp -p "$tmp/keep" "$tree/$y"
exit $fail
