/* SPDX-License-Identifier: MIT */
/*
 * test_durability.c - nothing lost across stops and restarts.
 *
 *  - delete, put again and demote, then a clean restart and kill -9
 *    restarts (with and without the segment): the new value every time
 *    (a late tombstone of the old value never shadows the new one);
 *  - SIGTERM with values only in DRAM and deletes not yet reclaimed: after
 *    a restart from disk alone, exactly the keys and latest values the pool
 *    had;
 *  - --durability strict: a delete returns once its tombstone is durable,
 *    so a kill -9 right after it (and a reboot) does not bring the key back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"

static uint32_t
key_a(char *k, int i)
{
	return (uint32_t)snprintf(k, 100, "%064x-a-%d",
				  (unsigned)i * 2654435761u, i);
}

static uint32_t
key_b(char *k, int i)
{
	return (uint32_t)snprintf(k, 100, "%064x-b-%d",
				  (unsigned)i * 2246822519u, i);
}

#define FLAGS(high, low, dur)                                                  \
	"--dram", "32M", "--dram-unit", "4K", "--dram-high", high,             \
		"--dram-low", low, "--ssd-dir", kvpt_ssd_dir, "--ssd-segment", \
		"4M", "--staging", "4M", "--staging-slot", "256K",             \
		"--durability", dur, NULL

#define DEMOTE_ALL FLAGS("0", "0", "relaxed")
#define KEEP_IN_DRAM FLAGS("90", "80", "relaxed")

static bool
no_deleted(void *p)
{
	return kvpt_count_state(p, KVP_IX_DELETED) == 0;
}

/*
 * 200 keys put, demoted, deleted, put again and demoted: the first
 * value's tombstone is written when the agent reclaims the deleted slot,
 * after the new value reached SSD.  A clean stop and a restart from disk
 * must still find the new value of every key; so must a second round
 * ended by kill -9 (re-attach), and a kill -9 with the segment gone (a
 * reboot).
 */
static void
test_delete_put_again_restart(void **state)
{
	enum {
		N = 200,
		SZ = 16 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	char k[100];
	int i;

	(void)state;
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, DEMOTE_ALL), 0);
	assert_int_equal(kvpt_put_and_demote(c, &s, N, SZ, key_a, 1, 30000), 0);
	for (i = 0; i < N; i++) {
		uint32_t kl = key_a(k, i);
		assert_int_equal(kvp_delete(c, k, kl), 0);
	}
	assert_int_equal(kvpt_put_and_demote(c, &s, N, SZ, key_a, 2, 30000), 0);
	/* the old values' tombstones are written by now (after the new
	 * values' records) */
	assert_true(kvpt_wait_until(no_deleted, &s, 10000) >= 0);
	kvp_close(c);
	kvp__seg_unmap(&s);
	assert_int_equal(kvpt_agent_stop(&a),
			 0); /* SIGTERM; no client: segment gone */

	assert_int_equal(kvpt_agent_restart(&a, DEMOTE_ALL), 0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_a, 0, N, SZ, 2, false), 0);

	/* round two, ended by kill -9 with the deletes maybe not reclaimed */
	for (i = 0; i < N; i++) {
		uint32_t kl = key_a(k, i);
		assert_int_equal(kvp_delete(c, k, kl), 0);
	}
	assert_int_equal(kvpt_put_and_demote(c, &s, N, SZ, key_a, 3, 30000), 0);
	kvp_close(c);
	kvp__seg_unmap(&s);
	kvpt_agent_kill(&a);
	assert_int_equal(kvpt_agent_restart(&a, DEMOTE_ALL), 0); /* re-attach */
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_a, 0, N, SZ, 3, false), 0);
	kvp_close(c);
	kvpt_agent_kill(&a);
	kvpt_pool_remove(a.pool); /* a reboot: only the disk is left */
	assert_int_equal(kvpt_agent_restart(&a, DEMOTE_ALL), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_a, 0, N, SZ, 3, false), 0);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

static bool
in_dram(struct kvp_client *c, const struct kvp_seg *s, kvpt_key_fn kfn, int i)
{
	char k[100];
	uint32_t kl = kfn(k, i);
	uint64_t w;
	int64_t slot = kvp_ix_find(s, c->ns_id, kvp_key_hash(c->ns_id, k, kl),
				   k, kl, KVP_IX_M(KVP_IX_READY), &w);

	/* relaxed: a test's look at a READY entry */
	return slot >= 0 &&
	       KVP_LOC_TIER(kvp_load_relaxed(&s->entries[slot].e_loc)) ==
		       KVP_TIER_DRAM &&
	       !kvp_load_relaxed(&s->entries[slot].e_ssd);
}

/*
 * SIGTERM with values only in DRAM (never demoted), deleted values whose
 * SSD copies are still held (so not reclaimed: no tombstone yet), and
 * keys deleted and put again in DRAM.  The clean stop writes the values
 * and the tombstones; after a restart from the disk alone (the segment
 * removed, as after a reboot) the pool has exactly the keys and latest
 * values it had.
 */
