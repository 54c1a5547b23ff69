/* SPDX-License-Identifier: MIT */
/*
 * kvp_span.h - staging spans: the slots of the staging arena that SSD
 * reads land in when they are not promoted, who holds them and who frees
 * them (I17, I23, I24).
 *
 * A span is one or more contiguous staging slots.  Its head slot's word
 * (struct kvp_span.sp_state) is [gen:24][freer:16][nslots:16][state:8]
 * (KVP_SP_WORDF below, the only description of it); each
 * body slot's word names its head and the head's generation
 * (KVP_SP_BODYW).  The head carries a holder bitmap, one bit per client
 * slot that has yet to copy from it.
 *
 *   FREE(g) --alloc (tier thread)--> READING(g, n) --I/O done--> READY
 *   READY --last bit cleared: one CAS--> FREEING(g, n, freer)
 *   FREEING --finish: bodies, then head--> FREE(g + 1)
 *   FREEING(dead freer) --adopt: one CAS--> FREEING(g, n, agent) --finish
 *   READING (the agent that read died) --attaching agent--> FREE(g + 1)
 *
 * Who does what:
 *  - Allocation is the tier thread's alone (kvp_staging_find, then the
 *    caller in rings.c): the count goes up (kvp_staging_account), body
 *    words are stored, holder bits cleared, the head stored READING; the
 *    requesters' bits are set before the read is submitted, and requests
 *    for bytes already in flight join with a bit of their own while the
 *    span is still READING.
 *  - The I/O completion stores READY (release: the bytes before the
 *    state) and answers the waiters; a waiter whose answer cannot be
 *    delivered (withdrawn, client reaped) has its bit taken back.
 *  - A holder copies its bytes, then clears its bit (a CAS loop); the one
 *    that sees no bit left tries READY -> FREEING with its own slot + 1 as
 *    freer (kvp__span_release in kvpool.h).  The tier thread does the same
 *    for a READY span nobody holds (kvp_span_free_if_unheld, as freer
 *    KVP_SP_AGENT).  The winner of that CAS subtracts the span's slots from
 *    h_staging_used, then finishes (kvp_span_finish_free, below).
 *  - A freer that dies between its CAS and the end is adopted: the reaper
 *    for that client, the sweep for one it finds dead, an attaching agent
 *    for its predecessor's frees (KVP_SP_AGENT).  The adopter's CAS
 *    replaces the freer in the word, so two adopters cannot both finish.
 *
 * Proof sketch:
 *  1. Freed exactly once.  A span leaves READY only by one CAS from its
 *     exact word, so exactly one freer wins; it alone finishes, unless it
 *     is dead, and an adopter first wins its own CAS from the exact
 *     FREEING word (naming the dead freer), so at most one adopter
 *     finishes, and never while the freer lives (liveness is the
 *     kernel's, I10).
 *  2. Never reused while held.  Allocation starts only from FREE; FREE
 *     follows only a finished FREEING, which follows only READY with no
 *     bit set (the freer saw none after clearing its own; bits are set
 *     only while READING, before READY is stored).  A late copy cannot
 *     happen: a holder clears its bit after its copy (release).
 *  3. Bodies are freed once.  Each body is freed by a CAS from exactly
 *     KVP_SP_BODYW(gen, head); a repeated or late finish (an adopter
 *     redoing what a dead freer started) finds a body already freed, or
 *     reused under a newer generation, and leaves it alone.  The head is
 *     freed last, with gen + 1.
 *  4. Nothing leaks.  A dead client's bits are cleared by the reaper (an
 *     idempotent AND) and spans left with no bit are freed; a READY span
 *     whose holders are all gone is freed by the sweep when an
 *     allocation finds the arena full.
 *  5. The count is exact (I24): h_staging_used rises by a span's slots
 *     before it leaves FREE and falls once, by the winner of its READY ->
 *     FREEING CAS (or the attach path for a dead agent's READING span),
 *     before its FREE store; an adopter does not subtract again.  A freer
 *     that died between its CAS and its subtraction leaves the count high;
 *     kvp_staging_reconcile puts it right when every slot is FREE.
 *
 * This file owns the span words (sp_state, sp_holders, and the fields the
 * allocation writes) and the header's words about the arena: the
 * occupancy count (h_staging_used, step 5), its peak (h_staging_peak) and
 * the futex a span's free bumps (h_staging_seq): every write is a
 * function here, and tests/structure/test_structure.sh fails on a write
 * anywhere else.  The policy (where to allocate, when to sweep, when the
 * count is reconciled) is the agent's, in agent/staging.c.
 */
