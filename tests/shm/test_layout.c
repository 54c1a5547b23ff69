/* SPDX-License-Identifier: MIT */
/*
 * test_layout.c - the segment layout: fixed offsets of the versioned
 * header, regions in order, aligned and inside the segment, and a
 * segment created by the agent that a client accepts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tests/agent/harness.h"

static void
test_static_layout(void **state)
{
	(void)state;
	/* the fields a client of any version reads first never move */
	assert_int_equal(offsetof(struct kvp_shm_header, h_magic), 0);
	assert_int_equal(offsetof(struct kvp_shm_header, h_abi_major), 8);
	assert_int_equal(offsetof(struct kvp_shm_header, h_abi_minor), 10);
	assert_int_equal(offsetof(struct kvp_shm_header, h_features), 12);
	assert_int_equal(offsetof(struct kvp_shm_header, h_layout_sig), 16);
	assert_true(sizeof(struct kvp_shm_header) <= KVP_HEADER_BYTES);
	assert_int_equal(sizeof(struct kvp_client_slot) % KVP_CACHELINE, 0);
	assert_int_equal(
		offsetof(struct kvp_client_slot, cs_ctr) % KVP_CACHELINE, 0);
	assert_int_equal(sizeof(struct kvp_entry) % KVP_CACHELINE, 0);
	assert_int_equal(offsetof(struct kvp_entry, e_key) % 8, 0);
	assert_true(sizeof(((struct kvp_entry *)0)->e_key) >= KVP_KEY_MAX);
	assert_int_equal(sizeof(struct kvp_page), 32);
	assert_int_equal(offsetof(struct kvp_dram_hdr, dh_used_pages) %
				 KVP_CACHELINE,
			 0);
	/* state word packing round-trips */
	{
		uint64_t w =
			KVP_IX_WORD(0xabcdef, 0x1234, 0x5678, KVP_IX_PENDING) |
			KVP_IX_CHECK;
		assert_int_equal(KVP_IX_GEN(w), 0xabcdef);
		assert_int_equal(KVP_IX_FP(w), 0x1234);
		assert_int_equal(KVP_IX_OWNER(w), 0x5678);
		assert_int_equal(KVP_IX_STATE(w), KVP_IX_PENDING);
		assert_int_equal(KVP_IX_FLAGS(w), KVP_IX_CHECK);
		assert_int_equal(KVP_IX_NEXTGEN(KVP_IX_WORD(0xffffff, 0, 0, 0)),
				 0);
		assert_int_equal(
			KVP_HOLD_SLOT(KVP_HOLD_MAKE(123456789, 0xfedcba)),
			123456789);
		assert_int_equal(
			KVP_HOLD_GEN(KVP_HOLD_MAKE(123456789, 0xfedcba)),
			0xfedcba);
		assert_int_equal(KVP_LOC_TIER(KVP_LOC_MAKE(KVP_TIER_SSD, 77)),
				 KVP_TIER_SSD);
		assert_int_equal(KVP_LOC_VAL(KVP_LOC_MAKE(KVP_TIER_SSD, 77)),
				 77);
	}
}

/*
 * The field lists of kvp_shm.h tile their structs: every field starts
 * where the one before it ended, give or take the padding its alignment
 * needs, and the last ends within alignment of the struct's size.  A
 * field added to a struct but not to its list leaves a gap (or the list
 * out of order) that this finds, so the signature covers every field.
 */
static void
test_field_lists_tile(void **state)
{
	const struct kvp_layout_field *f;
	size_t i, n, types = 0, fields = 0;
	uint32_t end = 0;

	(void)state;
	f = kvp_layout_fields(&n);
	for (i = 0; i < n; i++) {
		if (!f[i].field) {
			/* the type's end: at most 7 bytes of tail padding */
			if (f[i].size < end || f[i].size - end >= 8)
				fail_msg(
					"%s: fields end at %u, the struct is %u bytes: "
					"a field is missing from KVP_FIELDS_*",
					f[i].type, end, f[i].size);
			types++;
			end = 0;
			continue;
		}
		if (f[i].off < end || f[i].off - end >= 8)
			fail_msg(
				"%s.%s at %u, the field before it ends at %u: a field "
				"is missing from its list or out of order",
				f[i].type, f[i].field, f[i].off, end);
		assert_true(f[i].size > 0);
		end = f[i].off + f[i].size;
		fields++;
	}
	assert_int_equal(types, 14);
	assert_true(fields >= 100);
}

