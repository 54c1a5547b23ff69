/* SPDX-License-Identifier: MIT */
/*
 * evict.c - the eviction policy: which values leave DRAM (or the index),
 * and when.  Above --dram-high, or while a putter waits for room, a CLOCK
 * over index slots picks cold unheld values in batches (the verdict on
 * each is victim.c's, one fence and one hold scan per batch); without an
 * SSD copy a cold value is handed to demotion first (move.c).  A full
 * bucket pair (a putter's hint) gets one slot freed.  The index limit
 * (--index-entries): above its high mark cold entries leave the index,
 * and h_ix_used is recounted from the index when a death may have left
 * it high (docs/design.md, "The index limit").  Deleted values are
 * reclaimed here too.  The seam for other policies: kvp_dram_round_agent
 * is called once per round; victims go through kvp__release_check /
 * kvp__remove_agent.
 */
#include "agent/tier_int.h"

#define KVP_EVICT_BATCH 256u

/* Is DRAM use above the agent's own high watermark (--dram-high)? */
bool
kvp_dram_above_high_agent(const struct kvp_agent *a)
{
	/* relaxed: a heuristic; the allocator's counts decide */
	uint64_t used = kvp_load_relaxed(&a->seg.dram->dh_used_mirror);

	return used * 100 > a->seg.g.g_dram_pages * a->cfg.dram_high_pct;
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
		    kvp_tier_busy_agent(a, i))
			continue;
		n += kvp_ix_cand_take_agent(s, i, w, &cand[n]);
	}
	if (n == 0)
		return 0;
	kvp_ix_holds_scan_agent(s, cand, n);
	for (k = 0; k < n; k++) {
		unsigned rank;

		if (cand[k].held)
			continue;
		if (KVP_IX_STATE(cand[k].word) == KVP_IX_DELETED)
			rank = 0;
		else /* relaxed: a CLOCK hint */
			rank = kvp_load_relaxed(
				       &s->entries[cand[k].slot].e_ref) ?
				       2 :
				       1;
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
kvp_dram_evict_pass_agent(struct kvp_agent *a, uint64_t want_free_pages,
			  bool *stuck)
{
	struct kvp_seg *s = &a->seg;
	uint64_t nslots = s->g.g_index_slots, scanned = 0, freed = 0;
	struct kvp_cand cand[KVP_EVICT_BATCH];
	/* up to two turns of the clock; a pass that found nothing to do
	 * is not repeated until DRAM use changes or a putter asks (so an
	 * idle tier thread does not rescan the index every round) */
	uint64_t limit = 2 * nslots,
		 used = kvp_load_relaxed(&s->dram->dh_used_mirror);
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
				if (KVP_LOC_TIER(kvp_load_relaxed(&e->e_loc)) !=
				    KVP_TIER_DRAM)
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
			n += kvp_ix_cand_take_agent(s, i, w, &cand[n]);
		}
		found += n;
		if (n == 0)
			break;
		kvp_ix_holds_scan_agent(s, cand, n);
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
	/* full CAS: only from the count the scan agreed with */
	if (!kvp_cas(&s->hdr->h_ix_used, u1, count))
		return false;
	kvp_log(KVP_LOG_INFO, "index",
		"entry count corrected from %llu to %llu (a process "
		"died while changing it, or it was overwritten)",
		(unsigned long long)u1, (unsigned long long)count);
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
kvp_ix_evict_pass_agent(struct kvp_agent *a, uint64_t target, uint64_t *freed,
			bool *stuck)
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
		want = used - target < KVP_EVICT_BATCH ? used - target :
							 KVP_EVICT_BATCH;
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
					/* second chance */
					kvp_store_relaxed(&e->e_ref, 0);
					continue;
				}
			} else if (st != KVP_IX_DELETED) {
				continue;
			}
			n += kvp_ix_cand_take_agent(s, i, w, &cand[n]);
		}
		if (n == 0)
			continue;
		kvp_ix_holds_scan_agent(s, cand, n);
		for (k = 0; k < n; k++) {
			if (cand[k].held) {
				kvp__release_check(s, &cand[k]);
				continue;
			}
			*freed += kvp__remove_agent(a, &cand[k],
						    KVP_ACTR_EVICT_INDEX);
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
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC),
		 since = now - a->ix_recount_ns;
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
void
kvp_dram_round_agent(struct kvp_agent *a)
{
	struct kvp_shm_header *h = a->seg.hdr;
	uint64_t npages = a->seg.g.g_dram_pages;
	uint64_t want = npages - npages * a->cfg.dram_low_pct / 100, freed = 0,
		 need;
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
	kvp_store_relaxed(&h->h_evict_stuck,
			  (stuck ? KVP_STUCK_DRAM : 0) |
				  (ix_stuck ? KVP_STUCK_INDEX : 0));
	if (freed || stuck || ix_wake) {
		/* full: bump then wake putters sleeping on the seq */
		kvp_ifetch_add(&h->h_space_seq, 1);
		kvp_futex_wake(&h->h_space_seq);
	}
}
