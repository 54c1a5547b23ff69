/* SPDX-License-Identifier: MIT */
/*
 * test_alloc.c - the DRAM run allocator on a private segment (no agent
 * threads): fragmentation never collapses capacity, the run chain and the
 * bins stay consistent, a dead lock owner is recovered, and the sweep
 * frees exactly the runs no entry owns.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <sys/wait.h>

#include "agent/agent_int.h"
#include "tests/agent/harness.h"

static struct kvp_agent ag;

static int
seg_setup(void **state)
{
	(void)state;
	memset(&ag, 0, sizeof(ag));
	if (kvpt_pool_name(ag.cfg.pool, sizeof(ag.cfg.pool), "ta%d",
			   (int)getpid()))
		return -1;
	ag.cfg.dram_bytes = 16u << 20;
	ag.cfg.dram_unit = 4096;
	ag.cfg.index_entries = 4096;
	ag.cfg.max_value = 16u << 20;
	ag.cfg.max_clients = 8;
	ag.cfg.holds_per_client = 64;
	ag.cfg.dram_high_pct = 90;
	ag.cfg.dram_low_pct = 80;
	kvp_log_set_level(KVP_LOG_WARN);
	/* the arena (16 MiB) is populated before this returns */
	return kvp_shm_create_or_attach_agent(&ag) ||
	       kvp_populate_start_agent(&ag);
}

static int
seg_teardown(void **state)
{
	(void)state;
	kvp_store_release(&ag.stop, 1); /* release: the populate threads */
	kvp_populate_stop_agent(&ag);
	kvp_shm_remove_agent(&ag);
	kvp__seg_unmap(&ag.seg);
	return 0;
}

/* Walk the chain: it covers the arena exactly, no two free runs touch,
 * every free run is in the bin of its size, counts agree; interior units
 * carry no header and no tag; nothing reported damage. */
static void
check_consistent(struct kvp_seg *s)
{
	uint64_t n = s->g.g_dram_pages, p = 0, used = 0, free_runs = 0,
		 binned = 0, k;
	bool prev_free = false;
	unsigned b;

	assert_int_equal(kvp_dram_lock(s), 0);
	assert_int_equal(kvp_load_relaxed(&s->dram->dh_damaged), 0);
	while (p < n) {
		struct kvp_page *pg = &s->pages[p];
		assert_true(pg->pg_npages > 0 && pg->pg_npages <= n - p);
		assert_int_equal(s->pages[p + pg->pg_npages - 1].pg_head,
				 p + 1);
		for (k = p + 1; k < p + pg->pg_npages; k++) {
			assert_int_equal(s->pages[k].pg_state, KVP_PG_NONE);
			assert_int_equal(s->pages[k].pg_npages, 0);
			if (k < p + pg->pg_npages - 1)
				assert_int_equal(s->pages[k].pg_head, 0);
		}
		if (pg->pg_state == KVP_PG_FREE) {
			assert_false(prev_free);
			free_runs++;
		} else {
			assert_int_equal(pg->pg_state, KVP_PG_USED);
			used += pg->pg_npages;
		}
		prev_free = pg->pg_state == KVP_PG_FREE;
		p += pg->pg_npages;
	}
	assert_int_equal(p, n);
	for (b = 0; b < KVP_DRAM_BINS; b++) {
		uint32_t q;
		for (q = s->dram->dh_bin[b]; q; q = s->pages[q - 1].pg_next) {
			assert_int_equal(s->pages[q - 1].pg_state, KVP_PG_FREE);
			assert_int_equal(
				kvp_dram_bin(s->pages[q - 1].pg_npages), b);
			binned++;
		}
	}
	assert_int_equal(binned, free_runs);
	assert_int_equal(s->dram->dh_used_pages, used);
	assert_int_equal(s->dram->dh_free_pages, n - used);
	kvp_dram_unlock(s);
}

struct live {
	uint32_t first;
	uint64_t owner;
	uint32_t gen;
	uint64_t units;
};

/* Mixed sizes, random frees, for many rounds: an allocation fails only
 * when the free units really do not add up, however fragmented. */
static void
test_fragmentation(void **state)
{
	struct kvp_seg *s = &ag.seg;
	uint64_t n = s->g.g_dram_pages, unit = s->g.g_dram_unit;
	struct live *lv = calloc(n, sizeof(*lv));
	unsigned nl = 0, round, fails = 0, multi = 0;
	uint64_t seed = 12345, owner = 1;

	(void)state;
	for (round = 0; round < 200; round++) {
		/* fill with sizes from 1 byte to 300 KiB */
		for (;;) {
			uint64_t bytes, units;
			uint32_t first;
			int rc;

			seed = seed * 6364136223846793005ull +
			       1442695040888963407ull;
			bytes = 1 + (seed >> 33) % (300u << 10);
			units = (bytes + unit - 1) / unit;
			rc = kvp_dram_alloc(s, bytes, owner, 1, &first);
			if (rc == -ENOSPC) {
				/* only when the free units do not add up */
				assert_true(s->dram->dh_free_pages < units);
				fails++;
				break;
			}
			assert_int_equal(rc, 0);
			multi += s->pages[first].pg_next != 0;
			lv[nl].first = first;
			lv[nl].owner = owner++;
			lv[nl].gen = 1;
			lv[nl].units = units;
			nl++;
		}
		/* the arena is (nearly) full: capacity did not collapse */
		assert_true(s->dram->dh_used_pages * 100 >= n * 93);
		/* free a random ~half */
		for (unsigned k = 0; k < nl;) {
			seed = seed * 6364136223846793005ull +
			       1442695040888963407ull;
			if ((seed >> 40) & 1) {
				int64_t f = kvp_dram_free_chain(s, lv[k].first,
								lv[k].owner, 1);
				assert_int_equal(f, (int64_t)lv[k].units);
				lv[k] = lv[--nl];
			} else {
				k++;
			}
		}
		if (round % 20 == 0)
			check_consistent(s);
	}
	print_message(
		"  200 fill/free rounds: %u full arenas, %u values split over runs\n",
		fails, multi);
	assert_true(multi > 0); /* fragmentation happened and was absorbed */
	while (nl) {
		nl--;
		assert_true(kvp_dram_free_chain(s, lv[nl].first, lv[nl].owner,
						1) > 0);
	}
	check_consistent(s);
	assert_int_equal(s->dram->dh_used_pages, 0);
	free(lv);
}

