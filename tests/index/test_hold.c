/* SPDX-License-Identifier: MIT */
/*
 * test_hold.c - the hold protocol (the proof at the top of
 * index/kvp_index.h), both halves called directly on a bare segment
 * (kvpt_seg_bare: no agent): the reader's kvp_ix_hold / kvp_ix_unhold
 * against the agent's kvp_ix_cand_take_agent + kvp_ix_holds_scan_agent
 * (index/index_agent.c) and its verdicts (kvp_ix_check_release,
 * kvp_ix_relocate, kvp_ix_remove).
 *
 *  - a hold validated before the CHECK is seen by the scan, whatever
 *    generation of the slot it names, pinned or not; so are live leases;
 *    hold slots above a client's high-water mark are not read, and a
 *    forged mark is clamped; any number of candidates;
 *  - a reader that sees CHECK waits for the verdict: released, it holds;
 *    relocated, it holds the new location; removed, -ENOENT and nothing
 *    held; -EBUSY, nothing held, once its wait bound has passed;
 *  - Dekker (proof step 1: the reader sees CHECK or the scan sees the
 *    hold, never neither) with a reader and the agent in lock step, so
 *    their store-fence-load sequences overlap: a validated hold was seen
 *    by that round's scan, every round (fails without the reader's fence);
 *  - a stress of readers racing holds against the agent's CHECK, scan,
 *    relocation and removal: no reader ever holds a value the agent moved
 *    or freed.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "index/index_int.h"
#include "tests/agent/harness.h"

#define NS1 0x401d0001ull
#define HPC 64u /* hold slots per client */
#define CLIENTS 8u
#define AGENT_CS (CLIENTS - 1) /* the client slot the "agent" claims with */

static uint64_t
word(const struct kvp_seg *s, uint64_t i)
{
	return kvp_load_acquire(&s->meta[i]); /* acquire: a test's look */
}

static kvp_aword_t *
hold_slot(struct kvp_seg *s, uint32_t cs, uint32_t k)
{
	return &s->holds[(uint64_t)cs * s->g.g_holds_per_client + k];
}

/* Client cs uses hold slots below n (what kvp__hold publishes). */
static void
set_hwm(struct kvp_seg *s, uint32_t cs, uint64_t n)
{
	/* relaxed: ordered before the scan by the fences of the protocol */
	kvp_store_relaxed(&s->clients[cs].cs_hold_hwm, n);
}

static int64_t
put(struct kvp_seg *s, const char *key, uint64_t *w)
{
	int64_t i = kvpt_ix_put(s, AGENT_CS, NS1, key, strlen(key), w);

	assert_true(i >= 0);
	return i;
}

/* One pass of the agent over slot i alone: take it under CHECK, scan.
 * The candidate in *c. */
static bool
check_one(struct kvp_seg *s, uint64_t i, struct kvp_cand *c)
{
	assert_int_equal(kvp_ix_cand_take_agent(s, i, word(s, i), c), 1);
	kvp_ix_holds_scan_agent(s, c, 1);
	return c->held;
}

/* A hold taken on READY(g) is seen by the scan (the agent backs off:
 * CHECK released, same word); dropped, it is not, and the agent may
 * remove the value; a hold from the old word then finds the slot moved
 * on (-ENOENT) and leaves its hold slot empty. */
static void
test_hold_seen_by_scan(void **state)
{
	struct kvp_seg s;
	struct kvp_cand c;
	unsigned waits = 0;
	uint64_t w;
	int64_t i;

	(void)state;
	assert_int_equal(kvpt_seg_bare(&s, 256, CLIENTS, HPC, 8), 0);
	i = put(&s, "held", &w);
	set_hwm(&s, 0, 1);
	assert_int_equal(kvp_ix_hold(&s, hold_slot(&s, 0, 0), (uint64_t)i, w, 0,
				     1000000000ull, &waits),
			 0);
	assert_int_equal(waits, 0);
	assert_int_equal(kvp_load_relaxed(hold_slot(&s, 0, 0)),
			 KVP_HOLD_MAKE(i, KVP_IX_GEN(w)));
	assert_true(check_one(&s, (uint64_t)i, &c));
	assert_int_equal(c.slot, i);
	assert_int_equal(c.word, w | KVP_IX_CHECK);
	assert_true(kvp_ix_check_release(&s, (uint64_t)i, c.word));
	assert_int_equal(word(&s, (uint64_t)i), w);
	/* held again and again while the hold stays */
	assert_true(check_one(&s, (uint64_t)i, &c));
	assert_true(kvp_ix_check_release(&s, (uint64_t)i, c.word));
	kvp_ix_unhold(hold_slot(&s, 0, 0));
	assert_int_equal(kvp_load_relaxed(hold_slot(&s, 0, 0)), 0);
	assert_false(check_one(&s, (uint64_t)i, &c));
	assert_true(kvp_ix_remove(&s, (uint64_t)i, c.word));
	assert_int_equal(kvp_ix_hold(&s, hold_slot(&s, 0, 0), (uint64_t)i, w, 0,
				     1000000000ull, &waits),
			 -ENOENT);
	assert_int_equal(kvp_load_relaxed(hold_slot(&s, 0, 0)), 0);
	assert_int_equal(waits, 0);
	kvp__seg_unmap(&s);
}

