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
	assert_true(sizeof(struct kvp_shm_header) <= KVP_PAGE);
	assert_int_equal(sizeof(struct kvp_client_slot) % KVP_CACHELINE, 0);
	assert_int_equal(offsetof(struct kvp_client_slot, cs_ctr) % KVP_CACHELINE, 0);
	assert_int_equal(sizeof(struct kvp_entry) % KVP_CACHELINE, 0);
	assert_int_equal(offsetof(struct kvp_entry, e_key) % 8, 0);
	assert_true(sizeof(((struct kvp_entry *)0)->e_key) >= KVP_KEY_MAX);
	assert_int_equal(sizeof(struct kvp_page), 32);
	assert_int_equal(offsetof(struct kvp_dram_hdr, dh_used_pages) % KVP_CACHELINE, 0);
	/* state word packing round-trips */
	{
		uint64_t w = KVP_IX_WORD(0xabcdef, 0x1234, 0x5678, KVP_IX_PENDING) | KVP_IX_CHECK;
		assert_int_equal(KVP_IX_GEN(w), 0xabcdef);
		assert_int_equal(KVP_IX_FP(w), 0x1234);
		assert_int_equal(KVP_IX_OWNER(w), 0x5678);
		assert_int_equal(KVP_IX_STATE(w), KVP_IX_PENDING);
		assert_int_equal(KVP_IX_FLAGS(w), KVP_IX_CHECK);
		assert_int_equal(KVP_IX_NEXTGEN(KVP_IX_WORD(0xffffff, 0, 0, 0)), 0);
		assert_int_equal(KVP_HOLD_SLOT(KVP_HOLD_MAKE(123456789, 0xfedcba)), 123456789);
		assert_int_equal(KVP_HOLD_GEN(KVP_HOLD_MAKE(123456789, 0xfedcba)), 0xfedcba);
		assert_int_equal(KVP_LOC_TIER(KVP_LOC_MAKE(KVP_TIER_SSD, 77)), KVP_TIER_SSD);
		assert_int_equal(KVP_LOC_VAL(KVP_LOC_MAKE(KVP_TIER_SSD, 77)), 77);
	}
}

static void
test_agent_segment(void **state)
{
	struct kvpt_agent a;
	struct kvp_seg s;
	const struct kvp_shm_header *h;
	kvp_off_t offs[7], ends[7];
	int i;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "32M", "--dram-unit", "8K",
					  "--max-clients", "16", "--holds-per-client", "256",
					  "--index-entries", "1000", NULL), 0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	h = s.hdr;
	assert_int_equal(h->h_magic, KVP_SHM_MAGIC);
	assert_int_equal(h->h_abi_major, KVP_ABI_MAJOR);
	assert_int_equal(h->h_layout_sig, KVP_LAYOUT_SIG);
	assert_int_equal(h->h_incarnation, 1);
	assert_int_equal(h->h_max_clients, 16);
	assert_int_equal(h->h_holds_per_client, 256);
	assert_int_equal(h->h_dram_unit, 8192);
	assert_int_equal(h->h_dram_pages, 4096);
	assert_int_equal(h->h_index_slots, 2048); /* pow2 >= 1000 * 1.25 */
	offs[0] = h->h_clients_off; ends[0] = offs[0] + 16 * sizeof(struct kvp_client_slot);
	offs[1] = h->h_holds_off; ends[1] = offs[1] + 16 * 256 * 8;
	offs[2] = h->h_meta_off; ends[2] = offs[2] + 2048 * 8;
	offs[3] = h->h_entries_off; ends[3] = offs[3] + 2048 * sizeof(struct kvp_entry);
	offs[4] = h->h_dram_off; ends[4] = offs[4] + sizeof(struct kvp_dram_hdr);
	offs[5] = h->h_pagemap_off; ends[5] = offs[5] + 4096 * sizeof(struct kvp_page);
	offs[6] = h->h_arena_off; ends[6] = offs[6] + 4096ull * 8192;
	assert_true(offs[0] >= KVP_PAGE);
	for (i = 0; i < 7; i++) {
		assert_int_equal(offs[i] % KVP_PAGE, 0);
		if (i)
			assert_true(offs[i] >= ends[i - 1]);
	}
	assert_int_equal(h->h_arena_off % (2u << 20), 0);
	assert_int_equal(ends[6], h->h_seg_size);
	assert_int_equal(s.size, h->h_seg_size);
	kvp__seg_unmap(&s);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_static_layout),
		cmocka_unit_test(test_agent_segment),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
