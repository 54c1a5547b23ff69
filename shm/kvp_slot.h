/* SPDX-License-Identifier: MIT */
/*
 * kvp_slot.h - client slots: liveness, hold slots and their high-water
 * mark, and reaping a dead client's slot.
 *
 * Words (struct kvp_client_slot in shm/kvp_shm.h, and the hold slots
 * region: g_holds_per_client words per client slot):
 *
 *   cs_state       [gen:56][state:8], enum kvp_cs_state below
 *   cs_pid, cs_start_time   who owns a LIVE slot (kvp_shm_client_alive)
 *   cs_open_ns, cs_ns_id, cs_ns   when it opened and its namespace (for
 *                  humans and the metrics)
 *   cs_call_seq    the owner's call numbering (requests name their call)
 *   cs_io_futex    the owner sleeps on it; the agent bumps it when an
 *                  answer is ready (a request of its ring, its mailbox)
 *   cs_hold_hwm    the client's hold slots in use are all below it
 *   hold slots     (slot, gen) of a held index slot, 0 = free; the value's
 *                  format and the take/drop transitions are the hold
 *                  protocol's (index/kvp_index.h, kvp_ix_hold/unhold)
 *
 * This file owns these words: every write is a function here (or, for a
 * hold's take and drop, in index/kvp_index.h through kvp_slot_hold and
 * kvp_slot_unhold), and tests/structure/test_structure.sh fails on a
 * write anywhere else.  Transitions:
 *
 *   kvp_slot_claim        FREE(g) -> LIVE(g+1)        (kvp_open, holding
 *                                                     the slot's OFD lock)
 *   kvp_slot_identity_set / _clear  cs_pid, cs_start_time (the owner after
 *                         its claim; the owner or the reaper before FREE)
 *   kvp_slot_describe     cs_open_ns, cs_ns_id, cs_ns (the owner at open)
 *   kvp_slot_call_next    cs_call_seq + 1             (the owner)
 *   kvp_slot_wake         cs_io_futex + 1, wake       (the agent)
 *   kvp_slot_giveback     LIVE(g) -> FREE(g)          (kvp_close, a failed
 *                                                     kvp_open)
 *   kvp_slot_reap_begin   LIVE(g) -> REAPING(g)       (reaper, step 1)
 *   kvp_slot_reap_holds   every hold slot -> 0, mark -> 0 (reaper, step 2)
 *   kvp_slot_reap_end     REAPING(g) -> FREE(g)       (reaper, step 6)
 *   kvp_slot_hwm_raise / kvp_slot_hwm_lower           (the owner)
 *   kvp_slot_close_holds  the owner's holds -> 0, mark -> 0 (kvp_close)
 *   kvp_slot_hold / kvp_slot_unhold  one hold slot    (the owner)
 * Scans (agent and tools) read through kvp_slot_holds and
 * kvp_slot_hold_hwm_*, never by hand.
 *
 * Invariants and proof sketch:
 *  S1. A LIVE slot's owner holds the slot's OFD lock (it takes the lock
 *      before its claim CAS and stores FREE before its descriptor closes),
 *      so "LIVE and no lock" means the owner died.  Only a FREE word can
 *      be claimed and only a LIVE one reaped, each by one CAS on the exact
 *      word: one owner at a time, one reaper per death, and a reaper never
 *      races the owner (the owner is dead) nor a new owner (REAPING is not
 *      FREE).  Every claim bumps the generation, so a (slot, word) pair
 *      names one owner: an answer meant for a dead owner's request is
 *      never delivered to the next one (the agent compares the exact
 *      word, agent/ops.c and agent/cluster_mailbox.c).
 *  S2. Reaping is a sequence of idempotent steps (agent/reaper.c): a slot
 *      left REAPING by a dead agent is reaped again from step 2, and
 *      clearing a hold twice clears nothing more.  FREE is stored (release)
 *      after every step, so a new owner sees none of the dead one's holds.
 *  S3. (the hold high-water mark, in the hold protocol's proof of
 *      index/kvp_index.h) every hold slot that is not 0 is below
 *      cs_hold_hwm whenever the agent's hold scan could need it:
 *      - raise: the owner stores the new mark (relaxed) before
 *        kvp_ix_hold stores the hold (relaxed) and issues its full fence;
 *        the agent loads the mark (acquire) after its own fence.  So a
 *        scan that must see the hold (the hold proof's step 1, Dekker)
 *        sees the raised mark too: both stores precede the owner's fence.
 *      - lower: the owner lowers the mark (release) only when every slot
 *        at or above the new mark is clear (their drops were release
 *        stores before it); a scan that acquires the lowered mark misses
 *        only clear slots.
 *      - a mark a client forges is clamped to g_holds_per_client by every
 *        scan (kvp_slot_hold_hwm_*): a hostile client can hide only its
 *        own holds, never read outside its own hold slots.
 *  S4. Holds belong to client slots (STYLE: a counter is never the only
 *      record): the reaper clears a dead client's holds, idempotently
 *      (S2), and frees nothing it did not see held.
 */
