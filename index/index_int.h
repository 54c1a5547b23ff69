/* SPDX-License-Identifier: MIT */
/*
 * index_int.h - the agent's half of the index (index/index_agent.c): the
 * hold scan of the CHECK protocol and what an attaching agent undoes.
 * Never included by a public header.
 */
#ifndef KVP_INDEX_INT_H
#define KVP_INDEX_INT_H

#include "index/kvp_index.h"

/* A slot under CHECK, waiting for the hold scan's verdict. */
struct kvp_cand {
	uint64_t slot;
	uint64_t word; /* state word with CHECK set */
	bool held;
};

/* Step 1 for slot i (state word w): 1 if taken under CHECK (and *c
 * filled), 0 if not (it changed, or is not READY/DELETED without flags). */
unsigned kvp_ix_cand_take_agent(struct kvp_seg *s, uint64_t i, uint64_t w,
				struct kvp_cand *c);
/* Steps 2-3: one full fence, then mark every candidate named by a hold
 * slot or a live lease held.  Any number of candidates. */
void kvp_ix_holds_scan_agent(struct kvp_seg *s, struct kvp_cand *c, unsigned n);
/* An attaching agent: clear every CHECK and every claim its dead
 * predecessor left.  Returns how many it undid. */
unsigned kvp_ix_clear_stale_agent(struct kvp_seg *s, bool keep_ssd);

#endif /* KVP_INDEX_INT_H */
