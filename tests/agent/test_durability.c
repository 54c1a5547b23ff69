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
 *    so a kill -9 right after it (and a reboot) does not bring the key back;
 *  - a kill -9 and restart with the SSD store full: the agent starts, and
 *    the tombstones it could not write then are written later;
 *  - relaxed durability, an agent that dies after deletes, before their
 *    tombstones reached the file: restarted on the kept segment, and then
 *    from the disk alone, no deleted key comes back.
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
	/* SIGTERM; no client: segment gone */
	assert_int_equal(kvpt_agent_stop(&a), 0);

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

/* The entry of key i has an SSD copy (e_ssd set), wherever it lives. */
static bool
has_ssd_copy(struct kvp_client *c, const struct kvp_seg *s, kvpt_key_fn kfn,
	     int i)
{
	char k[100];
	uint32_t kl = kfn(k, i);
	uint64_t w;
	int64_t slot = kvp_ix_find(s, c->nsid, kvp_key_hash(c->nsid, k, kl), k,
				   kl, KVP_IX_M(KVP_IX_READY), &w);

	/* relaxed: a test's look at a READY entry */
	return slot >= 0 && kvp_load_relaxed(&s->entries[slot].e_ssd) != 0;
}

struct full_cond {
	struct kvp_client *c;
	const struct kvp_seg *s;
	const char *pool;
	int n, want;
};

/* The store is full: the agent's log says a demotion found no room, and
 * at least want of keys 1..n-1 have SSD copies (the first refusal may
 * come while writes in flight still hold room). */
static bool
store_full(void *arg)
{
	struct full_cond *fc = arg;
	char path[4200], line[1024];
	bool seen = false;
	int i, on = 0;
	FILE *f;

	for (i = 1; i < fc->n; i++)
		on += has_ssd_copy(fc->c, fc->s, key_a, i);
	if (on < fc->want)
		return false;
	kvpt_agent_log(fc->pool, path, sizeof(path));
	f = fopen(path, "r");
	if (!f)
		return false;
	while (!seen && fgets(line, sizeof(line), f))
		/* the store full: no room on the file system, or none to
		 * make while the oldest segment is pinned */
		seen = strstr(line, "demotion refused: No space left") ||
		       strstr(line, "demotion refused: no room on SSD");
	fclose(f);
	return seen;
}

#define FULL_FLAGS                                                             \
	"--dram", "32M", "--dram-unit", "4K", "--dram-high", "0",              \
		"--dram-low", "0", "--ssd-dir", kvpt_ssd_dir, "--ssd-segment", \
		"1M", "--ssd-size", "2M", "--staging", "1M", "--staging-slot", \
		"64K", NULL

/*
 * Rule 6 with a full SSD tier.  The store (two 1 MiB segments) is full of
 * values it cannot give back (a pinned value holds the oldest segment);
 * every key with an SSD copy is deleted and put again in DRAM, so its old
 * record is on disk and its tombstone has no room.  The agent is killed
 * (kill -9) and restarted on the kept segment: recovery finds the old
 * records, the index knows better, and the tombstones it owes cannot be
 * written now.  The agent must start anyway (before the fix it stopped:
 * "recovery failed: No space left on device"), serve the new values, and
 * write what it owes once the pin goes: after a clean stop and a restart
 * from the disk alone no old value comes back.
 */
static void
test_restart_ssd_full(void **state)
{
	enum {
		N = 150,
		SZ = 16 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_pinset *ps, *pins[N];
	struct kvp_seg s;
	struct kvp_op op;
	struct full_cond fc;
	bool again[N];
	char k[100];
	unsigned char *buf = malloc(SZ);
	int i, nagain = 0;

	(void)state;
	assert_non_null(buf);
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, FULL_FLAGS), 0);
	/* key 0 on SSD and pinned: the oldest segment stays */
	assert_int_equal(kvpt_put_and_demote(c, &s, 1, SZ, key_a, 1, 30000), 0);
	memset(&op, 0, sizeof(op));
	op.klen = key_a(k, 0);
	op.key = k;
	assert_int_equal(kvp_batch_lookup_pin(c, &op, 1, &ps), 1);
	/* 2.3 MiB, more than the store holds: demotions find it full (and
	 * for a second after each refusal drop cold values instead) */
	assert_int_equal(kvpt_put_keys(c, key_a, 1, N, SZ, 1), 0);
	fc.c = c;
	fc.s = &s;
	fc.pool = a.pool;
	fc.n = N;
	fc.want = 30;
	assert_true(kvpt_wait_until(store_full, &fc, 30000) >= 0);
	for (i = 1; i < N; i++) {
		int tries = 0;

		pins[i] = NULL;
		again[i] = has_ssd_copy(c, &s, key_a, i);
		if (!again[i])
			continue;
		op.klen = key_a(k, i);
		assert_int_equal(kvp_delete(c, k, op.klen), 0);
		/* the new value, pinned: the agent, finding no room on SSD,
		 * drops cold DRAM values (a value may be lost; relaxed
		 * durability may then bring the old one back after a crash,
		 * which is not what this test is about) */
		for (;;) {
			assert_int_equal(
				kvpt_put_keys(c, key_a, i, i + 1, SZ, 2), 0);
			if (kvp_batch_lookup_pin(c, &op, 1, &pins[i]) == 1)
				break;
			kvp_pinset_free(c, pins[i]); /* dropped already */
			pins[i] = NULL;
			assert_true(++tries < 100);
		}
		nagain++;
	}
	/* more than the hole left in a full segment takes: it is smaller
	 * than a record (20 KiB), a tombstone is 4 KiB */
	assert_true(nagain >= 10);
	kvpt_agent_kill(&a);
	assert_int_equal(kvpt_agent_restart(&a, FULL_FLAGS), 0);
	/* the client kept its pin and its mapping across the restart */
	for (i = 1; i < N; i++)
		if (again[i])
			assert_int_equal(kvpt_wrong_keys(c, key_a, i, i + 1, SZ,
							 2, true),
					 0);
	kvp_pinset_release(c, ps);
	kvp_pinset_free(c, ps);
	for (i = 1; i < N; i++)
		if (pins[i]) {
			kvp_pinset_release(c, pins[i]);
			kvp_pinset_free(c, pins[i]);
		}
	kvp_close(c);
	kvp__seg_unmap(&s);
	/* SIGTERM: the flush writes what fits and every owed tombstone */
	assert_int_equal(kvpt_agent_stop(&a), 0);
	kvpt_pool_remove(a.pool);
	assert_int_equal(kvpt_agent_restart(&a, FULL_FLAGS), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	for (i = 1; i < N; i++) {
		uint32_t kl = key_a(k, i);
		ssize_t got;

		do
			got = kvp_get(c, k, kl, buf, SZ);
		while (got == -EBUSY);
		if (got == -ENOENT)
			continue; /* given back to make room: gone, not old */
		assert_int_equal(got, SZ);
		if (!kvpt_check(buf, SZ, k, kl, again[i] ? 2 : 1))
			fail_msg("key %d: not its latest value (version %d) "
				 "after the restart from disk",
				 i, again[i] ? 2 : 1);
	}
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
	free(buf);
}

