/* SPDX-License-Identifier: MIT */
/*
 * dram.c - the DRAM allocator (tiers/kvp_dram.h) from the agent's side.
 * The agent never waits for the allocator lock (a client holding it may
 * be stopped): frees that need it wait in the agent's memory and are
 * retried every round; a lock whose holder died is taken over.  Here too:
 * the orphan sweep (runs whose owner entry moved on: a dead client's put,
 * an eviction cut short) and the repair of a damaged page map from the
 * index (I28).
 */
#include "agent/tier_int.h"

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
	if (now - a->lock_busy_since < 10000000ull ||
	    now - a->lock_checked_ns < 100000000ull)
		return -EBUSY;
	a->lock_checked_ns = now;
	rc = kvp_dram_lock_takeover(s);
	if (rc == 0) {
		kvp_log(KVP_LOG_WARN, "dram",
			"the allocator lock's holder died holding it: "
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

		kvp_log(KVP_LOG_WARN, "dram",
			"the allocator lock has been held for 60 s by "
			"%s %u (pid %llu), which is alive: stopped?  puts answer -EBUSY and "
			"frees wait until it goes on",
			t == KVP_LOCK_TOKEN_AGENT ? "the agent" : "client",
			t - 1,
			t >= 1 && t <= s->g.g_max_clients ?
				(unsigned long long)kvp_load_relaxed(
					&s->clients[t - 1].cs_pid) :
				0ull);
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
kvp_dram_free_agent(struct kvp_agent *a, uint32_t first, uint64_t slot,
		    uint32_t gen)
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
		int64_t got = kvp_dram_free_chain_until(&a->seg, d->first,
							d->slot, d->gen, 0);

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
			/* the unpopulated tail is kept where the agent's
			 * populate step put it; that tag anywhere else is a
			 * forgery, freed like any orphan */
			bool keep = pg->pg_owner == KVP_DRAM_OWNER_UNPOP &&
				    p == a->pop_frontier && p + len == n;

			if (!keep && pg->pg_owner &&
			    slot < s->g.g_index_slots) {
				/* acquire: pairs with the publish/claim CAS */
				uint64_t w = kvp_load_acquire(&s->meta[slot]);
				unsigned st = KVP_IX_STATE(w);
				/* relaxed: stable unless CHECK or busy, and
				 * this runs on the thread that changes it */
				uint64_t loc = kvp_load_relaxed(
					&s->entries[slot].e_loc);
				keep = KVP_IX_GEN(w) == pg->pg_owner_gen &&
				       (st == KVP_IX_PENDING ||
					((st == KVP_IX_READY ||
					  st == KVP_IX_DELETED) &&
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
				if (!h || h - 1 > p ||
				    !kvp__dram_run_ok(s, h - 1, &len)) {
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
kvp_repair_keep_chain(struct kvp_seg *s, uint64_t i, uint32_t gen,
		      uint64_t first, uint64_t vlen, uint64_t *used,
		      uint64_t *start)
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
	kvp_ix_entry_run_agent(s, i, runs[0][1]);
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
	uint64_t n = s->g.g_dram_pages, i, p, lost = 0;
	uint64_t *used = calloc((n + 63) / 64, 8),
		 *start = calloc((n + 63) / 64, 8);

	*kept_runs = 0;
	if (!used || !start) {
		free(used);
		free(start);
		return 0;
	}
	/* the unpopulated tail, where the populate step has it (first: no
	 * chain a client forged into it is kept) */
	if (a->pop_frontier < n) {
		kvp_bits_set(used, a->pop_frontier, n - a->pop_frontier);
		kvp_bit_set(start, a->pop_frontier);
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
					  kvp_load_relaxed(&e->e_len), used,
					  start))
			continue;
		lost++;
		if (kvp_load_relaxed(&e->e_ssd) && !kvp_tier_busy_agent(a, i)) {
			/* published by the relocation (same gen) */
			kvp_ix_entry_ssd_only_agent(s, i);
			kvp_ix_relocate(s, i, w);
		} else if (kvp_ix_remove(s, i, w)) {
			/* gone (I6: gen + 1); no SSD copy to tombstone (or its
			 * demotion in flight: the completion finds the slot
			 * moved on); its unit of the index count goes back */
			kvp_ix_count_give(s);
		}
	}
	/* runs of puts in progress and promotions in flight */
	for (p = 0; p < n;) {
		struct kvp_page *pg = &s->pages[p];
		uint32_t len;
		uint64_t slot;
		bool keep = false;

		if (kvp_bit(used, p) || pg->pg_state != KVP_PG_USED ||
		    !kvp__dram_run_ok(s, p, &len) ||
		    !kvp_bits_clear(used, p, len)) {
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
	kvp_dram_map_rewrite_locked(s, used, start, a->pop_frontier, kept_runs);
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
	/* a dead holder left a broken chain: we repair it */
	if (rc == -EUCLEAN)
		rc = kvp_dram_lock_agent(a);
	if (rc)
		return -EBUSY;
	a->last_repair_ns = now;
	kvp_dram_damage_clear_locked(s);
	a->dram_damaged = false;
	lost = kvp_dram_repair_locked(a, &kept);
	kvp_dram_unlock(s);
	kvp_actr_add(s->hdr, KVP_ACTR_ALLOC_RECOVER, 1); /* stat */
	kvp_log(lost ? KVP_LOG_WARN : KVP_LOG_INFO, "dram",
		"page map checked against the "
		"index and rebuilt (damage reported): %llu runs kept, %llu units free, "
		"%llu entries lost their damaged DRAM copy",
		(unsigned long long)kept,
		(unsigned long long)s->dram->dh_free_pages,
		(unsigned long long)lost);
	kvp_wake_space_agent(s); /* putters waiting for room retry now */
	return 0;
}
