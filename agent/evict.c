/* SPDX-License-Identifier: MIT */
/*
 * evict.c - the eviction policy: which values leave DRAM (or the index),
 * and when.  The order is the use word's (shm/kvp_shm.h, e_use): the
 * value used longest ago leaves first and, among values last used in the
 * same tick, the deepest page of its chain first, so what stays is
 * prefix-closed (a chain loses its tail before its head) and recency
 * orders everything else.  A value never used since its put counts its
 * age --evict-probation times (x2 when put as a continuation, the use
 * word's CONT bit), unless the ghost set (ghost.c) says its key was
 * evicted lately: a one-pass stream leaves before what is reused, and a
 * key evicted too early is kept the next time.  ARC's rule moves those
 * weights toward plain recency while values evicted under them come back
 * soon, and back while used values evicted do (kvp_evict_adapt): traffic
 * whose new values are reused (chat turns, documents) is not judged like
 * a scan.  Readers write only the
 * use word (a hit or a probe: one relaxed store per tick); the order is
 * found here, by the tier thread, with two scans of the index per pass:
 * the first counts DRAM units by age (log-linear buckets: exact up to 64
 * ticks, then 64 per power of two, 1.6% apart), which fixes the cut-off
 * age for the units wanted; the second takes everything older than the
 * cut-off bucket and sorts that bucket exactly (age, then depth) to take
 * the rest.  Above --dram-high, or while a putter waits for room, a pass
 * frees down to --dram-low; with an SSD tier a victim without an SSD copy
 * is written there first (move.c) and leaves on a later pass, and the
 * next-oldest band as large again is written ahead.  Held values are
 * skipped (a snapshot of the hold slots is the hint; the CHECK protocol,
 * victim.c, decides).  The index limit (--index-entries) uses the same
 * order over every entry whatever its tier; a full bucket pair (a
 * putter's hint) loses its oldest entry.  h_ix_used is recounted from the
 * index when a death may have left it high (docs/design.md, "The index
 * limit").  Deleted values are reclaimed here too.  Victims go through
 * kvp__release_check / kvp__remove_agent (victim.c).
 */
#include "agent/tier_int.h"

#define KVP_EVICT_BATCH 256u
/* a continuation's probation (kvp_use_weight) */
#define KVP_EVICT_CONT_PROBATION 2u
#define KVP_AGE_SUB 64u                     /* buckets per power of two */
#define KVP_AGE_BUCKETS (KVP_AGE_SUB * 59u) /* ages 0 .. 2^64 - 1 */

/* A pass's scratch (tier thread): the age histogram, the hold snapshot,
 * the exactly sorted cut-off bucket and a batch of CHECK candidates. */
struct kvp_tie {
	uint64_t slot, word, use, units, age;
};
struct kvp_evict {
	uint64_t now;                    /* the pass's tick */
	uint64_t units[KVP_AGE_BUCKETS]; /* evictable units by age bucket */
	uint64_t count[KVP_AGE_BUCKETS]; /* and entries */
	uint64_t total;
	uint64_t *held;       /* a bit per index slot: named by a hold slot */
	uint64_t *held_now;   /* ... again, for a waiting putter's verdict */
	bool asked_mid;       /* a kick during the round's scans was seen */
	bool all_held;        /* this round: every DRAM unit was held */
	struct kvp_tie *plan; /* the victims, oldest first (kvp_evict_plan) */
	size_t nplan, capplan, plan_pos;
	uint64_t plan_ns; /* when it was made */
	bool plan_dram;   /* for DRAM (else for the index: used at once) */
	struct kvp_cand cand[KVP_EVICT_BATCH];
	uint64_t cuse[KVP_EVICT_BATCH]; /* its use word when judged */
	bool ccheck[KVP_EVICT_BATCH];   /* ... to compare after the scan */
	unsigned ncand;
};

/* Is a value of use word 'use' in slot i (index word w) on probation:
 * never used since its put, not put as a continuation (CONT) and not
 * readmitted from the ghost set? */
static bool
kvp_use_probation(const struct kvp_agent *a, uint64_t i, uint64_t w,
		  uint64_t use)
{
	return a->cfg.evict_probation > 1 && !KVP_USE_HITS(use) &&
	       !KVP_USE_CONTS(use) &&
	       !kvp_ghost_readmitted_agent(a, i, KVP_IX_GEN(w));
}

/* Is a value of use word 'use' in slot i (word w) judged under a weight
 * ARC's rule moves: never used since its put (a continuation too), not
 * readmitted?  Its kind, whatever the weight now (x1 when fully relaxed):
 * ARC's lists, not their sizes. */
static bool
kvp_use_weighed(const struct kvp_agent *a, uint64_t i, uint64_t w, uint64_t use)
{
	return a->cfg.evict_probation > 1 && !KVP_USE_HITS(use) &&
	       !kvp_ghost_readmitted_agent(a, i, KVP_IX_GEN(w));
}

/* A weight of w (>= 1) as ARC's rule has left it (x256): 1 + (1 -
 * relax) (w - 1). */
static uint32_t
kvp_evict_weight_q8(const struct kvp_agent *a, uint32_t w)
{
	return 256u + (uint32_t)((1 - a->evict_relax) * (w - 1) * 256 + 0.5);
}

/* The weight of a never-used value now, in %, for the gauge (what the
 * next pass judges by). */
static void
kvp_evict_weight_gauge(struct kvp_agent *a)
{
	uint32_t p = a->cfg.evict_probation ? a->cfg.evict_probation : 1;

	/* relaxed: a gauge; only this thread writes it */
	kvp_actr_set(a->seg.hdr, KVP_ACTR_EVICT_WEIGHT,
		     (kvp_evict_weight_q8(a, p) * 100u + 128u) / 256u);
}

/* The weights a pass judges by (x256, kvp_evict_adapt): a never-used
 * value's age counts 1 + (1 - relax) (--evict-probation - 1) times, a
 * continuation's 1 + (1 - relax) (KVP_EVICT_CONT_PROBATION - 1) times
 * (at most --evict-probation). */
static void
kvp_evict_weights(struct kvp_agent *a)
{
	uint32_t p = a->cfg.evict_probation ? a->cfg.evict_probation : 1;
	uint32_t c = p < KVP_EVICT_CONT_PROBATION ? p :
						    KVP_EVICT_CONT_PROBATION;

	a->evict_wq[0] = kvp_evict_weight_q8(a, p);
	a->evict_wq[1] = kvp_evict_weight_q8(a, c);
	kvp_evict_weight_gauge(a);
}

/* How many times (x256) the age of slot i's value (word w, use word
 * 'use') counts: once when used since its put or readmitted; a
 * continuation never used since (CONT) up to KVP_EVICT_CONT_PROBATION
 * times, so that a tail put a moment after the hit on its head (the
 * engine's prefill in between) still leaves before that head once both
 * are old; anything else up to --evict-probation times (the weights ARC's
 * rule leaves, kvp_evict_weights). */
