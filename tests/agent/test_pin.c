/* SPDX-License-Identifier: MIT */
/*
 * test_pin.c - lookup-and-pin: the count a lookup returns is a promise
 * (every pinned key loads, whatever eviction and SSD reclaim do meanwhile),
 * pins die with their process, and the per-client pinned-bytes cap holds
 * (for pins and leases together).
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
key_of(char *k, int who, int i)
{
	return (uint32_t)snprintf(k, 100, "%064x_w%d_%d",
				  (unsigned)i * 2654435761u, who, i);
}

static void
put_all(struct kvp_client *c, int who, int from, int n, uint64_t sz)
{
	unsigned char *v = malloc(sz);
	char k[100];
	int i, rc;

	for (i = from; i < from + n; i++) {
		uint32_t kl = key_of(k, who, i);
		kvpt_fill(v, sz, k, kl, 3);
		while ((rc = kvp_put(c, k, kl, v, sz)) == -EBUSY)
			;
		assert_true(rc == 0 || rc == -ENOSPC);
	}
	free(v);
}

/* Keys of 'who' that are still DRAM-resident. */
static int
count_in_dram(struct kvp_client *c, struct kvp_seg *s, int who, int n)
{
	char k[100];
	int i, p = 0;

	for (i = 0; i < n; i++) {
		uint32_t kl = key_of(k, who, i);
		uint64_t w;
		int64_t slot = kvp_ix_find(s, c->nsid,
					   kvp_key_hash(c->nsid, k, kl), k, kl,
					   KVP_IX_M(KVP_IX_READY), &w);
		p += slot >= 0 &&
		     KVP_LOC_TIER(kvp_load_relaxed(&s->entries[slot].e_loc)) ==
			     KVP_TIER_DRAM;
	}
	return p;
}

/* The agent has brought DRAM down to its high mark (--dram-high 50: at
 * most half of the 16 MiB pool's 1,024 values of 16 KiB): pinning then
 * leaves the writers room.  Without the wait a loaded machine can pin a
 * DRAM the agent had not yet drained, wholly, and every later put is an
 * honest NOSPC (nothing is evictable), which is not what this test is
 * about. */
struct drained_arg {
	struct kvp_client *c;
	struct kvp_seg *s;
	int n;
};

static bool
drained(void *p)
{
	struct drained_arg *d = p;
	return count_in_dram(d->c, d->s, 0, d->n) <= 512;
}

/* Pin 2,000 keys; other processes then write enough to force eviction,
 * demotion and SSD segment reclaim; every pinned key still loads with
 * its bytes; after release the pool evicts them like any other. */
