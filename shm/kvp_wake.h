/* SPDX-License-Identifier: MIT */
/*
 * kvp_wake.h - the tier thread's doorbell: how clients (and the agent's
 * other threads) ask the tier thread for work, and how it tells putters
 * that room was made.
 *
 * Words (struct kvp_shm_header in shm/kvp_shm.h):
 *
 *   h_evict_wake   futex: bumped by whoever has work for the tier thread
 *                  (a posted request, a putter that needs room, a reaped
 *                  client, populated units, a helper's answer, the stop)
 *   h_evict_req    1: a putter's wake is pending (at most one syscall)
 *   h_evict_need   the largest unit count a putter waits for (a hint)
 *   h_ix_req       1: a putter waits for room in the index
 *   h_hint_seq, h_hint[KVP_HINTS]  a ring of key hashes whose two buckets
 *                  were full (0: empty)
 *   h_delete_seq   bumped by every delete: a reclaim pass has work
 *   h_space_seq    futex: bumped by the tier thread when room was made
 *                  (or none can be), putters sleep on it
 *   h_evict_stuck  KVP_STUCK_*: the last pass found nothing it could free
 *
 * This file owns these words: every write is a function here, and
 * tests/structure/test_structure.sh fails on a write anywhere else.
 * Transitions:
 *
 *   kvp_wake_agent        h_evict_wake + 1, wake      (anyone)
 *   kvp_wake_need         h_evict_need = max, h_evict_req 0 -> 1 (+ wake)
 *                                                     (a putter)
 *   kvp_wake_index        h_ix_req 0 -> 1 (+ wake)    (a putter)
 *   kvp_wake_hint         a hint into the ring (+ kvp_wake_need(0))
 *   kvp_wake_deleted      h_delete_seq + 1            (a delete)
 *   kvp_wake_take_agent   h_evict_req 1 -> 0, h_evict_need -> 0
 *   kvp_wake_take_index_agent   h_ix_req 1 -> 0
 *   kvp_wake_take_hint_agent    a hint -> 0
 *   kvp_wake_stuck_agent  h_evict_stuck = the pass's verdict
 *   kvp_wake_space_agent  h_space_seq + 1, wake       (tier thread)
 *
 * Proof sketch (no lost wake, no wake storm):
 *  W1. A waker bumps its futex word with a full RMW before FUTEX_WAKE; a
 *      sleeper loads the word (acquire) before it looks for work (the
 *      tier thread: before it serves the rings and runs its round; a
 *      putter: before it looks for room) and sleeps with FUTEX_WAIT on
 *      the value it loaded.  Work made visible before a bump is seen by
 *      the look that follows the load, or the bump changed the word and
 *      the FUTEX_WAIT returns at once: never neither.
 *  W2. A putter's request flag is taken (h_evict_req 1 -> 0, a CAS) by
 *      the tier thread before its pass; a putter that sets it after the
 *      take pays a wake again (its CAS 0 -> 1 succeeds), one that set it
 *      before is served by the pass.  So at most one wake syscall is in
 *      flight per pass, and no putter waits a pass for nothing.  Same
 *      for h_ix_req.
 *  W3. h_evict_need only grows between takes (a CAS loop keeps the
 *      largest); the take resets it after reading it: a need that lands
 *      between the read and the reset is lost to this pass, but its
 *      putter's flag (W2) brings the next one.  A hint: never trusted
 *      beyond how much the pass frees.
 *  W4. Hints: a position of its own for each putter (a fetch-add), the
 *      hash stored with a release, taken by a CAS from the hash the tier
 *      thread read (a newer hint in the same position is never lost to a
 *      take of the old one).  A hash of 0 is no hint.
 *  W5. Every word here is a hint or a wake: a client that writes any of
 *      them wrongly costs wakes or a pass, never a value (the tier thread
 *      checks for itself what it frees, docs/design.md, "Eviction").
 */
#ifndef KVP_WAKE_H
#define KVP_WAKE_H

#include "shm/kvp_shm.h"

/* ---- asking (clients, and the agent's other threads) ---- */

/* The tier thread has work: bump its futex word, then wake it (W1). */
KVP_INLINE void
kvp_wake_agent(struct kvp_seg *s)
{
	kvp_ifetch_add(&s->hdr->h_evict_wake, 1); /* full: then wake (W1) */
	kvp_futex_wake(&s->hdr->h_evict_wake);
}

/* A putter needs room: need_units > 0 says how much (W3); the evictor is
 * woken unless a wake is already pending (W2). */
