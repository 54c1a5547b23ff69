/* SPDX-License-Identifier: MIT */
/*
 * dram_agent.c - the agent's half of the DRAM tier: the evictor (CLOCK
 * over index slots, batched hold checks), reclamation of deleted values,
 * and the sweep that frees runs whose owner is gone.
 *
 * Eviction of a batch (proof sketch; see kvp_index.h for the reader side):
 *  1. For each victim, CAS READY(g) -> READY|CHECK(g).  From here no reader
 *     trusts a new hold on it and no client can delete it.
 *  2. Full fence (store-load: the CHECK stores before the hold loads).
 *  3. Load every hold slot of every client (acquire: pairs with the
 *     reader's release when it drops a hold, so its copy is finished).
 *  4. A victim named by any hold: CAS back to READY(g).  Otherwise CAS
 *     READY|CHECK(g) -> EMPTY(g+1), then free its runs.  A crash between
 *     the two leaves runs tagged (slot, g) with the slot at g+1: the
 *     sweep below frees them.
 * The agent is the only process that sets CHECK, so an agent restart
 * clears CHECK flags left by its predecessor (no decision was made).
 *
 * The index limit (--index-entries) is kept here too: a putter takes a
 * unit of h_ix_used for its slot (a bounded CAS) and waits when there is
 * none; above the limit's high mark this thread removes cold unheld
 * entries (CLOCK, the same CHECK protocol) and recounts h_ix_used from
 * the index when a death may have left it high.  The argument that the
 * count is never low, and exact after a recount, is in docs/design.md
 * ("The index limit").
 */
#include "agent/agent_int.h"

#define KVP_EVICT_BATCH 256u

static void kvp__holds_scan_chunk(struct kvp_seg *s, struct kvp_cand *c, unsigned n);

/* Mark candidates held if any client's hold slot or a live lease names
 * them.  Any number of candidates (an SSD segment's reclaim may bring
 * thousands): scanned in chunks that keep the lookup table half empty. */
void
kvp_dram_holds_scan_agent(struct kvp_seg *s, struct kvp_cand *c, unsigned n)
{
	unsigned k;

	for (k = 0; k < n; k += 512u)
		kvp__holds_scan_chunk(s, c + k, n - k < 512u ? n - k : 512u);
}

static void
kvp__holds_scan_chunk(struct kvp_seg *s, struct kvp_cand *c, unsigned n)
{
	enum { HBITS = 10, HSIZE = 1u << HBITS };
	int16_t table[HSIZE];
	uint32_t i, k, hpc = s->g.g_holds_per_client;

	memset(table, 0xff, sizeof(table));
	for (k = 0; k < n; k++) {
		uint32_t b = (uint32_t)(c[k].slot * 0x9e3779b1u) >> (32 - HBITS);
		while (table[b] >= 0)
			b = (b + 1) & (HSIZE - 1);
		table[b] = (int16_t)k;
	}
	/* live leases pin their slot like holds (an expired one does not) */
	{
		uint64_t now = kvp_now_ns(CLOCK_MONOTONIC), l;

		for (l = 0; l < s->g.g_max_leases; l++) {
			const struct kvp_lease_slot *ls = &s->leases[l];
			/* acquire: pairs with the taker's LIVE release */
			uint64_t w = kvp_load_acquire(&ls->ls_state), slot;
			uint32_t b;

			if ((w & 0xff) == KVP_LS_FREE)
				continue;
			/* relaxed: published by the LIVE release */
			if ((w & 0xff) == KVP_LS_LIVE && kvp_load_relaxed(&ls->ls_expiry) <= now)
				continue;
			slot = kvp_load_relaxed(&ls->ls_slot);
			b = (uint32_t)(slot * 0x9e3779b1u) >> (32 - HBITS);
			while (table[b] >= 0) {
				if (c[table[b]].slot == slot)
					c[table[b]].held = true;
				b = (b + 1) & (HSIZE - 1);
			}
		}
	}
	for (i = 0; i < s->g.g_max_clients; i++) {
		/* acquire: pairs with the reader's hwm store, ordered before
		 * its fence; our fence (step 2) precedes this load */
		uint64_t hwm = kvp_load_acquire(&s->clients[i].cs_hold_hwm);
		const kvp_aword_t *hs = &s->holds[(uint64_t)i * hpc];

		if (hwm > hpc)
			hwm = hpc; /* written by a client: never trusted */
		for (k = 0; k < hwm; k++) {
			/* acquire: pairs with the reader's release on drop */
			uint64_t h = kvp_load_acquire(&hs[k]), slot;
			uint32_t b;

			if (!h)
				continue;
			slot = KVP_HOLD_SLOT(h);
			b = (uint32_t)(slot * 0x9e3779b1u) >> (32 - HBITS);
			while (table[b] >= 0) {
				struct kvp_cand *x = &c[table[b]];
				/* any hold on the slot, whatever its generation:
				 * a value may change location (demotion,
				 * promotion) under one generation, and a hold
				 * whose generation is stale is being dropped */
				if (x->slot == slot)
					x->held = true;
				b = (b + 1) & (HSIZE - 1);
			}
		}
	}
}