static void
test_probe_then_evict(void **state)
{
	enum {
		N = 2000,
		SZ = 16 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	struct kvp_op *ops = calloc(N, sizeof(*ops));
	char(*keys)[100] = calloc(N, 100);
	unsigned char *out = malloc((size_t)N * SZ);
	struct kvp_pinset *ps;
	struct drained_arg dr;
	pid_t w[2];
	int i, k, ssd_pinned = 0, dram_pinned;

	(void)state;
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "16M",
				      "--dram-unit", "4K", "--dram-high", "50",
				      "--dram-low", "30", "--ssd-dir",
				      kvpt_ssd_dir, "--ssd-segment", "4M",
				      "--ssd-size", "64M", "--staging", "2M",
				      "--staging-slot", "256K", NULL),
			 0);
	put_all(c, 0, 0, N, SZ);
	dr.c = c;
	dr.s = &s;
	dr.n = N;
	assert_true(kvpt_wait_until(drained, &dr, 30000) >= 0);
	for (i = 0; i < N; i++) {
		ops[i].klen = key_of(keys[i], 0, i);
		ops[i].key = keys[i];
	}
	assert_int_equal(kvp_batch_lookup_pin(c, ops, N, &ps), N);
	for (i = 0; i < N; i++)
		ssd_pinned += kvp_pinset_tier(c, ps, (size_t)i) == KVP_TIER_SSD;
	print_message("  2000 pinned (%d SSD-resident)\n", ssd_pinned);
	assert_true(ssd_pinned > 0);
	dram_pinned = count_in_dram(c, &s, 0, N);
	assert_true(dram_pinned > 0);
	/* two writers churn 6x the DRAM and the SSD budget */
	for (k = 0; k < 2; k++) {
		w[k] = fork();
		if (w[k] == 0) {
			struct kvp_client *wc;
			if (kvp_open(a.pool, "ns", &wc))
				_exit(2);
			put_all(wc, k + 1, 0, 3000, SZ);
			kvp_close(wc);
			_exit(0);
		}
	}
	for (k = 0; k < 2; k++) {
		int st;
		assert_int_equal(waitpid(w[k], &st, 0), w[k]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	/* evicted from DRAM, or from SSD with a reclaimed segment */
	assert_true(
		kvp_load_relaxed(&s.hdr->h_actr[KVP_ACTR_EVICT]) +
			kvp_load_relaxed(&s.hdr->h_actr[KVP_ACTR_EVICT_SSD]) >
		0);
	print_message(
		"  churned: %llu evictions, %llu demotions, %llu segments reclaimed\n",
		(unsigned long long)kvp_load_relaxed(
			&s.hdr->h_actr[KVP_ACTR_EVICT]),
		(unsigned long long)kvp_load_relaxed(
			&s.hdr->h_actr[KVP_ACTR_DEMOTE]),
		(unsigned long long)kvp_load_relaxed(
			&s.hdr->h_actr[KVP_ACTR_SEGMENT_RECLAIM]));
	/* while pinned, the churn could not move them out of DRAM (counted
	 * before the release: after it the evictor may move them at once) */
	assert_int_equal(count_in_dram(c, &s, 0, N), dram_pinned);
	for (i = 0; i < N; i++) {
		ops[i].buf = out + (size_t)i * SZ;
		ops[i].off = 0;
		ops[i].len = SZ;
	}
	assert_int_equal(kvp_pinset_get(c, ps, ops, N), N);
	for (i = 0; i < N; i++) {
		assert_int_equal(ops[i].status, 0);
		assert_true(
			kvpt_check(ops[i].buf, SZ, keys[i], ops[i].klen, 3));
	}
	kvp_pinset_release(c, ps);
	kvp_pinset_release(c, ps); /* twice: harmless */
	assert_int_equal(kvp_pinset_count(ps), 0);
	kvp_pinset_free(c, ps);
	assert_int_equal(kvpt_holds_total(&s), 0);
	/* released: the next wave evicts them (out of DRAM) normally */
	put_all(c, 3, 0, 3000, SZ);
	assert_true(count_in_dram(c, &s, 0, N) < dram_pinned / 2);
	free(ops);
	free(keys);
	free(out);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

struct pin_cond {
	struct kvp_seg *s;
};

static bool
no_holds(void *p)
{
	struct kvp_seg *s = ((struct pin_cond *)p)->s;
	return kvpt_holds_total(s) == 0 && kvpt_clients_nonfree(s) == 0;
}

/* A process killed while holding a pinset: its pins go within 1 s. */
static void
test_killed_with_pinset(void **state)
{
	enum {
		N = 500
	};
	struct kvpt_agent a;
	struct kvp_seg s;
	struct pin_cond pc;
	long long ns;
	pid_t pid;
	int pfd[2];
	char b;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "64M", "--dram-unit",
					  "4K", "--reap-ms", "1000", NULL),
			 0);
	assert_int_equal(kvpt_seg_map(a.pool, &s), 0);
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	if (pid == 0) {
		struct kvp_client *c;
		struct kvp_op ops[N];
		char keys[N][100];
		struct kvp_pinset *ps;
		int i;

		if (kvp_open(a.pool, "ns", &c))
			_exit(2);
		put_all(c, 0, 0, N, 4096);
		for (i = 0; i < N; i++) {
			ops[i].klen = key_of(keys[i], 0, i);
			ops[i].key = keys[i];
		}
		if (kvp_batch_lookup_pin(c, ops, N, &ps) != N ||
		    write(pfd[1], "r", 1) != 1)
			_exit(3);
		for (;;)
			pause();
	}
	assert_int_equal(read(pfd[0], &b, 1), 1);
	assert_int_equal(kvpt_holds_total(&s), N);
	assert_int_equal(kvpt_ctr_total(&s, KVP_CTR_PINNED_DRAM),
			 (uint64_t)N * 4096);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	pc.s = &s;
	ns = kvpt_wait_until(no_holds, &pc, 1000);
	assert_true(ns >= 0);
	print_message("  %d pins released %.1f ms after SIGKILL\n", N,
		      (double)ns / 1e6);
	assert_int_equal(kvp_load_relaxed(&s.hdr->h_actr[KVP_ACTR_REAP_PINS]),
			 N);
	assert_int_equal(kvpt_ctr_total(&s, KVP_CTR_PINNED_DRAM), 0);
	kvp__seg_unmap(&s);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

struct cap_arg {
	const char *pool;
	int who;
	ssize_t pinned;
	bool capped;
	uint64_t bytes;
};

static void *
cap_worker(void *p)
{
	struct cap_arg *x = p;
	struct kvp_client *c;
	struct kvp_op ops[100];
	char keys[100][100];
	struct kvp_pinset *ps = NULL;
	int i, r;

	if (kvp_open(x->pool, "ns", &c))
		return NULL;
	for (r = 0; r < 20; r++) {
		for (i = 0; i < 100; i++) {
			ops[i].klen = key_of(keys[i], 0, i);
			ops[i].key = keys[i];
		}
		x->pinned = kvp_batch_lookup_pin(c, ops, 100, &ps);
		x->capped = ps && ps->capped;
		x->bytes = c->pinned_bytes;
		if (r < 19)
			kvp_pinset_free(c, ps);
	}
	kvp_pinset_free(c, ps);
	kvp_close(c);
	return NULL;
}

/* --max-pinned-per-client: concurrent lookups by several clients each pin
 * a shorter prefix, never more than the cap, and say so. */
static void
test_pinned_cap(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	struct cap_arg x[3];
	pthread_t t[3];
	int k;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "64M", "--dram-unit",
					  "4K", "--max-pinned-per-client", "1M",
					  NULL),
			 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	put_all(c, 0, 0, 100, 16 << 10);
	for (k = 0; k < 3; k++) {
		x[k].pool = a.pool;
		x[k].who = k;
		assert_int_equal(pthread_create(&t[k], NULL, cap_worker, &x[k]),
				 0);
	}
	for (k = 0; k < 3; k++) {
		pthread_join(t[k], NULL);
		assert_int_equal(x[k].pinned, 64); /* 1 MiB / 16 KiB */
		assert_true(x[k].capped);
		assert_true(x[k].bytes <= (1u << 20));
	}
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

struct lease_cond {
	struct kvp_client *c;
	const char *key;
	uint32_t klen;
	struct kvp_lease *l;
};

static bool
lease_taken(void *p)
{
	struct lease_cond *lc = p;

	return kvp_lease_acquire(lc->c, lc->key, lc->klen, 60000, lc->l) == 0;
}

/* --max-pinned-per-client counts leases too: a client's leases and its
 * pinsets together never pass the cap (a lease past it is -EBUSY, a
 * lookup-and-pin stops its prefix); released or expired leases stop
 * counting; the count is per client handle, and leases of a process that
 * exited count against nobody. */
static void
test_leases_count_against_cap(void **state)
{
	enum {
		SZ = 16 << 10,
		CAPN = 16
	}; /* the cap: 256K = 16 values */
	struct kvpt_agent a;
	struct kvp_client *c, *c2;
	struct kvp_lease l[CAPN + 8], x;
	struct kvp_op ops[8];
	char keys[40][100];
	struct kvp_pinset *ps;
	struct lease_cond lc;
	struct kvp_seg s;
	pid_t pid;
	int i, st;

	(void)state;
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "64M",
				      "--dram-unit", "4K",
				      "--max-pinned-per-client", "256K", NULL),
			 0);
	put_all(c, 0, 0, 40, SZ);
	for (i = 0; i < 40; i++)
		key_of(keys[i], 0, i);
	for (i = 0; i < CAPN; i++)
		assert_int_equal(kvp_lease_acquire(c, keys[i],
						   (uint32_t)strlen(keys[i]),
						   60000, &l[i]),
				 0);
	/* the 17th would pass the cap: BUSY, and nothing was taken */
	assert_int_equal(kvp_lease_acquire(c, keys[CAPN],
					   (uint32_t)strlen(keys[CAPN]), 60000,
					   &x),
			 -EBUSY);
	assert_int_equal(kvpt_holds_total(&s), 0);
	assert_true(kvpt_ctr_total(&s, KVP_CTR_PIN_CAPPED) >= 1);
	/* the leases fill the cap for pins too */
	for (i = 0; i < 8; i++) {
		ops[i].key = keys[20 + i];
		ops[i].klen = (uint32_t)strlen(keys[20 + i]);
	}
	assert_int_equal(kvp_batch_lookup_pin(c, ops, 8, &ps), 0);
	assert_true(ps->capped);
	assert_int_equal(ops[0].status, -EBUSY);
	kvp_pinset_free(c, ps);
	/* four released: four pins fit, then the cap stops the prefix */
	for (i = 0; i < 4; i++)
		assert_int_equal(kvp_lease_release(c, &l[i]), 0);
	/* twice: no double credit */
	assert_int_equal(kvp_lease_release(c, &l[0]), 0);
	assert_int_equal(kvp_batch_lookup_pin(c, ops, 8, &ps), 4);
	assert_true(ps->capped);
	/* and with pins and leases at the cap, no lease either */
	assert_int_equal(kvp_lease_acquire(c, keys[CAPN],
					   (uint32_t)strlen(keys[CAPN]), 60000,
					   &x),
			 -EBUSY);
	kvp_pinset_free(c, ps);
	/* another client handle has a cap of its own */
	assert_int_equal(kvp_open(a.pool, "ns", &c2), 0);
	for (i = 0; i < CAPN; i++)
		assert_int_equal(
			kvp_lease_acquire(c2, keys[20 + i],
					  (uint32_t)strlen(keys[20 + i]), 60000,
					  &l[i]),
			0);
	kvp_close(c2); /* its leases outlive it (until they expire) */
	/* short leases stop counting when they expire: fill the cap with
	 * 4 leases of 100 ms, then one more is taken once they are over */
	for (i = 0; i < 4; i++)
		assert_int_equal(kvp_lease_acquire(c, keys[i],
						   (uint32_t)strlen(keys[i]),
						   100, &x),
				 0);
	lc.c = c;
	lc.key = keys[39];
	lc.klen = (uint32_t)strlen(keys[39]);
	lc.l = &x;
	assert_int_equal(kvp_lease_acquire(c, lc.key, lc.klen, 60000, &x),
			 -EBUSY);
	assert_true(kvpt_wait_until(lease_taken, &lc, 5000) >= 0);
	/* a process that exits holding leases at its cap: a new client
	 * starts from zero (its leases count against nobody) */
	pid = fork();
	if (pid == 0) {
		struct kvp_client *cc;
		struct kvp_lease y;

		if (kvp_open(a.pool, "ns", &cc))
			_exit(2);
		for (i = 0; i < CAPN; i++)
			if (kvp_lease_acquire(cc, keys[i],
					      (uint32_t)strlen(keys[i]), 60000,
					      &y))
				_exit(3);
		_exit(kvp_lease_acquire(cc, keys[CAPN],
					(uint32_t)strlen(keys[CAPN]), 60000,
					&y) == -EBUSY ?
			      0 :
			      4);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c2), 0);
	assert_int_equal(kvp_lease_acquire(c2, keys[CAPN],
					   (uint32_t)strlen(keys[CAPN]), 60000,
					   &x),
			 0);
	kvp_close(c2);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

