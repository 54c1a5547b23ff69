/* SPDX-License-Identifier: MIT */
/*
 * victim.c - the verdict on one victim of the CHECK protocol (steps 4 of
 * the proof in index/kvp_index.h): a held one is released; an unheld one
 * is relocated (DRAM freed, the value now SSD-resident: its SSD copy was
 * written by a demotion) or removed from the index (its SSD copy gets a
 * tombstone, its DRAM is freed, its key goes into the ghost set,
 * ghost.c).  The eviction policy (evict.c) chooses victims; this file is
 * what every policy shares.
 */
#include "agent/tier_int.h"

/* A held candidate: clear CHECK; readers may trust their holds again. */
void
kvp__release_check(struct kvp_seg *s, const struct kvp_cand *c)
{
	KVP_ASSERT(c->word & KVP_IX_CHECK, "I5");  /* a CHECK this agent set */
	kvp_ix_check_release(s, c->slot, c->word); /* step 4, held: back off */
	kvp_actr_add(s->hdr, KVP_ACTR_EVICT_BACKOFF, 1); /* stat */
}

/*
 * An unheld candidate (step 4).  'why' says what the room is for:
 * KVP_ACTR_EVICT (DRAM) relocates a value that has an SSD copy (DRAM
 * freed, the entry now SSD-resident, same generation: location changes
 * are fenced by holds on the slot); anything else, and every deleted
 * value, empties the slot (the SSD copy gets a tombstone).  Returns units
 * of DRAM freed.
 */
uint64_t
kvp__remove_agent(struct kvp_agent *a, const struct kvp_cand *c,
		  enum kvp_actr why)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_shm_header *h = s->hdr;
	struct kvp_entry *e = &s->entries[c->slot];
	uint64_t w = c->word, i = c->slot, loc, len, ssd, gh;
	bool deleted = KVP_IX_STATE(w) == KVP_IX_DELETED;

	/* only a candidate the hold scan found unheld goes (I4), under the
	 * CHECK this agent set (I5); a deleted one once nothing on disk can
	 * bring it back (I20: kvp_tier_may_forget_agent) */
	KVP_ASSERT(!c->held && (w & KVP_IX_CHECK), "I4, I5");
	KVP_ASSERT(!deleted || !a->tier ||
			   a->tier->tombed[i] == KVP_TOMB_WRITTEN ||
			   (a->tier->tombed[i] == KVP_TOMB_NONE &&
			    !kvp_load_relaxed(&e->e_ssd)),
		   "I20");
	/* relaxed: stable under CHECK */
	loc = kvp_load_relaxed(&e->e_loc);
	len = kvp_load_relaxed(&e->e_len);
	ssd = kvp_load_relaxed(&e->e_ssd);
	if (!deleted && why == KVP_ACTR_EVICT && ssd &&
	    KVP_LOC_TIER(loc) == KVP_TIER_DRAM) {
		/* published by the relocation (clears CHECK) */
		kvp_ix_entry_ssd_only_agent(s, i);
		kvp_ix_relocate(s, i, w); /* readers see the SSD location now */
		kvp_crashpoint(A_DEMOTE_SWITCHED);
		return kvp_dram_free_agent(a, (uint32_t)KVP_LOC_VAL(loc), i,
					   KVP_IX_GEN(w));
	}
	/* the key is read for the tombstone while the slot is still ours */
	if (ssd && a->tier)
		kvp_tier_forget_agent(a, i, ssd, len);
	/* ... and for the ghost set (stable under our CHECK) */
	gh = deleted ? 0 : kvp_ghost_key_agent(a, i);
	/* the value is gone for new readers (I6: gen + 1); its unit of the
	 * index count goes back (nobody else moves a slot under CHECK, so
	 * the removal succeeds) */
	if (kvp_ix_remove(s, i, w))
		kvp_ix_count_give(s);
	/* an evicted key is remembered (ghost.c: one put again soon was
	 * evicted too early) */
	if (!deleted)
		kvp_ghost_evicted_agent(a, i, gh);
	if (a->tier)
		a->tier->tombed[i] =
			KVP_TOMB_NONE; /* for the slot's next key */
	/* stats: agent threads add atomically */
	kvp_actr_add(h, deleted ? KVP_ACTR_DELETE_RECLAIM : why, 1);
	if (!deleted)
		kvp_actr_add(h, KVP_ACTR_EVICT_BYTES, len);
	/* index pressure dropped a value the SSD tier still held: said
	 * apart (kvpool stat warns: --index-entries is too small) */
	if (!deleted && why == KVP_ACTR_EVICT_INDEX && ssd)
		kvp_actr_add(h, KVP_ACTR_EVICT_INDEX_SSD, 1);
	if (KVP_LOC_TIER(loc) != KVP_TIER_DRAM)
		return 0;
	kvp_crashpoint(A_EVICT_FREED);
	/* I9: only runs tagged (i, gen) are freed */
	return kvp_dram_free_agent(a, (uint32_t)KVP_LOC_VAL(loc), i,
				   KVP_IX_GEN(w));
}