/* Step 1: CAS slot i from w to w|CHECK and record it as a candidate.
 * Returns 1 if taken, 0 if the slot changed meanwhile. */
unsigned
kvp_dram_check_take_agent(struct kvp_seg *s, uint64_t i, uint64_t w, struct kvp_cand *c)
{
	/* full CAS: from here no reader trusts a new hold on the slot and no
	 * client can delete it; pairs with the reader's fence in kvp__hold */
	if (!kvp_cas(&s->meta[i], w, w | KVP_IX_CHECK))
		return 0;
	kvp_crashpoint(A_EVICT_CHECK);
	c->slot = i;
	c->word = w | KVP_IX_CHECK;
	c->held = false;
	return 1;
}

/* A held candidate: clear CHECK; readers may trust their holds again. */
static void
kvp__release_check(struct kvp_seg *s, const struct kvp_cand *c)
{
	/* full CAS: back off (step 4, held) */
	kvp_cas(&s->meta[c->slot], c->word, c->word & ~(uint64_t)KVP_IX_CHECK);
	kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_EVICT_BACKOFF], 1); /* stat */
}

/*
 * An unheld candidate (step 4).  'why' says what the room is for:
 * KVP_ACTR_EVICT (DRAM) relocates a value that has an SSD copy (DRAM
 * freed, the entry now SSD-resident, same generation: location changes
 * are fenced by holds on the slot); anything else, and every deleted
 * value, empties the slot (the SSD copy gets a tombstone).  Returns units
 * of DRAM freed.
 */
static uint64_t
kvp__remove_agent(struct kvp_agent *a, const struct kvp_cand *c, enum kvp_actr why)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_shm_header *h = s->hdr;
	struct kvp_entry *e = &s->entries[c->slot];
	uint64_t w = c->word, i = c->slot, loc, len, ssd;
	bool deleted = KVP_IX_STATE(w) == KVP_IX_DELETED;

	/* relaxed: stable under CHECK */
	loc = kvp_load_relaxed(&e->e_loc);
	len = kvp_load_relaxed(&e->e_len);
	ssd = kvp_load_relaxed(&e->e_ssd);
	if (!deleted && why == KVP_ACTR_EVICT && ssd && KVP_LOC_TIER(loc) == KVP_TIER_DRAM) {
		/* relaxed: published by the CAS that clears CHECK */
		kvp_store_relaxed(&e->e_loc, KVP_LOC_MAKE(KVP_TIER_SSD, 0));
		kvp_store_relaxed(&e->e_run, 0);
		/* full CAS: readers see the SSD location from now on */
		kvp_cas(&s->meta[i], w, w & ~(uint64_t)KVP_IX_CHECK);
		kvp_crashpoint(A_DEMOTE_SWITCHED);
		return kvp_dram_free_agent(a, (uint32_t)KVP_LOC_VAL(loc), i, KVP_IX_GEN(w));
	}
	/* the key is read for the tombstone while the slot is still ours */
	if (ssd && a->tier)
		kvp_tier_forget_agent(a, i, ssd, len);
	/* full CAS: the value is gone for new readers (I6: gen + 1); its
	 * unit of the index count goes back (nobody else moves a slot under
	 * CHECK, so the CAS succeeds) */
	if (kvp_cas(&s->meta[i], w, KVP_IX_WORD(KVP_IX_NEXTGEN(w), 0, 0, KVP_IX_EMPTY)))
		kvp_ix_count_give(s);
	/* stats: agent threads add atomically */
	kvp_fetch_add(&h->h_actr[deleted ? KVP_ACTR_DELETE_RECLAIM : why], 1);
	if (!deleted)
		kvp_fetch_add(&h->h_actr[KVP_ACTR_EVICT_BYTES], len);
	if (KVP_LOC_TIER(loc) != KVP_TIER_DRAM)
		return 0;
	kvp_crashpoint(A_EVICT_FREED);
	/* I9: only runs tagged (i, gen) are freed */
	return kvp_dram_free_agent(a, (uint32_t)KVP_LOC_VAL(loc), i, KVP_IX_GEN(w));
}

/*
 * Make room in the two full buckets of 'hash' (a putter's hint): CHECK
 * every removable slot there, one hold scan, remove one victim (a deleted
 * value first, then one without its reference bit, then any unheld one).
 * Returns 1 if a slot was freed.
 */