static bool
in_dram(struct kvp_client *c, const struct kvp_seg *s, kvpt_key_fn kfn, int i)
{
	char k[100];
	uint32_t kl = kfn(k, i);
	uint64_t w;
	int64_t slot = kvp_ix_find(s, c->nsid, kvp_key_hash(c->nsid, k, kl), k,
				   kl, KVP_IX_M(KVP_IX_READY), &w);

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

struct exited {
	struct kvpt_agent *a;
	int status;
};

static bool
agent_exited(void *p)
{
	struct exited *x = p;

	if (waitpid(x->a->pid, &x->status, WNOHANG) != x->a->pid)
		return false;
	x->a->pid = -1;
	return true;
}

/*
 * Issue 25 item 8, relaxed durability (the default): 50 keys on SSD are
 * deleted and the agent dies once it has built the batch that holds their
 * tombstones, before that batch is written (A_SSD_BATCH_BUILT); the
 * segment is kept.  Before the fix the reclaim pass emptied the deleted
 * slots when it queued the tombstones, so the restarted agent found the
 * records and no delete in the index, and put them back (50 of 50 here).
 * The index keeps a delete until its tombstone is written: none comes
 * back, on the kept segment or (after a clean stop) from the disk alone.
 */
static void
test_delete_crash_before_tombstone(void **state)
{
	enum {
		N = 50,
		SZ = 16 << 10
	};
	struct kvpt_agent a;
	struct exited x = { &a, 0 };
	struct kvp_client *c;
	struct kvp_seg s;
	char k[100];
	int i, back;

	(void)state;
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, DEMOTE_ALL), 0);
	assert_int_equal(kvpt_put_and_demote(c, &s, N, SZ, key_b, 1, 30000), 0);
	kvp_close(c);
	kvp__seg_unmap(&s);
	/* an agent whose next batch is its last: every value is on SSD
	 * already, so that batch is the deletes' tombstones */
	kvpt_agent_kill(&a);
	setenv("KVP_CRASH_AT", "A_SSD_BATCH_BUILT", 1);
	assert_int_equal(kvpt_agent_restart(&a, DEMOTE_ALL), 0);
	unsetenv("KVP_CRASH_AT");
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	for (i = 0; i < N; i++) {
		uint32_t kl = key_b(k, i);
		assert_int_equal(kvp_delete(c, k, kl), 0);
	}
	assert_true(kvpt_wait_until(agent_exited, &x, 10000) >= 0);
	assert_true(WIFEXITED(x.status));
	assert_int_equal(WEXITSTATUS(x.status), KVP_CRASH_EXIT);
	kvp_close(c);
	/* re-attach to the kept segment */
	assert_int_equal(kvpt_agent_restart(&a, DEMOTE_ALL), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	back = kvpt_wrong_keys(c, key_b, 0, N, SZ, 0, false);
	print_message("  %d of %d deleted keys back after the crash\n", back,
		      N);
	assert_int_equal(back, 0);
	kvp_close(c);
	/* a clean stop (every tombstone written), then the disk alone */
	assert_int_equal(kvpt_agent_stop(&a), 0);
	assert_int_equal(kvpt_agent_restart(&a, DEMOTE_ALL), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_b, 0, N, SZ, 0, false), 0);
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
		cmocka_unit_test(test_restart_ssd_full),
		cmocka_unit_test(test_delete_crash_before_tombstone),
	};

	return cmocka_run_group_tests(tests, kvpt_ssd_dir_setup,
				      kvpt_ssd_dir_teardown);
}