/* The source tree's root: the test runs as
 * <root>/build/<variant>/test_layout. */
static void
tree_root(char *out, size_t cap)
{
	ssize_t n = readlink("/proc/self/exe", out, cap - 1);
	int up;

	assert_true(n > 0);
	out[n] = '\0';
	for (up = 0; up < 3; up++) {
		char *slash = strrchr(out, '/');

		assert_non_null(slash);
		*slash = '\0';
	}
}

/*
 * docs/design.md's table of regions ("## Segment layout": rows whose
 * first cell is a name in backquotes) names the regions of enum
 * kvp_region, in order, as kvp_region_name does: the docs are the layout
 * table, not a copy that drifts from it.
 */
static void
test_docs_table(void **state)
{
	char path[4200], line[1024];
	unsigned r = 0;
	bool in = false;
	FILE *f;

	(void)state;
	tree_root(path, sizeof(path) - 32);
	strcat(path, "/docs/design.md");
	f = fopen(path, "r");
	if (!f)
		fail_msg("cannot open %s", path);
	while (fgets(line, sizeof(line), f)) {
		char *name, *end;

		if (!strncmp(line, "## ", 3)) {
			if (in)
				break;
			in = !strncmp(line, "## Segment layout", 17);
			continue;
		}
		if (!in || strncmp(line, "| `", 3))
			continue;
		name = line + 3;
		end = strchr(name, '`');
		assert_non_null(end);
		*end = '\0';
		if (r >= KVP_R__N)
			fail_msg(
				"docs/design.md lists region '%s' after the %u of "
				"enum kvp_region",
				name, (unsigned)KVP_R__N);
		if (strcmp(name, kvp_region_name(r)))
			fail_msg(
				"docs/design.md region %u is '%s', enum kvp_region "
				"says '%s'",
				r, name, kvp_region_name(r));
		r++;
	}
	fclose(f);
	if (r != KVP_R__N)
		fail_msg(
			"docs/design.md lists %u regions, enum kvp_region has %u",
			r, (unsigned)KVP_R__N);
}

/*
 * The signature of this ABI's layout.  It changes only when a shared
 * type does (a field added, removed, resized or moved): then bump
 * KVP_ABI_MAJOR in shm/kvp_shm.h and record the new value here, with the
 * ABI it belongs to.  A field whose meaning changes bumps the ABI without
 * changing the signature (ABI 6 made the entry's CLOCK bit, e_ref, the
 * use word, e_use).  ABI 7: the SSD drives' state and usage at the
 * header's end (h_drive_state, h_drive_used, h_drive_total); the
 * allocator header counts the arena's unpopulated tail (dh_unpop_pages)
 * and says the backing's page size (dh_page_bytes), and the page map's
 * owner tag KVP_DRAM_OWNER_UNPOP marks that tail (agent/populate.c).
 * ABI 8: the HBM tier: the GPU slots at the header's end (h_gpu, struct
 * kvp_gpu_slot), the HBM map region (a word per index slot), and 40
 * counter slots per client (cs_ctr; h_actr grows with it).
 */
/*
 * ABI 9: the remote tier: the geometry names each client's remote mailbox
 * size (g_rbox_kib, from g_pad), the cluster region (struct kvp_cluster,
 * then a struct kvp_rbox and its answers, struct kvp_rbox_ans, per
 * client), and two client counters (remote hits, probes).
 */
/*
 * ABI 10: the cluster thread's heartbeat (cl_beat, from cl_pad: a client
 * asks nothing of a stalled thread) and 32 cluster counters (from 16).
 */
/*
 * ABI 11: the HBM helper's socket name has an unguessable part, drawn by
 * the helper and published in its GPU slot (gs_nonce); the header's
 * region is two pages (KVP_HEADER_BYTES: the slots outgrew one); each
 * drive id records the directory its locations name (h_drive_dir_dev,
 * h_drive_dir_ino).
 */
