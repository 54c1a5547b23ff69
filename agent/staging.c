/* SPDX-License-Identifier: MIT */
/*
 * staging.c - the staging arena: spans of slots that SSD reads land in
 * when they are not promoted, and who frees them (I17, I23, I24).
 *
 * A span is one or more contiguous staging slots.  Its head slot's word
 * (struct kvp_span.sp_state) is [gen:24][freer:16][nslots:16][state:8]
 * (KVP_SP_WORDF in shm/kvp_shm.h, the only description of it); each
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
 *    h_staging_used, then finishes (kvp_span_finish_free, shm/kvp_shm.h).
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
 */
#include "agent/tier_int.h"

void
kvp_span_set_holder(struct kvp_span *sp, uint32_t client)
{
	uint64_t bit = 1ull << (client % 64), old;

	do /* relaxed: the CAS decides */
		old = kvp_load_relaxed(&sp->sp_holders[client / 64]);
	/* full CAS */
	while (!kvp_cas(&sp->sp_holders[client / 64], old, old | bit));
}

void
kvp_span_clear_holder(struct kvp_span *sp, uint32_t client)
{
	uint64_t bit = 1ull << (client % 64), old;

	do /* relaxed: the CAS decides */
		old = kvp_load_relaxed(&sp->sp_holders[client / 64]);
	while ((old & bit) &&
	       !kvp_cas(&sp->sp_holders[client / 64], old, old & ~bit));
}

bool
kvp_span_unheld(const struct kvp_span *sp)
{
	unsigned k;

	for (k = 0; k < KVP_SPAN_HOLDER_WORDS; k++)
		/* acquire: holders' CAS */
		if (kvp_load_acquire(&sp->sp_holders[k]))
			return false;
	return true;
}

/* Free a READY span nobody holds (any agent thread; idempotent).  A span
 * already FREEING belongs to its freer and is left alone here. */
bool
kvp_span_free_if_unheld(struct kvp_seg *s, uint32_t head, bool count_expired)
{
	struct kvp_span *sp = &s->spans[head];
	/* acquire: pairs with the state CASes */
	uint64_t w = kvp_load_acquire(&sp->sp_state);
	uint64_t fw = KVP_SP_WORDF(KVP_SP_GEN(w), KVP_SP_N(w), KVP_SP_FREEING,
				   KVP_SP_AGENT);

	if (KVP_SP_STATE(w) != KVP_SP_READY || !kvp_span_unheld(sp) ||
	    /* full CAS: one freer */
	    !kvp_cas(&sp->sp_state, w, fw))
		return false;
	/* full: occupancy, by the FREEING CAS winner only; an adopter of a
	 * dead freer's span does not subtract again (a freer killed between
	 * its CAS and this leaves the count high until the arena is idle:
	 * kvp_staging_reconcile) */
	kvp_fetch_add(&s->hdr->h_staging_used, (uint64_t)0 - KVP_SP_N(w));
	kvp_span_finish_free(s, head, fw);
	if (count_expired)
		/* stat */
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_STAGING_EXPIRED], 1);
	return true;
}

/* Finish the free of a FREEING span whose freer is dead (freer named in
 * the word: client slot + 1, or KVP_SP_AGENT for a dead predecessor).
 * Takes the span over with a CAS first, so two adopters cannot both
 * finish it.  Returns 1 if it freed the span. */
unsigned
kvp_span_adopt_agent(struct kvp_seg *s, uint32_t head, unsigned dead_freer)
{
	struct kvp_span *sp = &s->spans[head];
	/* acquire: pairs with the freer's CAS */
	uint64_t w = kvp_load_acquire(&sp->sp_state);
	uint64_t fw = KVP_SP_WORDF(KVP_SP_GEN(w), KVP_SP_N(w), KVP_SP_FREEING,
				   KVP_SP_AGENT);

	if (KVP_SP_STATE(w) != KVP_SP_FREEING ||
	    KVP_SP_FREER(w) != dead_freer ||
	    /* full CAS: the span is ours to finish */
	    !kvp_cas(&sp->sp_state, w, fw))
		return 0;
	kvp_span_finish_free(s, head, fw);
	return 1;
}

/* A dead client's span bits go (reaper thread); spans left unheld are
 * freed.  Idempotent. */
void
kvp_span_release_client_agent(struct kvp_seg *s, uint32_t client)
{
	uint64_t k;

	if (!s->spans)
		return;
	for (k = 0; k < s->g.g_staging_slots; k++) {
		struct kvp_span *sp = &s->spans[k];
		uint64_t w = kvp_load_acquire(&sp->sp_state); /* acquire */

		if (KVP_SP_STATE(w) == KVP_SP_FREEING) {
			/* it died freeing this span */
			kvp_span_adopt_agent(s, (uint32_t)k, client + 1);
			continue;
		}
		if (KVP_SP_STATE(w) != KVP_SP_READY &&
		    KVP_SP_STATE(w) != KVP_SP_READING)
			continue;
		kvp_span_clear_holder(sp, client);
		kvp_span_free_if_unheld(s, (uint32_t)k, true);
	}
}

/* Reclaim spans whose holders are gone (dead clients' bits included) and
 * finish frees a dying client left half-done.  Returns spans freed. */