#ifndef KVP_SPAN_H
#define KVP_SPAN_H

#include "shm/kvp_shm.h"

enum kvp_sp_state {
	KVP_SP_FREE = 0,
	KVP_SP_READING = 1, /* agent I/O in flight; holders being added */
	KVP_SP_READY = 2,
	KVP_SP_BODY = 3,    /* a non-head slot of a multi-slot span */
	KVP_SP_FREEING = 4, /* its freer (in the word) is freeing it */
};
/* [gen:24][freer:16][nslots:16][state:8]; freer (FREEING only) is the
 * client slot + 1 that is freeing the span, or KVP_SP_AGENT: only the
 * freer finishes the free, or whoever takes it over once the freer is
 * known dead (reaper, sweep, an attaching agent). */
#define KVP_SP_AGENT 0xffffu
#define KVP_SP_WORDF(gen, n, st, freer)        \
	((((uint64_t)(gen)&0xffffffu) << 40) | \
	 ((uint64_t)((freer)&0xffffu) << 24) | \
	 ((uint64_t)((n)&0xffffu) << 8) | (st))
#define KVP_SP_WORD(gen, n, st) KVP_SP_WORDF(gen, n, st, 0)
#define KVP_SP_FREER(w) ((unsigned)(((w) >> 24) & 0xffffu))
/* A body slot names its head and the head's generation (staging slots
 * are at most 65535): freeing a body is a CAS from exactly this word, so
 * a late or repeated free never frees a slot that was reused. */
#define KVP_SP_BODYW(gen, head) KVP_SP_WORDF(gen, head, KVP_SP_BODY, 0)
#define KVP_SP_STATE(w) ((unsigned)((w)&0xff))
#define KVP_SP_N(w) ((unsigned)(((w) >> 8) & 0xffff))
#define KVP_SP_GEN(w) ((uint32_t)((w) >> 40))

/* ---- holder bits ---- */

/* The agent adds client's bit (while the span is READING). */
KVP_INLINE void
kvp_span_set_holder(struct kvp_span *sp, uint32_t client)
{
	uint64_t bit = 1ull << (client % 64), old;

	do /* relaxed: the CAS decides */
		old = kvp_load_relaxed(&sp->sp_holders[client / 64]);
	/* full CAS */
	while (!kvp_cas(&sp->sp_holders[client / 64], old, old | bit));
}

/* The agent or the reaper takes client's bit back (an answer that could
 * not be delivered, a dead client): idempotent, nothing written when the
 * bit is clear. */
KVP_INLINE void
kvp_span_clear_holder(struct kvp_span *sp, uint32_t client)
{
	uint64_t bit = 1ull << (client % 64), old;

	do /* relaxed: the CAS decides */
		old = kvp_load_relaxed(&sp->sp_holders[client / 64]);
	while ((old & bit) &&
	       !kvp_cas(&sp->sp_holders[client / 64], old, old & ~bit));
}

