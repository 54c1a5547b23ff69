/* SPDX-License-Identifier: MIT */
/*
 * staging.c - the staging arena: spans of slots that SSD reads land in
 * when they are not promoted, and who frees them (I17, I23, I24).
 *
 * The span words, their transitions and the proof that a span is freed
 * exactly once, never reused while held, and counted exactly are in
 * shm/kvp_span.h; this file is the tier thread's policy over them: where
 * a span goes (first fit), the occupancy count (h_staging_used, I24),
 * the sweep of spans whose holders are gone, and the adoption of frees a
 * dead freer left half-done.
 */
#include "agent/tier_int.h"

/* Free a READY span nobody holds (any agent thread; idempotent).  A span
 * already FREEING belongs to its freer and is left alone here. */
bool
kvp_span_free_if_unheld(struct kvp_seg *s, uint32_t head, bool count_expired)
{
	struct kvp_span *sp = &s->spans[head];
	/* acquire: pairs with the state CASes */
	uint64_t w = kvp_load_acquire(&sp->sp_state), fw;

	if (KVP_SP_STATE(w) != KVP_SP_READY || !kvp_span_unheld(sp) ||
	    /* one freer */
	    !kvp_span_free_begin(sp, w, KVP_SP_AGENT, &fw))
		return false;
	/* occupancy, by the FREEING CAS winner only; an adopter of a dead
	 * freer's span does not subtract again (a freer killed between its
	 * CAS and this leaves the count high until the arena is idle:
	 * kvp_staging_reconcile) */
	kvp_span_count_sub(s, KVP_SP_N(w));
	kvp_span_finish_free(s, head, fw);
	if (count_expired)
		/* stat */
		kvp_actr_add(s->hdr, KVP_ACTR_STAGING_EXPIRED, 1);
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
	uint64_t w = kvp_load_acquire(&sp->sp_state), fw;

	if (KVP_SP_STATE(w) != KVP_SP_FREEING ||
	    KVP_SP_FREER(w) != dead_freer ||
	    /* the span is ours to finish */
	    !kvp_span_adopt(sp, w, &fw))
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

/* 'need' contiguous free slots; a run does not wrap.  UINT32_MAX if
 * none.  While at most a quarter of the arena is taken, first fit from
 * slot 0: the arena's low slots are used again and again, so a client
 * maps (first touch: a minor fault per 4 KiB page, 1-18 us each) and
 * caches only the part of the arena a load needs, not all of it in turn
 * (next fit walked 64 MiB of 64 KiB slots through every client: 2,000
 * values read 0.28 s against 0.09 s).  Fuller, next fit from *hint
 * (where the last span ended: with small slots the arena has thousands,
 * and the slots after the last span are the likeliest free), so the scan
 * stays short. */
uint32_t
kvp_staging_find(struct kvp_seg *s, unsigned need, uint32_t *hint)
{
	uint64_t S = s->g.g_staging_slots,
		 /* relaxed: a hint for where to look (this thread is the
		  * only one that raises it) */
		used = kvp_load_relaxed(&s->hdr->h_staging_used),
		 from = used * 4 <= S ? 0 :
			*hint < S     ? *hint :
					0,
		 k, run = 0, n;

	for (n = 0; n < S + need; n++) {
		k = (from + n) % S;
		if (k == 0)
			run = 0; /* a run does not wrap */
		/* acquire: pairs with the freer's release */
		run = KVP_SP_STATE(kvp_load_acquire(&s->spans[k].sp_state)) ==
				      KVP_SP_FREE ?
			      run + 1 :
			      0;
		if (run == need) {
			*hint = (uint32_t)((k + 1) % S);
			return (uint32_t)(k + 1 - need);
		}
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
kvp_staging_alloc_agent(struct kvp_seg *s, uint32_t *hint, unsigned need,
			uint64_t slot, uint64_t astart, uint64_t extent,
			uint32_t client)
{
	uint32_t head = kvp_staging_find(s, need, hint);
	uint64_t hw;

	if (head == UINT32_MAX && kvp_staging_sweep_agent(s))
		head = kvp_staging_find(s, need, hint);
	if (head == UINT32_MAX)
		return -EBUSY;
	/* the span lies in the arena: found by our own count, not read */
	KVP_ASSERT(need >= 1 && (uint64_t)head + need <= s->g.g_staging_slots,
		   "I17");
	/* acquire: the free word we allocate from (its generation) */
	hw = kvp_load_acquire(&s->spans[head].sp_state);
	kvp_staging_account(s, need);
	kvp_span_alloc_agent(s, head, need, hw, slot, astart, extent);
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
	/* READY with no holder, freed just below; relaxed: our own word */
	kvp_span_ready_agent(&s->spans[head],
			     kvp_load_relaxed(&s->spans[head].sp_state), need);
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
	kvp_span_count_add_agent(s, need);
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
	if (used && kvp_span_count_reset_agent(s, used))
		return used;
	return 0;
}
