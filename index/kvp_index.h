/* SPDX-License-Identifier: MIT */
/*
 * kvp_index.h - the lock-free key index and the hold protocol.
 *
 * Shape: 2-choice bucketed hashing.  A key hashes to two buckets of eight
 * slots; it lives in one of those 16 slots or nowhere.  No chains and no
 * tombstones, so a lookup reads at most two cache lines of state words
 * and a removed slot is immediately reusable.
 *
 * Each slot has one 64-bit state word in the meta array:
 *
 *   [gen:24][fp:16][owner:16][flags:4][state:4]
 *
 * gen   bumped whenever the slot's contents or location change meaning,
 *       so (slot, gen) names one value at one location (ABA guard).
 * fp    16 bits of the key hash: most mismatches never touch the entry.
 * owner client slot + 1 of the claimant/putter (RESERVED/CLAIM/PENDING).
 * flags KVP_IX_CHECK: the agent is deciding whether the slot is held.
 *
 * Lifecycle: EMPTY -> RESERVED (claimant writes key) -> CLAIM (visible to
 * other claimants of the same key) -> PENDING (the single winner copies
 * bytes) -> READY (published) -> DELETED (client delete) -> EMPTY (agent,
 * once unheld).  The agent also moves READY -> EMPTY (eviction).
 *
 * This file owns the state word: every transition is one function here,
 * and no other code writes a state word (the agent-only halves live in
 * index/index_agent.c, under the same proofs):
 *
 *   kvp_ix_claim        EMPTY -> RESERVED -> CLAIM -> PENDING, or a kill
 *                       CLAIM(g) -> EMPTY(g+1) of a later claimant
 *   kvp_ix_abort        PENDING(g) -> EMPTY(g+1)        (its owner)
 *   kvp_ix_publish      PENDING(g) -> READY(g)          (its owner)
 *   kvp_ix_delete       READY(g) -> DELETED(g)          (a client, or the
 *                                                       agent for a strict
 *                                                       delete)
 *   kvp_ix_check_take   READY|DELETED(g) -> +CHECK      (agent, step 1)
 *   kvp_ix_check_release  +CHECK -> -CHECK              (agent, held)
 *   kvp_ix_relocate     +CHECK -> -CHECK, the entry's new location
 *                       published, same generation     (agent, unheld)
 *   kvp_ix_remove       (+CHECK) -> EMPTY(g+1)          (agent, unheld)
 *   kvp_ix_reap_owner   RESERVED/CLAIM/PENDING(g) of a dead owner ->
 *                       EMPTY(g+1)                      (reaper, attach)
 *
 * It owns the fields of an index entry (struct kvp_entry) as well: the
 * key, written by the claimant while RESERVED (kvp_ix_key_write); the
 * value's length, location and first run, by the putter while PENDING
 * (kvp_ix_entry_put); a new location or SSD copy by the agent while the
 * slot is under its CHECK, busy in its tier thread, or at attach before
 * any of its threads runs (kvp_ix_entry_*_agent); each published by a
 * release on the state word (a promotion: by e_loc's own release).  The
 * use word (e_use) is a hint any user of the value writes
 * (kvp_ix_use_touch): never trusted for safety.
 *
 * It also owns the index entry count (h_ix_used) and each client's word
 * about its share of it (cs_ix_resv, cs_ix_slot): kvp_ix_count_take and
 * _give, kvp_ix_count_say (a new kind), kvp_ix_count_name_slot, and the
 * agent's kvp_ix_count_correct_agent (docs/design.md, "The index limit").
 *
 * Correctness sketch (insert-if-absent, "exactly one copies"):
 *  1. A claimant stores CLAIM (all key fields written before, in RESERVED)
 *     and issues a full fence before it scans the 16 candidate slots.
 *  2. For any two concurrent claimants X, Y of one key, the store;fence;
 *     load pattern guarantees that at least one of them sees the other's
 *     CLAIM (Dekker).  A slot seen as RESERVED has not stored CLAIM yet,
 *     so that claimant's later scan sees us.
 *  3. Tie rule by candidate position p (bucket 1 slots 0..7, then bucket
 *     2 slots 0..7): a claimant that sees a same-key CLAIM at an earlier
 *     position, or any same-key PENDING/READY, loses.  One that sees a
 *     same-key CLAIM at a later position kills it with a CAS CLAIM(g) ->
 *     EMPTY(g+1); if that CAS fails because the other already went
 *     PENDING, it loses.
 *  4. The winner's last step is CAS CLAIM(g) -> PENDING(g); it fails iff
 *     someone killed it.  So of two claimants both may lose only if a
 *     third same-key entry is live, and both can never win: if X sees Y
 *     and X < Y, X kills Y or Y is already PENDING (then X loses); if X
 *     does not see Y, Y sees X and X < Y, so Y loses.
 *
 * Hold protocol (hazard slots, DESIGN-NOTES 2b).  Both halves:
 *  reader (kvp_ix_hold, below): store (slot, gen) into its own hold slot;
 *          full fence; reload the state word; valid iff READY(gen) without
 *          CHECK.  Dropping the hold is a release store of 0 after the
 *          last read of the held bytes.
 *  agent (index/index_agent.c): kvp_ix_check_take on every victim (CAS
 *          READY(g) -> READY|CHECK(g)); one full fence; kvp_ix_holds_scan
 *          loads every used hold slot (acquire) and every live lease;
 *          held -> kvp_ix_check_release; unheld -> change the location
 *          (kvp_ix_relocate) or free the value (kvp_ix_remove).
 * Proof sketch:
 *  1. Store;fence;load on both sides (Dekker): either the reader's reload
 *     sees CHECK, or the agent's scan sees the hold.  Never neither.
 *  2. A reader that sees CHECK does not trust its hold: it waits for the
 *     agent's verdict (the flag is cleared: the value stays; or the slot
 *     moved on: it looks again).  A reader that sees READY(g) without
 *     CHECK after its fence is seen by every later scan, so no CHECK
 *     verdict can remove or move the value while the hold is stored.
 *  3. The agent that sees a hold (any generation of the slot: a value
 *     changes tier under one generation) backs off; one that sees none
 *     knows no reader validated a hold after its CHECK CAS (1), and none
 *     can from now on (2): it may change the value's location or free it.
 *  4. The drop's release pairs with the scan's acquire: a scan that sees
 *     the slot empty sees every read of the held bytes done.
 *  5. The scan reads a client's hold slots below its high-water mark
 *     (cs_hold_hwm) only; step 1 holds for those too: the reader raises
 *     the mark before its hold store and fence, the agent loads it
 *     (acquire) after its fence, and the mark is lowered (release) only
 *     over clear slots.  The mark's protocol and proof (S3) are in
 *     shm/kvp_slot.h, which owns the hold slots and the mark (this file
 *     owns the hold word's format and its take and drop).
 *  Holds belong to client slots, so the reaper clears a dead client's
 *  holds idempotently; CHECK is only ever set by the agent's tier thread
 *  and never outlives one of its passes, so an attaching agent clears
 *  every CHECK its predecessor left (I5).
 */