static void
test_stop_flushes_dram(void **state)
{
	enum {
		NA = 100,
		NB = 200,
		SZ = 16 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c, *holder;
	struct kvp_pinset *ps = NULL;
	struct kvp_op ops[50];
	unsigned char *v = malloc(SZ);
	char keys[50][100];
	struct kvp_seg s;
	char k[100];
	int i;

	(void)state;
	assert_non_null(v);
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, DEMOTE_ALL), 0);
	assert_int_equal(kvpt_put_and_demote(c, &s, NA, SZ, key_a, 1, 30000),
			 0);
	/* the same pool with the usual watermarks: new values stay in DRAM */
	kvpt_agent_kill(&a);
	assert_int_equal(kvpt_agent_restart(&a, KEEP_IN_DRAM), 0);
	for (i = 0; i < NB; i++) {
		uint32_t kl = key_b(k, i);
		kvpt_fill(v, SZ, k, kl, 1);
		assert_int_equal(kvp_put(c, k, kl, v, SZ), 0);
	}
	for (i = 0; i < NB; i++)
		assert_true(in_dram(c, &s, key_b, i));
	/* a0..a49 held by another client, then deleted: not reclaimable */
	assert_int_equal(kvp_open(a.pool, "ns", &holder), 0);
	for (i = 0; i < 50; i++) {
		ops[i].klen = key_a(keys[i], i);
		ops[i].key = keys[i];
	}
	assert_int_equal(kvp_batch_lookup_pin(holder, ops, 50, &ps), 50);
	for (i = 0; i < 50; i++)
		assert_int_equal(kvp_delete(c, keys[i], ops[i].klen), 0);
	/* a0..a24 put again (version 2, in DRAM), b0..b19 deleted */
	for (i = 0; i < 25; i++) {
		kvpt_fill(v, SZ, keys[i], ops[i].klen, 2);
		assert_int_equal(kvp_put(c, keys[i], ops[i].klen, v, SZ), 0);
		assert_true(in_dram(c, &s, key_a, i));
	}
	for (i = 0; i < 20; i++) {
		uint32_t kl = key_b(k, i);
		assert_int_equal(kvp_delete(c, k, kl), 0);
	}
	assert_int_equal(kvpt_count_state(&s, KVP_IX_DELETED) >= 50, 1);
	/* the clean stop: live clients keep the segment; then a reboot */
	kvp__seg_unmap(&s);
	assert_int_equal(kvpt_agent_stop(&a), 0);
	kvp_pinset_free(holder, ps);
	kvp_close(holder);
	kvp_close(c);
	kvpt_pool_remove(a.pool);

	assert_int_equal(kvpt_agent_restart(&a, KEEP_IN_DRAM), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_a, 0, 25, SZ, 2, false), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_a, 25, 50, SZ, 0, false), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_a, 50, NA, SZ, 1, false), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_b, 0, 20, SZ, 0, false), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_b, 20, NB, SZ, 1, false), 0);
	kvp_close(c);
	free(v);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

/*
 * --durability strict: kvp_delete returns only once the tombstone is
 * durable.  The deleted keys are held by another client (so the agent
 * cannot reclaim them, which is when a relaxed pool writes tombstones);
 * the agent is killed right after the deletes returned and the segment
 * removed: the deleted keys stay deleted, the others are there.
 */
static void
test_strict_delete_durable(void **state)
{
	enum {
		N = 50,
		SZ = 16 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c, *holder;
	struct kvp_pinset *ps = NULL;
	struct kvp_op ops[N];
	char keys[N][100];
	struct kvp_seg s;
	int i;

	(void)state;
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, FLAGS("0", "0", "strict")),
			 0);
	assert_int_equal(kvp_open(a.pool, "ns", &holder), 0);
	assert_int_equal(kvpt_put_and_demote(c, &s, N, SZ, key_a, 1, 30000), 0);
	for (i = 0; i < N; i++) {
		ops[i].klen = key_a(keys[i], i);
		ops[i].key = keys[i];
	}
	assert_int_equal(kvp_batch_lookup_pin(holder, ops, N, &ps), N);
	for (i = 0; i < N / 2; i++)
		assert_int_equal(kvp_delete(c, keys[i], ops[i].klen), 0);
	/* gone for readers at once, held bytes stay for the holder */
	assert_int_equal(kvpt_wrong_keys(c, key_a, 0, N / 2, SZ, 0, false), 0);
	assert_int_equal(kvpt_count_state(&s, KVP_IX_DELETED), N / 2);
	kvp__seg_unmap(&s);
	kvpt_agent_kill(&a);
	kvp_pinset_free(holder, ps);
	kvp_close(holder);
	kvp_close(c);
	kvpt_pool_remove(a.pool); /* a crash and a reboot */
	assert_int_equal(kvpt_agent_restart(&a, FLAGS("0", "0", "strict")), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_a, 0, N / 2, SZ, 0, false), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_a, N / 2, N, SZ, 1, false), 0);
	/* with no agent a strict delete deletes nothing and says so */
	kvpt_agent_kill(&a);
	{
		char k[100];
		uint32_t kl = key_a(k, N - 1);
		assert_int_equal(kvp_delete(c, k, kl), -ENOTCONN);
	}
	kvp_close(c);
	assert_int_equal(kvpt_agent_restart(&a, FLAGS("0", "0", "strict")), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_a, N - 1, N, SZ, 1, false), 0);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_delete_put_again_restart),
		cmocka_unit_test(test_stop_flushes_dram),
		cmocka_unit_test(test_strict_delete_durable),
	};

	return cmocka_run_group_tests(tests, kvpt_ssd_dir_setup,
				      kvpt_ssd_dir_teardown);
}