static uint64_t
kvp_use_weight(const struct kvp_agent *a, uint64_t i, uint64_t w, uint64_t use)
{
	if (!kvp_use_weighed(a, i, w, use))
		return 256;
	return a->evict_wq[KVP_USE_CONTS(use) ? 1 : 0];
}

/* The age of use word 'use' of slot i (word w) at tick 'now', weighted
 * (kvp_use_weight).  A tick from the future (a clock read a moment
 * after ours) is now; one more than a second ahead can only be garbage a
 * client wrote: the oldest. */
static uint64_t
kvp_use_age(const struct kvp_agent *a, uint64_t i, uint64_t w, uint64_t use,
	    uint64_t now)
{
	uint64_t t = KVP_USE_TICK(use), age, p;

	if (t <= now)
		age = now - t;
	else
		return t - now < 1024u ? 0 : UINT64_MAX;
	p = kvp_use_weight(a, i, w, use);
	if (p == 256 || age > (UINT64_MAX >> 8) / p)
		return age;
	return age * p >> 8;
}

/*
 * ARC's rule (Megiddo, Modha, FAST'03) on the weights: a key put again
 * while in the ghost set, within a tenth of the DRAM tier's units of
 * evictions after it left, says its eviction was early.  One that left
 * under a weight (never used since its put) moves the weights toward
 * plain recency by --evict-adapt / units; one that left at weight 1
 * (used) moves them back; each step times the ratio of the other kind's
 * evictions lately to its own when that is above 1, so the weights
 * settle where both kinds of victim come back at the same rate.  Only
 * keys back soon count: the rate just after an eviction is what a
 * weight trades (a slot held a little longer), and a long window let the
 * returns of old conversations keep the weights of new values high
 * (stress/trace_matrix: arcw=0.1 vs 0; docs/performance.md).
 */
static void
kvp_evict_adapt(struct kvp_agent *a, enum kvp_ghost_back back, uint64_t ago)
{
	uint64_t units = kvp_dram_capacity_agent(a);
	double step, f;

	if (!a->cfg.evict_adapt || back == KVP_GHOST_NONE ||
	    back == KVP_GHOST_BACK_UNJUDGED || !units ||
	    ago >= (units + 9) / 10)
		return;
	step = (double)a->cfg.evict_adapt / (double)units;
	if (back == KVP_GHOST_BACK_WEIGHTED) {
		f = a->evict_ev_w > 0 ? a->evict_ev_1 / a->evict_ev_w : 1;
		a->evict_relax += step * (f > 1 ? f : 1);
	} else {
		f = a->evict_ev_1 > 0 ? a->evict_ev_w / a->evict_ev_1 : 1;
		a->evict_relax -= step * (f > 1 ? f : 1);
	}
	a->evict_relax = a->evict_relax < 0 ? 0 :
			 a->evict_relax > 1 ? 1 :
					      a->evict_relax;
	/* the weights follow at the next pass's start (kvp_evict_begin):
	 * one pass judges every value by the same ones */
	kvp_evict_weight_gauge(a);
}

/* A victim the policy judged has left: its kind counted for ARC's rule
 * (decayed over the ghost set's length, the window its returns are seen
 * in; the ghost set was told before the removal). */
static void
kvp_evict_leaves(struct kvp_agent *a, bool weighted)
{
	uint64_t len = kvp_ghost_length_agent(a);
	double keep = len ? 1 - 1 / (double)len : 0;

	a->evict_ev_w = a->evict_ev_w * keep + weighted;
	a->evict_ev_1 = a->evict_ev_1 * keep + !weighted;
}

/* Log-linear: exact below KVP_AGE_SUB ticks, then KVP_AGE_SUB buckets per
 * power of two; a larger bucket is older. */
static unsigned
kvp_age_bucket(uint64_t age)
{
	unsigned e;

	if (age < KVP_AGE_SUB)
		return (unsigned)age;
	e = 63u - (unsigned)__builtin_clzll(age); /* 6 .. 63 */
	return KVP_AGE_SUB * (e - 5u) +
	       (unsigned)((age >> (e - 6u)) & (KVP_AGE_SUB - 1u));
}

/* Which of two uses leaves first: the older tick, then the deeper page. */
static int
kvp_tie_cmp(const void *x, const void *y)
{
	const struct kvp_tie *p = (const struct kvp_tie *)x,
			     *q = (const struct kvp_tie *)y;
	uint64_t tp = p->age, tq = q->age;
	uint32_t dp = KVP_USE_DEPTH(p->use), dq = KVP_USE_DEPTH(q->use);

	if (tp != tq)
		return tp > tq ? -1 : 1;
	if (dp != dq)
		return dp > dq ? -1 : 1;
	return p->slot < q->slot ? -1 : p->slot > q->slot;
}

/* The pass's scratch, allocated once (NULL: out of memory, no pass). */
static struct kvp_evict *
kvp_evict_scratch(struct kvp_agent *a)
{
	uint64_t words = (a->seg.g.g_index_slots + 63) / 64;

	if (a->ev)
		return a->ev;
	a->ev = calloc(1, sizeof(*a->ev));
	if (!a->ev)
		return NULL;
	a->ev->held = calloc(words, sizeof(uint64_t));
	a->ev->held_now = calloc(words, sizeof(uint64_t));
	if (!a->ev->held || !a->ev->held_now) {
		free(a->ev->held);
		free(a->ev->held_now);
		free(a->ev);
		a->ev = NULL;
	}
	return a->ev;
}

/* The policy's state at start: the weights as given (ARC's rule moves
 * them from there). */
void
kvp_evict_start_agent(struct kvp_agent *a)
{
	a->evict_relax = a->evict_ev_w = a->evict_ev_1 = 0;
	kvp_evict_weights(a);
}

void
kvp_evict_free_agent(struct kvp_agent *a)
{
	if (!a->ev) {
		kvp_ghost_free_agent(a);
		kvp_distinct_free_agent(a);
		return;
	}
	free(a->ev->held);
	free(a->ev->held_now);
	free(a->ev->plan);
	free(a->ev);
	a->ev = NULL;
	kvp_ghost_free_agent(a);
	kvp_distinct_free_agent(a);
}

/* Which slots the hold slots and live leases name now, a bit a slot in
 * 'held' (a hint: a value held now is not counted as room; the CHECK
 * protocol's own scan decides, and a hold taken after this is found
 * there). */