#ifndef KVP_INDEX_H
#define KVP_INDEX_H

#include "shm/kvp_shm.h"

/* states */
#define KVP_IX_EMPTY 0u
#define KVP_IX_RESERVED 1u
#define KVP_IX_CLAIM 2u
#define KVP_IX_PENDING 3u
#define KVP_IX_READY 4u
#define KVP_IX_DELETED 5u
#define KVP_IX_CHECK 0x10u

#define KVP_IX_STATE(w) ((unsigned)((w)&0xfu))
#define KVP_IX_FLAGS(w) ((unsigned)((w)&0xf0u))
#define KVP_IX_OWNER(w) ((unsigned)(((w) >> 8) & 0xffffu))
#define KVP_IX_FP(w) ((unsigned)(((w) >> 24) & 0xffffu))
#define KVP_IX_GEN(w) ((uint32_t)((w) >> 40))
#define KVP_IX_GEN_MASK 0xffffffu
#define KVP_IX_WORD(gen, fp, owner, st)              \
	((((uint64_t)(gen)&KVP_IX_GEN_MASK) << 40) | \
	 ((uint64_t)((fp)&0xffffu) << 24) |          \
	 ((uint64_t)((owner)&0xffffu) << 8) | (uint64_t)(st))
#define KVP_IX_NEXTGEN(w) (((uint32_t)KVP_IX_GEN(w) + 1) & KVP_IX_GEN_MASK)
#define KVP_IX_OWNER_AGENT 0xffffu /* owner field of the agent's claims */

/* A hold slot value: (gen << 40) | [pin:1] | (slot + 1); 0 = free.  The
 * pin bit marks holds taken by kvp_batch_lookup_pin (for the reaper's
 * count); it does not change what a hold protects. */
#define KVP_HOLD_PIN (1ull << 39)
#define KVP_HOLD_MAKE(slot, gen) \
	(((uint64_t)(gen) << 40) | ((uint64_t)(slot) + 1))
#define KVP_HOLD_SLOT(h) (((h) & ((1ull << 39) - 1)) - 1)
#define KVP_HOLD_GEN(h) ((uint32_t)((h) >> 40))