/* What the scan counts as held, in one pass over ten candidates: a hold
 * of the slot's generation, of an older one, a pinned hold, a hold of a
 * client whose high-water mark a client forged past its slots (clamped,
 * read in bounds), a live lease and a lease being taken; not: a hold
 * above its client's mark, an expired lease, a free lease slot, a slot
 * nobody names. */
static void
test_scan_what_counts(void **state)
{
	enum {
		HOLD_GEN,
		HOLD_OLD,
		HOLD_PIN,
		HOLD_FORGED_HWM,
		LEASE_LIVE,
		LEASE_RESERVED,
		HOLD_ABOVE_HWM,
		LEASE_EXPIRED,
		LEASE_FREE,
		NOBODY,
		N
	};
	static const bool want[N] = { true, true,  true,  true,  true,
				      true, false, false, false, false };
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC), w[N];
	struct kvp_cand c[N];
	struct kvp_seg s;
	int64_t slot[N];
	char key[16];
	unsigned k, n = 0;

	(void)state;
	assert_int_equal(kvpt_seg_bare(&s, 256, CLIENTS, HPC, 8), 0);
	for (k = 0; k < N; k++) {
		snprintf(key, sizeof(key), "c%u", k);
		slot[k] = put(&s, key, &w[k]);
	}
	/* client 0: a hold of the current generation */
	set_hwm(&s, 0, 1);
	kvp_store_release(hold_slot(&s, 0, 0),
			  KVP_HOLD_MAKE(slot[HOLD_GEN],
					KVP_IX_GEN(w[HOLD_GEN])));
	/* client 1: an older generation, in its 4th slot */
	set_hwm(&s, 1, 4);
	kvp_store_release(hold_slot(&s, 1, 3),
			  KVP_HOLD_MAKE(slot[HOLD_OLD],
					KVP_IX_GEN(w[HOLD_OLD]) + 5));
	/* client 2: a pin */
	set_hwm(&s, 2, 1);
	kvp_store_release(hold_slot(&s, 2, 0),
			  KVP_HOLD_MAKE(slot[HOLD_PIN],
					KVP_IX_GEN(w[HOLD_PIN])) |
				  KVP_HOLD_PIN);
	/* client 3: its mark says 2; a hold in slot 5 is not in use */
	set_hwm(&s, 3, 2);
	kvp_store_release(hold_slot(&s, 3, 5),
			  KVP_HOLD_MAKE(slot[HOLD_ABOVE_HWM],
					KVP_IX_GEN(w[HOLD_ABOVE_HWM])));
	/* client 4: a forged mark; its last slot is read, nothing beyond */
	set_hwm(&s, 4, ~0ull);
	kvp_store_release(hold_slot(&s, 4, HPC - 1),
			  KVP_HOLD_MAKE(slot[HOLD_FORGED_HWM],
					KVP_IX_GEN(w[HOLD_FORGED_HWM])));
	/* leases (release: published as a taker's LIVE store is) */
	kvp_store_relaxed(&s.leases[0].ls_slot, (uint64_t)slot[LEASE_LIVE]);
	kvp_store_relaxed(&s.leases[0].ls_expiry, now + 60000000000ull);
	kvp_store_release(&s.leases[0].ls_state,
			  KVP_LS_WORD(1, 1, KVP_LS_LIVE));
	kvp_store_relaxed(&s.leases[1].ls_slot, (uint64_t)slot[LEASE_EXPIRED]);
	kvp_store_relaxed(&s.leases[1].ls_expiry, now - 1);
	kvp_store_release(&s.leases[1].ls_state,
			  KVP_LS_WORD(1, 1, KVP_LS_LIVE));
	kvp_store_relaxed(&s.leases[2].ls_slot, (uint64_t)slot[LEASE_RESERVED]);
	kvp_store_release(&s.leases[2].ls_state,
			  KVP_LS_WORD(1, 2, KVP_LS_RESERVED));
	kvp_store_relaxed(&s.leases[3].ls_slot, (uint64_t)slot[LEASE_FREE]);
	kvp_store_relaxed(&s.leases[3].ls_expiry, now + 60000000000ull);
	kvp_store_release(&s.leases[3].ls_state,
			  KVP_LS_WORD(1, 1, KVP_LS_FREE));
	for (k = 0; k < N; k++)
		n += kvp_ix_cand_take_agent(&s, (uint64_t)slot[k], w[k], &c[n]);
	assert_int_equal(n, N);
	kvp_ix_holds_scan_agent(&s, c, n);
	for (k = 0; k < N; k++) {
		assert_int_equal(c[k].slot, slot[k]);
		if (c[k].held != want[k])
			fail_msg("candidate %u: held %d, want %d", k, c[k].held,
				 want[k]);
	}
	kvp__seg_unmap(&s);
}