KVP_INLINE void
kvp_wake_need(struct kvp_seg *s, uint64_t need_units)
{
	struct kvp_shm_header *hd = s->hdr;
	uint64_t cur;

	/* relaxed: a hint; the CAS loop only keeps the largest */
	while ((cur = kvp_load_relaxed(&hd->h_evict_need)) < need_units &&
	       !kvp_cas(&hd->h_evict_need, cur, need_units))
		;

	/* full CAS: only the first client to see the need pays the syscall;
	 * the agent clears h_evict_req before each pass (W2) */
	if (kvp_cas(&hd->h_evict_req, 0, 1))
		kvp_wake_agent(s);
}

/* The index is at its limit: wake the evictor (at most one wake in
 * flight, W2), which removes cold entries. */
KVP_INLINE void
kvp_wake_index(struct kvp_seg *s)
{
	/* full CAS: only the first waiting putter pays the syscall; the
	 * agent clears h_ix_req before its pass (W2) */
	if (kvp_cas(&s->hdr->h_ix_req, 0, 1))
		kvp_wake_agent(s);
}

/* Both candidate buckets of hash are full: leave the hash in the hint
 * ring (W4) and wake the evictor, which frees an unheld slot there. */
KVP_INLINE void
kvp_wake_hint(struct kvp_seg *s, uint64_t hash)
{
	struct kvp_shm_header *hd = s->hdr;
	/* full: a ring position of our own */
	uint64_t k = kvp_fetch_add(&hd->h_hint_seq, 1) % KVP_HINTS;

	/* release: the evictor takes it with a CAS; 0 means empty (a key
	 * whose hash is 0 gets no hint: its put may answer -ENOSPC) */
	kvp_store_release(&hd->h_hint[k], hash);
	kvp_wake_need(s, 0);
}

/* A value was deleted: a reclaim pass has work (no wake: the pass runs
 * at least once a second). */
KVP_INLINE void
kvp_wake_deleted(struct kvp_seg *s)
{
	/* full: tells the agent a reclaim pass has work */
	kvp_fetch_add(&s->hdr->h_delete_seq, 1);
}

/* The word the tier thread sleeps on (for a wait the drives arm:
 * agent/loop.c), read-only. */
KVP_INLINE const kvp_aint_t *
kvp_wake_word(const struct kvp_seg *s)
{
	return &s->hdr->h_evict_wake;
}

/* ---- answering (the tier thread) ---- */

/* Take a putter's request before the pass (W2): true if one was pending,
 * with *need the largest unit count a putter waits for (W3). */
KVP_INLINE bool
kvp_wake_take_agent(struct kvp_seg *s, uint64_t *need)
{
	struct kvp_shm_header *h = s->hdr;
	/* full CAS: take the request; a client that kicks after this
	 * sees 0 and wakes us again */
	bool kicked = kvp_cas(&h->h_evict_req, 1, 0);

	/* relaxed: the largest unit count a putter is waiting for */
	*need = kvp_load_relaxed(&h->h_evict_need);
	kvp_store_relaxed(&h->h_evict_need, 0);
	return kicked;
}

/* Take an index request before the index pass (W2). */
KVP_INLINE bool
kvp_wake_take_index_agent(struct kvp_seg *s)
{
	/* full CAS: take the request; a putter that kicks after this sees 0 */
	return kvp_cas(&s->hdr->h_ix_req, 1, 0);
}

/* Take hint k of the ring (W4): its hash, or 0 (none, or a newer one
 * replaced it: that one is taken next time). */
KVP_INLINE uint64_t
kvp_wake_take_hint_agent(struct kvp_seg *s, unsigned k)
{
	/* acquire: pairs with the putter's release */
	uint64_t hint = kvp_load_acquire(&s->hdr->h_hint[k]);

	/* full CAS: take the hint (a newer one may replace it) */
	return hint && kvp_cas(&s->hdr->h_hint[k], hint, 0) ? hint : 0;
}

/* The pass's verdict for putters that gave up (KVP_STUCK_*). */
KVP_INLINE void
kvp_wake_stuck_agent(struct kvp_seg *s, uint64_t stuck)
{
	/* relaxed: read by putters that gave up; a hint */
	kvp_store_relaxed(&s->hdr->h_evict_stuck, stuck);
}

/* Room was made, or none can be: putters sleeping on h_space_seq look
 * again (W1). */
KVP_INLINE void
kvp_wake_space_agent(struct kvp_seg *s)
{
	kvp_ifetch_add(&s->hdr->h_space_seq, 1); /* full: then wake (W1) */
	kvp_futex_wake(&s->hdr->h_space_seq);
}

#endif /* KVP_WAKE_H */
