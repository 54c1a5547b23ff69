/* SPDX-License-Identifier: MIT */
/*
 * kvp_ring.h - the request ring: what a client asks of the agent (read a
 * value off SSD, delete a key durably), one ring of g_ring_entries
 * entries (struct kvp_req, shm/kvp_shm.h) per client slot.
 *
 * Each entry has one state word, rq_state = [seq:56][state:8]:
 *
 *   FREE(s) -> POSTED(s+1)     the client, after writing the request's
 *                              fields (kvp_ring_post)
 *   POSTED(s) -> TAKEN(s)      the agent (kvp_ring_take)
 *   TAKEN(s) -> ANSWERING(s)   the agent, to answer (kvp_ring_answer_claim);
 *                              then result and where, then
 *   ANSWERING(s) -> DONE(s)    (kvp_ring_answer_done), then a wake of the
 *                              client's cs_io_futex
 *   DONE(s) -> FREE(s)         the client, after reading the answer
 *                              (kvp_ring_free)
 *   POSTED|TAKEN(s) -> FREE(s) the client withdraws (agent gone:
 *                              kvp_ring_withdraw)
 *   TAKEN|ANSWERING(s) -> POSTED(s)  an attaching agent serves again what
 *                              its predecessor took (kvp_ring_requeue_agent)
 *   any(s) -> FREE(s+1)        a new owner of the client slot, at kvp_open
 *                              (kvp_ring_reset)
 *
 * This file owns rq_state and the request's fields: every write is a
 * function here, and tests/structure/test_structure.sh fails on a write
 * anywhere else.
 *
 * Invariants and proof sketch:
 *  R1. The client writes the fields only while the entry is FREE (it is
 *      the entry's only writer then: the agent writes only after a CAS
 *      from POSTED or TAKEN), and publishes them with the POSTED release;
 *      the agent reads them after the acquire load that saw POSTED.
 *  R2. The agent writes result and where only after its CAS from the
 *      exact TAKEN word it took to ANSWERING succeeded: an entry the
 *      client withdrew (FREE), or that a new owner reset (FREE(s+1)) and
 *      posted again (POSTED(s+2)), never receives a late answer (I19).
 *      It also checks that the client slot still has the word it had when
 *      it took the request (agent/ops.c, kvp_answer).
 *  R3. DONE is a release after the answer's fields; the client reads them
 *      after an acquire load that saw DONE(s) of its own POSTED(s), so a
 *      stale DONE of an earlier sequence is never taken for its answer.
 *  R4. An agent that died after TAKEN (or while ANSWERING) left the entry
 *      in a state no one else leaves: its successor puts it back to
 *      POSTED with a CAS (the client may withdraw at the same moment) and
 *      serves it again; reading off SSD is idempotent, and so is a
 *      durable delete of one (slot, gen).
 */
#ifndef KVP_RING_H
#define KVP_RING_H

#include "shm/kvp_shm.h"

enum kvp_rq_state {
	KVP_RQ_FREE = 0,
	KVP_RQ_POSTED = 1,
	KVP_RQ_TAKEN = 2,
	KVP_RQ_DONE = 3,
	KVP_RQ_ANSWERING = 4, /* the agent is writing the answer */
};
#define KVP_RQ_STATE(w) ((unsigned)((w)&0xff)) /* rq_state: [seq:56][state:8] */
#define KVP_RQ_SEQ(w) ((uint64_t)(w) >> 8)
#define KVP_RQ_WORD(seq, st) (((uint64_t)(seq) << 8) | (uint64_t)(st))
/* the same sequence, another state */
#define KVP_RQ_WITH(w, st) KVP_RQ_WORD(KVP_RQ_SEQ(w), st)
#define KVP_RQ_FIRST (1ull << 63)   /* rq_call: first key of its resolve call */
#define KVP_RQ_WHOLE (1ull << 62)   /* rq_call: whole value (may promote) */
#define KVP_RQ_DELETE (1ull << 61)  /* rq_call: delete (slot, gen), durably */
#define KVP_WHERE_DRAM (1ull << 63) /* rq_where: promoted; read the entry */

/* Client slot c's ring (g_ring_entries entries).  The segment must have
 * an SSD tier (s->rings). */
KVP_INLINE struct kvp_req *
kvp_ring_of(const struct kvp_seg *s, uint32_t c)
{
	return &s->rings[(uint64_t)c * s->g.g_ring_entries];
}

/* ---- the client's half ---- */

/* A new owner of the slot: whatever a previous owner left is void (the
 * agent answers with a CAS on the exact word, R2). */
KVP_INLINE void
kvp_ring_reset(struct kvp_req *q)
{
	/* acquire: the last word the agent or owner wrote */
	uint64_t w = kvp_load_acquire(&q->rq_state);

	/* release: a fresh sequence, FREE */
	kvp_store_release(&q->rq_state,
			  KVP_RQ_WORD(KVP_RQ_SEQ(w) + 1, KVP_RQ_FREE));
}