#ifndef KVP_SLOT_H
#define KVP_SLOT_H

#include "index/kvp_index.h"

/* Client slot states (low 8 bits of cs_state; generation above). */
enum kvp_cs_state {
	KVP_CS_FREE = 0,
	KVP_CS_LIVE = 1,
	KVP_CS_REAPING = 2,
};
#define KVP_CS_STATE(w) ((unsigned)((w)&0xff))
#define KVP_CS_GEN(w) ((uint64_t)(w) >> 8)
#define KVP_CS_WORD(gen, st) (((uint64_t)(gen) << 8) | (uint64_t)(st))

/* ---- liveness ---- */

/*
 * Claim client slot cs, whose state word was w (FREE), while holding its
 * OFD lock: FREE(g) -> LIVE(g+1).  True with *word the LIVE word (the
 * owner's name for the slot from now on); false if someone else won it.
 */
KVP_INLINE bool
kvp_slot_claim(struct kvp_client_slot *cs, uint64_t w, uint64_t *word)
{
	uint64_t live = KVP_CS_WORD(KVP_CS_GEN(w) + 1, KVP_CS_LIVE);

	/* full CAS: the slot is ours; its fields are written after */
	if (!kvp_cas(&cs->cs_state, w, live))
		return false;
	*word = live;
	return true;
}

/* Give a LIVE slot back (its owner, before its lock drops): LIVE(g) ->
 * FREE(g), only from the exact word it claimed. */
KVP_INLINE void
kvp_slot_giveback(struct kvp_client_slot *cs, uint64_t word)
{
	/* full CAS: FREE before our lock drops (fd close), so the reaper
	 * never sees a LIVE slot without its lock (S1) */
	kvp_cas(&cs->cs_state, word,
		KVP_CS_WORD(KVP_CS_GEN(word), KVP_CS_FREE));
}

/* Who owns the slot (after the claim; for humans and the reaper's fork
 * check: the lock is the authority while these are still zero). */
KVP_INLINE void
kvp_slot_identity_set(struct kvp_client_slot *cs, uint64_t pid,
		      uint64_t start_time)
{
	/* relaxed: read by kvp_shm_client_alive, which trusts the lock while
	 * they are zero (a torn pair only makes it look again) */
	kvp_store_relaxed(&cs->cs_start_time, start_time);
	kvp_store_relaxed(&cs->cs_pid, pid);
}

/* The slot names no process any more (before FREE is stored). */
KVP_INLINE void
kvp_slot_identity_clear(struct kvp_client_slot *cs)
{
	/* relaxed: published by the FREE store after it */
	kvp_store_relaxed(&cs->cs_pid, 0);
	kvp_store_relaxed(&cs->cs_start_time, 0);
}

/* What the owner is, for humans and the metrics (at open, after its
 * claim): when it opened (CLOCK_REALTIME ns), its namespace's id and
 * name (truncated). */
