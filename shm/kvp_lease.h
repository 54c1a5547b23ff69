/* SPDX-License-Identifier: MIT */
/*
 * kvp_lease.h - timed leases: a lease pins an index entry (no eviction,
 * relocation or reclaim of its SSD segment) until its expiry or its
 * release, whoever holds or does not hold it, for readers that cannot
 * take a hold (a remote reader, a NIC doing DMA).
 *
 * Each lease slot (struct kvp_lease_slot, shm/kvp_shm.h) has one state
 * word, ls_state = [gen:32][owner:16][0:8][state:8]:
 *
 *   FREE(g) -> RESERVED(g+1, taker)   the taker (kvp_ls_reserve), while it
 *                                     holds the entry (a hold)
 *   RESERVED(g) -> LIVE(g)            the taker, after ls_slot, ls_owner
 *                                     and ls_expiry (kvp_ls_publish)
 *   LIVE(g) -> FREE(g+1)              the taker's release (kvp_ls_release)
 *                                     or the sweep after ls_expiry
 *   RESERVED(g, dead taker) -> FREE(g+1)   the reaper or the sweep
 *                                     (kvp_ls_free_agent)
 *
 * This file owns these words: every write is a function here, and
 * tests/structure/test_structure.sh fails on a write anywhere else.
 *
 * Invariants and proof sketch:
 *  L1. A lease protects its entry exactly like a hold while it is LIVE
 *      and not expired: the taker publishes LIVE (release) while its own
 *      hold on the entry is still up, and drops the hold after; the
 *      agent's hold scan (index/index_agent.c) reads every lease word
 *      (acquire) after its fence, so a scan that misses the hold sees the
 *      lease (the hold protocol's proof, index/kvp_index.h).
 *  L2. Every transition is one CAS or store from a word its writer alone
 *      may leave: FREE is left by one CAS (one taker), RESERVED only by
 *      its taker (named in the word, so a taker that dies before writing
 *      anything else is still known and freed), LIVE by a CAS from the
 *      exact LIVE(g) word, so a late release of generation g never frees
 *      the lease a later taker holds (g + 1 after every free).
 *  L3. Nothing leaks: a RESERVED word whose taker is dead is freed by the
 *      reaper (that client) or the sweep (any dead taker); a LIVE one
 *      expires.  Freeing is idempotent (a CAS from the exact word).
 */
#ifndef KVP_LEASE_H
#define KVP_LEASE_H

#include "shm/kvp_shm.h"

enum kvp_ls_state {
	KVP_LS_FREE = 0,
	KVP_LS_LIVE = 1,
	KVP_LS_RESERVED = 2, /* being filled in by its taker */
};
/* A RESERVED word names its taker (client slot + 1) in the word itself,
 * so a taker that dies before writing anything else is still known. */
#define KVP_LS_WORD(gen, owner, st)          \
	(((uint64_t)(uint32_t)(gen) << 32) | \
	 ((uint64_t)((owner)&0xffff) << 16) | (st))
#define KVP_LS_GEN(w) ((uint32_t)((w) >> 32))
#define KVP_LS_OWNER(w) ((uint32_t)(((w) >> 16) & 0xffff))
#define KVP_LS_STATE(w) ((unsigned)((w)&0xff))

/* FREE(w) -> RESERVED(gen, taker): the slot is the taker's to fill in.
 * True with *gen the lease's generation. */
KVP_INLINE bool
kvp_ls_reserve(struct kvp_lease_slot *ls, uint64_t w, uint32_t taker,
	       uint32_t *gen)
{
	*gen = KVP_LS_GEN(w) + 1;
	/* full CAS: the lease slot is ours to fill in; the word names us,
	 * so the reaper can free it if we die now (L2) */
	return KVP_LS_STATE(w) == KVP_LS_FREE &&
	       kvp_cas(&ls->ls_state, w,
		       KVP_LS_WORD(*gen, taker, KVP_LS_RESERVED));
}

/* RESERVED(gen) -> LIVE(gen), its fields first (the taker, still holding
 * the entry: L1). */
KVP_INLINE void
kvp_ls_publish(struct kvp_lease_slot *ls, uint32_t gen, uint64_t slot,
	       uint32_t taker, uint64_t expiry)
{
	/* relaxed: published below */
	kvp_store_relaxed(&ls->ls_slot, slot);
	kvp_store_relaxed(&ls->ls_owner, taker);
	kvp_store_relaxed(&ls->ls_expiry, expiry);
	/* release: the fields before LIVE; the agent's hold scan acquires
	 * it; our hold is still up, so the value is safe until the lease is
	 * visible */
	kvp_store_release(&ls->ls_state, KVP_LS_WORD(gen, 0, KVP_LS_LIVE));
}

/* LIVE(gen) -> FREE(gen + 1), of this generation only (the taker). */
KVP_INLINE void
kvp_ls_release(struct kvp_lease_slot *ls, uint32_t gen)
{
	/* full CAS: only the lease of this generation; pairs with the
	 * agent's acquire in its hold scan */
	kvp_cas(&ls->ls_state, KVP_LS_WORD(gen, 0, KVP_LS_LIVE),
		KVP_LS_WORD(gen + 1, 0, KVP_LS_FREE));
}

/* The reaper or the sweep: a lease whose word is w (expired LIVE, or
 * RESERVED by a dead taker) -> FREE(gen + 1).  True if it freed it. */
KVP_INLINE bool
kvp_ls_free_agent(struct kvp_lease_slot *ls, uint64_t w)
{
	/* full CAS: the taker may release it at the same moment; another
	 * sweep may race (L3) */
	return kvp_cas(&ls->ls_state, w,
		       KVP_LS_WORD(KVP_LS_GEN(w) + 1, 0, KVP_LS_FREE));
}

#endif /* KVP_LEASE_H */
