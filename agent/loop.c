/* SPDX-License-Identifier: MIT */
/*
 * loop.c - the tier thread: one round (kvp_tier_step_agent) reaps SSD
 * completions, serves the request rings, runs the orphan sweep the reaper
 * asked for, retries frees that waited for the allocator lock, repairs a
 * damaged page map, runs the eviction policy (evict.c), submits I/O and
 * wakes the clients it answered.  The thread loops on rounds, sleeping on
 * the h_evict_wake futex when idle; at stop it runs the flush (below:
 * demotions and tombstones, move.c, between rounds).  The fuzz harness
 * drives rounds directly.
 */
#include "agent/tier_int.h"

/* One round of the tier thread: SSD completions, requests from the rings,
 * the orphan sweep the reaper asked for, the DRAM round (eviction,
 * demotion, reclaim), submissions and wake-ups.  With I/O in flight,
 * sleeps until a completion or a request arrives, wait_ms at most (0:
 * not at all).  Returns true when I/O is still in
 * flight (the caller should come back at once). */
bool
kvp_tier_step_agent(struct kvp_agent *a, int wait_ms)
{
	struct kvp_shm_header *h = a->seg.hdr;
	struct kvp_tier *t = a->tier;
	struct kvp_ssd_cqe cq[64];
	/* acquire: pairs with the clients' bump after posting; loaded before
	 * the rings are served, so a post after it ends the sleep below */
	unsigned int seq = kvp_iload_acquire(&h->h_evict_wake);
	int n, k;

	if (t) {
		while ((n = kvp_drv_poll_agent(t->ssd, cq, 64, 0)) > 0)
			for (k = 0; k < n; k++)
				kvp_complete(a, &cq[k]);
		/* reads first (rule 9): what the rings ask is sent to the
		 * devices, and the clients answered by the completions above
		 * are woken, before this round's background work (eviction,
		 * demotion, reclaim) */
		kvp_serve_rings(a);
		kvp_tier_submit(a);
		kvp_wake_clients(a);
		/* tombstones the store could not take */
		kvp_tomb_retry_agent(a);
		kvp_tier_publish(a);
	}
	/* full CAS: a sweep the reaper asked for */
	if (kvp_cas(&a->gc_request, 1, 0)) {
		uint64_t freed = kvp_dram_gc_agent(a);

		if (freed == UINT64_MAX) {
			/* the allocator lock is held: next round */
			/* release: our own flag */
			kvp_store_release(&a->gc_request, 1);
		} else {
			/* stat */
			kvp_actr_add(h, KVP_ACTR_REAP_PAGES, freed);
			if (freed)
				kvp_log(KVP_LOG_INFO, "reaper",
					"%llu units of unfinished "
					"puts freed",
					(unsigned long long)freed);
		}
	}
	/* a cut of the segment file: values whose DRAM bytes it zeroed
	 * leave DRAM first (segment.c found it; the repair then reclaims) */
	{
		/* acquire: pairs with the reaper's CAS */
		uint64_t cut = kvp_load_acquire(&a->cut_due);

		/* full CAS: done unless a lower cut came meanwhile */
		if (cut && kvp_evict_cut_agent(a, cut - 1))
			kvp_cas(&a->cut_due, cut, 0);
	}
	/* frees that waited for the allocator lock, and a damaged map */
	kvp_dram_deferred_agent(a);
	kvp_dram_repair_agent(a);
	/* units populated since the last round become free */
	kvp_populate_step_agent(a);
	kvp_dram_round_agent(a);
	/* the HBM tier: helpers' answers and health, copies in and out */
	kvp_hbm_round_agent(a);
	if (!t)
		return false;
	kvp_tier_submit(a);
	kvp_wake_clients(a);
	if (!kvp_drv_outstanding_agent(t->ssd))
		return false;
	/* I/O in flight: sleep until a completion or a request (a client
	 * bumps h_evict_wake after posting), wait_ms at most; where that
	 * sleep is not to be had, wait for I/O only, wait_ms at a time, so
	 * new requests are not left waiting long */
	if (wait_ms && kvp_drv_wait_agent(t->ssd, kvp_wake_word(&a->seg), seq,
					  wait_ms) == 0)
		wait_ms = 0;
	n = kvp_drv_poll_agent(t->ssd, cq, 64, wait_ms);
	for (k = 0; k < n; k++)
		kvp_complete(a, &cq[k]);
	kvp_wake_clients(a);
	return true;
}

/* What a stop flush still has to do: READY values only in DRAM, and
 * deleted values with an SSD copy but no tombstone. */
static uint64_t
kvp_flush_left(struct kvp_agent *a, uint64_t *tombs)
{
	struct kvp_seg *s = &a->seg;
	uint64_t i, n = 0;

	*tombs = 0;
	for (i = 0; i < s->g.g_index_slots; i++) {
		/* acquire: pairs with the publish CAS */
		uint64_t w = kvp_load_acquire(&s->meta[i]);
		const struct kvp_entry *e = &s->entries[i];

		/* relaxed: this thread writes locations */
		if (KVP_IX_STATE(w) == KVP_IX_READY &&
		    KVP_LOC_TIER(kvp_load_relaxed(&e->e_loc)) ==
			    KVP_TIER_DRAM &&
		    !kvp_load_relaxed(&e->e_ssd))
			n++;
		else if (KVP_IX_STATE(w) == KVP_IX_DELETED &&
			 kvp_load_relaxed(&e->e_ssd) && !a->tier->tombed[i])
			(*tombs)++;
	}
	*tombs += a->tier->nlater; /* queued but not yet taken by the store */
	return n;
}