KVP_INLINE void
kvp_slot_describe(struct kvp_client_slot *cs, uint64_t open_ns, uint64_t ns_id,
		  const char *ns)
{
	size_t len = strlen(ns);

	/* relaxed: for humans and the metrics (read relaxed, never acted
	 * on) */
	kvp_store_relaxed(&cs->cs_open_ns, open_ns);
	kvp_store_relaxed(&cs->cs_ns_id, ns_id);
	memset(cs->cs_ns, 0, sizeof(cs->cs_ns));
	memcpy(cs->cs_ns, ns,
	       len < sizeof(cs->cs_ns) - 1 ? len : sizeof(cs->cs_ns) - 1);
}

/* The owner numbers a new call (its requests name it): the number. */
KVP_INLINE uint64_t
kvp_slot_call_next(struct kvp_client_slot *cs)
{
	/* relaxed: only the owner writes it (informative to others) */
	uint64_t call = kvp_load_relaxed(&cs->cs_call_seq) + 1;

	kvp_store_relaxed(&cs->cs_call_seq, call); /* relaxed: ours */
	return call;
}

/* The agent: an answer for the owner of slot cs is ready (its ring's, its
 * mailbox's, stored before with a release); the owner loads the word
 * (acquire) before it looks for answers and sleeps on the value it
 * loaded, so the bump either precedes its look or ends its sleep. */
KVP_INLINE void
kvp_slot_wake(struct kvp_client_slot *cs)
{
	kvp_ifetch_add(&cs->cs_io_futex, 1); /* full: then wake */
	kvp_futex_wake(&cs->cs_io_futex);
}

/* Reaper step 1: LIVE(g) -> REAPING(g).  True with *w the REAPING word
 * when the reaper won it (or the slot was REAPING already: a reap an
 * agent left half-done is redone, S2); false when there is nothing to
 * reap. */
KVP_INLINE bool
kvp_slot_reap_begin(struct kvp_client_slot *cs, uint64_t *w)
{
	uint64_t reaping = KVP_CS_WORD(KVP_CS_GEN(*w), KVP_CS_REAPING);

	if (KVP_CS_STATE(*w) == KVP_CS_LIVE) {
		/* full CAS: step 1 */
		if (!kvp_cas(&cs->cs_state, *w, reaping))
			return false;
		*w = reaping;
		return true;
	}
	return KVP_CS_STATE(*w) == KVP_CS_REAPING;
}

/* Reaper step 6: REAPING(g) -> FREE(g), after every other step. */
KVP_INLINE void
kvp_slot_reap_end(struct kvp_client_slot *cs, uint64_t w)
{
	/* release: step 6, after every step before it; pairs with the
	 * relaxed load + claim CAS of the next owner (S2) */
	kvp_store_release(&cs->cs_state,
			  KVP_CS_WORD(KVP_CS_GEN(w), KVP_CS_FREE));
}

/* ---- hold slots ---- */

/* Client slot i's hold slots (g_holds_per_client words), for scans. */
KVP_INLINE const kvp_aword_t *
kvp_slot_holds(const struct kvp_seg *s, uint32_t i)
{
	return &s->holds[(uint64_t)i * s->g.g_holds_per_client];
}

/* The bound of the agent's hold scan of client i (S3): its mark, clamped
 * (a client writes it: never trusted). */
KVP_INLINE uint32_t
kvp_slot_hold_hwm_acquire(const struct kvp_seg *s, uint32_t i)
{
	/* acquire: pairs with the owner's release when it lowers the mark,
	 * and, after the scanner's fence, sees every raise ordered before a
	 * reader's fence (S3) */
	uint64_t hwm = kvp_load_acquire(&s->clients[i].cs_hold_hwm);

	return hwm < s->g.g_holds_per_client ? (uint32_t)hwm :
					       s->g.g_holds_per_client;
}

/* The same bound for a hint or a snapshot (the eviction policy's "held
 * now", metrics): not ordered with anything. */
KVP_INLINE uint32_t
kvp_slot_hold_hwm_hint(const struct kvp_seg *s, uint32_t i)
{
	/* relaxed: a hint or a snapshot for humans */
	uint64_t hwm = kvp_load_relaxed(&s->clients[i].cs_hold_hwm);

	return hwm < s->g.g_holds_per_client ? (uint32_t)hwm :
					       s->g.g_holds_per_client;
}