unsigned
kvp_staging_sweep_agent(struct kvp_seg *s)
{
	unsigned n = 0;
	uint64_t k;
	uint32_t c;

	if (!s->spans)
		return 0;
	for (k = 0; k < s->g.g_staging_slots; k++) {
		struct kvp_span *sp = &s->spans[k];
		uint64_t w = kvp_load_acquire(&sp->sp_state); /* acquire */

		if (KVP_SP_STATE(w) == KVP_SP_FREEING) {
			/* a client freer that died (not yet reaped); a live
			 * one finishes its own free */
			unsigned f = KVP_SP_FREER(w);
			if (f && f <= s->g.g_max_clients &&
			    !kvp_shm_client_alive(s, f - 1))
				n += kvp_span_adopt_agent(s, (uint32_t)k, f);
			continue;
		}
		if (KVP_SP_STATE(w) != KVP_SP_READY)
			continue;
		/* bits of clients that are not LIVE any more (a LIVE one
		 * that died is the reaper's: it clears its bits) */
		for (c = 0; c < s->g.g_max_clients; c++) {
			/* acquire */
			uint64_t cw = kvp_load_acquire(&s->clients[c].cs_state);
			if (KVP_CS_STATE(cw) != KVP_CS_LIVE &&
			    /* relaxed: a hint; the clear is a CAS */
			    (kvp_load_relaxed(&sp->sp_holders[c / 64]) >>
			     (c % 64)) &
				    1)
				kvp_span_clear_holder(sp, c);
		}
		n += kvp_span_free_if_unheld(s, (uint32_t)k, true);
	}
	return n;
}

/* First fit of 'need' contiguous free slots; UINT32_MAX if none. */
uint32_t
kvp_staging_find(struct kvp_seg *s, unsigned need)
{
	uint64_t S = s->g.g_staging_slots, k, run = 0;

	for (k = 0; k < S; k++) {
		/* acquire: pairs with the freer's release */
		uint64_t w = kvp_load_acquire(&s->spans[k].sp_state);

		run = KVP_SP_STATE(w) == KVP_SP_FREE ? run + 1 : 0;
		if (run == need)
			return (uint32_t)(k + 1 - need);
	}
	return UINT32_MAX;
}

/*
 * Allocate a span of 'need' slots for the extent [astart, astart + extent)
 * of index slot 'slot', READING, with client's bit set (tier thread: the
 * only allocator).  An arena with no room is swept once (spans whose
 * holders are gone).  The head slot, or -EBUSY.
 */
int64_t
kvp_staging_alloc_agent(struct kvp_seg *s, unsigned need, uint64_t slot,
			uint64_t astart, uint64_t extent, uint32_t client)
{
	uint32_t head = kvp_staging_find(s, need);
	uint64_t hw;
	unsigned k;

	if (head == UINT32_MAX && kvp_staging_sweep_agent(s))
		head = kvp_staging_find(s, need);
	if (head == UINT32_MAX)
		return -EBUSY;
	/* the span lies in the arena: found by our own count, not read */
	KVP_ASSERT(need >= 1 && (uint64_t)head + need <= s->g.g_staging_slots,
		   "I17");
	/* acquire: the free word we allocate from (its generation) */
	hw = kvp_load_acquire(&s->spans[head].sp_state);
	kvp_staging_account(s, need);
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
	kvp_span_set_holder(&s->spans[head], client);
	return head;
}

/* The read into a span just allocated could not be submitted: the
 * client's bit goes, the span is READY with no holder and freed. */
void
kvp_staging_abort_agent(struct kvp_seg *s, uint32_t head, unsigned need,
			uint32_t client)
{
	kvp_span_clear_holder(&s->spans[head], client);
	/* release: READY with no holder, freed just below */
	kvp_store_release(&s->spans[head].sp_state,
			  KVP_SP_WORD(KVP_SP_GEN(kvp_load_relaxed(
					      &s->spans[head].sp_state)),
				      need, KVP_SP_READY));
	kvp_span_free_if_unheld(s, head, false);
}

/*
 * Staging occupancy, kept exactly: h_staging_used goes up by a span's
 * slots here, before the span leaves FREE (this thread is the only
 * allocator), and down by the same count from whoever wins the span's
 * READY -> FREEING CAS (a holder, or this thread), before the FREE
 * stores.  Occupancy only grows here, so the highest value returned here
 * is the exact peak; no sampling can miss it.
 */
void
kvp_staging_account(struct kvp_seg *s, unsigned need)
{
	struct kvp_shm_header *h = s->hdr;
	/* full: the count goes up before the span's state stores */
	uint64_t used = kvp_fetch_add(&h->h_staging_used, need) + need;

	/* relaxed: written by this thread only; read by tools */
	if (used > kvp_load_relaxed(&h->h_staging_peak))
		kvp_store_relaxed(&h->h_staging_peak, used);
}

/*
 * A freer killed between its FREEING CAS and its subtraction leaves the
 * count high by its span.  When every slot is FREE (acquire: each freer
 * subtracted before its FREE store, and nothing leaves FREE but through
 * this thread), the true occupancy is 0: put the count right.  Returns
 * the slots that were unaccounted for.
 */
uint64_t
kvp_staging_reconcile(struct kvp_seg *s)
{
	struct kvp_shm_header *h = s->hdr;
	uint64_t k, used;

	/* relaxed: a hint; the scan below decides */
	if (!s->spans || !kvp_load_relaxed(&h->h_staging_used))
		return 0;
	for (k = 0; k < s->g.g_staging_slots; k++)
		/* acquire: pairs with the freers' FREE release */
		if (KVP_SP_STATE(kvp_load_acquire(&s->spans[k].sp_state)) !=
		    KVP_SP_FREE)
			return 0;
	/* relaxed: ordered after the acquire loads above */
	used = kvp_load_relaxed(&h->h_staging_used);
	/* full CAS: nobody else changes it while every slot is free */
	if (used && kvp_cas(&h->h_staging_used, used, 0))
		return used;
	return 0;
}