/* A free with the wrong owner tag frees nothing. */
static void
test_free_checks_owner(void **state)
{
	struct kvp_seg *s = &ag.seg;
	uint32_t first;

	(void)state;
	assert_int_equal(kvp_dram_alloc(s, 3 * 4096, 5, 9, &first), 0);
	assert_int_equal(kvp_dram_free_chain(s, first, 6, 9), 0);
	assert_int_equal(kvp_dram_free_chain(s, first, 5, 8), 0);
	assert_int_equal(kvp_dram_free_chain(s, first, 5, 9), 3);
	check_consistent(s);
}

/* The lock owner dies with the bins half updated: the next locker
 * takes the lock over, rebuilds from the chain, and everything is
 * consistent. */
static void
test_owner_dead_recovery(void **state)
{
	struct kvp_seg *s = &ag.seg;
	uint32_t first, f2;
	pid_t pid;
	int st;

	(void)state;
	assert_int_equal(kvp_dram_alloc(s, 64 * 4096, 1, 1, &first), 0);
	assert_int_equal(kvp_dram_alloc(s, 64 * 4096, 2, 1, &f2), 0);
	pid = fork();
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		if (kvp_dram_lock(s))
			_exit(2);
		/* die in the middle of an update: a run unlinked from its bin,
		 * the bins pointing at garbage */
		kvp__dram_bin_unlink(s, first + 64 + 64);
		s->dram->dh_bin[3] = 12345;
		s->dram->dh_free_pages = 7;
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(kvp_dram_alloc(s, 4096, 3, 1, &f2), 0);
	assert_int_equal(
		kvp_load_relaxed(&s->hdr->h_actr[KVP_ACTR_ALLOC_RECOVER]), 1);
	check_consistent(s);
	assert_true(kvp_dram_free_chain(s, f2, 3, 1) == 1);
}

/* The sweep frees runs whose owner slot is not PENDING, or READY/DELETED
 * with a DRAM location, at the run's generation; it keeps the others. */
static void
test_gc_owner_tags(void **state)
{
	struct kvp_seg *s = &ag.seg;
	uint32_t a1, a2, a3;
	uint64_t before;

	(void)state;
	kvp_dram_gc_agent(&ag); /* start clean */
	before = s->dram->dh_used_pages;
	/* slot 10 READY at gen 4, slot 11 EMPTY at gen 5, slot 12 PENDING
	 * gen 2 */
	kvp_store_release(&s->meta[10], KVP_IX_WORD(4, 0, 0, KVP_IX_READY));
	kvp_store_release(&s->meta[11], KVP_IX_WORD(5, 0, 0, KVP_IX_EMPTY));
	kvp_store_release(&s->meta[12], KVP_IX_WORD(2, 0, 1, KVP_IX_PENDING));
	assert_int_equal(kvp_dram_alloc(s, 4096 * 2, 10, 4, &a1), 0);
	/* stale gen */
	assert_int_equal(kvp_dram_alloc(s, 4096 * 3, 11, 4, &a2), 0);
	assert_int_equal(kvp_dram_alloc(s, 4096 * 5, 12, 2, &a3), 0);
	kvp_store_relaxed(&s->entries[10].e_loc,
			  KVP_LOC_MAKE(KVP_TIER_DRAM, a1));
	/* slot 13 READY at gen 1 but SSD-resident: a relocation to SSD was
	 * cut short before its DRAM runs were freed */
	kvp_store_release(&s->meta[13], KVP_IX_WORD(1, 0, 0, KVP_IX_READY));
	kvp_store_relaxed(&s->entries[13].e_loc, KVP_LOC_MAKE(KVP_TIER_SSD, 0));
	assert_int_equal(kvp_dram_alloc(s, 4096 * 4, 13, 1, &a2), 0);
	assert_int_equal(kvp_dram_gc_agent(&ag), 3 + 4);
	assert_int_equal(s->dram->dh_used_pages, before + 7);
	assert_int_equal(kvp_dram_free_chain(s, a1, 10, 4), 2);
	assert_int_equal(kvp_dram_free_chain(s, a3, 12, 2), 5);
	kvp_store_release(&s->meta[10], 0);
	kvp_store_release(&s->meta[12], 0);
	kvp_store_release(&s->meta[13], 0);
	check_consistent(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fragmentation),
		cmocka_unit_test(test_free_checks_owner),
		cmocka_unit_test(test_owner_dead_recovery),
		cmocka_unit_test(test_gc_owner_tags),
	};

	return cmocka_run_group_tests(tests, seg_setup, seg_teardown);
}