static int
kvp_ix_evict_for_hash_agent(struct kvp_agent *a, uint64_t hash)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_cand cand[KVP_IX_CANDS];
	unsigned n = 0, pos, k, best = KVP_IX_CANDS, best_rank = 3;

	for (pos = 0; pos < KVP_IX_CANDS; pos++)
		/* relaxed: a hint; a slot freed meanwhile is room already */
		if (KVP_IX_STATE(kvp_load_relaxed(&s->meta[kvp_ix_cand(s, hash, pos)])) ==
		    KVP_IX_EMPTY)
			return 1;
	for (pos = 0; pos < KVP_IX_CANDS; pos++) {
		uint64_t i = kvp_ix_cand(s, hash, pos);
		/* acquire: pairs with the publish CAS */
		uint64_t w = kvp_load_acquire(&s->meta[i]);
		unsigned st = KVP_IX_STATE(w);

		if (KVP_IX_FLAGS(w) || (st != KVP_IX_READY && st != KVP_IX_DELETED) ||
		    kvp_tier_busy_agent(a, i))
			continue;
		n += kvp_dram_check_take_agent(s, i, w, &cand[n]);
	}
	if (n == 0)
		return 0;
	/* full fence: step 2 */
	kvp_fence_full();
	kvp_dram_holds_scan_agent(s, cand, n);
	for (k = 0; k < n; k++) {
		unsigned rank;

		if (cand[k].held)
			continue;
		if (KVP_IX_STATE(cand[k].word) == KVP_IX_DELETED)
			rank = 0;
		else /* relaxed: a CLOCK hint */
			rank = kvp_load_relaxed(&s->entries[cand[k].slot].e_ref) ? 2 : 1;
		if (rank < best_rank) {
			best_rank = rank;
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
 * One pass: reclaim deleted values and evict unheld cold ones until
 * 'want_free_pages' units are free or two turns of the clock found
 * nothing more.  Returns units freed; *stuck says nothing was evictable
 * while space was still wanted.
 */
uint64_t
kvp_dram_evict_pass_agent(struct kvp_agent *a, uint64_t want_free_pages, bool *stuck)
{
	struct kvp_seg *s = &a->seg;
	uint64_t nslots = s->g.g_index_slots, scanned = 0, freed = 0;
	struct kvp_cand cand[KVP_EVICT_BATCH];
	/* up to two turns of the clock; a pass that found nothing to do
	 * is not repeated until DRAM use changes or a putter asks (so an
	 * idle tier thread does not rescan the index every round) */
	uint64_t limit = 2 * nslots, used = kvp_load_relaxed(&s->dram->dh_used_mirror);
	unsigned found = 0;
	bool need;

	*stuck = false;
	if (want_free_pages && !a->evict_urgent && a->idle_used == used + 1)
		return 0;
	for (;;) {
		unsigned n = 0, k;

		/* dh_free_pages without the lock: a progress hint only */
		need = s->dram->dh_free_pages < want_free_pages;
		while (n < KVP_EVICT_BATCH && scanned < limit) {
			uint64_t i = a->clock_hand++ & (nslots - 1), w;
			unsigned st;

			scanned++;
			/* acquire: pairs with the publish CAS */
			w = kvp_load_acquire(&s->meta[i]);
			st = KVP_IX_STATE(w);
			if (KVP_IX_FLAGS(w) || kvp_tier_busy_agent(a, i))
				continue;
			if (st == KVP_IX_READY) {
				struct kvp_entry *e = &s->entries[i];
				if (!need)
					continue;
				/* relaxed: stable while READY(g) */
				if (KVP_LOC_TIER(kvp_load_relaxed(&e->e_loc)) != KVP_TIER_DRAM)
					continue;
				if (kvp_load_relaxed(&e->e_ref)) {
					/* relaxed: CLOCK second chance */
					kvp_store_relaxed(&e->e_ref, 0);
					found++; /* a victim on the next turn */
					continue;
				}
				/* with an SSD tier a cold value is written
				 * there first (copy first, free after) */
				if (a->tier && !kvp_load_relaxed(&e->e_ssd) &&
				    !kvp_tier_write_failing_agent(a)) {
					/* a value still to write counts as
					 * work found, even when the writes in
					 * flight are at their limit */
					kvp_tier_demote_agent(a, i, w);
					found++;
					continue;
				}
			} else if (st != KVP_IX_DELETED) {
				/* a value being put is work for a later pass:
				 * this one is not idle (its units are counted
				 * already, so DRAM use will not change when it
				 * is published, and an idle evictor would never
				 * look at it again) */
				if (st == KVP_IX_PENDING && need)
					found++;
				continue;
			}
			n += kvp_dram_check_take_agent(s, i, w, &cand[n]);
		}
		found += n;
		if (n == 0)
			break;
		/* full fence: step 2, CHECK stores before hold-slot loads */
		kvp_fence_full();
		kvp_dram_holds_scan_agent(s, cand, n);
		for (k = 0; k < n; k++) {
			if (cand[k].held) {
				kvp__release_check(s, &cand[k]);
				continue;
			}
			freed += kvp__remove_agent(a, &cand[k], KVP_ACTR_EVICT);
		}
		if (scanned >= limit)
			break;
	}
	/* a hint for putters that gave up: nothing could be evicted */
	/* remember an idle pass (+1: 0 means none) */
	a->idle_used = found || freed ? 0 : used + 1;
	if (freed || s->dram->dh_free_pages >= want_free_pages)
		a->noprogress_scanned = 0;
	else
		a->noprogress_scanned += scanned;
	/* stuck: two whole turns of the clock freed nothing */
	if (s->dram->dh_free_pages < want_free_pages && a->noprogress_scanned >= 2 * nslots)
		*stuck = true;
	return freed;
}

/* Is DRAM use above the agent's own high watermark (--dram-high)? */
bool
kvp_dram_above_high_agent(const struct kvp_agent *a)
{
	/* relaxed: a heuristic; the allocator's counts decide */
	uint64_t used = kvp_load_relaxed(&a->seg.dram->dh_used_mirror);

	return used * 100 > a->seg.g.g_dram_pages * a->cfg.dram_high_pct;
}

/* Undo CHECK flags an earlier agent left (it made no decision). */
unsigned
kvp_ix_clear_stale_checks_agent(struct kvp_seg *s)
{
	uint64_t i;
	unsigned n = 0;

	for (i = 0; i < s->g.g_index_slots; i++) {
		/* acquire: pairs with the CAS that set the flag */
		uint64_t w = kvp_load_acquire(&s->meta[i]);

		if ((w & KVP_IX_CHECK) &&
		    /* full CAS: nobody else sets or clears CHECK */
		    kvp_cas(&s->meta[i], w, w & ~(uint64_t)KVP_IX_CHECK))
			n++;
		/* a claim the previous agent made (SSD recovery) and never
		 * finished: owner 0xffff is the agent's */
		if ((KVP_IX_STATE(w) == KVP_IX_RESERVED || KVP_IX_STATE(w) == KVP_IX_CLAIM ||
		     KVP_IX_STATE(w) == KVP_IX_PENDING) && KVP_IX_OWNER(w) == 0xffffu &&
		    /* full CAS: the previous agent is dead */
		    kvp_cas(&s->meta[i], w, KVP_IX_WORD(KVP_IX_NEXTGEN(w), 0, 0, KVP_IX_EMPTY)))
			n++;
	}
	return n;
}

/* ---- the allocator lock, from the agent's side ---- */

/*
 * Take the allocator lock without waiting (tier thread).  0 (locked),
 * -EBUSY (someone holds it: come back later), -EUCLEAN (damaged: reported,
 * not locked).  A word no holder wrote is taken over at once (by
 * kvp_dram_lock_until); a holder that keeps it for more than 10 ms is
 * checked with the kernel at most every 100 ms and taken over if its
 * process is dead.  A live holder, stopped or not, is never overruled:
 * what needs the lock waits in the agent's memory (kvp_dram_free_agent).
 */
int
kvp_dram_lock_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	int rc = kvp_dram_lock_until(s, 0);
	uint64_t now;

	if (rc == 0) {
		a->lock_busy_since = 0;
		return 0;
	}
	if (rc == -EUCLEAN) {
		a->dram_damaged = true;
		return rc;
	}
	now = kvp_now_ns(CLOCK_MONOTONIC);
	if (!a->lock_busy_since) {
		a->lock_busy_since = now;
		a->lock_checked_ns = now;
		return -EBUSY;
	}
	if (now - a->lock_busy_since < 10000000ull || now - a->lock_checked_ns < 100000000ull)
		return -EBUSY;
	a->lock_checked_ns = now;
	rc = kvp_dram_lock_takeover(s);
	if (rc == 0) {
		kvp_log(KVP_LOG_WARN, "dram", "the allocator lock's holder died holding it: "
			"taken over, bins rebuilt");
		a->lock_busy_since = 0;
		return 0;
	}
	if (rc == -EUCLEAN)
		a->dram_damaged = true;
	else if (now - a->lock_busy_since > 60000000000ull && !a->lock_warned) {
		/* acquire: the word, for the log line */
		unsigned int v = kvp_iload_acquire(&s->dram->dh_lock);
		unsigned int t = KVP_LOCK_TOKEN(v);

		kvp_log(KVP_LOG_WARN, "dram", "the allocator lock has been held for 60 s by "
			"%s %u (pid %llu), which is alive: stopped?  puts answer -EBUSY and "
			"frees wait until it goes on", t == KVP_LOCK_TOKEN_AGENT ? "the agent" :
			"client", t - 1, t >= 1 && t <= s->g.g_max_clients ?
			(unsigned long long)kvp_load_relaxed(&s->clients[t - 1].cs_pid) : 0ull);
		a->lock_warned = true;
	}
	return rc;
}

/*
 * Free the run chain of (slot, gen) from first, or queue the free if the
 * lock is busy (a client holding it may be stopped: the agent never waits
 * behind it).  Returns units freed now.
 */
uint64_t
kvp_dram_free_agent(struct kvp_agent *a, uint32_t first, uint64_t slot, uint32_t gen)
{
	int64_t got;

	if (!a->ndfree && kvp_dram_lock_agent(a) == 0) {
		kvp_dram_unlock(&a->seg);
		got = kvp_dram_free_chain_until(&a->seg, first, slot, gen, 0);
		if (got >= 0)
			return (uint64_t)got;
		if (got == -EUCLEAN) {
			a->dram_damaged = true;
			return 0;
		}
	}
	if (a->ndfree == a->capdfree) {
		size_t cap = a->capdfree ? a->capdfree * 2 : 256;
		struct kvp_dfree *n = realloc(a->dfree, cap * sizeof(*n));

		if (!n) /* the orphan sweep frees it later */
			return 0;
		a->dfree = n;
		a->capdfree = cap;
	}
	a->dfree[a->ndfree++] = (struct kvp_dfree){ slot, first, gen };
	return 0;
}

/* Retry the queued frees (each round).  Returns units freed. */
uint64_t
kvp_dram_deferred_agent(struct kvp_agent *a)
{
	uint64_t freed = 0;
	size_t k;

	if (!a->ndfree || kvp_dram_lock_agent(a))
		return 0;
	kvp_dram_unlock(&a->seg);
	for (k = 0; k < a->ndfree; k++) {
		const struct kvp_dfree *d = &a->dfree[a->ndfree - 1 - k];
		int64_t got = kvp_dram_free_chain_until(&a->seg, d->first, d->slot, d->gen, 0);

		if (got == -EBUSY)
			break;
		if (got == -EUCLEAN)
			a->dram_damaged = true;
		else
			freed += (uint64_t)got;
	}
	a->ndfree -= k;
	return freed;
}

/*
 * Free every USED run whose owner entry no longer names it: the slot's
 * generation moved on (evicted, reaped) or it is in a state that owns no
 * bytes.  Runs of a PENDING put in progress are kept: their slot is
 * PENDING at the run's generation.  Returns units freed, or -EBUSY
 * (as a huge value: the caller asks again) when the lock is busy.
 */
uint64_t
kvp_dram_gc_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	uint64_t n = s->g.g_dram_pages, p = 0, freed = 0;

	if (kvp_dram_lock_agent(a))
		return UINT64_MAX;
	while (p < n) {
		struct kvp_page *pg = &s->pages[p];
		uint32_t len;

		if (!kvp__dram_run_ok(s, p, &len)) {
			a->dram_damaged = true;
			break;
		}
		if (pg->pg_state == KVP_PG_USED) {
			uint64_t slot = (uint64_t)pg->pg_owner - 1;
			bool keep = false;

			if (pg->pg_owner && slot < s->g.g_index_slots) {
				/* acquire: pairs with the publish/claim CAS */
				uint64_t w = kvp_load_acquire(&s->meta[slot]);
				unsigned st = KVP_IX_STATE(w);
				/* relaxed: stable unless CHECK or busy, and
				 * this runs on the thread that changes it */
				uint64_t loc = kvp_load_relaxed(&s->entries[slot].e_loc);
				keep = KVP_IX_GEN(w) == pg->pg_owner_gen &&
				       (st == KVP_IX_PENDING ||
					((st == KVP_IX_READY || st == KVP_IX_DELETED) &&
					 (KVP_LOC_TIER(loc) == KVP_TIER_DRAM ||
					  kvp_tier_busy_agent(a, slot))));
			}
			if (!keep) {
				uint32_t h;

				kvp_crashpoint(A_GC_FREE);
				if (kvp__dram_free_run_locked(s, (uint32_t)p)) {
					a->dram_damaged = true;
					break;
				}
				freed += len;
				/* the freed run may have merged backwards:
				 * restart from its (new) head */
				h = s->pages[p + len - 1].pg_head;
				if (!h || h - 1 > p || !kvp__dram_run_ok(s, h - 1, &len)) {
					a->dram_damaged = true;
					break;
				}
				p = h - 1;
			}
		}
		p += len;
	}
	kvp_dram_unlock(s);
	return freed;
}