static void
kvp_evict_snapshot_holds(struct kvp_agent *a, uint64_t *held)
{
	struct kvp_seg *s = &a->seg;
	uint64_t nslots = s->g.g_index_slots, k;
	uint32_t c;

	memset(held, 0, (nslots + 63) / 64 * sizeof(uint64_t));
	for (c = 0; c < s->g.g_max_clients; c++) {
		/* a hint (above) */
		uint32_t hwm = kvp_slot_hold_hwm_hint(s, c);
		const kvp_aword_t *hs = kvp_slot_holds(s, c);

		for (k = 0; k < hwm; k++) {
			/* relaxed: a hint (above) */
			uint64_t h = kvp_load_relaxed(&hs[k]), slot;

			if (!h)
				continue;
			slot = KVP_HOLD_SLOT(h);
			if (slot < nslots)
				held[slot / 64] |= 1ull << (slot % 64);
		}
	}
	/* live leases pin their slot like holds */
	for (k = 0; k < s->g.g_max_leases; k++) {
		const struct kvp_lease_slot *ls = &s->leases[k];
		/* relaxed: a hint (above) */
		uint64_t w = kvp_load_relaxed(&ls->ls_state), slot;

		if (KVP_LS_STATE(w) == KVP_LS_FREE)
			continue;
		slot = kvp_load_relaxed(&ls->ls_slot); /* relaxed: a hint */
		if (slot < nslots)
			held[slot / 64] |= 1ull << (slot % 64);
	}
}

/* Start a pass: its tick, the weights, an empty histogram, and the hold
 * snapshot. */
static void
kvp_evict_begin(struct kvp_agent *a, struct kvp_evict *ev)
{
	ev->now = kvp_tick_now();
	kvp_evict_weights(a);
	memset(ev->units, 0, sizeof(ev->units));
	memset(ev->count, 0, sizeof(ev->count));
	ev->total = 0;
	ev->ncand = 0;
	kvp_evict_snapshot_holds(a, ev->held);
}

static bool
kvp_evict_held(const struct kvp_evict *ev, uint64_t slot)
{
	return ev->held[slot / 64] >> (slot % 64) & 1u;
}

/*
 * Do the values a hold snapshot names (kvp_evict_snapshot_holds) take
 * every DRAM unit in use?  Then nothing is evictable, and a waiting
 * putter can have that verdict before a pass has scanned the index (a
 * scan of 131,072 slots takes 30-70 ms under TSan here, more than a
 * put's 50 ms wait).  The DRAM units of the distinct READY or DELETED
 * values named, against DRAM use: a value put and not yet published is
 * in use and named by no hold, so the answer is no while one is.  Yes is
 * exact unless a client wrote garbage into a value's length or its hold
 * slots (then the round's pass, which scans, frees what it can and its
 * verdict stands); no says nothing.
 */
static bool
kvp_evict_all_held(struct kvp_agent *a, const uint64_t *held)
{
	struct kvp_seg *s = &a->seg;
	uint64_t words = (s->g.g_index_slots + 63) / 64, k, sum = 0;
	uint64_t unit = s->g.g_dram_unit;
	/* relaxed: a heuristic, like the pass's (the allocator decides) */
	uint64_t used = kvp_load_relaxed(&s->dram->dh_used_mirror);

	for (k = 0; k < words && sum < used; k++) {
		uint64_t bits = held[k];

		while (bits) {
			uint64_t i = k * 64 + (uint64_t)__builtin_ctzll(bits);
			/* acquire: pairs with the publish CAS */
			uint64_t w = kvp_load_acquire(&s->meta[i]), len, n;
			const struct kvp_entry *e = &s->entries[i];

			bits &= bits - 1;
			if (KVP_IX_STATE(w) != KVP_IX_READY &&
			    KVP_IX_STATE(w) != KVP_IX_DELETED)
				continue;
			/* relaxed: stable while READY or DELETED (g); a hint */
			if (KVP_LOC_TIER(kvp_load_relaxed(&e->e_loc)) !=
			    KVP_TIER_DRAM)
				continue;
			/* relaxed: as above */
			len = kvp_load_relaxed(&e->e_len);
			n = (len + unit - 1) / unit;
			sum += n && n <= s->g.g_dram_pages ? n : 1;
		}
	}
	return used && sum >= used;
}

/*
 * A putter waits for room (it kicked with the units it needs: at the
 * round's start, 'waiting'; or during the round's scans, h_evict_req and
 * h_evict_need set again): when everything in DRAM is held, publish that
 * verdict now, not at the end of the round (its index scans can take
 * longer than the put's wait: it would answer -EBUSY where -ENOSPC is
 * due).  Once at the start and once during a round; the round's end
 * (kvp_dram_round_agent) keeps the verdict when nothing was freed.  The
 * long scans call it every 4096 slots.  Cost: a snapshot of the hold
 * slots and a walk of its bitmap (an 8th of a byte a slot).
 */
static void
kvp_evict_answer(struct kvp_agent *a, struct kvp_evict *ev, bool waiting)
{
	struct kvp_shm_header *h = a->seg.hdr;

	if (!ev)
		return;
	if (!waiting) {
		/* relaxed: hints; the next round takes the kick (CAS) */
		if (ev->asked_mid || !kvp_load_relaxed(&h->h_evict_req) ||
		    !kvp_load_relaxed(&h->h_evict_need))
			return;
		ev->asked_mid = true;
	}
	kvp_evict_snapshot_holds(a, ev->held_now);
	if (!kvp_evict_all_held(a, ev->held_now))
		return;
	ev->all_held = true;
	/* a hint putters read when they give up; only this thread writes
	 * it (relaxed: the word's own) */
	kvp_wake_stuck_agent(&a->seg, kvp_load_relaxed(&h->h_evict_stuck) |
					      KVP_STUCK_DRAM);
}

/* Steps 2-4 for the batch of candidates: the hold scan, then each one
 * removed (or relocated) or released.  Returns DRAM units freed. */
static uint64_t
kvp_evict_flush(struct kvp_agent *a, struct kvp_evict *ev, enum kvp_actr why,
		unsigned *removed)
{
	uint64_t freed = 0;
	unsigned k;
	bool prob, weighed;

	if (!ev->ncand)
		return 0;
	kvp_ix_holds_scan_agent(&a->seg, ev->cand, ev->ncand);
	for (k = 0; k < ev->ncand; k++) {
		if (ev->cand[k].held) {
			kvp__release_check(&a->seg, &ev->cand[k]);
			continue;
		}
		/* how it leaves, judged before the use-word check: nothing
		 * but a store between that check and the removal (a probe
		 * that touches it in between loses its get) */
		prob = ev->ccheck[k] &&
		       kvp_use_probation(a, ev->cand[k].slot, ev->cand[k].word,
					 ev->cuse[k]);
		weighed = ev->ccheck[k] &&
			  kvp_use_weighed(a, ev->cand[k].slot, ev->cand[k].word,
					  ev->cuse[k]);
		/* used since it was judged (a probe or a hit that held it
		 * and let go): it is young now, and a probe that just
		 * counted it predicts a load; relaxed: a hint */
		if (ev->ccheck[k] &&
		    kvp_load_relaxed(&a->seg.entries[ev->cand[k].slot].e_use) !=
			    ev->cuse[k]) {
			kvp_ix_check_release(&a->seg, ev->cand[k].slot,
					     ev->cand[k].word);
			continue;
		}
		if (ev->ccheck[k])
			kvp_ghost_weighed_agent(a, weighed);
		freed += kvp__remove_agent(a, &ev->cand[k], why);
		kvp_ghost_unweighed_agent(a); /* a relocation: none */
		(*removed)++;
		if (ev->ccheck[k])
			kvp_evict_leaves(a, weighed);
		if (prob) /* stats: agent threads add atomically */
			kvp_actr_add(a->seg.hdr, KVP_ACTR_EVICT_PROBATION, 1);
	}
	ev->ncand = 0;
	return freed;
}