#define KVP_IX_WAYS 8u
#define KVP_IX_CANDS 16u

/* Namespace id: a 64-bit hash of the name (never 0). */
KVP_INLINE uint64_t
kvp_ns_id(const char *ns)
{
	uint64_t id = kvp_hash(0x6b76706f6f6c6e73ull, ns, strlen(ns));

	return id ? id : 1;
}

KVP_INLINE uint64_t
kvp_key_hash(uint64_t ns_id, const void *key, size_t klen)
{
	return kvp_hash(ns_id, key, klen);
}

/* The 16 candidate slots of a hash, in tie-break order. */
KVP_INLINE uint64_t
kvp_ix_cand(const struct kvp_seg *s, uint64_t hash, unsigned pos)
{
	uint64_t b1 = hash & s->bucket_mask;
	uint64_t b2 = kvp__fold(hash, 0xff51afd7ed558ccdull) & s->bucket_mask;

	if (b2 == b1)
		b2 = b1 ^ 1;
	return ((pos < KVP_IX_WAYS ? b1 : b2) * KVP_IX_WAYS) +
	       (pos % KVP_IX_WAYS);
}

KVP_INLINE unsigned
kvp_ix_fp(uint64_t hash)
{
	return (unsigned)(hash >> 48);
}

/*
 * Compare the key stored in slot i with (ns, key, klen).  Relaxed loads:
 * the caller validates the slot's state word before and after, so a torn
 * comparison is discarded.
 */
KVP_INLINE bool
kvp_ix_key_eq(const struct kvp_seg *s, uint64_t i, uint64_t ns, const void *key,
	      size_t klen)
{
	const struct kvp_entry *e = &s->entries[i];
	const unsigned char *k = (const unsigned char *)key;
	size_t off;

	/* relaxed: validated by the state word re-read in the caller */
	if (kvp_load_relaxed(&e->e_klen) != klen ||
	    kvp_load_relaxed(&e->e_ns) != ns)
		return false;
	for (off = 0; off + 8 <= klen; off += 8) {
		uint64_t w;
		memcpy(&w, k + off, 8);
		if (kvp_load_relaxed(&e->e_key[off / 8]) != w)
			return false;
	}
	if (off < klen) {
		uint64_t w = 0;
		memcpy(&w, k + off, klen - off);
		if (kvp_load_relaxed(&e->e_key[off / 8]) != w)
			return false;
	}
	return true;
}

/* Write the key fields of a slot this process owns (RESERVED). */
KVP_INLINE void
kvp_ix_key_write(struct kvp_seg *s, uint64_t i, uint64_t ns, uint64_t hash,
		 const void *key, size_t klen)
{
	struct kvp_entry *e = &s->entries[i];
	const unsigned char *k = (const unsigned char *)key;
	size_t off;

	/* relaxed: published by the CLAIM store-release that follows */
	kvp_store_relaxed(&e->e_ns, ns);
	kvp_store_relaxed(&e->e_hash, hash);
	kvp_store_relaxed(&e->e_klen, klen);
	kvp_store_relaxed(&e->e_loc, 0);
	kvp_store_relaxed(&e->e_len, 0);
	kvp_store_relaxed(&e->e_use, 0); /* the putter sets it */
	for (off = 0; off < 256; off += 8) {
		uint64_t w = 0;
		if (off < klen)
			memcpy(&w, k + off, klen - off >= 8 ? 8 : klen - off);
		kvp_store_relaxed(&e->e_key[off / 8], w);
	}
}

/* ---- an entry's fields (see the top of the file) ---- */

/* The putter, while its slot i is PENDING: the value's length, its DRAM
 * location (the chain's first page and that run's units), no SSD copy
 * (the slot's previous value may have had one, and an eviction would
 * otherwise point this key at that record), and its use word. */
KVP_INLINE void
kvp_ix_entry_put(struct kvp_seg *s, uint64_t i, uint64_t len, uint64_t first,
		 uint64_t run, uint64_t use)
{
	struct kvp_entry *e = &s->entries[i];

	/* relaxed: published by the READY CAS in kvp_ix_publish */
	kvp_store_relaxed(&e->e_len, len);
	kvp_store_relaxed(&e->e_loc, KVP_LOC_MAKE(KVP_TIER_DRAM, first));
	kvp_store_relaxed(&e->e_run, run);
	kvp_store_relaxed(&e->e_ssd, 0);
	kvp_store_relaxed(&e->e_use, use);
}

