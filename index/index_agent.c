/* SPDX-License-Identifier: MIT */
/*
 * index_agent.c - the agent's half of the hold protocol (the proof is at
 * the top of index/kvp_index.h, with the reader's half): candidates are
 * taken under CHECK, one fence, one scan of every hold slot and live lease
 * decides which are held.  And what an attaching agent undoes of its
 * predecessor's state words.  Tier thread only.
 */
#include "index/index_int.h"
#include "shm/kvp_lease.h"
#include "shm/kvp_slot.h"
#include "shm/kvp_assert.h"

static void
kvp__holds_scan_chunk(struct kvp_seg *s, struct kvp_cand *c, unsigned n)
{
	enum {
		HBITS = 10,
		HSIZE = 1u << HBITS
	};
	int16_t table[HSIZE];
	uint32_t i, k;

	memset(table, 0xff, sizeof(table));
	for (k = 0; k < n; k++) {
		uint32_t b = (uint32_t)(c[k].slot * 0x9e3779b1u) >>
			     (32 - HBITS);
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

			if (KVP_LS_STATE(w) == KVP_LS_FREE)
				continue;
			/* relaxed: published by the LIVE release */
			if (KVP_LS_STATE(w) == KVP_LS_LIVE &&
			    kvp_load_relaxed(&ls->ls_expiry) <= now)
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
		/* the reader's mark, raised before its fence; our fence
		 * (step 2) precedes this load (shm/kvp_slot.h, S3) */
		uint32_t hwm = kvp_slot_hold_hwm_acquire(s, i);
		const kvp_aword_t *hs = kvp_slot_holds(s, i);

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
				/* any hold on the slot, whatever its
				 * generation: a value may change location
				 * (demotion, promotion) under one generation,
				 * and a hold whose generation is stale is being
				 * dropped */
				if (x->slot == slot)
					x->held = true;
				b = (b + 1) & (HSIZE - 1);
			}
		}
	}
}

/* Steps 2-3: mark candidates held if any client's hold slot or a live
 * lease names them.  Any number of candidates (an SSD segment's reclaim
 * may bring thousands): scanned in chunks that keep the lookup table half
 * empty. */
void
kvp_ix_holds_scan_agent(struct kvp_seg *s, struct kvp_cand *c, unsigned n)
{
	unsigned k;

	/* full fence: step 2, the CHECK stores (step 1) before every hold
	 * slot load below; pairs with the reader's fence in kvp_ix_hold */
	kvp_fence_full();
	for (k = 0; k < n; k += 512u)
		kvp__holds_scan_chunk(s, c + k, n - k < 512u ? n - k : 512u);
}

/* Step 1: take slot i (state word w) under CHECK and record it as a
 * candidate.  Returns 1 if taken, 0 if the slot changed meanwhile (or is
 * not READY or DELETED without flags). */
unsigned
kvp_ix_cand_take_agent(struct kvp_seg *s, uint64_t i, uint64_t w,
		       struct kvp_cand *c)
{
	if (!kvp_ix_check_take(s, i, w))
		return 0;
	kvp_crashpoint(A_EVICT_CHECK);
	/* ours: the CAS took a flagless READY or DELETED word (I5) */
	KVP_ASSERT(i < s->g.g_index_slots && !KVP_IX_FLAGS(w), "I5");
	c->slot = i;
	c->word = w | KVP_IX_CHECK;
	c->held = false;
	return 1;
}

/* Undo CHECK flags an earlier agent left (it made no decision).  With
 * keep_ssd (an agent with an SSD tier), an entry whose value is not in
 * DRAM keeps its flag: the earlier agent may have died giving back its
 * segment, and whether the segment is still there is known only after
 * the SSD tier's recovery (kvp_recover_lost_agent then removes the entry
 * or clears the flag).  Undone at once, such an entry was READY for the
 * ~50 ms of the recovery with nothing to read: a reader that held it
 * then got FAILED for a value that was only being evicted (stress_pool
 * chaos).  Readers that find the flag wait for the verdict, as they do
 * for an eviction's. */
unsigned
kvp_ix_clear_stale_agent(struct kvp_seg *s, bool keep_ssd)
{
	uint64_t i;
	unsigned n = 0;

	for (i = 0; i < s->g.g_index_slots; i++) {
		/* acquire: pairs with the CAS that set the flag */
		uint64_t w = kvp_load_acquire(&s->meta[i]);

		/* relaxed: the location is stable under CHECK (no agent
		 * moves it: this is the agent, before its threads) */
		if ((w & KVP_IX_CHECK) && keep_ssd &&
		    KVP_LOC_TIER(kvp_load_relaxed(&s->entries[i].e_loc)) !=
			    KVP_TIER_DRAM)
			continue;
		/* nobody else sets or clears CHECK (I5) */
		if ((w & KVP_IX_CHECK) && kvp_ix_check_release(s, i, w))
			n++;
		/* a claim the previous agent made (SSD recovery) and never
		 * finished: owner 0xffff is the agent's, and it is dead */
		else if (kvp_ix_reap_owner(s, i, w, KVP_IX_OWNER_AGENT))
			n++;
	}
	return n;
}