/* Step 1 for slot i (word w) into the batch; a full batch is decided at
 * once.  'use': the use word the victim was judged by (NULL: a deleted
 * value, whatever its use).  Returns DRAM units freed. */
static uint64_t
kvp_evict_take(struct kvp_agent *a, struct kvp_evict *ev, uint64_t i,
	       uint64_t w, const uint64_t *use, enum kvp_actr why,
	       unsigned *removed)
{
	ev->cuse[ev->ncand] = use ? *use : 0;
	ev->ccheck[ev->ncand] = use != NULL;
	ev->ncand +=
		kvp_ix_cand_take_agent(&a->seg, i, w, &ev->cand[ev->ncand]);
	if (ev->ncand < KVP_EVICT_BATCH)
		return 0;
	return kvp_evict_flush(a, ev, why, removed);
}

/*
 * May slot i (word w, READY) leave for this kind of pass?  DRAM: resident
 * in DRAM; the index: any tier.  Never while the tier thread has an
 * operation on it or while it is flagged (the caller asks the hold
 * snapshot).  *units: what it frees (DRAM units; an entry for the index).
 */
static bool
kvp_evict_candidate(struct kvp_agent *a, const struct kvp_evict *ev, uint64_t i,
		    uint64_t w, bool dram, uint64_t *units)
{
	struct kvp_seg *s = &a->seg;
	const struct kvp_entry *e = &s->entries[i];
	uint64_t len, unit = s->g.g_dram_unit;

	(void)ev;
	if (KVP_IX_STATE(w) != KVP_IX_READY || KVP_IX_FLAGS(w) ||
	    kvp_tier_busy_agent(a, i))
		return false;
	if (!dram) {
		*units = 1;
		return true;
	}
	/* relaxed: stable while READY(g); only this thread moves values */
	if (KVP_LOC_TIER(kvp_load_relaxed(&e->e_loc)) != KVP_TIER_DRAM)
		return false;
	len = kvp_load_relaxed(&e->e_len); /* relaxed: as above */
	*units = (len + unit - 1) / unit;
	if (*units > s->g.g_dram_pages || *units == 0)
		*units = 1; /* garbage from a client: counted as one */
	return true;
}

/*
 * Scan 1: every deleted value is reclaimed; every candidate of the pass
 * is counted by age (only when room is wanted: 'count').  A scan that
 * only reclaims stops when a putter kicks (h_evict_req): the putter waits
 * for the verdict of a counting pass (kvp_dram_round_agent), which
 * reclaims too, and a whole index scanned first would make it wait two
 * scans (a run under TSan: 30-40 ms each for 131,072 slots, over a put's
 * 50 ms).  Returns DRAM units freed.
 */
static uint64_t
kvp_evict_scan_count(struct kvp_agent *a, struct kvp_evict *ev, bool dram,
		     bool count, unsigned *found, unsigned *removed)
{
	struct kvp_seg *s = &a->seg;
	uint64_t nslots = s->g.g_index_slots, i, freed = 0;
	enum kvp_actr why = dram ? KVP_ACTR_EVICT : KVP_ACTR_EVICT_INDEX;

	for (i = 0; i < nslots; i++) {
		/* acquire: pairs with the publish CAS */
		uint64_t w = kvp_load_acquire(&s->meta[i]), units;
		unsigned st = KVP_IX_STATE(w), b;

		if (i % 4096 == 4095) {
			kvp_evict_answer(a, ev, false);
			/* relaxed: a hint; the next round takes the kick */
			if (!count && kvp_load_relaxed(&s->hdr->h_evict_req)) {
				a->last_reclaim_ns = 0; /* the rest: later */
				break;
			}
		}

		if (st == KVP_IX_DELETED && !KVP_IX_FLAGS(w) &&
		    !kvp_tier_busy_agent(a, i)) {
			(*found)++;
			/* once its tombstone is written (I20; queued now if
			 * it is not yet: a later pass takes the slot) */
			if (kvp_tier_may_forget_agent(a, i))
				freed += kvp_evict_take(a, ev, i, w, NULL, why,
							removed);
			continue;
		}
		/* a value being put is work for a later pass: this one is
		 * not idle (its units are counted already, so DRAM use
		 * will not change when it is published, and an idle
		 * evictor would never look at it again) */
		if (st == KVP_IX_PENDING && count) {
			(*found)++;
			continue;
		}
		/* a new value in the slot: was its key evicted lately? */
		if (st == KVP_IX_READY) {
			uint64_t ago = 0;

			/* used or stored since the last whole scan? */
			kvp_distinct_seen_agent(
				a, i,
				/* relaxed: a hint (the use word) */
				kvp_load_relaxed(&s->entries[i].e_use));
			kvp_evict_adapt(
				a,
				kvp_ghost_seen_agent(a, i, KVP_IX_GEN(w), &ago),
				ago);
		}
		if (!count || kvp_evict_held(ev, i) ||
		    !kvp_evict_candidate(a, ev, i, w, dram, &units))
			continue;
		/* relaxed: a hint (the use word) */
		b = kvp_age_bucket(kvp_use_age(
			a, i, w, kvp_load_relaxed(&s->entries[i].e_use),
			ev->now));
		ev->units[b] += units;
		ev->count[b]++;
		ev->total += units;
	}
	if (i == nslots) /* a whole scan: distinct.c counts from its start */
		kvp_distinct_scanned_agent(a, ev->now);
	return freed + kvp_evict_flush(a, ev, why, removed);
}

/*
 * A victim of a DRAM pass: with an SSD tier and no SSD copy yet it is
 * written there first (copy first, free after: a later pass relocates
 * it: *sent is set); otherwise it is taken.  Returns DRAM units freed.
 */