/* Post a request in entry q, whose word w is FREE: its fields, then
 * POSTED (R1).  posted_ns: the client's post time (CLOCK_MONOTONIC), left
 * in rq_result while the request is POSTED for the agent's queue stage (a
 * statistic it clamps, I38; 0: none).  Returns the POSTED word (the
 * request's name). */
KVP_INLINE uint64_t
kvp_ring_post(struct kvp_req *q, uint64_t w, uint64_t slot, uint64_t gen,
	      uint64_t off, uint64_t len, uint64_t call, uint64_t posted_ns)
{
	uint64_t posted = KVP_RQ_WORD(KVP_RQ_SEQ(w) + 1, KVP_RQ_POSTED);

	/* relaxed: published by the POSTED store-release below */
	kvp_store_relaxed(&q->rq_slot, slot);
	kvp_store_relaxed(&q->rq_gen, gen);
	kvp_store_relaxed(&q->rq_off, off);
	kvp_store_relaxed(&q->rq_len, len);
	kvp_store_relaxed(&q->rq_call, call);
	kvp_store_relaxed(&q->rq_result, posted_ns);
	kvp_store_relaxed(&q->rq_where, 0);
	/* release: the request's fields before its POSTED state; pairs with
	 * the agent's acquire in kvp_serve_rings */
	kvp_store_release(&q->rq_state, posted);
	return posted;
}

/* The answer to the request posted as 'posted' is there: w (read with
 * an acquire load) is its DONE word (R3). */
KVP_INLINE bool
kvp_ring_is_done(uint64_t w, uint64_t posted)
{
	return w == KVP_RQ_WITH(posted, KVP_RQ_DONE);
}

/* The answer (DONE word w) was read: the entry is the client's again. */
KVP_INLINE void
kvp_ring_free(struct kvp_req *q, uint64_t w)
{
	/* release: our reads of the answer come first; the entry is ours to
	 * post again */
	kvp_store_release(&q->rq_state, KVP_RQ_WITH(w, KVP_RQ_FREE));
}

/* Withdraw the request whose word is w (the agent is gone): true unless
 * the word changed meanwhile (answered, or taken by a new agent). */
KVP_INLINE bool
kvp_ring_withdraw(struct kvp_req *q, uint64_t w)
{
	/* full CAS: withdraw it unless answered meanwhile (R2) */
	return kvp_cas(&q->rq_state, w, KVP_RQ_WITH(w, KVP_RQ_FREE));
}

/* ---- the agent's half ---- */

/* Take the POSTED request whose word is w: true with the entry TAKEN
 * (its word KVP_RQ_WITH(w, KVP_RQ_TAKEN)). */
KVP_INLINE bool
kvp_ring_take(struct kvp_req *q, uint64_t w)
{
	/* full CAS: the request is ours */
	return kvp_cas(&q->rq_state, w, KVP_RQ_WITH(w, KVP_RQ_TAKEN));
}

/* Claim the request taken as 'taken' to answer it: false when it was
 * withdrawn or reused meanwhile (then nothing may be written, R2). */
KVP_INLINE bool
kvp_ring_answer_claim(struct kvp_req *q, uint64_t taken)
{
	/* full CAS: TAKEN(seq) -> ANSWERING(seq); the entry is ours to write */
	return kvp_cas(&q->rq_state, taken,
		       KVP_RQ_WITH(taken, KVP_RQ_ANSWERING));
}

/* The answer's fields (the entry is ANSWERING, ours). */
KVP_INLINE void
kvp_ring_answer_write(struct kvp_req *q, int64_t res, uint64_t where)
{
	/* relaxed: published by the DONE release (kvp_ring_answer_done) */
	kvp_store_relaxed(&q->rq_result, (uint64_t)res);
	kvp_store_relaxed(&q->rq_where, where);
}

/* The answer is complete: DONE (R3). */
KVP_INLINE void
kvp_ring_answer_done(struct kvp_req *q, uint64_t taken)
{
	/* release: the answer before DONE; pairs with the client's acquire */
	kvp_store_release(&q->rq_state, KVP_RQ_WITH(taken, KVP_RQ_DONE));
}

/* An attaching agent: a request its predecessor took (TAKEN, or died
 * answering) is served again (R4).  True if it was put back. */
KVP_INLINE bool
kvp_ring_requeue_agent(struct kvp_req *q, uint64_t w)
{
	/* full CAS: the client may withdraw it at the same time */
	return (KVP_RQ_STATE(w) == KVP_RQ_TAKEN ||
		KVP_RQ_STATE(w) == KVP_RQ_ANSWERING) &&
	       kvp_cas(&q->rq_state, w, KVP_RQ_WITH(w, KVP_RQ_POSTED));
}

#endif /* KVP_RING_H */