/* Bitmap helpers for the repair (private memory). */
static bool
kvp_bit(const uint64_t *b, uint64_t i)
{
	return (b[i / 64] >> (i % 64)) & 1;
}

static void
kvp_bit_set(uint64_t *b, uint64_t i)
{
	b[i / 64] |= 1ull << (i % 64);
}

/* Are units [p, p + len) all clear in b?  (word at a time) */
static bool
kvp_bits_clear(const uint64_t *b, uint64_t p, uint64_t len)
{
	while (len) {
		uint64_t off = p % 64, k = 64 - off < len ? 64 - off : len;
		uint64_t mask = (k == 64 ? ~0ull : ((1ull << k) - 1)) << off;

		if (b[p / 64] & mask)
			return false;
		p += k;
		len -= k;
	}
	return true;
}

static void
kvp_bits_set(uint64_t *b, uint64_t p, uint64_t len)
{
	while (len--)
		kvp_bit_set(b, p++);
}

/*
 * Keep the DRAM chain of READY/DELETED slot i (at generation gen) if every
 * run of it is a well-formed USED run tagged (i, gen), inside the arena,
 * not claimed by another value, and the runs cover its length: mark its
 * units in used (and its run heads in start).  Returns true if kept.
 */
static bool
kvp_repair_keep_chain(struct kvp_seg *s, uint64_t i, uint32_t gen, uint64_t first,
		      uint64_t vlen, uint64_t *used, uint64_t *start)
{
	uint64_t n = s->g.g_dram_pages, unit = s->g.g_dram_unit;
	uint64_t need = (vlen + unit - 1) / unit, got = 0, p = first, hops = 0;
	uint64_t runs[64][2];
	unsigned nr = 0, k;

	if (!vlen || need > n)
		return false;
	while (got < need) {
		struct kvp_page *pg;
		uint32_t len, next;

		if (p >= n || ++hops > 64 || !kvp__dram_run_ok(s, p, &len))
			return false;
		pg = &s->pages[p];
		next = pg->pg_next;
		if (pg->pg_state != KVP_PG_USED || pg->pg_owner != i + 1 ||
		    pg->pg_owner_gen != gen || !kvp_bits_clear(used, p, len))
			return false;
		for (k = 0; k < nr; k++) /* no run twice */
			if (p < runs[k][0] + runs[k][1] && runs[k][0] < p + len)
				return false;
		runs[nr][0] = p;
		runs[nr][1] = len;
		nr++;
		got += len;
		if (got < need) {
			if (!next || next > n)
				return false;
			p = next - 1;
		}
	}
	for (k = 0; k < nr; k++) {
		kvp_bits_set(used, runs[k][0], runs[k][1]);
		kvp_bit_set(start, runs[k][0]);
	}
	/* the copy fast path's length of the first run */
	kvp_store_relaxed(&s->entries[i].e_run, runs[0][1]); /* relaxed: ours */
	return true;
}