/*
 * ABI 12: a region of per-namespace counters that engine adapters add to
 * (struct kvp_ns_stat, kvp_ns_count), between the leases and the arena.
 */
/*
 * ABI 13: the SSD read stages the tier thread times (h_io_hist, enum
 * kvp_io_stage) and the devices' queues (h_io_reads, h_io_writes,
 * h_io_write_bytes) in the header; two agent counters (reads behind
 * writes, demotion yields); a client histogram of SSD copy-outs
 * (KVP_HIST_SSD_COPY, a spare row of the shard).
 */
/*
 * ABI 14: the use word's CONT bit (taken from the depth, which keeps 18
 * bits: a meaning, not a size) and three eviction-policy counters in
 * h_actr (ghost hits, the ghost set's keys, probation victims).
 */
#define KVPT_LAYOUT_SIG_ABI14 0x379dacf9de61d85eull
/*
 * ABI 15: agent counters in h_actr: SSD reads whose batch header came
 * from the agent's header cache, and those that read it from the device;
 * a gauge, the weight a never-used value's age counts now (ARC's rule on
 * --evict-probation, agent/evict.c).
 */
/*
 * ABI 16: four gauges in h_actr, the last --ceiling-window's distinct
 * keys, lookups, stores and length (agent/distinct.c).
 */
/*
 * ABI 17: three counters in h_actr, the SSD write pacer's operations,
 * pieces and writes held back for a read (tiers/ssd_io.c).
 */
#define KVPT_LAYOUT_SIG_ABI17 0x8122f2e420e43ab5ull

static void
test_signature_recorded(void **state)
{
	(void)state;
	assert_int_equal(KVP_ABI_MAJOR, 17);
	if (kvp_layout_sig() != KVPT_LAYOUT_SIG_ABI17)
		fail_msg(
			"the shared layout changed (signature %016llx, recorded "
			"%016llx for ABI 17): bump KVP_ABI_MAJOR and record the "
			"new signature",
			(unsigned long long)kvp_layout_sig(),
			KVPT_LAYOUT_SIG_ABI17);
}

/* Every region of the layout table is page aligned (the arena and the
 * staging arena 2 MiB), lies after the one before it and inside the
 * segment, and has the size its geometry implies. */