/*
 * A use of slot i (a hit, a probe, a pin, a lease) at tick: the one
 * shared word a hit writes, and only when it changes, so readers of a
 * hot value do not bounce its line.  The depth and the CONT bit the
 * putter set are kept.  Not ordered with anything: a hint for the
 * eviction policy (kvp_shm.h, "The use word").
 */
KVP_INLINE void
kvp_ix_use_touch(struct kvp_seg *s, uint64_t i, uint64_t tick)
{
	kvp_aword_t *u = &s->entries[i].e_use;
	/* relaxed: a hint; a racing reader writes the same tick */
	uint64_t old = kvp_load_relaxed(u), use;

	use = (tick << KVP_USE_DEPTH_BITS) | (old & KVP_USE_KEEP) | KVP_USE_HIT;
	if (old != use)
		/* relaxed: a hint (above) */
		kvp_store_relaxed(u, use);
}

/* Agent, a promotion of slot i done (the slot busy in its tier thread):
 * the value is in DRAM at run chain 'first' (that run: 'run' units). */
KVP_INLINE void
kvp_ix_entry_dram_agent(struct kvp_seg *s, uint64_t i, uint64_t first,
			uint64_t run)
{
	struct kvp_entry *e = &s->entries[i];

	/* relaxed: published by the e_loc release below */
	kvp_store_relaxed(&e->e_run, run);
	/* release: the DRAM copy is complete before anyone reads this
	 * location */
	kvp_store_release(&e->e_loc, KVP_LOC_MAKE(KVP_TIER_DRAM, first));
}

/* Agent, slot i under its CHECK: the value is on SSD only now (its DRAM
 * goes); published by kvp_ix_relocate. */
KVP_INLINE void
kvp_ix_entry_ssd_only_agent(struct kvp_seg *s, uint64_t i)
{
	struct kvp_entry *e = &s->entries[i];

	/* relaxed: published by the relocation (same generation) */
	kvp_store_relaxed(&e->e_loc, KVP_LOC_MAKE(KVP_TIER_SSD, 0));
	kvp_store_relaxed(&e->e_run, 0);
}

/* Agent, rebuilding the page map (allocator lock held, tier thread):
 * the first run of slot i's chain has 'run' units (the copy fast path). */
KVP_INLINE void
kvp_ix_entry_run_agent(struct kvp_seg *s, uint64_t i, uint64_t run)
{
	/* relaxed: ours (the tier thread changes locations) */
	kvp_store_relaxed(&s->entries[i].e_run, run);
}

/* Agent: slot i's SSD copy is at loc now (0: none), written by the tier
 * thread (or at attach, before it runs); read only for SSD-resident
 * entries, which a DRAM one becomes through a later CHECK CAS, or under
 * CHECK, published by the relocation. */
KVP_INLINE void
kvp_ix_entry_ssd_agent(struct kvp_seg *s, uint64_t i, uint64_t loc)
{
	/* relaxed: published by a later CAS of the state word */
	kvp_store_relaxed(&s->entries[i].e_ssd, loc);
}

/* Agent, recovery at attach (no tier thread yet): slot i, claimed by the
 * agent (PENDING), holds a value of vlen bytes read back from SSD at
 * loc; not used since this start (oldest of all, depth unknown). */
KVP_INLINE void
kvp_ix_entry_recovered_agent(struct kvp_seg *s, uint64_t i, uint64_t vlen,
			     uint64_t loc)
{
	struct kvp_entry *e = &s->entries[i];

	/* relaxed: published by the READY CAS */
	kvp_store_relaxed(&e->e_len, vlen);
	kvp_store_relaxed(&e->e_ssd, loc);
	kvp_store_relaxed(&e->e_run, 0);
	kvp_store_relaxed(&e->e_use, KVP_USE_MAKE(0, 0));
	kvp_store_relaxed(&e->e_loc, KVP_LOC_MAKE(KVP_TIER_SSD, 0));
}

/*
 * Find the slot holding (ns, key) in one of the states in 'mask' (a bit
 * per state).  Returns the slot and its validated state word in *wout, or
 * -ENOENT.  No lock, no syscall, no write.
 */