/*
 * Rebuild the page map from the index (tier thread, lock held): the DRAM
 * chain of every READY/DELETED entry is checked run by run (I9) and kept;
 * the runs of puts in progress (PENDING at their tag's generation) and of
 * promotions in flight are kept; every other unit becomes free, in
 * maximal runs, binned.  An entry whose chain is damaged goes to its SSD
 * copy when it has one, else leaves the index (its bytes are not what was
 * put).  Returns the entries that lost their DRAM copy.
 */
static uint64_t
kvp_dram_repair_locked(struct kvp_agent *a, uint64_t *kept_runs)
{
	struct kvp_seg *s = &a->seg;
	uint64_t n = s->g.g_dram_pages, i, p, used_units = 0, lost = 0;
	uint64_t *used = calloc((n + 63) / 64, 8), *start = calloc((n + 63) / 64, 8);
	unsigned b;

	*kept_runs = 0;
	if (!used || !start) {
		free(used);
		free(start);
		return 0;
	}
	for (i = 0; i < s->g.g_index_slots; i++) {
		/* acquire: pairs with the publish CAS */
		uint64_t w = kvp_load_acquire(&s->meta[i]);
		struct kvp_entry *e = &s->entries[i];
		unsigned st = KVP_IX_STATE(w);
		uint64_t loc;

		if (st != KVP_IX_READY && st != KVP_IX_DELETED)
			continue;
		/* relaxed: this thread changes locations */
		loc = kvp_load_relaxed(&e->e_loc);
		if (KVP_LOC_TIER(loc) != KVP_TIER_DRAM)
			continue;
		if (kvp_repair_keep_chain(s, i, KVP_IX_GEN(w), KVP_LOC_VAL(loc),
					  kvp_load_relaxed(&e->e_len), used, start))
			continue;
		lost++;
		if (kvp_load_relaxed(&e->e_ssd) && !kvp_tier_busy_agent(a, i)) {
			/* relaxed: published by the CAS below (same gen) */
			kvp_store_relaxed(&e->e_loc, KVP_LOC_MAKE(KVP_TIER_SSD, 0));
			kvp_store_relaxed(&e->e_run, 0);
			/* full CAS: a location change, as a relocation does */
			kvp_cas(&s->meta[i], w, w & ~(uint64_t)KVP_IX_CHECK);
		} else {
			/* full CAS: gone (I6: gen + 1); no SSD copy to
			 * tombstone (or its demotion in flight: the
			 * completion finds the slot moved on) */
			kvp_cas(&s->meta[i], w, KVP_IX_WORD(KVP_IX_NEXTGEN(w), 0, 0, KVP_IX_EMPTY));
		}
	}
	/* runs of puts in progress and promotions in flight */
	for (p = 0; p < n;) {
		struct kvp_page *pg = &s->pages[p];
		uint32_t len;
		uint64_t slot;
		bool keep = false;

		if (kvp_bit(used, p) || pg->pg_state != KVP_PG_USED ||
		    !kvp__dram_run_ok(s, p, &len) || !kvp_bits_clear(used, p, len)) {
			p++;
			continue;
		}
		slot = (uint64_t)pg->pg_owner - 1;
		if (pg->pg_owner && slot < s->g.g_index_slots) {
			/* acquire: pairs with the claim CAS */
			uint64_t w = kvp_load_acquire(&s->meta[slot]);
			unsigned st = KVP_IX_STATE(w);

			keep = KVP_IX_GEN(w) == pg->pg_owner_gen &&
			       (st == KVP_IX_PENDING ||
				((st == KVP_IX_READY || st == KVP_IX_DELETED) &&
				 kvp_tier_busy_agent(a, slot)));
		}
		if (!keep) {
			p++;
			continue;
		}
		kvp_bits_set(used, p, len);
		kvp_bit_set(start, p);
		p += len;
	}
	/* rewrite the map: kept runs as they are, the gaps as free runs */
	for (b = 0; b < KVP_DRAM_BINS; b++)
		s->dram->dh_bin[b] = 0;
	for (p = 0; p < n;) {
		uint64_t q = p + 1, k;

		if (kvp_bit(used, p)) {
			while (q < n && kvp_bit(used, q) && !kvp_bit(start, q))
				q++;
			s->pages[p].pg_state = KVP_PG_USED;
			used_units += q - p;
			(*kept_runs)++;
		} else {
			while (q < n && !kvp_bit(used, q))
				q++;
			s->pages[p].pg_state = KVP_PG_FREE;
			s->pages[p].pg_owner = s->pages[p].pg_owner_gen = 0;
		}
		s->pages[p].pg_npages = (uint32_t)(q - p);
		s->pages[p].pg_head = 0;
		for (k = p + 1; k < q; k++) /* interior units carry no header */
			kvp__dram_interior(s, k);
		s->pages[q - 1].pg_head = (uint32_t)p + 1;
		if (s->pages[p].pg_state == KVP_PG_FREE)
			kvp__dram_bin_link(s, (uint32_t)p); /* bins were just cleared */
		p = q;
	}
	s->dram->dh_used_pages = used_units;
	s->dram->dh_free_pages = n - used_units;
	free(used);
	free(start);
	return lost;
}

