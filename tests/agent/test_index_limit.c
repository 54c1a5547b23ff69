/* SPDX-License-Identifier: MIT */
/*
 * test_index_limit.c - --index-entries is a limit the pool keeps: never
 * more live entries than it allows, puts at the limit wait for the
 * evictor (cold unheld entries leave the index, SSD-resident ones with a
 * tombstone) and answer BUSY / NOSPC / UNAVAILABLE as documented when it
 * cannot make room, and the count behind it (h_ix_used) neither drifts
 * nor leaks when processes die while changing it; its default makes
 * room for what the SSD tier holds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"

static uint32_t
key_of(char *k, int i)
{
	return (uint32_t)snprintf(k, 100, "%064x_limit_%d",
				  (unsigned)i * 2654435761u, i);
}

/* Entries the limit counts: READY and DELETED slots. */
static uint64_t
entries(const struct kvp_seg *s)
{
	return kvpt_count_state(s, KVP_IX_READY) +
	       kvpt_count_state(s, KVP_IX_DELETED);
}

static uint64_t
ix_used(const struct kvp_seg *s)
{
	/* acquire: a test's look */
	return kvp_load_acquire(&s->hdr->h_ix_used);
}

/* Put key i (version ver), retrying BUSY for at most 10 s; the status. */
static int
put_retry(struct kvp_client *c, int i, uint64_t sz, uint64_t ver,
	  unsigned *busy)
{
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC);
	unsigned char *v = malloc(sz);
	char k[100];
	uint32_t kl = key_of(k, i);
	int rc;

	kvpt_fill(v, sz, k, kl, ver);
	while ((rc = kvp_put(c, k, kl, v, sz)) == -EBUSY &&
	       kvp_now_ns(CLOCK_MONOTONIC) - t0 < 10000000000ull)
		(*busy)++;
	free(v);
	return rc;
}

/* The count is exact once the pool is quiet (the agent recounts). */
struct quiet {
	const struct kvp_seg *s;
};

static bool
count_exact(void *p)
{
	const struct kvp_seg *s = ((struct quiet *)p)->s;
	uint64_t before = entries(s);

	return ix_used(s) == before && entries(s) == before;
}

/* Below the index limit's high mark (agent/evict.c: the limit less half
 * of 1/32 of it): the agent removes nothing more without new puts. */
static bool
below_high_mark(void *p)
{
	const struct kvp_seg *s = ((struct quiet *)p)->s;
	uint64_t limit = s->g.g_index_limit, room = limit / 32 ? limit / 32 : 1;

	return ix_used(s) < limit - room / 2;
}

static bool
count_exact_settled(void *p)
{
	return kvpt_count_state(((struct quiet *)p)->s, KVP_IX_PENDING) == 0 &&
	       count_exact(p);
}

/* `kvpool stat` of pool into out: its exit status. */
static int
stat_table(const char *pool, char *out, size_t cap)
{
	return kvpt_run(out, cap, "%s/kvpool --pool %s stat 2>&1",
			kvpt_bindir(), pool);
}

/* The WARN line of `kvpool stat` about SSD-resident values that index
 * pressure drops (present or not, and it names the flag to raise). */
static bool
stat_warns_index_ssd(const char *table)
{
	const char *w = strstr(table, "\nWARN ");

	return w && strstr(w, "index pressure is dropping SSD-resident") &&
	       strstr(w, "--index-entries");
}

/*
 * DRAM only, --index-entries 100 (a 128-slot table): 1,000 puts of new
 * keys all succeed, the index never holds more than 100 entries, the
 * agent evicted to make room (cold ones: the newest key is always
 * there), and the count equals the entries when the pool is quiet.
 */
