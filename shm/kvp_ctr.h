/* SPDX-License-Identifier: MIT */
/*
 * kvp_ctr.h - counters and histograms in the segment: each client's
 * shard, the agent's counters, and what gone clients leave behind.
 *
 * Words (shm/kvp_shm.h):
 *
 *   cs_ctr[KVP_CTR_SLOTS]        a client's counters (enum kvp_ctr) and
 *                                gauges, in its slot
 *   cs_hist[KVP_HIST_SLOTS][...] its latency histograms (enum kvp_hist)
 *   h_actr[KVP_ACTR__N]          the agent's counters (enum kvp_actr), and
 *                                from KVP_ACTR_RETIRED0 on the counters of
 *                                gone clients
 *   h_hist_retired[...]          the histograms of gone clients
 *
 * This file owns these words: every write is a function here, and
 * tests/structure/test_structure.sh fails on a write anywhere else.
 *
 *   kvp_ctr_add, kvp_ctr_hist   a client's own shard (single writer)
 *   kvp_ctr_retire              a shard folded into the retired sums and
 *                               zeroed (kvp_close; the reaper)
 *   kvp_ctr_unpin_agent         a dead client's pinned-bytes gauges -> 0
 *                               (the reaper)
 *   kvp_actr_add, kvp_actr_set  an agent counter, a gauge (agent threads;
 *                               a client that repairs the allocator)
 *
 * Rules (statistics: nothing is ever decided on them):
 *  C1. A shard has one writer, its client, while the slot is LIVE: a
 *      relaxed load and store, no RMW (no bus lock on the hot path).  A
 *      reader sums the shards and the retired words: a torn or late sum
 *      is a statistic a scrape later, never a wrong answer.
 *  C2. A shard is retired once per owner: by kvp_close before its slot is
 *      given back, or by the reaper while the slot is REAPING (the owner is
 *      dead: the reaper is the only writer).  Retiring adds each non-zero
 *      word to the retired sums (an atomic add: several retirers run at
 *      once) and zeroes it, so the next owner starts from zero.  A reaper
 *      killed between an add and its zero counts that word twice: a
 *      statistic.
 *  C3. The agent's counters are atomic adds (several threads, and a
 *      client's allocator repair); a gauge is a relaxed store by the one
 *      thread that keeps it.
 *  C4. Every word is written by clients too (its shard, a retire, the
 *      allocator's repair): the agent reads them for metrics only, and
 *      nothing it decides depends on them.
 */
#ifndef KVP_CTR_H
#define KVP_CTR_H

#include "shm/kvp_shm.h"

/* ---- a client's shard (C1) ---- */

/* Counter k of shard cs += d (a gauge goes down with d wrapping). */
KVP_INLINE void
kvp_ctr_add(struct kvp_client_slot *cs, unsigned k, uint64_t d)
{
	kvp_aword_t *w = &cs->cs_ctr[k];

	/* relaxed: statistics; only this client writes its shard (C1) */
	kvp_store_relaxed(w, kvp_load_relaxed(w) + d);
}

/* One observation of ns nanoseconds into histogram h of shard cs. */
KVP_INLINE void
kvp_ctr_hist(struct kvp_client_slot *cs, unsigned h, uint64_t ns)
{
	kvp_aword_t *hw = cs->cs_hist[h];
	unsigned b = kvp_hist_bucket(ns);

	/* relaxed: statistics; only this client writes its shard (C1) */
	kvp_store_relaxed(&hw[b], kvp_load_relaxed(&hw[b]) + 1);
	kvp_store_relaxed(&hw[KVP_HIST_SUM],
			  kvp_load_relaxed(&hw[KVP_HIST_SUM]) + ns);
}

/* Fold shard cs (counters and histograms) into the pool's retired totals
 * and zero it (C2): kvp_close, and the reaper for a dead client. */
KVP_INLINE void
kvp_ctr_retire(struct kvp_shm_header *h, struct kvp_client_slot *cs)
{
	uint32_t k, j;

	for (k = 0; k < KVP_CTR_SLOTS; k++) {
		/* relaxed: statistics; the add is atomic */
		uint64_t v = kvp_load_relaxed(&cs->cs_ctr[k]);
		if (v)
			kvp_fetch_add(&h->h_actr[KVP_ACTR_RETIRED0 + k], v);
		kvp_store_relaxed(&cs->cs_ctr[k], 0);
	}
	for (k = 0; k < KVP_HIST_SLOTS; k++) {
		for (j = 0; j < KVP_HIST_WORDS; j++) {
			/* relaxed: statistics; the add is atomic */
			uint64_t v = kvp_load_relaxed(&cs->cs_hist[k][j]);
			if (v)
				kvp_fetch_add(&h->h_hist_retired[k][j], v);
			kvp_store_relaxed(&cs->cs_hist[k][j], 0);
		}
	}
}

/* The reaper: a dead client pins nothing any more, its pinned-bytes
 * gauges go to zero (before its shard is retired: gauges are not sums). */
KVP_INLINE void
kvp_ctr_unpin_agent(struct kvp_client_slot *cs)
{
	/* relaxed: stats; the owner is dead (C2) */
	kvp_store_relaxed(&cs->cs_ctr[KVP_CTR_PINNED_DRAM], 0);
	kvp_store_relaxed(&cs->cs_ctr[KVP_CTR_PINNED_SSD], 0);
}

/* ---- the agent's counters (C3) ---- */

/* Agent counter k += v. */
KVP_INLINE void
kvp_actr_add(struct kvp_shm_header *h, unsigned k, uint64_t v)
{
	/* full: several threads add; statistics (C3) */
	kvp_fetch_add(&h->h_actr[k], v);
}

/* Agent gauge k = v (the one thread that keeps it). */
KVP_INLINE void
kvp_actr_set(struct kvp_shm_header *h, unsigned k, uint64_t v)
{
	/* relaxed: a gauge, one writer; read by tools (C3) */
	kvp_store_relaxed(&h->h_actr[k], v);
}

#endif /* KVP_CTR_H */