/*
 * A clean stop with an SSD tier (SIGTERM, --stop-flush-secs): every READY
 * value that lives only in DRAM is written to SSD and every deleted value
 * with an SSD copy gets its tombstone, so that a restart, with or without
 * the segment, finds exactly the keys and latest values the pool had.
 * Held values are written too (a hold keeps bytes from being freed, not
 * from being read); requests keep being served meanwhile (each wait is a
 * round of the tier thread).  Bounded by deadline_ns (CLOCK_MONOTONIC).
 * Returns the number of values and tombstones left unwritten.
 */
uint64_t
kvp_tier_flush_agent(struct kvp_agent *a, uint64_t deadline_ns)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	uint64_t i, written = 0, tombs = 0, left = 0, ltombs = 0,
		    t0 = kvp_now_ns(CLOCK_MONOTONIC);
	unsigned pass;

	if (!t)
		return 0;
	for (pass = 0; pass < 4; pass++) {
		for (i = 0; i < s->g.g_index_slots; i++) {
			/* acquire: pairs with the publish CAS */
			uint64_t w = kvp_load_acquire(&s->meta[i]);
			struct kvp_entry *e = &s->entries[i];
			unsigned st = KVP_IX_STATE(w);

			if (kvp_now_ns(CLOCK_MONOTONIC) >= deadline_ns)
				goto out;
			if (st == KVP_IX_DELETED) {
				/* relaxed: this thread writes SSD locations */
				uint64_t ssd = kvp_load_relaxed(&e->e_ssd);

				if (!ssd || t->tombed[i] || t->busy[i])
					/* busy: a demotion; next pass */
					continue;
				while (t->nfree < 2 &&
				       kvp_now_ns(CLOCK_MONOTONIC) <
					       deadline_ns)
					kvp_tier_step_agent(a, 1);
				tombs += kvp_tomb_queue(a, i, ssd, NULL, 0) ==
					 0;
				continue;
			}
			/* relaxed: stable while READY; this thread moves it */
			if (st != KVP_IX_READY ||
			    KVP_LOC_TIER(kvp_load_relaxed(&e->e_loc)) !=
				    KVP_TIER_DRAM ||
			    kvp_load_relaxed(&e->e_ssd) || t->busy[i])
				continue;
			while ((kvp_tier_demote_full_agent(a) ||
				t->nfree < 2) &&
			       kvp_now_ns(CLOCK_MONOTONIC) < deadline_ns)
				kvp_tier_step_agent(a, 1);
			if (kvp_tier_write_failing_agent(a)) {
				kvp_log(KVP_LOG_ERROR, "ssd",
					"stop: SSD writes fail: values only "
					"in DRAM are lost");
				goto out;
			}
			written += kvp_tier_demote_agent(a, i, w);
		}
		/* let every write land (and the evictor relocate) */
		while (kvp_drv_outstanding_agent(t->ssd) &&
		       kvp_now_ns(CLOCK_MONOTONIC) < deadline_ns)
			kvp_tier_step_agent(a, 5);
		if (!kvp_flush_left(a, &ltombs) && !ltombs)
			break;
	}
out:
	while ((kvp_drv_outstanding_agent(t->ssd) || t->nlater) &&
	       kvp_now_ns(CLOCK_MONOTONIC) < deadline_ns)
		kvp_tier_step_agent(a, 5);
	left = kvp_flush_left(a, &ltombs);
	kvp_log(left || ltombs ? KVP_LOG_WARN : KVP_LOG_INFO, "ssd",
		"stop: %llu values written "
		"to SSD and %llu tombstones in %.2f s; %llu values and %llu tombstones left "
		"unwritten%s",
		(unsigned long long)written, (unsigned long long)tombs,
		(double)(kvp_now_ns(CLOCK_MONOTONIC) - t0) / 1e9,
		(unsigned long long)left, (unsigned long long)ltombs,
		left || ltombs ?
			" (deadline, SSD full or failing, or values still being put)" :
			"");
	return left + ltombs;
}

/* The tier thread.  On stop, with an SSD tier, it flushes (above). */
void *
kvp_tier_main_agent(void *arg)
{
	struct kvp_agent *a = arg;
	struct kvp_shm_header *h = a->seg.hdr;

	while (!kvp_load_acquire(&a->stop)) { /* acquire: main's release */
		unsigned int seq = kvp_iload_acquire(&h->h_evict_wake);

		/* I/O in flight: the step sleeps until a completion or a
		 * request (10 ms at most: deferred demotions, the publish) */
		if (kvp_tier_step_agent(
			    a, a->tier && !a->tier->ssd->wait_failed ? 10 : 1))
			continue;
		if (kvp_load_acquire(&a->stop)) /* acquire: main's release */
			break;
		/* sleep until a client kicks or posts, or 100 ms */
		kvp_futex_wait(&h->h_evict_wake, seq, 100ull * 1000 * 1000);
	}
	if (a->tier && a->cfg.stop_flush_ms)
		kvp_tier_flush_agent(a, kvp_now_ns(CLOCK_MONOTONIC) +
						(uint64_t)a->cfg.stop_flush_ms *
							1000000ull);
	return NULL;
}