/* A holder clears its own bit after its copy (proof step 2). */
KVP_INLINE void
kvp_span_holder_done(struct kvp_span *sp, uint32_t client)
{
	uint64_t bit = 1ull << (client % 64);
	unsigned word = client / 64;

	for (;;) {
		/* relaxed: the CAS below decides */
		uint64_t old = kvp_load_relaxed(&sp->sp_holders[word]);
		/* full CAS: clear our bit; pairs with the other holders' CAS
		 * and the reaper's (a CAS loop: AND is not in every AO) */
		if (kvp_cas(&sp->sp_holders[word], old, old & ~bit))
			break;
	}
}

/* Does no one hold the span? */
KVP_INLINE bool
kvp_span_unheld(const struct kvp_span *sp)
{
	unsigned k;

	for (k = 0; k < KVP_SPAN_HOLDER_WORDS; k++)
		/* acquire: pairs with the holders' CAS */
		if (kvp_load_acquire(&sp->sp_holders[k]))
			return false;
	return true;
}

/* ---- the occupancy count (proof step 5) ---- */

/* The tier thread, the only allocator: the count goes up by need slots
 * before the span leaves FREE; the peak follows (occupancy only grows
 * here, so the highest value seen here is the exact peak). */
KVP_INLINE void
kvp_span_count_add_agent(struct kvp_seg *s, unsigned need)
{
	struct kvp_shm_header *h = s->hdr;
	/* full: the count goes up before the span's state stores */
	uint64_t used = kvp_fetch_add(&h->h_staging_used, need) + need;

	/* relaxed: written by this thread only; read by tools */
	if (used > kvp_load_relaxed(&h->h_staging_peak))
		kvp_store_relaxed(&h->h_staging_peak, used);
}

/* The winner of a span's READY -> FREEING CAS (or the attach path, for a
 * dead agent's READING span): the count goes down by its n slots, once,
 * before the FREE stores, so an agent that sees the span FREE (acquire)
 * sees this too. */
KVP_INLINE void
kvp_span_count_sub(struct kvp_seg *s, unsigned n)
{
	/* full: before the FREE stores (an adopter does not subtract
	 * again) */
	kvp_fetch_add(&s->hdr->h_staging_used, (uint64_t)0 - n);
}

/* The tier thread saw every slot FREE (acquire, after the count read
 * 'used'): the true occupancy is 0, put the count right (a freer killed
 * between its CAS and its subtraction left it high).  True if done. */
KVP_INLINE bool
kvp_span_count_reset_agent(struct kvp_seg *s, uint64_t used)
{
	/* full CAS: nobody else changes it while every slot is free */
	return kvp_cas(&s->hdr->h_staging_used, used, 0);
}

/* ---- the state word ---- */

/*
 * Allocate span [head, head + need) from head's FREE word hw (tier thread,
 * the only allocator; the occupancy count went up first): body words, no
 * holder, the extent [astart, astart + extent) of index slot 'slot', then
 * READING.
 */
KVP_INLINE void
kvp_span_alloc_agent(struct kvp_seg *s, uint32_t head, unsigned need,
		     uint64_t hw, uint64_t slot, uint64_t astart,
		     uint64_t extent)
{
	unsigned k;

	for (k = 1; k < need; k++)
		/* release: a body slot of this span, not free */
		kvp_store_release(&s->spans[head + k].sp_state,
				  KVP_SP_BODYW(KVP_SP_GEN(hw), head));
	for (k = 0; k < KVP_SPAN_HOLDER_WORDS; k++)
		/* relaxed: ours */
		kvp_store_relaxed(&s->spans[head].sp_holders[k], 0);
	/* relaxed: published below */
	kvp_store_relaxed(&s->spans[head].sp_slot, slot + 1);
	kvp_store_relaxed(&s->spans[head].sp_off, astart);
	kvp_store_relaxed(&s->spans[head].sp_len, extent);
	/* release: a span in flight */
	kvp_store_release(&s->spans[head].sp_state,
			  KVP_SP_WORD(KVP_SP_GEN(hw), need, KVP_SP_READING));
}

/* The read into span sp (its READING word w) is done, or failed: READY
 * with n slots. */