/* The agent scans each client's holds up to its high-water mark: a large
 * pinset raises it, and when the pinset goes the mark falls back (a client
 * takes its lowest free hold slot), so one long prompt does not make every
 * later eviction scan its slots.  Two pinsets: releasing the lower one
 * keeps the mark (the upper still holds), a new small pinset reuses the
 * lowest slots, releasing the upper one brings the mark down to it. */
static uint64_t
hwm_of(struct kvp_seg *s, struct kvp_client *c)
{
	return kvp_load_relaxed(&s->clients[c->slot].cs_hold_hwm);
}

static void
test_hold_mark_falls_back(void **state)
{
	enum {
		N = 3000,
		SZ = 4096
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	struct kvp_op *ops = calloc(N, sizeof(*ops));
	char(*keys)[100] = calloc(N, 100);
	struct kvp_pinset *lo, *hi, *small;
	int i;

	(void)state;
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "64M", NULL), 0);
	put_all(c, 0, 0, N, SZ);
	for (i = 0; i < N; i++) {
		ops[i].klen = key_of(keys[i], 0, i);
		ops[i].key = keys[i];
	}
	assert_int_equal(hwm_of(&s, c), 0);
	assert_int_equal(kvp_batch_lookup_pin(c, ops, 1000, &lo), 1000);
	assert_int_equal(hwm_of(&s, c), 1000);
	assert_int_equal(kvp_batch_lookup_pin(c, ops + 1000, 2000, &hi), 2000);
	assert_int_equal(hwm_of(&s, c), 3000);
	kvp_pinset_free(c, lo);
	assert_int_equal(hwm_of(&s, c), 3000); /* hi still holds 1000..2999 */
	assert_int_equal(kvp_batch_lookup_pin(c, ops, 50, &small), 50);
	assert_int_equal(hwm_of(&s, c), 3000);
	kvp_pinset_free(c, hi);
	assert_int_equal(hwm_of(&s, c), 50); /* small took slots 0..49 */
	kvp_pinset_free(c, small);
	assert_int_equal(hwm_of(&s, c), 0);
	/* and reads hold below the mark as before */
	{
		unsigned char *v = malloc(SZ);
		assert_int_equal(kvp_get(c, keys[7], ops[7].klen, v, SZ),
				 (int)SZ);
		free(v);
	}
	assert_int_equal(hwm_of(&s, c), 0);
	free(ops);
	free(keys);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pinned_cap),
		cmocka_unit_test(test_leases_count_against_cap),
		cmocka_unit_test(test_killed_with_pinset),
		cmocka_unit_test(test_probe_then_evict),
		cmocka_unit_test(test_hold_mark_falls_back),
	};

	return cmocka_run_group_tests(tests, kvpt_ssd_dir_setup,
				      kvpt_ssd_dir_teardown);
}