KVP_INLINE int64_t
kvp_ix_find(const struct kvp_seg *s, uint64_t ns, uint64_t hash,
	    const void *key, size_t klen, unsigned mask, uint64_t *wout)
{
	unsigned fp = kvp_ix_fp(hash), pos;

	for (pos = 0; pos < KVP_IX_CANDS; pos++) {
		uint64_t i = kvp_ix_cand(s, hash, pos), w, w2;
		int tries = 0;
again:
		/* acquire: pairs with the release that published the slot's
		 * key fields (CLAIM store or a CAS); the key reads follow */
		w = kvp_load_acquire(&s->meta[i]);
		if (!(mask & (1u << KVP_IX_STATE(w))) || KVP_IX_FP(w) != fp)
			continue;
		/* the key spans three lines of the entry: fetch them in
		 * parallel rather than one miss after another */
		__builtin_prefetch((const char *)&s->entries[i] + 64);
		__builtin_prefetch((const char *)&s->entries[i] + 128);
		if (!kvp_ix_key_eq(s, i, ns, key, klen)) {
			/* acquire: orders the key loads before the re-check */
			w2 = kvp_load_acquire(&s->meta[i]);
			if (w2 != w && ++tries < 64)
				goto again;
			continue;
		}
		/* acquire: a changed word means the key may be torn: retry */
		w2 = kvp_load_acquire(&s->meta[i]);
		if (KVP_IX_GEN(w2) != KVP_IX_GEN(w) ||
		    KVP_IX_STATE(w2) == KVP_IX_EMPTY ||
		    KVP_IX_STATE(w2) == KVP_IX_RESERVED) {
			if (++tries < 64)
				goto again;
			continue;
		}
		if (!(mask & (1u << KVP_IX_STATE(w2))))
			continue;
		*wout = w2;
		return (int64_t)i;
	}
	return -ENOENT;
}

#define KVP_IX_M(st) (1u << (st))
#define KVP_IX_LIVE_MASK                                     \
	(KVP_IX_M(KVP_IX_CLAIM) | KVP_IX_M(KVP_IX_PENDING) | \
	 KVP_IX_M(KVP_IX_READY))

/*
 * The slot a claim of hash would reserve now (the first EMPTY slot of the
 * emptier bucket, as kvp_ix_claim chooses), or -1 if both are full.  A
 * hint for prefetching (recovery's inserts): the claim decides.
 */
KVP_INLINE int64_t
kvp_ix_claim_hint(const struct kvp_seg *s, uint64_t hash)
{
	unsigned pos, free1 = 0, free2 = 0;
	int64_t first1 = -1, first2 = -1;

	for (pos = 0; pos < KVP_IX_CANDS; pos++) {
		uint64_t i = kvp_ix_cand(s, hash, pos);
		/* relaxed: a hint */
		uint64_t w = kvp_load_relaxed(&s->meta[i]);

		if (KVP_IX_STATE(w) != KVP_IX_EMPTY)
			continue;
		if (pos < KVP_IX_WAYS && !free1++)
			first1 = (int64_t)i;
		else if (pos >= KVP_IX_WAYS && !free2++)
			first2 = (int64_t)i;
	}
	return free1 >= free2 ? first1 : first2;
}

/*
 * Insert-if-absent, step 1..4 of the sketch above.  On success the slot is
 * PENDING, owned by client 'cslot', and its index is returned with its
 * state word in *wout.  -EEXIST: the key is live (or being put by someone
 * who won); -ENOSPC: both buckets are full.  (The entry limit is kept by
 * the count above, which the putter takes once it holds its slot.)
 */