/*
 * Verify and repair the allocator when a client or an agent operation
 * reported damage (at most every 100 ms: a client that keeps reporting
 * costs one pass of the index and the map per 100 ms).  0, or -EBUSY
 * (the lock is held: next round).
 */
int
kvp_dram_repair_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC), kept, lost;
	int rc;

	/* relaxed: a hint (see kvp_dram_report_damage) */
	if (!a->dram_damaged && !kvp_load_relaxed(&s->dram->dh_damaged))
		return 0;
	if (now - a->last_repair_ns < 100000000ull)
		return -EBUSY;
	rc = kvp_dram_lock_agent(a);
	if (rc == -EUCLEAN) /* a dead holder left a broken chain: we repair it */
		rc = kvp_dram_lock_agent(a);
	if (rc)
		return -EBUSY;
	a->last_repair_ns = now;
	kvp_store_relaxed(&s->dram->dh_damaged, 0); /* relaxed: under the lock */
	a->dram_damaged = false;
	lost = kvp_dram_repair_locked(a, &kept);
	kvp_dram_unlock(s);
	kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_ALLOC_RECOVER], 1); /* stat */
	kvp_log(lost ? KVP_LOG_WARN : KVP_LOG_INFO, "dram", "page map checked against the "
		"index and rebuilt (damage reported): %llu runs kept, %llu units free, "
		"%llu entries lost their damaged DRAM copy", (unsigned long long)kept,
		(unsigned long long)s->dram->dh_free_pages, (unsigned long long)lost);
	/* putters waiting for room retry now */
	kvp_ifetch_add(&s->hdr->h_space_seq, 1); /* full: then wake */
	kvp_futex_wake(&s->hdr->h_space_seq);
	return 0;
}