static void
test_limit_kept(void **state)
{
	enum {
		N = 1000,
		SZ = 4096,
		LIMIT = 100
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	struct quiet q;
	unsigned char out[SZ];
	unsigned busy = 0;
	uint64_t most = 0;
	static char table[16384];
	char k[100];
	int i;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "64M", "--dram-unit",
					  "4K", "--index-entries", "100", NULL),
			 0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	assert_int_equal(s.g.g_index_limit, LIMIT);
	assert_int_equal(s.g.g_index_slots, 128);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	for (i = 0; i < N; i++) {
		uint32_t kl = key_of(k, i);
		uint64_t e;

		assert_int_equal(put_retry(c, i, SZ, 1, &busy), 0);
		e = entries(&s);
		if (e > most)
			most = e;
		assert_true(e <= LIMIT);
		assert_true(ix_used(&s) <= LIMIT);
		/* the newest key is there, whole */
		assert_int_equal(kvp_get(c, k, kl, out, SZ), SZ);
		assert_true(kvpt_check(out, SZ, k, kl, 1));
	}
	print_message(
		"  %d puts: at most %llu entries of %d, %llu removed for room, %u BUSY "
		"answers\n",
		N, (unsigned long long)most, LIMIT,
		(unsigned long long)kvpt_actr(&s, KVP_ACTR_EVICT_INDEX), busy);
	/* the limit, not the table, binds */
	assert_true(most >= LIMIT - LIMIT / 16);
	assert_true(kvpt_actr(&s, KVP_ACTR_EVICT_INDEX) >= N - LIMIT);
	/* no SSD tier: nothing the index dropped had a copy on SSD, and
	 * kvpool stat has nothing to warn about */
	assert_int_equal(kvpt_actr(&s, KVP_ACTR_EVICT_INDEX_SSD), 0);
	assert_int_equal(stat_table(a.pool, table, sizeof(table)), 0);
	assert_false(stat_warns_index_ssd(table));
	q.s = &s;
	assert_true(kvpt_wait_until(count_exact, &q, 5000) >= 0);
	assert_int_equal(kvpt_cli_check(a.pool, -1, NULL, 0), 0);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

/*
 * At the limit with every entry pinned, a put waits KVP_PUT_WAIT_MS and
 * answers NOSPC (nothing can be removed), never a miss and never stuck;
 * once the pins go, it succeeds.  With the agent gone it answers
 * UNAVAILABLE.
 */
static void
test_limit_all_held(void **state)
{
	enum {
		SZ = 4096,
		LIMIT = 64
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	struct kvp_op ops[LIMIT];
	char keys[LIMIT][100];
	struct kvp_pinset *ps;
	unsigned busy = 0;
	uint64_t t0;
	int i, rc;

	(void)state;
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "64M",
				      "--dram-unit", "4K", "--index-entries",
				      "64", NULL),
			 0);
	for (i = 0; i < LIMIT; i++)
		assert_int_equal(put_retry(c, i, SZ, 2, &busy), 0);
	for (i = 0; i < LIMIT; i++) {
		ops[i].klen = key_of(keys[i], i);
		ops[i].key = keys[i];
	}
	/* the agent may have made a little room already (below the limit's
	 * high mark): pin every key that is there, one by one (a prefix would
	 * stop at the first one it evicted and leave the rest unpinned), then
	 * top the index up, pinning as it goes */
	{
		struct kvp_pinset *more[2 * LIMIT];
		size_t pinned = 0;
		int nmore = 0, j = LIMIT;

		ps = NULL;
		for (i = 0; i < LIMIT; i++) {
			if (kvp_batch_lookup_pin(c, &ops[i], 1, &more[nmore]) ==
			    1)
				nmore++;
			else
				kvp_pinset_free(c, more[nmore]);
		}
		while (entries(&s) < LIMIT) {
			struct kvp_op op;
			char k[100];

			assert_int_equal(put_retry(c, j, SZ, 2, &busy), 0);
			op.klen = key_of(k, j++);
			op.key = k;
			if (kvp_batch_lookup_pin(c, &op, 1, &more[nmore]) == 1)
				nmore++;
			else
				kvp_pinset_free(c, more[nmore]);
		}
		assert_true(pinned + (size_t)nmore >= LIMIT);
		assert_int_equal(ix_used(&s), LIMIT);
		t0 = kvp_now_ns(CLOCK_MONOTONIC);
		rc = put_retry(c, 5000, SZ, 2, &busy);
		assert_int_equal(rc, -ENOSPC);
		assert_true(kvp_now_ns(CLOCK_MONOTONIC) - t0 < 2000000000ull);
		assert_int_equal(kvp_exists(c, keys[0], ops[0].klen), 1);
		assert_int_equal(entries(&s), LIMIT);
		for (i = 0; i < nmore; i++)
			kvp_pinset_free(c, more[i]);
	}
	kvp_pinset_free(c, ps);
	assert_int_equal(put_retry(c, 5000, SZ, 2, &busy), 0);
	assert_true(entries(&s) <= LIMIT);
	kvp_close(c);
	/* no agent to make room: UNAVAILABLE, within the put's wait */
	kvpt_agent_kill(&a);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	for (i = 6000; i < 6000 + LIMIT + 1; i++) {
		rc = put_retry(c, i, SZ, 2, &busy);
		if (rc)
			break;
	}
	assert_int_equal(rc, -ENOTCONN);
	assert_true(entries(&s) <= LIMIT);
	kvp_close(c);
	kvp__seg_unmap(&s);
	kvpt_pool_remove(a.pool);
}