/* Any number of candidates (scanned in chunks of 512): 1,500, every
 * 7th held by one of seven clients; exactly those are held; the agent
 * then releases them and removes the others. */
static void
test_scan_many_candidates(void **state)
{
	enum {
		N = 1500
	};
	struct kvp_cand *c = calloc(N, sizeof(*c));
	uint32_t used[CLIENTS] = { 0 };
	struct kvp_seg s;
	char key[32];
	unsigned k, n = 0, held = 0;
	uint64_t w;

	(void)state;
	assert_non_null(c);
	assert_int_equal(kvpt_seg_bare(&s, 2048, CLIENTS, HPC, 8), 0);
	for (k = 0; k < N; k++) {
		int64_t i;

		snprintf(key, sizeof(key), "many-%u", k);
		i = put(&s, key, &w);
		if (k % 7 == 0) {
			uint32_t cs = (k / 7) % 7;

			kvp_store_release(hold_slot(&s, cs, used[cs]++),
					  KVP_HOLD_MAKE(i, KVP_IX_GEN(w)));
			set_hwm(&s, cs, used[cs]);
		}
		n += kvp_ix_cand_take_agent(&s, (uint64_t)i, w, &c[n]);
	}
	assert_int_equal(n, N);
	kvp_ix_holds_scan_agent(&s, c, n);
	for (k = 0; k < N; k++) {
		if (c[k].held != (k % 7 == 0))
			fail_msg("candidate %u (slot %llu): held %d", k,
				 (unsigned long long)c[k].slot, c[k].held);
		held += c[k].held;
		if (c[k].held)
			assert_true(
				kvp_ix_check_release(&s, c[k].slot, c[k].word));
		else
			assert_true(kvp_ix_remove(&s, c[k].slot, c[k].word));
	}
	assert_int_equal(held, (N + 6) / 7);
	assert_int_equal(kvpt_count_state(&s, KVP_IX_READY), held);
	free(c);
	kvp__seg_unmap(&s);
}

/* A reader that finds the slot under CHECK waits, and gives up after
 * its wait bound: -EBUSY, nothing held, the slot untouched. */
static void
test_hold_busy_after_bound(void **state)
{
	struct kvp_seg s;
	struct kvp_cand c;
	unsigned waits = 0;
	uint64_t w, t0, dt;
	int64_t i;

	(void)state;
	assert_int_equal(kvpt_seg_bare(&s, 256, CLIENTS, HPC, 8), 0);
	i = put(&s, "busy", &w);
	set_hwm(&s, 0, 1);
	assert_int_equal(kvp_ix_cand_take_agent(&s, (uint64_t)i, w, &c), 1);
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	assert_int_equal(kvp_ix_hold(&s, hold_slot(&s, 0, 0), (uint64_t)i, w, 0,
				     5000000ull, &waits),
			 -EBUSY);
	dt = kvp_now_ns(CLOCK_MONOTONIC) - t0;
	assert_true(dt >= 5000000ull);
	assert_true(waits > 0);
	assert_int_equal(kvp_load_relaxed(hold_slot(&s, 0, 0)), 0);
	assert_int_equal(word(&s, (uint64_t)i), w | KVP_IX_CHECK);
	/* the word the reader passes may carry the flag: the same answer */
	waits = 0;
	assert_int_equal(kvp_ix_hold(&s, hold_slot(&s, 0, 0), (uint64_t)i,
				     w | KVP_IX_CHECK, 0, 1000000ull, &waits),
			 -EBUSY);
	assert_true(waits > 0);
	kvp__seg_unmap(&s);
}

/* ---- a reader waiting for the verdict (a forked child) ---- */

struct verdict {
	kvp_aint_t waits; /* the child's wait count, updated as it waits */
	kvp_aword_t loc;  /* the location it held */
	kvp_aword_t word; /* the state word while it held */
	kvp_aword_t hold; /* its hold slot's value while it held */
};

enum {
	V_RELEASE,
	V_RELOCATE,
	V_REMOVE
};

static bool
child_waits(void *p)
{
	/* acquire: a look */
	return kvp_iload_acquire(&((struct verdict *)p)->waits) > 0;
}

/* The reader: hold slot i (READY word w) with a bound far beyond the
 * test's; exit 0 held, 1 -ENOENT, 2 -EBUSY, 3 anything else. */