/* ---- the index limit (docs/design.md, "The index limit") ---- */

static int
kvp_u64_cmp(const void *x, const void *y)
{
	uint64_t a = KVP_HOLD_SLOT(*(const uint64_t *)x), b = KVP_HOLD_SLOT(*(const uint64_t *)y);

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
		if (kvp_load_acquire(&s->clients[c].cs_ix_resv) != a->ix_seen[c])
			return false;
	if (u0 != u1)
		return false;
	if (count == u1)
		return true;
	/* full CAS: only from the count the scan agreed with */
	if (!kvp_cas(&s->hdr->h_ix_used, u1, count))
		return false;
	kvp_log(KVP_LOG_INFO, "index", "entry count corrected from %llu to %llu (a process "
		"died while changing it, or it was overwritten)", (unsigned long long)u1,
		(unsigned long long)count);
	return true;
}

/*
 * Remove cold unheld entries until h_ix_used is down to 'target': CLOCK
 * over every READY or DELETED slot (a reference bit buys a second
 * chance; deleted ones go first), the CHECK protocol of eviction, and
 * removal from the index whatever the tier (DRAM freed, an SSD copy gets
 * a tombstone).  At most two turns of the clock.  Returns entries
 * removed; *freed gets the DRAM units freed, *stuck says two turns found
 * nothing removable while the index was at its limit.
 */