/*
 * Processes killed while changing the count: 60 die with a unit taken
 * and not yet recorded as theirs (C_IX_COUNTED: the reaper cannot know
 * whether their CAS happened), 60 with a unit held for a slot they never
 * published (C_PUT_COPIED: given back exactly).  120 lost units would
 * fill a 100-entry index for good; the count comes back exact, and 100
 * more puts succeed.
 */
static void
test_count_survives_deaths(void **state)
{
	enum {
		SZ = 4096,
		LIMIT = 100,
		DEATHS = 60
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	struct quiet q;
	unsigned busy = 0;
	int i, round;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "64M", "--dram-unit",
					  "4K", "--index-entries", "100", NULL),
			 0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	for (round = 0; round < 2; round++) {
		const char *at = round ? "C_PUT_COPIED" : "C_IX_COUNTED";

		for (i = 0; i < DEATHS; i++) {
			pid_t pid = fork();
			int st;

			if (pid == 0) {
				struct kvp_client *cc;
				unsigned b = 0;

				kvp_crash_arm(kvp_crash_lookup(at), 0);
				if (kvp_open(a.pool, "ns", &cc))
					_exit(2);
				put_retry(cc, 10000 + round * DEATHS + i, SZ, 3,
					  &b);
				/* not reached: the crash point exits 86 */
				_exit(3);
			}
			assert_int_equal(waitpid(pid, &st, 0), pid);
			assert_true(WIFEXITED(st));
			assert_int_equal(WEXITSTATUS(st), KVP_CRASH_EXIT);
		}
	}
	q.s = &s;
	assert_true(kvpt_wait_until(count_exact_settled, &q, 10000) >= 0);
	assert_int_equal(entries(&s), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	for (i = 0; i < LIMIT; i++)
		assert_int_equal(put_retry(c, i, SZ, 3, &busy), 0);
	assert_true(entries(&s) <= LIMIT);
	assert_true(kvpt_wait_until(count_exact, &q, 5000) >= 0);
	assert_int_equal(kvpt_cli_check(a.pool, -1, NULL, 0), 0);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

/*
 * With an SSD tier: 300 puts into a 64-entry index while the agent
 * demotes everything: cold SSD-resident entries leave the index with a
 * tombstone, counted apart (the SSD had room for them: kvpool stat
 * warns and names --index-entries).  After a clean stop and a rebuild
 * from disk alone (the segment is gone), the index holds the last
 * entries it had and no evicted key comes back; recovery stays within
 * the limit.
 */
static void
test_limit_ssd_tombstones(void **state)
{
	enum {
		N = 300,
		SZ = 16 << 10,
		LIMIT = 64
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	struct quiet q;
	unsigned char *out = malloc(SZ);
	bool *present = calloc(N, sizeof(bool));
	unsigned busy = 0, npresent = 0;
	static char table[16384];
	char k[100];
	int i;

	(void)state;
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
#define AGENT_ARGS                                                       \
	"--dram", "64M", "--dram-unit", "4K", "--dram-high", "0",        \
		"--dram-low", "0", "--index-entries", "64", "--ssd-dir", \
		kvpt_ssd_dir, "--ssd-segment", "8M", "--staging", "8M",  \
		"--staging-slot", "1M", NULL
	assert_int_equal(kvpt_pool_up(&a, &s, &c, AGENT_ARGS), 0);
	for (i = 0; i < N; i++) {
		assert_int_equal(put_retry(c, i, SZ, 4, &busy), 0);
		assert_true(entries(&s) <= LIMIT);
	}
	assert_true(kvpt_actr(&s, KVP_ACTR_EVICT_INDEX) >= N - LIMIT);
	/* the values went to SSD first (--dram-high 0): the evictions were
	 * of values with an SSD copy, and kvpool stat says so */
	print_message(
		"  %llu index evictions, %llu of values with an SSD copy\n",
		(unsigned long long)kvpt_actr(&s, KVP_ACTR_EVICT_INDEX),
		(unsigned long long)kvpt_actr(&s, KVP_ACTR_EVICT_INDEX_SSD));
	assert_true(kvpt_actr(&s, KVP_ACTR_EVICT_INDEX_SSD) > 0);
	assert_true(kvpt_actr(&s, KVP_ACTR_EVICT_INDEX_SSD) <=
		    kvpt_actr(&s, KVP_ACTR_EVICT_INDEX));
	assert_int_equal(stat_table(a.pool, table, sizeof(table)), 0);
	if (!stat_warns_index_ssd(table))
		fail_msg("kvpool stat does not warn:\n%s", table);
	q.s = &s;
	/* the agent removes entries while the count is at the limit's high
	 * mark: only below it is the set of present keys final */
	assert_true(kvpt_wait_until(below_high_mark, &q, 5000) >= 0);
	assert_true(kvpt_wait_until(count_exact, &q, 5000) >= 0);
	for (i = 0; i < N; i++) {
		uint32_t kl = key_of(k, i);
		ssize_t n = kvp_get(c, k, kl, out, SZ);

		assert_true(n == SZ || n == -ENOENT);
		if (n == SZ) {
			assert_true(kvpt_check(out, SZ, k, kl, 4));
			present[i] = true;
			npresent++;
		}
	}
	assert_true(npresent > 0 && npresent <= LIMIT);
	assert_int_equal(kvpt_cli_check(a.pool, -1, NULL, 0), 0);
	kvp_close(c);
	kvp__seg_unmap(&s);
	/* a clean stop (tombstones written), then only the disk is left */
	assert_int_equal(kvpt_agent_stop(&a), 0);
	assert_int_equal(kvpt_agent_restart(&a, AGENT_ARGS), 0);
#undef AGENT_ARGS
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	assert_true(entries(&s) <= LIMIT);
	for (i = 0; i < N; i++) {
		uint32_t kl = key_of(k, i);
		ssize_t n = kvp_get(c, k, kl, out, SZ);

		if (!present[i]) {
			/* evicted: its tombstone holds */
			assert_int_equal(n, -ENOENT);
			continue;
		}
		assert_int_equal(n, SZ);
		assert_true(kvpt_check(out, SZ, k, kl, 4));
	}
	assert_true(kvpt_wait_until(count_exact, &q, 5000) >= 0);
	free(out);
	free(present);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

/*
 * The default --index-entries counts the SSD tier: 256 MiB of DRAM (its
 * share alone is the floor, 65,536 entries) and an --ssd-size that holds
 * K = 72,000 values of 32 KiB (36 KiB records; the default counts values
 * of one 4 KiB unit, 8 KiB records: more): K small values put (DRAM
 * holds 65,536 at most: the rest go to SSD to make room) are all still there
 * afterwards; the index limit dropped none (with the DRAM share only it
 * allowed 65,536 and dropped the rest: this failed).
 */
static void
test_default_counts_ssd(void **state)
{
	enum {
		K = 72000,
		SZ = 512
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	char k[100], ssd_size[32];
	uint64_t t0;
	int i, present = 0;

	(void)state;
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	snprintf(ssd_size, sizeof(ssd_size), "%lluK", 36ull * K);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "256M",
				      "--dram-unit", "4K", "--ssd-dir",
				      kvpt_ssd_dir, "--ssd-segment", "64M",
				      "--ssd-size", ssd_size, "--staging", "8M",
				      "--staging-slot", "1M",
				      "--stop-flush-secs", "0", NULL),
			 0);
	print_message("  index limit %llu, %llu slots\n",
		      (unsigned long long)s.g.g_index_limit,
		      (unsigned long long)s.g.g_index_slots);
	assert_true(s.g.g_index_limit >= 65536 + K);
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	assert_int_equal(kvpt_put_keys(c, key_of, 0, K, SZ, 7), 0);
	print_message("  puts done after %.1f s\n",
		      (double)(kvp_now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
	for (i = 0; i < K; i++) {
		uint32_t kl = key_of(k, i);

		present += kvp_exists(c, k, kl) == 1;
	}
	print_message("  %d of %d present after %.1f s; %llu demoted, %llu "
		      "index evictions\n",
		      present, K,
		      (double)(kvp_now_ns(CLOCK_MONOTONIC) - t0) / 1e9,
		      (unsigned long long)kvpt_actr(&s, KVP_ACTR_DEMOTE),
		      (unsigned long long)kvpt_actr(&s, KVP_ACTR_EVICT_INDEX));
	assert_int_equal(present, K);
	/* DRAM holds 65,536 of them (a 4 KiB unit each): a put waited for
	 * room, so the rest had gone to SSD */
	assert_true(kvpt_actr(&s, KVP_ACTR_DEMOTE) >= K - 65536);
	assert_int_equal(kvpt_actr(&s, KVP_ACTR_EVICT_INDEX), 0);
	assert_int_equal(kvpt_actr(&s, KVP_ACTR_SEGMENT_RECLAIM), 0);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_limit_kept),
		cmocka_unit_test(test_limit_all_held),
		cmocka_unit_test(test_count_survives_deaths),
		cmocka_unit_test(test_limit_ssd_tombstones),
		cmocka_unit_test(test_default_counts_ssd),
	};

	return cmocka_run_group_tests(tests, kvpt_ssd_dir_setup,
				      kvpt_ssd_dir_teardown);
}