static void
check_layout(const struct kvp_seg *s)
{
	const struct kvp_layout *L = &s->L;
	uint64_t prev_end = 0;
	unsigned r;

	assert_int_equal(L->off[KVP_R_HEADER], 0);
	assert_int_equal(L->len[KVP_R_HEADER], KVP_HEADER_BYTES);
	for (r = 0; r < KVP_R__N; r++) {
		if (!L->len[r]) {
			assert_int_equal(L->off[r], 0);
			continue;
		}
		assert_int_equal(L->off[r] % KVP_PAGE, 0);
		assert_true(L->off[r] >= prev_end);
		assert_true(L->off[r] + L->len[r] <= s->size);
		prev_end = L->off[r] + L->len[r];
	}
	assert_int_equal(L->off[KVP_R_ARENA] % KVP_HUGE_ALIGN, 0);
	assert_int_equal(L->len[KVP_R_CLIENTS],
			 (uint64_t)s->g.g_max_clients *
				 sizeof(struct kvp_client_slot));
	assert_int_equal(L->len[KVP_R_HOLDS], (uint64_t)s->g.g_max_clients *
						      s->g.g_holds_per_client *
						      8);
	assert_int_equal(L->len[KVP_R_META], s->g.g_index_slots * 8);
	assert_int_equal(L->len[KVP_R_ENTRIES],
			 s->g.g_index_slots * sizeof(struct kvp_entry));
	assert_int_equal(L->len[KVP_R_DRAM], sizeof(struct kvp_dram_hdr));
	assert_int_equal(L->len[KVP_R_PAGEMAP],
			 s->g.g_dram_pages * sizeof(struct kvp_page));
	assert_int_equal(L->len[KVP_R_LEASES],
			 s->g.g_max_leases * sizeof(struct kvp_lease_slot));
	assert_int_equal(L->len[KVP_R_ARENA],
			 s->g.g_dram_pages * s->g.g_dram_unit);
	assert_int_equal(L->len[KVP_R_RINGS], (uint64_t)s->g.g_max_clients *
						      s->g.g_ring_entries *
						      sizeof(struct kvp_req));
	assert_int_equal(L->len[KVP_R_SPANS],
			 s->g.g_staging_slots * sizeof(struct kvp_span));
	assert_int_equal(L->len[KVP_R_STAGING],
			 s->g.g_staging_slots * s->g.g_staging_slot_bytes);
	if (L->len[KVP_R_STAGING])
		assert_int_equal(L->off[KVP_R_STAGING] % KVP_HUGE_ALIGN, 0);
	assert_int_equal(L->end, s->size);
	assert_int_equal(s->g.g_seg_size, s->size);
	/* the pointers of the mapping are the table's offsets */
	assert_ptr_equal(s->clients, s->base + L->off[KVP_R_CLIENTS]);
	assert_ptr_equal(s->holds, s->base + L->off[KVP_R_HOLDS]);
	assert_ptr_equal(s->meta, s->base + L->off[KVP_R_META]);
	assert_ptr_equal(s->entries, s->base + L->off[KVP_R_ENTRIES]);
	assert_ptr_equal(s->dram, s->base + L->off[KVP_R_DRAM]);
	assert_ptr_equal(s->pages, s->base + L->off[KVP_R_PAGEMAP]);
	assert_ptr_equal(s->leases, s->base + L->off[KVP_R_LEASES]);
	assert_ptr_equal(s->arena, s->base + L->off[KVP_R_ARENA]);
	if (s->rings) {
		assert_ptr_equal(s->rings, s->base + L->off[KVP_R_RINGS]);
		assert_ptr_equal(s->spans, s->base + L->off[KVP_R_SPANS]);
		assert_ptr_equal(s->staging, s->base + L->off[KVP_R_STAGING]);
	}
}

static void
test_agent_segment(void **state)
{
	struct kvpt_agent a;
	struct kvp_seg s;
	const struct kvp_shm_header *h;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "32M", "--dram-unit",
					  "8K", "--max-clients", "16",
					  "--holds-per-client", "256",
					  "--index-entries", "1000", NULL),
			 0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	h = s.hdr;
	assert_int_equal(h->h_magic, KVP_SHM_MAGIC);
	assert_int_equal(h->h_abi_major, KVP_ABI_MAJOR);
	assert_int_equal(h->h_layout_sig, kvp_layout_sig());
	assert_int_equal(h->h_incarnation, 1);
	assert_int_equal(s.g.g_max_clients, 16);
	assert_int_equal(s.g.g_holds_per_client, 256);
	assert_int_equal(s.g.g_dram_unit, 8192);
	assert_int_equal(s.g.g_dram_pages, 4096);
	assert_int_equal(s.g.g_index_slots, 2048); /* pow2 >= 1000 * 1.25 */
	assert_int_equal(s.g.g_ring_entries, 0);
	assert_null(s.rings);
	/* both header copies are the geometry the process bound */
	assert_memory_equal(&h->h_geom[0], &s.g, sizeof(s.g));
	assert_memory_equal(&h->h_geom[1], &s.g, sizeof(s.g));
	check_layout(&s);
	kvp__seg_unmap(&s);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