static uint64_t
kvp_evict_victim(struct kvp_agent *a, struct kvp_evict *ev, uint64_t i,
		 uint64_t w, uint64_t use, bool dram, unsigned *found,
		 unsigned *removed, bool *sent)
{
	(*found)++;
	*sent = false;
	/* relaxed: stable while READY(g); written by this thread */
	if (dram && a->tier && !kvp_load_relaxed(&a->seg.entries[i].e_ssd) &&
	    !kvp_tier_write_failing_agent(a)) {
		/* a value still to write counts as work found, even when
		 * the writes in flight are at their limit */
		kvp_tier_demote_agent(a, i, w);
		*sent = true;
		return 0;
	}
	return kvp_evict_take(a, ev, i, w, &use,
			      dram ? KVP_ACTR_EVICT : KVP_ACTR_EVICT_INDEX,
			      removed);
}

/*
 * Scan 2: the plan, the values that leave for 'want' units (DRAM) or
 * entries (index), oldest use first, deepest first within a tick.  The
 * histogram of scan 1 gives the cut-off bucket; every value in it or
 * older is collected, and the lot sorted exactly (age, then depth) and cut
 * at 'want'.  Returns false when nothing is to go (or out of memory).
 */
static bool
kvp_evict_plan(struct kvp_agent *a, struct kvp_evict *ev, bool dram,
	       uint64_t want)
{
	struct kvp_seg *s = &a->seg;
	uint64_t nslots = s->g.g_index_slots, i, acc = 0, count = 0;
	unsigned cut = KVP_AGE_BUCKETS, b;
	size_t k;

	ev->nplan = ev->plan_pos = 0;
	/* the cut-off: the youngest bucket some of whose units must go */
	while (cut > 0 && acc < want) {
		acc += ev->units[--cut];
		count += ev->count[cut];
	}
	if (acc == 0)
		return false;
	if (ev->capplan < count) {
		struct kvp_tie *t = realloc(ev->plan, count * sizeof(*t));
		if (!t)
			return false; /* out of memory: no pass this round */
		ev->plan = t;
		ev->capplan = count;
	}
	for (i = 0; i < nslots && ev->nplan < ev->capplan; i++) {
		/* acquire: pairs with the publish CAS */
		uint64_t w = kvp_load_acquire(&s->meta[i]), units, use, age;

		if (i % 4096 == 4095)
			kvp_evict_answer(a, ev, false);
		if (!kvp_evict_candidate(a, ev, i, w, dram, &units))
			continue;
		/* relaxed: a hint (the use word) */
		use = kvp_load_relaxed(&s->entries[i].e_use);
		age = kvp_use_age(a, i, w, use, ev->now);
		b = kvp_age_bucket(age);
		if (b < cut)
			continue; /* younger than the cut-off */
		if (kvp_evict_held(ev, i)) {
			/* a victim, but held: left alone (not counted as
			 * room by scan 1) */
			kvp_actr_add(s->hdr, KVP_ACTR_EVICT_BACKOFF,
				     1); /* stat */
			continue;
		}
		ev->plan[ev->nplan++] =
			(struct kvp_tie){ i, w, use, units, age };
	}
	qsort(ev->plan, ev->nplan, sizeof(*ev->plan), kvp_tie_cmp);
	for (k = 0, acc = 0; k < ev->nplan && acc < want; k++)
		acc += ev->plan[k].units;
	ev->nplan = k;
	ev->plan_dram = dram;
	ev->plan_ns = kvp_now_ns(CLOCK_MONOTONIC);
	return ev->nplan > 0;
}

/*
 * Carry the plan out, from its oldest value, until 'want' units (or
 * entries) are freed or on their way (a victim being written to SSD
 * first counts: it leaves on a later round).  A value that changed since
 * the plan (deleted, put again, used, moved) is no longer the plan's; the
 * ones done at its front are not walked again.  Stops at a victim still
 * to write when the writes in flight are at their limit.  Returns DRAM
 * units freed; *acted: victims removed or sent to SSD by this call (not
 * one found held by the CHECK scan, nor one used since it was judged),
 * *coming: units freed or on their way (writes in flight included).
 */
static uint64_t
kvp_evict_carry_out(struct kvp_agent *a, struct kvp_evict *ev, uint64_t want,
		    unsigned *found, unsigned *removed, unsigned *acted,
		    uint64_t *coming)
{
	struct kvp_seg *s = &a->seg;
	bool dram = ev->plan_dram, front = true, sent;
	uint64_t acc = 0, freed = 0, units, away = 0;
	unsigned removed0 = *removed, nsent = 0;
	size_t k;

	for (k = ev->plan_pos; k < ev->nplan && acc < want; k++) {
		struct kvp_tie *t = &ev->plan[k];
		/* acquire: pairs with the publish CAS */
		uint64_t w = kvp_load_acquire(&s->meta[t->slot]);
		bool copy;

		/* a demotion in flight: room is coming; not done yet */
		if (w == t->word && kvp_tier_busy_agent(a, t->slot)) {
			front = false;
			acc += t->units;
			away += t->units;
			(*found)++;
			continue;
		}
		/* relaxed: a hint (the use word) */
		if (w != t->word ||
		    kvp_load_relaxed(&s->entries[t->slot].e_use) != t->use ||
		    !kvp_evict_candidate(a, ev, t->slot, w, dram, &units)) {
			if (front)
				ev->plan_pos = k + 1; /* done, or not ours */
			continue;
		}
		/* relaxed: stable while READY(g); written by this thread */
		copy = kvp_load_relaxed(&s->entries[t->slot].e_ssd) != 0;
		if (dram && a->tier && !copy && kvp_tier_demote_full_agent(a)) {
			(*found)++; /* work, waiting for a write slot */
			break;
		}
		front = false;
		acc += t->units;
		freed += kvp_evict_victim(a, ev, t->slot, t->word, t->use, dram,
					  found, removed, &sent);
		if (sent) {
			nsent++;
			away += t->units;
		}
	}
	if (front)
		ev->plan_pos = k;
	freed += kvp_evict_flush(
		a, ev, dram ? KVP_ACTR_EVICT : KVP_ACTR_EVICT_INDEX, removed);
	*acted = *removed - removed0 + nsent;
	*coming = freed + away;
	return freed;
}

/* Is the DRAM plan still worth carrying out?  Not after a second (held
 * values may have been let go, values put since aged), and not once it is
 * done. */
static bool
kvp_evict_plan_live(const struct kvp_evict *ev)
{
	return ev->plan_dram && ev->plan_pos < ev->nplan &&
	       kvp_now_ns(CLOCK_MONOTONIC) - ev->plan_ns < 1000000000ull;
}

/*
 * Make room in the two full buckets of 'hash' (a putter's hint): CHECK
 * every removable slot there, one hold scan, remove one victim (a deleted
 * value first, then the oldest use, the deepest within a tick).
 * Returns 1 if a slot was freed.
 */