KVP_INLINE void
kvp_span_ready_agent(struct kvp_span *sp, uint64_t w, unsigned n)
{
	/* release: the bytes before READY; pairs with the holders' acquire */
	kvp_store_release(&sp->sp_state,
			  KVP_SP_WORD(KVP_SP_GEN(w), n, KVP_SP_READY));
}

/*
 * READY(w) -> FREEING(freer): the one CAS that makes its winner the span's
 * freer (proof step 1).  True with *fw the FREEING word; the winner
 * subtracts the span's slots from the count, then calls
 * kvp_span_finish_free.
 */
KVP_INLINE bool
kvp_span_free_begin(struct kvp_span *sp, uint64_t w, unsigned freer,
		    uint64_t *fw)
{
	*fw = KVP_SP_WORDF(KVP_SP_GEN(w), KVP_SP_N(w), KVP_SP_FREEING, freer);
	/* full CAS: exactly one freer, named in the word (if it dies now
	 * the reaper, the sweep or an attaching agent finishes the free) */
	return kvp_cas(&sp->sp_state, w, *fw);
}

/* FREEING(dead freer, word w) -> FREEING(KVP_SP_AGENT): take a dead
 * freer's span over, so two adopters cannot both finish it.  True with
 * *fw the new word. */
KVP_INLINE bool
kvp_span_adopt(struct kvp_span *sp, uint64_t w, uint64_t *fw)
{
	*fw = KVP_SP_WORDF(KVP_SP_GEN(w), KVP_SP_N(w), KVP_SP_FREEING,
			   KVP_SP_AGENT);
	/* full CAS: the span is ours to finish */
	return kvp_cas(&sp->sp_state, w, *fw);
}

/* Finish freeing span 'head' whose FREEING word w the caller owns: body
 * slots first, then the head (a new generation), then wake the putters
 * and readers waiting for room.  Client and agent alike. */
KVP_INLINE void
kvp_span_finish_free(struct kvp_seg *s, uint32_t head, uint64_t w)
{
	struct kvp_span *sp = &s->spans[head];
	uint64_t n = KVP_SP_N(w), k;

	for (k = 1; k < n && head + k < s->g.g_staging_slots; k++)
		/* full CAS: only a body of this span (a dead freer may have
		 * freed it, and the agent reused it, already) */
		kvp_cas(&s->spans[head + k].sp_state,
			KVP_SP_BODYW(KVP_SP_GEN(w), head), 0);
	/* release: the span is free for the agent's next allocation */
	kvp_store_release(&sp->sp_state,
			  KVP_SP_WORD(KVP_SP_GEN(w) + 1, 0, KVP_SP_FREE));
	kvp_ifetch_add(&s->hdr->h_staging_seq, 1); /* full: wake BUSY waiters */
	kvp_futex_wake(&s->hdr->h_staging_seq);
}

/* An attaching agent: span j was READING (word w, n slots) when the agent
 * that read into it died; no holder was answered, so its bits and its
 * slots go at once (the caller subtracted its slots). */
KVP_INLINE void
kvp_span_drop_reading_agent(struct kvp_seg *s, uint64_t j, uint64_t w)
{
	struct kvp_span *sp = &s->spans[j];
	unsigned b, ns = KVP_SP_N(w);

	for (b = 0; b < KVP_SPAN_HOLDER_WORDS; b++)
		/* relaxed: ours */
		kvp_store_relaxed(&sp->sp_holders[b], 0);
	for (b = 1; b < ns && j + b < s->g.g_staging_slots; b++)
		/* release */
		kvp_store_release(&s->spans[j + b].sp_state, 0);
	/* release: free again */
	kvp_store_release(&sp->sp_state,
			  KVP_SP_WORD(KVP_SP_GEN(w) + 1, 0, KVP_SP_FREE));
}

#endif /* KVP_SPAN_H */