KVP_INLINE int64_t
kvp_ix_claim(struct kvp_seg *s, uint32_t cslot, uint64_t ns, uint64_t hash,
	     const void *key, size_t klen, uint64_t *wout)
{
	unsigned fp = kvp_ix_fp(hash), owner = cslot + 1, pos, mypos = 0;
	uint64_t w, me = 0, mine = 0;
	int attempts;

	if (kvp_ix_find(s, ns, hash, key, klen, KVP_IX_LIVE_MASK, &w) >= 0)
		return -EEXIST;

	/* RESERVE an EMPTY slot in the emptier bucket. */
	for (attempts = 0;; attempts++) {
		unsigned free1 = 0, free2 = 0, best = KVP_IX_CANDS;

		for (pos = 0; pos < KVP_IX_CANDS; pos++) {
			/* relaxed: a hint; the CAS below decides */
			w = kvp_load_relaxed(
				&s->meta[kvp_ix_cand(s, hash, pos)]);
			if (KVP_IX_STATE(w) != KVP_IX_EMPTY)
				continue;
			if (pos < KVP_IX_WAYS)
				free1++;
			else
				free2++;
		}
		if (free1 + free2 == 0 || attempts > 64)
			return -ENOSPC;
		for (pos = free1 >= free2 ? 0 : KVP_IX_WAYS; pos < KVP_IX_CANDS;
		     pos++) {
			uint64_t i = kvp_ix_cand(s, hash, pos);
			/* relaxed: the CAS below decides */
			w = kvp_load_relaxed(&s->meta[i]);
			if (KVP_IX_STATE(w) != KVP_IX_EMPTY)
				continue;
			/* full CAS: the slot is ours; key writes follow */
			if (kvp_cas(&s->meta[i], w,
				    KVP_IX_WORD(KVP_IX_GEN(w), fp, owner,
						KVP_IX_RESERVED))) {
				best = pos;
				me = i;
				mine = KVP_IX_GEN(w);
				break;
			}
		}
		if (best < KVP_IX_CANDS) {
			mypos = best;
			break;
		}
	}

	kvp_ix_key_write(s, me, ns, hash, key, klen);
	/* release: publishes the key fields to claimants and readers that
	 * acquire-load this word */
	kvp_store_release(&s->meta[me],
			  KVP_IX_WORD(mine, fp, owner, KVP_IX_CLAIM));
	/* full fence: our CLAIM store before our loads of the other slots
	 * (the store-load pattern of step 2: pairs with the same fence of a
	 * concurrent claimant) */
	kvp_fence_full();

	for (pos = 0; pos < KVP_IX_CANDS; pos++) {
		uint64_t i = kvp_ix_cand(s, hash, pos), w2;

		if (i == me)
			continue;
rescan:
		/* acquire: pairs with the other claimant's CLAIM release */
		w = kvp_load_acquire(&s->meta[i]);
		if (!(KVP_IX_LIVE_MASK & KVP_IX_M(KVP_IX_STATE(w))) ||
		    KVP_IX_FP(w) != fp)
			continue;
		if (!kvp_ix_key_eq(s, i, ns, key, klen))
			continue;
		/* acquire: validates the key comparison */
		w2 = kvp_load_acquire(&s->meta[i]);
		if (w2 != w)
			goto rescan;
		if (KVP_IX_STATE(w) == KVP_IX_CLAIM && pos > mypos) {
			/* full CAS: kill the later claimant (step 3) */
			if (kvp_cas(&s->meta[i], w,
				    KVP_IX_WORD(KVP_IX_NEXTGEN(w), 0, 0,
						KVP_IX_EMPTY)))
				continue;
			goto rescan;
		}
		/* we lose: give our slot back unless someone killed us */
		kvp_cas(&s->meta[me],
			KVP_IX_WORD(mine, fp, owner, KVP_IX_CLAIM),
			KVP_IX_WORD(mine + 1, 0, 0, KVP_IX_EMPTY));
		return -EEXIST;
	}
	/* full CAS: step 4, fails iff an earlier claimant killed us */
	w = KVP_IX_WORD(mine, fp, owner, KVP_IX_PENDING);
	if (!kvp_cas(&s->meta[me], KVP_IX_WORD(mine, fp, owner, KVP_IX_CLAIM),
		     w))
		return -EEXIST;
	*wout = w;
	return (int64_t)me;
}

/*
 * The index entry count, h_ix_used (docs/design.md, "The index limit"):
 * one unit per READY or DELETED slot, and one per put that holds a unit
 * for its PENDING slot, never more than g_index_limit.  A unit is taken
 * with a bounded CAS and given back when its slot goes EMPTY or its put
 * gives up; giving back saturates at 0.  Every process that changes it
 * first says so in a word of its own (cs_ix_resv), so the agent can
 * recount it exactly from a scan of the index.
 */
KVP_INLINE bool
kvp_ix_count_take(struct kvp_seg *s)
{
	uint64_t cur;

	/* relaxed: a hint; the CAS decides */
	while ((cur = kvp_load_relaxed(&s->hdr->h_ix_used)) <
	       s->g.g_index_limit)
		/* full CAS: one unit is ours; orders the taker's cs_ix_resv
		 * store before it (pairs with the agent's acquire loads of
		 * h_ix_used then cs_ix_resv in its recount) */
		if (kvp_cas(&s->hdr->h_ix_used, cur, cur + 1))
			return true;
	return false;
}

KVP_INLINE void
kvp_ix_count_give(struct kvp_seg *s)
{
	uint64_t cur;

	do /* relaxed: the CAS decides */
		cur = kvp_load_relaxed(&s->hdr->h_ix_used);
	/* full CAS: as in kvp_ix_count_take; never below 0 */
	while (cur && !kvp_cas(&s->hdr->h_ix_used, cur, cur - 1));
}

/* The agent's recount (agent/evict.c) agreed with the index on 'count'
 * while the count was u: correct it, only from that value. */
KVP_INLINE bool
kvp_ix_count_correct_agent(struct kvp_seg *s, uint64_t u, uint64_t count)
{
	/* full CAS: only from the count the scan agreed with */
	return kvp_cas(&s->hdr->h_ix_used, u, count);
}