static int
kvp_ix_evict_for_hash_agent(struct kvp_agent *a, uint64_t hash)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_cand cand[KVP_IX_CANDS];
	unsigned n = 0, pos, k, best = KVP_IX_CANDS;
	struct kvp_tie oldest = { 0, 0, 0, 0, 0 };
	uint64_t now = kvp_tick_now();

	for (pos = 0; pos < KVP_IX_CANDS; pos++)
		/* relaxed: a hint; a slot freed meanwhile is room already */
		if (KVP_IX_STATE(kvp_load_relaxed(
			    &s->meta[kvp_ix_cand(s, hash, pos)])) ==
		    KVP_IX_EMPTY)
			return 1;
	for (pos = 0; pos < KVP_IX_CANDS; pos++) {
		uint64_t i = kvp_ix_cand(s, hash, pos);
		/* acquire: pairs with the publish CAS */
		uint64_t w = kvp_load_acquire(&s->meta[i]);
		unsigned st = KVP_IX_STATE(w);

		if (KVP_IX_FLAGS(w) ||
		    (st != KVP_IX_READY && st != KVP_IX_DELETED) ||
		    kvp_tier_busy_agent(a, i) ||
		    /* a deleted one once its tombstone is written (I20) */
		    (st == KVP_IX_DELETED && !kvp_tier_may_forget_agent(a, i)))
			continue;
		n += kvp_ix_cand_take_agent(s, i, w, &cand[n]);
	}
	if (n == 0)
		return 0;
	kvp_ix_holds_scan_agent(s, cand, n);
	for (k = 0; k < n; k++) {
		struct kvp_tie t = { cand[k].slot, cand[k].word, 0, 1, 0 };

		if (cand[k].held)
			continue;
		if (KVP_IX_STATE(cand[k].word) == KVP_IX_DELETED) {
			best = k;
			break; /* a deleted value goes first */
		}
		/* relaxed: a hint (the use word) */
		t.use = kvp_load_relaxed(&s->entries[cand[k].slot].e_use);
		t.age = kvp_use_age(a, cand[k].slot, cand[k].word, t.use, now);
		if (best == KVP_IX_CANDS || kvp_tie_cmp(&t, &oldest) < 0) {
			oldest = t;
			best = k;
		}
	}
	for (k = 0; k < n; k++)
		if (k != best)
			kvp__release_check(s, &cand[k]);
	if (best == KVP_IX_CANDS)
		return 0;
	kvp__remove_agent(a, &cand[best], KVP_ACTR_EVICT_INDEX);
	return 1;
}

/*
 * One pass: reclaim deleted values and, while fewer than
 * 'want_free_pages' units are free, evict the oldest unheld values until
 * they are (two scans of the index).  Returns units freed; *stuck says
 * nothing was evictable while space was still wanted.
 */
uint64_t
kvp_dram_evict_pass_agent(struct kvp_agent *a, uint64_t want_free_pages,
			  bool *stuck)
{
	struct kvp_seg *s = &a->seg;
	uint64_t nslots = s->g.g_index_slots, freed = 0, free_now, need;
	/* relaxed: a heuristic; the allocator's counts decide */
	uint64_t used = kvp_load_relaxed(&s->dram->dh_used_mirror);
	struct kvp_evict *ev;
	unsigned found = 0, removed = 0;
	bool scanned = false;

	*stuck = false;
	/* a pass that found nothing to do is not repeated until DRAM use
	 * changes or a putter asks (so an idle tier thread does not rescan
	 * the index every round); its verdict stands (a skipped pass that
	 * said "not stuck" would erase it, and a putter whose own pass is
	 * still running at its deadline would read -EBUSY for a pool whose
	 * every value is held) */
	if (want_free_pages && !a->evict_urgent && a->idle_used == used + 1) {
		*stuck = s->dram->dh_free_pages < want_free_pages &&
			 a->noprogress_scanned >= 2 * nslots;
		return 0;
	}
	ev = kvp_evict_scratch(a);
	if (!ev)
		return 0; /* out of memory: no pass this round */
	/* dh_free_pages without the lock: a progress hint only */
	free_now = s->dram->dh_free_pages;
	need = want_free_pages > free_now ? want_free_pages - free_now : 0;
	/* the plan of an earlier pass first: its victims are still the
	 * oldest (values put since are younger, used ones drop out), so no
	 * scan of the index while it lasts */
	if (need && kvp_evict_plan_live(ev)) {
		unsigned acted = 0;
		uint64_t coming = 0;

		freed += kvp_evict_carry_out(a, ev, need, &found, &removed,
					     &acted, &coming);
		/* a new plan only when this one removed nothing and sent
		 * nothing to SSD (what is left of it was taken since, used,
		 * or is held: the CHECK scan backed off from all of it) and
		 * what is on its way falls short; not while the writes in
		 * flight are at their limit (the plan's next victims wait
		 * for a write slot: a rescan of the index would find the
		 * same ones, every round).  A plan of held values carried
		 * out again and again (for its second of life) would keep
		 * the index from being scanned, and only a scan says that
		 * everything is held: a putter got -EBUSY where -ENOSPC was
		 * due (test_pool's full and held pool). */
		if (acted || coming >= need ||
		    (a->tier && kvp_tier_demote_full_agent(a)))
			goto out;
	}
	kvp_evict_begin(a, ev);
	scanned = need != 0;
	freed += kvp_evict_scan_count(a, ev, true, need != 0, &found, &removed);
	need = need > freed ? need - freed : 0;
	/* plan for twice the need: the next pass finds its victims ready */
	if (need && kvp_evict_plan(a, ev, true, 2 * need)) {
		unsigned acted = 0;
		uint64_t coming = 0;

		freed += kvp_evict_carry_out(a, ev, need, &found, &removed,
					     &acted, &coming);
	}
out:
	/* remember an idle pass (+1: 0 means none) */
	a->idle_used = found || freed ? 0 : used + 1;
	if (freed || s->dram->dh_free_pages >= want_free_pages)
		a->noprogress_scanned = 0;
	else if (scanned)
		a->noprogress_scanned += 2 * nslots;
	/* stuck: the whole index was looked at (twice) and nothing freed:
	 * every value held, pinned or leased (a pass that only carried out
	 * an earlier plan looked at no more than that plan) */
	if (s->dram->dh_free_pages < want_free_pages &&
	    a->noprogress_scanned >= 2 * nslots)
		*stuck = true;
	return freed;
}

static int
kvp_u64_cmp(const void *x, const void *y)
{
	uint64_t a = KVP_HOLD_SLOT(*(const uint64_t *)x),
		 b = KVP_HOLD_SLOT(*(const uint64_t *)y);

	return a < b ? -1 : a > b;
}