static void
verdict_child(struct kvp_seg *s, struct verdict *v, uint64_t i, uint64_t w)
{
	kvp_aword_t *h = hold_slot(s, 0, 0);
	int rc = kvp_ix_hold(s, h, i, w, 0, 60000000000ull, &v->waits);

	if (rc == 0) {
		/* relaxed: the hold's validation (acquire) ordered these */
		kvp_store_relaxed(&v->loc,
				  kvp_load_relaxed(&s->entries[i].e_loc));
		kvp_store_relaxed(&v->word, word(s, i));
		kvp_store_relaxed(&v->hold, kvp_load_relaxed(h));
		kvp_ix_unhold(h);
	}
	_exit(rc == 0 ? 0 : rc == -ENOENT ? 1 : rc == -EBUSY ? 2 : 3);
}

/* The slot is under CHECK before the reader comes; the reader stores
 * its hold, sees CHECK and waits (the test waits until it has waited);
 * then the verdict.  Release: the agent's scan, made now, sees the hold,
 * and the reader holds the value.  Relocate and remove: the scan was
 * made before the reader came (it saw no hold); relocated, the reader
 * holds the new location at the same generation; removed, it is told
 * -ENOENT and holds nothing. */
static void
run_verdict(int verdict)
{
	const uint64_t old_loc = KVP_LOC_MAKE(KVP_TIER_DRAM, 11),
		       new_loc = KVP_LOC_MAKE(KVP_TIER_SSD, 22);
	struct verdict *v = mmap(NULL, sizeof(*v), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct kvp_seg s;
	struct kvp_cand c;
	uint64_t w;
	int64_t i;
	pid_t pid;
	int st;

	assert_ptr_not_equal(v, MAP_FAILED);
	memset(v, 0, sizeof(*v));
	assert_int_equal(kvpt_seg_bare(&s, 256, CLIENTS, HPC, 8), 0);
	i = put(&s, "verdict", &w);
	/* release: before the fork */
	kvp_store_release(&s.entries[i].e_loc, old_loc);
	set_hwm(&s, 0, 1);
	assert_int_equal(kvp_ix_cand_take_agent(&s, (uint64_t)i, w, &c), 1);
	if (verdict != V_RELEASE) {
		kvp_ix_holds_scan_agent(&s, &c, 1);
		assert_false(c.held);
	}
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		verdict_child(&s, v, (uint64_t)i, w);
	if (kvpt_wait_until(child_waits, v, 20000) < 0) {
		kill(pid, SIGKILL);
		fail_msg("the reader never waited on CHECK");
	}
	/* it waits: its hold is stored (before its fence) */
	assert_int_equal(kvp_load_acquire(hold_slot(&s, 0, 0)),
			 KVP_HOLD_MAKE(i, KVP_IX_GEN(w)));
	switch (verdict) {
	case V_RELEASE:
		kvp_ix_holds_scan_agent(&s, &c, 1);
		assert_true(c.held);
		assert_true(kvp_ix_check_release(&s, (uint64_t)i, c.word));
		break;
	case V_RELOCATE:
		/* relaxed: the CAS publishes */
		kvp_store_relaxed(&s.entries[i].e_loc, new_loc);
		assert_true(kvp_ix_relocate(&s, (uint64_t)i, c.word));
		break;
	default:
		assert_true(kvp_ix_remove(&s, (uint64_t)i, c.word));
		break;
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	if (verdict == V_REMOVE) {
		assert_int_equal(WEXITSTATUS(st), 1);
	} else {
		assert_int_equal(WEXITSTATUS(st), 0);
		assert_int_equal(kvp_load_relaxed(&v->word), w);
		assert_int_equal(kvp_load_relaxed(&v->hold),
				 KVP_HOLD_MAKE(i, KVP_IX_GEN(w)));
		assert_int_equal(kvp_load_relaxed(&v->loc),
				 verdict == V_RELEASE ? old_loc : new_loc);
	}
	assert_int_equal(kvp_load_relaxed(hold_slot(&s, 0, 0)), 0);
	print_message("  the reader waited %u times for the verdict\n",
		      kvp_iload_acquire(&v->waits));
	kvp__seg_unmap(&s);
	munmap(v, sizeof(*v));
}

static void
test_wait_release(void **state)
{
	(void)state;
	run_verdict(V_RELEASE);
}

static void
test_wait_relocate(void **state)
{
	(void)state;
	run_verdict(V_RELOCATE);
}

static void
test_wait_remove(void **state)
{
	(void)state;
	run_verdict(V_REMOVE);
}

/*
 * The stress.  An agent thread runs the CHECK protocol over four keys
 * again and again, one READY slot per pass: under CHECK, one scan, then
 * held -> released; unheld -> relocated (a new location, same
 * generation) or removed (and put again).  Each location carries a tag
 * naming the (slot, generation) it belongs to, poisoned the moment the
 * agent moved the value off it or freed it.  Reader threads find a key,
 * hold it and, while they hold it, read their location's tag over and
 * over: it must name what they hold, every time.  A reader that trusted
 * a hold the agent did not see reads a poisoned or reused tag.  (The
 * threads run free, so the window of proof step 1 is seldom hit here:
 * the lock-step test below is the one that catches a missing fence.)
 * Runs until every outcome has been seen (held, moved away, backed off,
 * relocated, removed, a reader waiting on CHECK) and at least
 * KVPT_HOLD_STRESS_MS (default 1000) ms have passed, at most 60 s.
 */
#define SKEYS 4
#define NLOC 256
#define SREADERS 2
#define TAG(slot, gen) \
	((1ull << 63) | ((uint64_t)(gen) << 32) | (uint64_t)(slot))
#define POISON 0xdeadull

struct stress {
	struct kvp_seg *s;
	kvp_aword_t tag[NLOC];
	kvp_aword_t stop;
	uint64_t min_ns;
	/* agent-private */
	uint32_t free_loc[NLOC], nfree;
	uint64_t relocated, removed, backed_off, rounds;
	/* per reader (written by that reader only) */
	struct {
		uint64_t held, moved, busy, waits, bad, checks;
	} r[SREADERS];
};

static char stress_keys[SKEYS][16];

static uint32_t
loc_alloc(struct stress *x, uint64_t slot, uint32_t gen)
{
	uint32_t loc = x->free_loc[--x->nfree];

	/* relaxed: published by the CAS that publishes the location */
	kvp_store_relaxed(&x->tag[loc], TAG(slot, gen));
	kvp_store_relaxed(&x->s->entries[slot].e_loc, loc);
	return loc;
}

static void
loc_free(struct stress *x, uint64_t loc)
{
	/* relaxed: a reader that still read it was not protected, and
	 * reading the poison is how it finds out */
	kvp_store_relaxed(&x->tag[loc], POISON);
	x->free_loc[x->nfree++] = (uint32_t)loc;
}

static void
stress_put(struct stress *x, unsigned k)
{
	uint64_t w;
	int64_t i = kvp_ix_claim(x->s, AGENT_CS, NS1,
				 kvp_key_hash(NS1, stress_keys[k],
					      strlen(stress_keys[k])),
				 stress_keys[k], strlen(stress_keys[k]), &w);

	if (i < 0)
		abort(); /* no other claimant: cannot happen */
	loc_alloc(x, (uint64_t)i, KVP_IX_GEN(w));
	if (kvp_ix_publish(x->s, (uint64_t)i, w))
		abort();
}

static bool
stress_done(struct stress *x, uint64_t t0)
{
	uint64_t held = 0, moved = 0, waits = 0;
	unsigned k;

	if (kvp_now_ns(CLOCK_MONOTONIC) - t0 > 60000000000ull)
		return true;
	if (kvp_now_ns(CLOCK_MONOTONIC) - t0 < x->min_ns)
		return false;
	for (k = 0; k < SREADERS; k++) {
		/* relaxed: a progress look; the numbers are read again after
		 * join */
		held += __atomic_load_n(&x->r[k].held, __ATOMIC_RELAXED);
		moved += __atomic_load_n(&x->r[k].moved, __ATOMIC_RELAXED);
		waits += __atomic_load_n(&x->r[k].waits, __ATOMIC_RELAXED);
	}
	return held && moved && waits && x->relocated && x->removed &&
	       x->backed_off;
}

static void *
stress_agent(void *p)
{
	struct stress *x = p;
	struct kvp_seg *s = x->s;
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC);
	struct kvp_cand c[1];

	while (!stress_done(x, t0)) {
		unsigned n = 0, k;
		uint64_t i;

		/* one READY slot per pass: the scan follows its CHECK at once,
		 * the tightest window a reader's hold can race */
		for (i = 0; i < s->g.g_index_slots && n < 1; i++) {
			uint64_t j = (x->rounds + i) % s->g.g_index_slots,
				 w = word(s, j);

			if (KVP_IX_STATE(w) == KVP_IX_READY &&
			    kvp_ix_cand_take_agent(s, j, w, &c[n]))
				n++;
		}
		kvp_ix_holds_scan_agent(s, c, n);
		for (k = 0; k < n; k++) {
			uint64_t i2 = c[k].slot,
				 old = kvp_load_relaxed(&s->entries[i2].e_loc);
			unsigned key;

			if (c[k].held) {
				if (!kvp_ix_check_release(s, i2, c[k].word))
					abort();
				x->backed_off++;
				continue;
			}
			if ((x->rounds + k) % 3) {
				loc_alloc(x, i2, KVP_IX_GEN(c[k].word));
				if (!kvp_ix_relocate(s, i2, c[k].word))
					abort();
				loc_free(x, old);
				x->relocated++;
				continue;
			}
			/* which key: the stored key names it */
			for (key = 0; key < SKEYS; key++)
				if (kvp_ix_key_eq(s, i2, NS1, stress_keys[key],
						  strlen(stress_keys[key])))
					break;
			if (key == SKEYS || !kvp_ix_remove(s, i2, c[k].word))
				abort();
			loc_free(x, old);
			x->removed++;
			stress_put(x, key);
		}
		x->rounds++;
	}
	kvp_store_release(&x->stop, 1); /* release: the readers stop */
	return NULL;
}

struct reader_arg {
	struct stress *x;
	uint32_t me;
};

static void *
stress_reader(void *p)
{
	struct reader_arg *a = p;
	struct stress *x = a->x;
	struct kvp_seg *s = x->s;
	kvp_aword_t *h = hold_slot(s, a->me, 0);
	unsigned k = a->me;

	set_hwm(s, a->me, 1);
	/* acquire: pairs with the agent's stop store */
	while (!kvp_load_acquire(&x->stop)) {
		const char *key = stress_keys[k++ % SKEYS];
		size_t kl = strlen(key);
		unsigned waits = 0, spin;
		uint64_t w, loc, want;
		int64_t i = kvp_ix_find(s, NS1, kvp_key_hash(NS1, key, kl), key,
					kl, KVP_IX_M(KVP_IX_READY), &w);
		int rc;

		if (i < 0)
			continue; /* between a removal and the put again */
		rc = kvp_ix_hold(s, h, (uint64_t)i, w, 0, 10000000000ull,
				 &waits);
		__atomic_fetch_add(&x->r[a->me].waits, waits, __ATOMIC_RELAXED);
		if (rc == -ENOENT) {
			__atomic_fetch_add(&x->r[a->me].moved, 1,
					   __ATOMIC_RELAXED);
			continue;
		}
		if (rc) {
			x->r[a->me].busy++;
			continue;
		}
		/* held: the location and its tag must stay ours until the
		 * drop */
		/* relaxed: held */
		loc = kvp_load_relaxed(&s->entries[i].e_loc);
		want = TAG(i, KVP_IX_GEN(w));
		for (spin = 0; spin < 64; spin++) {
			x->r[a->me].checks++;
			if (loc >= NLOC ||
			    kvp_load_acquire(&x->tag[loc]) != want ||
			    kvp_load_relaxed(&s->entries[i].e_loc) != loc) {
				x->r[a->me].bad++;
				break;
			}
		}
		kvp_ix_unhold(h);
		__atomic_fetch_add(&x->r[a->me].held, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void
test_hold_stress(void **state)
{
	struct stress *x = calloc(1, sizeof(*x));
	struct reader_arg ra[SREADERS];
	pthread_t at, rt[SREADERS];
	uint64_t held = 0, moved = 0, busy = 0, waits = 0, bad = 0, checks = 0;
	struct kvp_seg s;
	unsigned k;

	(void)state;
	assert_non_null(x);
	assert_int_equal(kvpt_seg_bare(&s, 256, CLIENTS, HPC, 1), 0);
	x->s = &s;
	x->min_ns = kvpt_env_ms_ns("KVPT_HOLD_STRESS_MS", 1000);
	for (k = 0; k < NLOC; k++) {
		x->free_loc[k] = NLOC - 1 - k;
		kvp_store_relaxed(&x->tag[k], POISON);
	}
	x->nfree = NLOC;
	for (k = 0; k < SKEYS; k++) {
		snprintf(stress_keys[k], sizeof(stress_keys[k]), "stress-%u",
			 k);
		stress_put(x, k);
	}
	for (k = 0; k < SREADERS; k++) {
		ra[k].x = x;
		ra[k].me = k;
		assert_int_equal(
			pthread_create(&rt[k], NULL, stress_reader, &ra[k]), 0);
	}
	assert_int_equal(pthread_create(&at, NULL, stress_agent, x), 0);
	pthread_join(at, NULL);
	for (k = 0; k < SREADERS; k++) {
		pthread_join(rt[k], NULL);
		held += x->r[k].held;
		moved += x->r[k].moved;
		busy += x->r[k].busy;
		waits += x->r[k].waits;
		bad += x->r[k].bad;
		checks += x->r[k].checks;
	}
	print_message(
		"  %llu agent rounds: %llu backed off, %llu relocated, %llu removed; "
		"readers: %llu held (%llu checks), %llu moved away, %llu waits on CHECK, "
		"%llu busy\n",
		(unsigned long long)x->rounds,
		(unsigned long long)x->backed_off,
		(unsigned long long)x->relocated,
		(unsigned long long)x->removed, (unsigned long long)held,
		(unsigned long long)checks, (unsigned long long)moved,
		(unsigned long long)waits, (unsigned long long)busy);
	assert_int_equal(bad, 0);
	/* it exercised every outcome (else it ran out of time: 60 s) */
	assert_true(held > 0 && moved > 0 && waits > 0);
	assert_true(x->backed_off > 0 && x->relocated > 0 && x->removed > 0);
	assert_int_equal(kvpt_holds_total(&s), 0);
	kvp__seg_unmap(&s);
	free(x);
}

/*
 * Dekker, in lock step.  One reader and the agent meet at the start of
 * every round on one slot, so that the reader's hold store and the
 * agent's CHECK CAS land as close together as two threads can make them
 * (the store-buffer litmus test: without the reader's fence, x86 lets
 * its reload of the state word pass its hold store).  The reader keeps
 * what it holds until the agent's scan of that round is done; the agent
 * releases what it saw held and removes what it did not (then puts the
 * key again).  Proof step 1: a reader whose hold was validated (0) was
 * seen by that round's scan; a reader told -ENOENT was not.  Runs at
 * least KVPT_HOLD_STRESS_MS (default 1000) ms, until both verdicts have
 * been seen and the hold and the scan have overlapped in time in
 * HOLD_OVERLAPS rounds (else, after 60 s, it says SKIP for the race it
 * could not make).
 */
#define HOLD_OVERLAPS 2000
#define COLD_LINES (1u << 18) /* 16 MiB */

struct lockstep {
	struct kvp_seg *s;
	kvp_aword_t next;    /* the agent: round r's slot and word are set */
	kvp_aword_t ready;   /* the reader: about to hold in round r */
	kvp_aword_t scanned; /* the agent: r << 1 | held, once it scanned */
	kvp_aword_t done;    /* the reader: dropped what it held in round r */
	kvp_aword_t stop;
	kvp_aword_t slot, word;
	uint64_t min_ns;
	uint64_t *cold; /* COLD_LINES cache lines of the reader's own */
	/* the agent's */
	uint64_t rounds, released, removed;
	uint64_t scan_t[2]; /* its CHECK CAS and scan: start, end */
	/* the reader's */
	uint64_t held, moved, waited, busy, bad, overlapped;
};

static void *
lockstep_agent(void *p)
{
	struct lockstep *x = p;
	struct kvp_seg *s = x->s;
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC), r,
		 seed = 0x9e3779b97f4a7c15ull;

	for (r = 1;; r++) {
		uint64_t i = kvp_load_relaxed(&x->slot),
			 w = kvp_load_relaxed(&x->word), now;
		struct kvp_cand c;

		kvpt_step_wait(&x->ready, r, NULL);
		kvpt_delay(&seed, 63);
		x->scan_t[0] = kvp_now_ns(CLOCK_MONOTONIC);
		if (!kvp_ix_cand_take_agent(s, i, w, &c))
			abort(); /* nobody else writes the word */
		kvp_ix_holds_scan_agent(s, &c, 1);
		x->scan_t[1] = kvp_now_ns(CLOCK_MONOTONIC);
		/* release: the reader waits for the scan's answer (and
		 * times) */
		kvp_store_release(&x->scanned, r << 1 | c.held);
		if (c.held) {
			if (!kvp_ix_check_release(s, i, c.word))
				abort();
			x->released++;
		} else {
			if (!kvp_ix_remove(s, i, c.word))
				abort();
			x->removed++;
		}
		kvpt_step_wait(&x->done, r, NULL);
		if (!c.held) {
			int64_t j = kvpt_ix_put(s, AGENT_CS, NS1, "lockstep", 8,
						&w);

			if (j < 0)
				abort();
			/* relaxed: published by the release of next below */
			kvp_store_relaxed(&x->slot, (uint64_t)j);
			kvp_store_relaxed(&x->word, w);
		}
		x->rounds = r;
		now = kvp_now_ns(CLOCK_MONOTONIC);
		if (now - t0 > 60000000000ull ||
		    (now - t0 >= x->min_ns && x->released && x->removed &&
		     __atomic_load_n(&x->overlapped, __ATOMIC_RELAXED) >=
			     HOLD_OVERLAPS)) {
			/* release: the reader stops */
			kvp_store_release(&x->stop, 1);
			break;
		}
		/* release: round r + 1's slot and word */
		kvp_store_release(&x->next, r);
	}
	return NULL;
}

static void *
lockstep_reader(void *p)
{
	struct lockstep *x = p;
	struct kvp_seg *s = x->s;
	kvp_aword_t *h = hold_slot(s, 0, 0);
	uint64_t r, seed = 0x2545f4914f6cdd1dull, *cold = x->cold;
	unsigned lead = 0;

	set_hwm(s, 0, 1);
	for (r = 1;; r++) {
		uint64_t i, w, scan, h0, h1;
		unsigned waits = 0, n;
		int rc;

		if (!kvpt_step_wait(&x->next, r - 1, &x->stop))
			break;
		i = kvp_load_relaxed(&x->slot); /* relaxed: published by next */
		w = kvp_load_relaxed(&x->word);
		kvp_store_release(&x->ready, r); /* release: go */
		/* the agent sees 'ready' a cache transfer later: the reader
		 * waits 'lead' loads, adjusted every round towards the point
		 * where the scan sees its hold half the time, plus a random
		 * delay on both sides: the two threads' offset sweeps the
		 * window */
		for (n = 0; n < lead; n++)
			kvp_load_relaxed(&x->stop); /* relaxed: a delay */
		kvpt_delay(&seed, 63);
		/* stores still in flight when the hold is stored, as after a
		 * copy into a cold buffer: the hold store drains after them
		 * (TSO keeps stores in order), the reload of the state word
		 * need not wait, unless the fence makes it */
		/* before: its fences would drain them */
		h0 = kvp_now_ns(CLOCK_MONOTONIC);
		for (n = 0; n < 32; n++)
			cold[((seed >> 7) + (uint64_t)n * 4099) % COLD_LINES *
			     8] = r;
		rc = kvp_ix_hold(s, h, i, w, 0, 10000000000ull, &waits);
		h1 = kvp_now_ns(CLOCK_MONOTONIC);
		x->waited += waits != 0;
		kvpt_step_wait(&x->scanned, r << 1, NULL);
		/* acquire: the scan's answer for this round */
		scan = kvp_load_acquire(&x->scanned);
		/* the hold and the agent's CHECK and scan ran at once */
		if (h0 < x->scan_t[1] && x->scan_t[0] < h1)
			__atomic_fetch_add(&x->overlapped, 1, __ATOMIC_RELAXED);
		if (scan & 1)
			lead += lead < 100000; /* ahead of the agent: later */
		else
			lead -= lead > 0;
		if (rc == 0) {
			x->held++;
			/* held, and the scan did not see it */
			x->bad += !(scan & 1);
			kvp_ix_unhold(h);
		} else if (rc == -ENOENT) {
			x->moved++;
			/* the scan saw a hold that was never taken */
			x->bad += scan & 1;
		} else {
			x->busy++;
		}
		kvp_store_release(&x->done, r); /* release: dropped */
	}
	return NULL;
}

static void
test_hold_dekker_lockstep(void **state)
{
	struct lockstep *x = calloc(1, sizeof(*x));
	pthread_t at, rt;
	struct kvp_seg s;
	uint64_t w;
	int64_t i;

	(void)state;
	assert_non_null(x);
	assert_int_equal(kvpt_seg_bare(&s, 16, CLIENTS, HPC, 1), 0);
	x->s = &s;
	x->min_ns = kvpt_env_ms_ns("KVPT_HOLD_STRESS_MS", 1000);
	x->cold = calloc(COLD_LINES, 64);
	assert_non_null(x->cold);
	i = put(&s, "lockstep", &w);
	x->slot = (uint64_t)i;
	x->word = w;
	assert_int_equal(pthread_create(&rt, NULL, lockstep_reader, x), 0);
	assert_int_equal(pthread_create(&at, NULL, lockstep_agent, x), 0);
	pthread_join(at, NULL);
	pthread_join(rt, NULL);
	print_message(
		"  %llu rounds (%llu with the hold and the scan at once): the scan "
		"saw the hold %llu times, removed %llu; the reader held %llu, was told "
		"ENOENT %llu, waited on CHECK in %llu, busy %llu\n",
		(unsigned long long)x->rounds,
		(unsigned long long)x->overlapped,
		(unsigned long long)x->released, (unsigned long long)x->removed,
		(unsigned long long)x->held, (unsigned long long)x->moved,
		(unsigned long long)x->waited, (unsigned long long)x->busy);
	if (x->bad)
		fail_msg(
			"%llu rounds where the reader's hold and the agent's scan disagreed",
			(unsigned long long)x->bad);
	assert_true(x->released > 0 && x->removed > 0);
	/* what it could not check is said, not passed off as checked */
	if (x->overlapped < HOLD_OVERLAPS)
		print_message(
			"SKIP lock-step Dekker: the hold and the scan overlapped in %llu "
			"rounds of %llu in 60 s (fewer than two free cores?)\n",
			(unsigned long long)x->overlapped,
			(unsigned long long)x->rounds);
	assert_int_equal(kvpt_holds_total(&s), 0);
	kvp__seg_unmap(&s);
	free(x->cold);
	free(x);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hold_seen_by_scan),
		cmocka_unit_test(test_scan_what_counts),
		cmocka_unit_test(test_scan_many_candidates),
		cmocka_unit_test(test_hold_busy_after_bound),
		cmocka_unit_test(test_wait_release),
		cmocka_unit_test(test_wait_relocate),
		cmocka_unit_test(test_wait_remove),
		cmocka_unit_test(test_hold_dekker_lockstep),
		cmocka_unit_test(test_hold_stress),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