/* A client says what it is doing with the count (a new kind in its
 * cs_ix_resv, a new sequence every time); its own slot only, or, for the
 * reaper, a dead client's (after: the word it read, acquire). */
KVP_INLINE void
kvp_ix_count_say(struct kvp_client_slot *cs, uint64_t after, unsigned kind)
{
	/* release: cs_ix_slot, and a publish or an abort, before the new
	 * kind; pairs with the agent's acquire in its recount and the
	 * reaper's */
	kvp_store_release(&cs->cs_ix_resv, KVP_IXR_NEXT(after, kind));
}

/* The same, from the word as it is now (its only writer while it lives). */
KVP_INLINE void
kvp_ix_count_say_own(struct kvp_client_slot *cs, unsigned kind)
{
	/* relaxed: only we write it while we live */
	kvp_ix_count_say(cs, kvp_load_relaxed(&cs->cs_ix_resv), kind);
}

/* Name PENDING slot i at generation gen as the one a unit of the count
 * will be taken for (cs_ix_slot), before the kind says RESERVING. */
KVP_INLINE void
kvp_ix_count_name_slot(struct kvp_client_slot *cs, uint64_t i, uint32_t gen)
{
	/* release: after our last cs_ix_resv store (IDLE), so an agent that
	 * sees this slot sees that store too (its recount reads the slot,
	 * then the kind again, with acquire loads) */
	kvp_store_release(&cs->cs_ix_slot, KVP_HOLD_MAKE(i, gen));
}

/* Give back a PENDING slot that was never published (its owner only). */
KVP_INLINE void
kvp_ix_abort(struct kvp_seg *s, uint64_t i, uint64_t w)
{
	/* full CAS: after this the slot may be reused by anyone */
	kvp_cas(&s->meta[i], w,
		KVP_IX_WORD(KVP_IX_NEXTGEN(w), 0, 0, KVP_IX_EMPTY));
}

/*
 * Reader half of the hold protocol (see the top of this file): make hold
 * slot *hold name (slot i, generation of w) and validate it.  Returns 0
 * (held: the value stays at its location until the hold is dropped),
 * -ENOENT (the slot moved on: nothing is held; look again), -EBUSY (the
 * agent kept it under CHECK longer than check_wait_ns: nothing is held).
 * *waits counts the times it waited for a CHECK verdict.  flags: bits
 * of the hold word that do not change what it protects (KVP_HOLD_PIN).
 */
KVP_INLINE int
kvp_ix_hold(const struct kvp_seg *s, kvp_aword_t *hold, uint64_t i, uint64_t w,
	    uint64_t flags, uint64_t check_wait_ns, unsigned *waits)
{
	uint64_t base = w & ~(uint64_t)KVP_IX_CHECK, w2, t0 = 0;

	/* relaxed: ordered by the fence below */
	kvp_store_relaxed(hold, KVP_HOLD_MAKE(i, KVP_IX_GEN(base)) | flags);
	kvp_crashpoint(C_HOLD_STORED);
	/* full fence: hold store before the state reload; pairs with the
	 * agent's CHECK CAS + fence + hold scan (store-load, both sides) */
	kvp_fence_full();
	for (;;) {
		/* acquire: pairs with the agent's CAS that clears CHECK */
		w2 = kvp_load_acquire(&s->meta[i]);
		if (w2 == base) {
			kvp_crashpoint(C_HOLD_TAKEN);
			return 0;
		}
		if (w2 != (base | KVP_IX_CHECK))
			break;
		/* the agent is deciding; it either sees our hold and backs
		 * off, or takes the value away: wait for the verdict */
		if (!t0) {
			t0 = kvp_now_ns(CLOCK_MONOTONIC);
		} else if (kvp_now_ns(CLOCK_MONOTONIC) - t0 > check_wait_ns) {
			/* release: nothing was copied */
			kvp_store_release(hold, 0);
			return -EBUSY;
		}
		(*waits)++;
		sched_yield();
	}
	/* release: nothing was copied under this hold */
	kvp_store_release(hold, 0);
	return -ENOENT;
}

/* Drop a hold: every read of the held bytes happens before the slot
 * clears (release; pairs with the agent's acquire in its hold scan). */
KVP_INLINE void
kvp_ix_unhold(kvp_aword_t *hold)
{
	kvp_store_release(hold, 0);
}

/* Delete: READY(g) -> DELETED(g) (a CHECK flag in w is cleared with it:
 * only the agent's strict delete passes one, which no pass of its own can
 * have set).  Readers that hold it finish; the agent reclaims it.  Pairs
 * with the agent's CHECK CAS (whichever comes first wins).  True if done. */