/*
 * Recount h_ix_used: one unit per READY or DELETED slot, and one per put
 * holding a unit for its PENDING slot (HAVE_SLOT).  Exact, or nothing:
 * every client's cs_ix_resv is read before the scan of the index and
 * again after it, h_ix_used too, and the count is replaced (a CAS from
 * what it was) only if none of them changed.  A kind changes around every
 * change of the count and of a counted slot that is not this thread's
 * own (a publish happens under HAVE_SLOT, whose slot is counted once
 * whatever state the scan finds it in), so an unchanged set means the
 * scan saw one consistent state.  Tier thread.  Returns false when a
 * client was mid-change (or wrote garbage): try again later.
 */
bool
kvp_ix_recount_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	uint32_t nc = s->g.g_max_clients, c, nn = 0, j = 0;
	uint64_t u0, u1, count = 0, i;

	if (!a->ix_seen) {
		a->ix_seen = calloc(nc, sizeof(uint64_t));
		a->ix_named = calloc(nc, sizeof(uint64_t));
		if (!a->ix_seen || !a->ix_named) {
			free(a->ix_seen);
			free(a->ix_named);
			a->ix_seen = a->ix_named = NULL;
			return false;
		}
	}
	for (c = 0; c < nc; c++) {
		/* acquire: pairs with the client's (or reaper's) release */
		uint64_t f = kvp_load_acquire(&s->clients[c].cs_ix_resv);

		a->ix_seen[c] = f;
		if (KVP_IXR_KIND(f) == KVP_IXR_IDLE)
			continue;
		if (KVP_IXR_KIND(f) != KVP_IXR_HAVE_SLOT)
			return false; /* taking or giving back a unit: later */
		/* acquire: pairs with the release that wrote it (before
		 * RESERVING); a rewrite shows as a new kind below */
		a->ix_named[nn++] = kvp_load_acquire(&s->clients[c].cs_ix_slot);
	}
	qsort(a->ix_named, nn, sizeof(uint64_t), kvp_u64_cmp);
	/* acquire: orders the scan after the reads above */
	u0 = kvp_load_acquire(&s->hdr->h_ix_used);
	for (i = 0; i < s->g.g_index_slots; i++) {
		/* acquire: pairs with the claim / publish / delete CASes */
		uint64_t w = kvp_load_acquire(&s->meta[i]);
		unsigned st = KVP_IX_STATE(w);
		bool named = false;

		if (i % 4096 == 4095)
			kvp_evict_answer(a, a->ev, false);

		while (j < nn && KVP_HOLD_SLOT(a->ix_named[j]) < i)
			j++;
		for (c = j; c < nn && KVP_HOLD_SLOT(a->ix_named[c]) == i; c++)
			named |= KVP_HOLD_GEN(a->ix_named[c]) == KVP_IX_GEN(w);
		count += named || st == KVP_IX_READY || st == KVP_IX_DELETED;
	}
	/* acquire: h_ix_used before the kinds again: a unit taken or given
	 * that this load sees was announced by a kind the loads below see */
	u1 = kvp_load_acquire(&s->hdr->h_ix_used);
	for (c = 0; c < nc; c++)
		/* acquire: as above */
		if (kvp_load_acquire(&s->clients[c].cs_ix_resv) !=
		    a->ix_seen[c])
			return false;
	if (u0 != u1)
		return false;
	if (count == u1)
		return true;
	if (!kvp_ix_count_correct_agent(s, u1, count))
		return false;
	kvp_log(KVP_LOG_INFO, "index",
		"entry count corrected from %llu to %llu (a process "
		"died while changing it, or it was overwritten)",
		(unsigned long long)u1, (unsigned long long)count);
	return true;
}

/*
 * Remove unheld entries until h_ix_used is down to 'target': deleted ones
 * first, then the oldest use (deepest first within a tick), whatever the
 * tier: DRAM freed, an SSD copy gets a tombstone.  Returns entries
 * removed; *freed gets the DRAM units freed, *stuck says nothing was
 * removable while the index was at its limit.
 */
static unsigned
kvp_ix_evict_pass_agent(struct kvp_agent *a, uint64_t target, uint64_t *freed,
			bool *stuck)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_evict *ev = kvp_evict_scratch(a);
	/* relaxed: progress, re-read after scan 1 */
	uint64_t used = kvp_load_relaxed(&s->hdr->h_ix_used);
	unsigned found = 0, removed = 0;

	*stuck = false;
	if (!ev || used <= target)
		return 0;
	kvp_evict_begin(a, ev);
	*freed += kvp_evict_scan_count(a, ev, false, true, &found, &removed);
	used = kvp_load_relaxed(&s->hdr->h_ix_used); /* relaxed: as above */
	if (used > target && kvp_evict_plan(a, ev, false, used - target)) {
		unsigned acted = 0;
		uint64_t coming = 0;

		*freed += kvp_evict_carry_out(a, ev, used - target, &found,
					      &removed, &acted, &coming);
	}
	ev->nplan = ev->plan_pos = 0; /* not a DRAM plan */
	/* relaxed: the count now */
	*stuck = !removed &&
		 kvp_load_relaxed(&s->hdr->h_ix_used) >= s->g.g_index_limit;
	return removed;
}

/*
 * The index side of a round: recount when due, and above the high mark
 * (the limit less 1/64 of it) or for a waiting putter remove entries
 * down to the low mark (less 1/32).  Returns true when putters waiting on
 * h_space_seq should look again.
 */
static bool
kvp_ix_round_agent(struct kvp_agent *a, uint64_t *freed, bool *stuck)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_shm_header *h = s->hdr;
	uint64_t limit = s->g.g_index_limit, room = limit / 32 ? limit / 32 : 1;
	uint64_t low = limit - room, high = limit - room / 2, used;
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC),
		 since = now - a->ix_recount_ns;
	bool kicked = kvp_wake_take_index_agent(s); /* take the request */

	*stuck = false;
	/* relaxed: a hint; the pass re-reads it */
	used = kvp_load_relaxed(&h->h_ix_used);
	/* recount: soon after a start or a death that may have left the
	 * count high, every second while it is near the limit (room made
	 * for a count that is high for nothing is lost), every 10 s anyway */
	/* acquire: pairs with the reaper's release */
	if ((kvp_load_acquire(&a->ix_recount_due) && since >= 10000000ull) ||
	    (used >= high && since >= 1000000000ull) ||
	    since >= 10000000000ull) {
		a->ix_recount_ns = now;
		if (kvp_ix_recount_agent(a))
			/* release: ours */
			kvp_store_release(&a->ix_recount_due, 0);
		used = kvp_load_relaxed(&h->h_ix_used); /* relaxed: as above */
	}
	if (used < high)
		return kicked; /* room already: let the putter look again */
	if (kvp_ix_evict_pass_agent(a, low, freed, stuck) > 0)
		return true;
	/* nothing to remove, but a recount is due (a client died while it
	 * changed the count): the count may be high for nothing, so this is
	 * not "everything held" yet; the putter retries (-EBUSY) */
	/* acquire: pairs with the reaper's release */
	if (*stuck && kvp_load_acquire(&a->ix_recount_due))
		*stuck = false;
	return *stuck || kicked;
}