/* The mark as written (unclamped), for the checker's I12. */
KVP_INLINE uint64_t
kvp_slot_hold_hwm_raw(const struct kvp_seg *s, uint32_t i)
{
	/* relaxed: read together with the hold slots, a snapshot */
	return kvp_load_relaxed(&s->clients[i].cs_hold_hwm);
}

/* The owner raises its mark to hwm before it takes a hold at hwm - 1. */
KVP_INLINE void
kvp_slot_hwm_raise(struct kvp_seg *s, uint32_t slot, uint32_t hwm)
{
	/* relaxed: ordered before the agent's scan by the fence in
	 * kvp_ix_hold (S3) */
	kvp_store_relaxed(&s->clients[slot].cs_hold_hwm, hwm);
}

/* The owner lowers its mark to hwm: every hold slot at or above it is
 * clear. */
KVP_INLINE void
kvp_slot_hwm_lower(struct kvp_seg *s, uint32_t slot, uint32_t hwm)
{
	/* release: our reads under the holds above hwm, and their clearing,
	 * come first; pairs with the agent's acquire of the mark before its
	 * hold scan (kvp_slot_hold_hwm_acquire, S3) */
	kvp_store_release(&s->clients[slot].cs_hold_hwm, hwm);
}

/* The owner takes hold h (raised under the mark) on index slot i, whose
 * state word was w: the reader half of the hold protocol
 * (index/kvp_index.h, kvp_ix_hold: the returns are its). */
KVP_INLINE int
kvp_slot_hold(struct kvp_seg *s, uint32_t slot, uint32_t h, uint64_t i,
	      uint64_t w, uint64_t flags, uint64_t wait_ns, unsigned *waits)
{
	return kvp_ix_hold(
		s, &s->holds[(uint64_t)slot * s->g.g_holds_per_client + h], i,
		w, flags, wait_ns, waits);
}

/* The owner drops hold h (index/kvp_index.h, kvp_ix_unhold). */
KVP_INLINE void
kvp_slot_unhold(struct kvp_seg *s, uint32_t slot, uint32_t h)
{
	kvp_ix_unhold(&s->holds[(uint64_t)slot * s->g.g_holds_per_client + h]);
}

/* The owner, closing: its holds below hwm clear, then its mark. */
KVP_INLINE void
kvp_slot_close_holds(struct kvp_seg *s, uint32_t slot, uint32_t hwm)
{
	kvp_aword_t *hs = &s->holds[(uint64_t)slot * s->g.g_holds_per_client];
	uint32_t k;

	for (k = 0; k < hwm; k++)
		/* release: our copies are done before the slot clears */
		kvp_store_release(&hs[k], 0);
	/* relaxed: no holds left */
	kvp_store_relaxed(&s->clients[slot].cs_hold_hwm, 0);
}

/*
 * Reaper step 2: clear every hold slot of dead client i (all of them: its
 * mark is the dead client's word), then its mark.  Returns the holds
 * cleared; *pins counts those taken as pins (KVP_HOLD_PIN).
 */
KVP_INLINE uint64_t
kvp_slot_reap_holds(struct kvp_seg *s, uint32_t i, uint64_t *pins)
{
	uint32_t hpc = s->g.g_holds_per_client, k;
	kvp_aword_t *hs = &s->holds[(uint64_t)i * hpc];
	uint64_t holds = 0;

	for (k = 0; k < hpc; k++) {
		/* relaxed: the owner is dead; nobody else writes these */
		uint64_t hv = kvp_load_relaxed(&hs[k]);

		if (hv) {
			kvp_store_release(&hs[k], 0); /* release: step 2 */
			holds++;
			*pins += (hv & KVP_HOLD_PIN) != 0;
		}
	}
	kvp_store_relaxed(&s->clients[i].cs_hold_hwm,
			  0); /* relaxed: no holds remain */
	return holds;
}

#endif /* KVP_SLOT_H */