static void
test_agent_segment_ssd(void **state)
{
	struct kvpt_agent a;
	struct kvp_seg s;
	char dir[128];

	(void)state;
	assert_int_equal(kvpt_tmpdir(dir, sizeof(dir), "layout"), 0);
	assert_int_equal(kvpt_agent_start(&a, "--dram", "16M", "--max-clients",
					  "8", "--ssd-dir", dir, "--staging",
					  "1M", "--staging-slot", "64K", NULL),
			 0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	assert_int_equal(s.g.g_ring_entries, KVP_RING_ENTRIES);
	assert_int_equal(s.g.g_staging_slots, 16);
	assert_int_equal(s.g.g_staging_slot_bytes, 64u << 10);
	assert_non_null(s.rings);
	check_layout(&s);
	kvp__seg_unmap(&s);
	assert_int_equal(kvpt_agent_stop(&a), 0);
	kvpt_tmpdir_remove(dir);
}

/* A geometry that passes, and one field at a time pushed out of range:
 * kvp_layout_compute refuses each, naming it. */
static void
test_geometry_limits(void **state)
{
	struct kvp_geom g0, g;
	struct kvp_layout L;
	char msg[160];

	(void)state;
	memset(&g0, 0, sizeof(g0));
	g0.g_index_slots = 1024;
	g0.g_index_limit = 800;
	g0.g_dram_unit = 16384;
	g0.g_dram_pages = 64;
	g0.g_max_value = 16384;
	g0.g_max_clients = 8;
	g0.g_holds_per_client = 64;
	g0.g_max_leases = 16;
	assert_int_equal(kvp_layout_compute(&g0, &L, msg, sizeof(msg)), 0);
	g0.g_seg_size = L.end;
	kvp_geom_seal(&g0);
	assert_int_equal(kvp_geom_check(&g0, L.end, &L, msg, sizeof(msg)), 0);
	/* the file must be exactly the layout's size */
	assert_int_equal(kvp_geom_check(&g0, L.end + KVP_PAGE, &L, msg,
					sizeof(msg)),
			 -EPROTO);
	/* one flipped bit is caught by the checksum */
	g = g0;
	g.g_max_clients ^= 0x100;
	assert_int_equal(kvp_geom_check(&g, L.end, &L, msg, sizeof(msg)),
			 -EPROTO);
	assert_non_null(strstr(msg, "checksum"));
#define BAD(field, v, name)                                                    \
	do {                                                                   \
		g = g0;                                                        \
		g.field = v;                                                   \
		assert_int_equal(kvp_layout_compute(&g, &L, msg, sizeof(msg)), \
				 -EINVAL);                                     \
		assert_non_null(strstr(msg, name));                            \
	} while (0)
	BAD(g_max_clients, 0, "max_clients");
	BAD(g_max_clients, 4000000000u, "max_clients");
	BAD(g_holds_per_client, 1u << 21, "holds_per_client");
	BAD(g_index_slots, 1000, "index_slots");
	BAD(g_index_slots, 1ull << 40, "index_slots");
	BAD(g_index_limit, 2048, "index_limit");
	BAD(g_dram_unit, 12288, "dram_unit");
	BAD(g_dram_pages, 0, "dram_pages");
	BAD(g_dram_pages, 0x100000000ull, "dram_pages");
	BAD(g_max_value, 64 * 16384 + 1, "max_value");
	BAD(g_max_leases, 0, "max_leases");
	BAD(g_ring_entries, 65, "ring_entries");
	BAD(g_staging_slots, 3, "staging"); /* staging without rings */
	g = g0;
	g.g_ring_entries = 64;
	g.g_staging_slots = 70000; /* spans name a head in 16 bits */
	g.g_staging_slot_bytes = 4096;
	assert_int_equal(kvp_layout_compute(&g, &L, msg, sizeof(msg)), -EINVAL);
	g.g_staging_slots = 8;
	g.g_max_clients = 300; /* span holder bitmaps: 256 clients */
	assert_int_equal(kvp_layout_compute(&g, &L, msg, sizeof(msg)), -EINVAL);
#undef BAD
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_static_layout),
		cmocka_unit_test(test_field_lists_tile),
		cmocka_unit_test(test_signature_recorded),
		cmocka_unit_test(test_docs_table),
		cmocka_unit_test(test_agent_segment),
		cmocka_unit_test(test_agent_segment_ssd),
		cmocka_unit_test(test_geometry_limits),
	};
#ifdef KVP_TEST_SWAP_HEADER
	/* tests/shm/test_layout_swapped.sh: the checks of the layout alone
	 * (the other tests start an agent, which has the real layout) */
	const struct CMUnitTest layout[] = {
		cmocka_unit_test(test_field_lists_tile),
		cmocka_unit_test(test_signature_recorded),
	};

	(void)tests;
	return cmocka_run_group_tests(layout, NULL, NULL);
#endif
	return cmocka_run_group_tests(tests, NULL, NULL);
}