/*
 * One round of the DRAM side of the tier thread: index-pressure hints,
 * the index limit, then eviction (or demotion) above the high watermark
 * or when a putter is waiting, and reclamation of deleted values.  Wakes
 * putters that sleep on h_space_seq when it made room or found none.
 */
/*
 * A cut of the segment file (agent/segment.c restored its size: what lay
 * past 'cut' reads as zeros): every value whose DRAM bytes may lie there
 * leaves DRAM through the CHECK protocol, relocated to its SSD copy when
 * it has one, removed otherwise, so no reader is ever served the zeros.
 * Every DRAM value is judged so when the cut took part of the page map
 * (its run chains are gone); otherwise those whose first run reaches the
 * cut or that have more runs than one.  Frees only runs still tagged for
 * the value (I9): the zeroed ones are the allocator repair's.  Returns
 * true when no such value is left in DRAM (a held one is checked again
 * next round).  Tier thread.
 */
bool
kvp_evict_cut_agent(struct kvp_agent *a, uint64_t cut)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_evict *ev = kvp_evict_scratch(a);
	uint64_t unit = s->g.g_dram_unit, npages = s->g.g_dram_pages;
	uint64_t arena = s->L.off[KVP_R_ARENA], i, first;
	bool all = cut < s->L.off[KVP_R_PAGEMAP] + s->L.len[KVP_R_PAGEMAP];
	unsigned removed = 0, found = 0;

	if (cut >= arena + npages * unit)
		return true; /* the arena is whole */
	if (!ev)
		return false;
	first = cut <= arena ? 0 : (cut - arena) / unit;
	kvp_evict_begin(a, ev);
	for (i = 0; i < s->g.g_index_slots; i++) {
		/* acquire: pairs with the publish CAS */
		uint64_t w = kvp_load_acquire(&s->meta[i]), loc, len, run, u0;
		const struct kvp_entry *e = &s->entries[i];
		unsigned st = KVP_IX_STATE(w);

		if (st != KVP_IX_READY && st != KVP_IX_DELETED)
			continue;
		/* relaxed: stable while READY or DELETED (g) */
		loc = kvp_load_relaxed(&e->e_loc);
		if (KVP_LOC_TIER(loc) != KVP_TIER_DRAM)
			continue;
		len = kvp_load_relaxed(&e->e_len); /* relaxed: as above */
		run = kvp_load_relaxed(&e->e_run); /* relaxed: as above */
		u0 = KVP_LOC_VAL(loc);
		if (!all && u0 < first && (len + unit - 1) / unit <= run &&
		    u0 + run <= first)
			continue; /* one run, before the cut */
		found++;
		if (KVP_IX_FLAGS(w) || kvp_tier_busy_agent(a, i) ||
		    kvp_evict_held(ev, i) ||
		    (st == KVP_IX_DELETED && !kvp_tier_may_forget_agent(a, i)))
			continue; /* next round (I20: a tombstone first) */
		kvp_evict_take(a, ev, i, w, NULL, KVP_ACTR_EVICT, &removed);
	}
	kvp_evict_flush(a, ev, KVP_ACTR_EVICT, &removed);
	if (removed) {
		kvp_log(KVP_LOG_WARN, "shm",
			"%u value(s) whose DRAM bytes lay past the cut left "
			"DRAM (to their SSD copy, or removed)",
			removed);
		kvp_dram_report_damage(s); /* the zeroed units: repair */
	}
	return found == removed;
}

void
kvp_dram_round_agent(struct kvp_agent *a)
{
	struct kvp_shm_header *h = a->seg.hdr;
	uint64_t npages = kvp_dram_capacity_agent(a);
	uint64_t want = npages - npages * a->cfg.dram_low_pct / 100, freed = 0,
		 need;
	bool stuck = false, kicked, ix_wake, ix_stuck;
	struct kvp_evict *ev;
	unsigned k;

	/* take the request: a client that kicks after this wakes us again */
	kicked = kvp_wake_take_agent(&a->seg, &need);
	ev = kvp_evict_scratch(a);
	if (ev)
		ev->asked_mid = ev->all_held = false;
	if (kicked && need)
		kvp_evict_answer(a, ev, true);
	if (need > want)
		want = need;
	if (!kicked && !kvp_dram_above_high_agent(a)) {
		/* only reclaim deleted values: when there were deletes, or
		 * once a second (a delete's counter bump is a hint) */
		/* relaxed: hint */
		uint64_t dseq = kvp_load_relaxed(&h->h_delete_seq);
		uint64_t now = kvp_now_ns(CLOCK_MONOTONIC);

		if (dseq == a->delete_seq_seen &&
		    now - a->last_reclaim_ns < 1000000000ull)
			want = UINT64_MAX; /* nothing to do this round */
		else
			want = 0;
		if (!want) {
			a->delete_seq_seen = dseq;
			a->last_reclaim_ns = now;
		}
	}
	a->evict_urgent = kicked; /* a putter waits: scan as far as it takes */
	for (k = 0; k < KVP_HINTS; k++) {
		uint64_t hint = kvp_wake_take_hint_agent(&a->seg, k);

		if (hint)
			freed += (uint64_t)kvp_ix_evict_for_hash_agent(a, hint);
	}
	ix_wake = kvp_ix_round_agent(a, &freed, &ix_stuck);
	kvp_distinct_round_agent(a); /* the hit-rate ceiling's window */
	if (want != UINT64_MAX)
		freed += kvp_dram_evict_pass_agent(a, want, &stuck);
	/* everything held when a putter asked, and nothing freed since:
	 * stuck, whatever the pass looked at (a plan carried out) */
	if (ev && ev->all_held && !freed)
		stuck = true;
	/* with demotions in flight, or frees waiting for the allocator
	 * lock (a client holds it), room is coming: not stuck */
	if (stuck && ((a->tier && (kvp_tier_demoting_agent(a) ||
				   kvp_tier_write_deferred_agent(a))) ||
		      a->ndfree || kvp_populate_pending_agent(a)))
		stuck = false;
	kvp_wake_stuck_agent(&a->seg, (stuck ? KVP_STUCK_DRAM : 0) |
					      (ix_stuck ? KVP_STUCK_INDEX : 0));
	if (freed || stuck || ix_wake)
		kvp_wake_space_agent(&a->seg); /* putters on the seq */
}