static unsigned
kvp_ix_evict_pass_agent(struct kvp_agent *a, uint64_t target, uint64_t *freed, bool *stuck)
{
	struct kvp_seg *s = &a->seg;
	uint64_t nslots = s->g.g_index_slots, scanned = 0, turns = 2 * nslots;
	struct kvp_cand cand[KVP_EVICT_BATCH];
	unsigned removed = 0;

	for (;;) {
		/* relaxed: progress, re-read every batch */
		uint64_t used = kvp_load_relaxed(&s->hdr->h_ix_used), want;
		unsigned n = 0, k;

		if (used <= target || scanned >= turns)
			break;
		want = used - target < KVP_EVICT_BATCH ? used - target : KVP_EVICT_BATCH;
		while (n < want && scanned < turns) {
			uint64_t i = a->ix_hand++ & (nslots - 1), w;
			unsigned st;

			scanned++;
			/* acquire: pairs with the publish CAS */
			w = kvp_load_acquire(&s->meta[i]);
			st = KVP_IX_STATE(w);
			if (KVP_IX_FLAGS(w) || kvp_tier_busy_agent(a, i))
				continue;
			if (st == KVP_IX_READY) {
				struct kvp_entry *e = &s->entries[i];

				/* relaxed: the CLOCK bit, a hint */
				if (kvp_load_relaxed(&e->e_ref)) {
					kvp_store_relaxed(&e->e_ref, 0); /* second chance */
					continue;
				}
			} else if (st != KVP_IX_DELETED) {
				continue;
			}
			n += kvp_dram_check_take_agent(s, i, w, &cand[n]);
		}
		if (n == 0)
			continue;
		/* full fence: step 2, CHECK stores before hold-slot loads */
		kvp_fence_full();
		kvp_dram_holds_scan_agent(s, cand, n);
		for (k = 0; k < n; k++) {
			if (cand[k].held) {
				kvp__release_check(s, &cand[k]);
				continue;
			}
			*freed += kvp__remove_agent(a, &cand[k], KVP_ACTR_EVICT_INDEX);
			removed++;
		}
	}
	/* relaxed: the count now */
	*stuck = !removed && scanned >= turns &&
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
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC), since = now - a->ix_recount_ns;
	/* full CAS: take the request; a putter that kicks after this sees 0 */
	bool kicked = kvp_cas(&h->h_ix_req, 1, 0);

	*stuck = false;
	/* relaxed: a hint; the pass re-reads it */
	used = kvp_load_relaxed(&h->h_ix_used);
	/* recount: soon after a start or a death that may have left the
	 * count high, every second while it is near the limit (room made
	 * for a count that is high for nothing is lost), every 10 s anyway */
	/* acquire: pairs with the reaper's release */
	if ((kvp_load_acquire(&a->ix_recount_due) && since >= 10000000ull) ||
	    (used >= high && since >= 1000000000ull) || since >= 10000000000ull) {
		a->ix_recount_ns = now;
		if (kvp_ix_recount_agent(a))
			kvp_store_release(&a->ix_recount_due, 0); /* release: ours */
		used = kvp_load_relaxed(&h->h_ix_used); /* relaxed: as above */
	}
	if (used < high)
		return kicked; /* room already: let the putter look again */
	return kvp_ix_evict_pass_agent(a, low, freed, stuck) > 0 || *stuck || kicked;
}

/*
 * One round of the DRAM side of the tier thread: index-pressure hints,
 * the index limit, then eviction (or demotion) above the high watermark
 * or when a putter is waiting, and reclamation of deleted values.  Wakes
 * putters that sleep on h_space_seq when it made room or found none.
 */
void
kvp_dram_round_agent(struct kvp_agent *a)
{
	struct kvp_shm_header *h = a->seg.hdr;
	uint64_t npages = a->seg.g.g_dram_pages;
	uint64_t want = npages - npages * a->cfg.dram_low_pct / 100, freed = 0, need;
	bool stuck = false, kicked, ix_wake, ix_stuck;
	unsigned k;

	/* full CAS: take the request; a client that kicks after this
	 * sees 0 and wakes us again */
	kicked = kvp_cas(&h->h_evict_req, 1, 0);
	/* relaxed: the largest unit count a putter is waiting for */
	need = kvp_load_relaxed(&h->h_evict_need);
	kvp_store_relaxed(&h->h_evict_need, 0);
	if (need > want)
		want = need;
	if (!kicked && !kvp_dram_above_high_agent(a)) {
		/* only reclaim deleted values: when there were deletes, or
		 * once a second (a delete's counter bump is a hint) */
		uint64_t dseq = kvp_load_relaxed(&h->h_delete_seq); /* relaxed: hint */
		uint64_t now = kvp_now_ns(CLOCK_MONOTONIC);

		if (dseq == a->delete_seq_seen && now - a->last_reclaim_ns < 1000000000ull)
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
		/* acquire: pairs with the putter's release */
		uint64_t hint = kvp_load_acquire(&h->h_hint[k]);
		/* full CAS: take the hint (a newer one may replace it) */
		if (hint && kvp_cas(&h->h_hint[k], hint, 0))
			freed += (uint64_t)kvp_ix_evict_for_hash_agent(a, hint);
	}
	ix_wake = kvp_ix_round_agent(a, &freed, &ix_stuck);
	if (want != UINT64_MAX)
		freed += kvp_dram_evict_pass_agent(a, want, &stuck);
	/* with demotions in flight, or frees waiting for the allocator
	 * lock (a client holds it), room is coming: not stuck */
	if (stuck && ((a->tier && kvp_tier_demoting_agent(a)) || a->ndfree))
		stuck = false;
	/* relaxed: read by putters that gave up; a hint */
	kvp_store_relaxed(&h->h_evict_stuck, (stuck ? KVP_STUCK_DRAM : 0) |
			  (ix_stuck ? KVP_STUCK_INDEX : 0));
	if (freed || stuck || ix_wake) {
		/* full: bump then wake putters sleeping on the seq */
		kvp_ifetch_add(&h->h_space_seq, 1);
		kvp_futex_wake(&h->h_space_seq);
	}
}