KVP_INLINE bool
kvp_ix_delete(struct kvp_seg *s, uint64_t i, uint64_t w)
{
	if (KVP_IX_STATE(w) != KVP_IX_READY)
		return false;
	/* full CAS: from the exact word (generation included) */
	return kvp_cas(&s->meta[i], w,
		       (w & ~(uint64_t)(0xfu | KVP_IX_CHECK)) | KVP_IX_DELETED);
}

/* Agent, step 1 of the CHECK protocol: READY or DELETED(g) -> +CHECK.
 * From here no reader trusts a new hold on the slot and no client can
 * delete it (pairs with the reader's fence in kvp_ix_hold). */
KVP_INLINE bool
kvp_ix_check_take(struct kvp_seg *s, uint64_t i, uint64_t w)
{
	if ((KVP_IX_STATE(w) != KVP_IX_READY &&
	     KVP_IX_STATE(w) != KVP_IX_DELETED) ||
	    KVP_IX_FLAGS(w))
		return false;
	/* full CAS: the flag, before the fence and the hold scan */
	return kvp_cas(&s->meta[i], w, w | KVP_IX_CHECK);
}

/* Agent: clear CHECK (the victim was held, or an attaching agent undoes
 * a predecessor's flag): readers may trust their holds again. */
KVP_INLINE bool
kvp_ix_check_release(struct kvp_seg *s, uint64_t i, uint64_t wc)
{
	/* full CAS: releases the readers waiting in kvp_ix_hold */
	return kvp_cas(&s->meta[i], wc, wc & ~(uint64_t)KVP_IX_CHECK);
}

/* Agent: the value's location (e_loc, e_run, written while the slot was
 * under CHECK, or busy in the tier thread) is published: CHECK cleared,
 * same generation (holds fence the slot, not a generation).  Readers
 * that acquire the word see the new location. */
KVP_INLINE bool
kvp_ix_relocate(struct kvp_seg *s, uint64_t i, uint64_t wc)
{
	/* full CAS (release half): the location stores before the word */
	return kvp_cas(&s->meta[i], wc, wc & ~(uint64_t)KVP_IX_CHECK);
}

/* Agent: the value leaves the index, -> EMPTY(g+1) (I6): a victim under
 * CHECK that nobody held (step 4), or an entry with nothing left to read
 * (its SSD segment is gone at attach; its DRAM chain is damaged: a reader
 * holding it reads what a repair leaves, never outside the arena).  Its
 * DRAM runs are tagged (i, g): the caller frees them. */
KVP_INLINE bool
kvp_ix_remove(struct kvp_seg *s, uint64_t i, uint64_t w)
{
	/* full CAS: gone for new readers; the generation moves on */
	return kvp_cas(&s->meta[i], w,
		       KVP_IX_WORD(KVP_IX_NEXTGEN(w), 0, 0, KVP_IX_EMPTY));
}

/* Reaper, or an attaching agent: a claim or put in progress whose owner
 * ('owner' as in the word: client slot + 1, or 0xffff for an agent) is
 * dead: RESERVED, CLAIM or PENDING(g) -> EMPTY(g+1).  Only the other
 * claimants' kill CAS can race, and either wins.  True if done. */
KVP_INLINE bool
kvp_ix_reap_owner(struct kvp_seg *s, uint64_t i, uint64_t w, unsigned owner)
{
	unsigned st = KVP_IX_STATE(w);

	if ((st != KVP_IX_RESERVED && st != KVP_IX_CLAIM &&
	     st != KVP_IX_PENDING) ||
	    KVP_IX_OWNER(w) != owner)
		return false;
	/* full CAS: the owner is dead; the slot is reusable */
	return kvp_cas(&s->meta[i], w,
		       KVP_IX_WORD(KVP_IX_NEXTGEN(w), 0, 0, KVP_IX_EMPTY));
}

/* Publish a PENDING slot: its bytes become visible. */
KVP_INLINE int
kvp_ix_publish(struct kvp_seg *s, uint64_t i, uint64_t w)
{
	/* full CAS (release half): the value bytes and e_loc/e_len written
	 * before are visible to every reader that acquire-loads READY */
	if (!kvp_cas(&s->meta[i], w,
		     KVP_IX_WORD(KVP_IX_GEN(w), KVP_IX_FP(w), 0, KVP_IX_READY)))
		return -ESTALE; /* reaped: this client was declared dead */
	return 0;
}

#endif /* KVP_INDEX_H */
