/* SPDX-License-Identifier: MIT */
/*
 * kvp_rbox.h - the remote mailbox (kvpoold --cluster): a client that
 * missed keys here asks the agent, through its mailbox in region
 * KVP_R_CLUSTER (g_rbox_kib KiB per client slot: a struct kvp_rbox, then
 * its data), which of them other nodes hold (PROBE) or to fetch them into
 * this pool (FETCH).
 *
 * Data: n answers (struct kvp_rbox_ans) first, then the namespace (1 byte
 * length, then the name), then n keys, each a 1-byte length and the key;
 * rb_bytes counts the namespace and the keys.
 *
 * The mailbox's state word, rb_state = [seq:56][state:8]:
 *
 *   FREE(s) -> POSTED(s)       the client, after the data (ready words
 *                              cleared), rb_kind, rb_n, rb_bytes
 *                              (kvp_rbox_request, kvp_rbox_post); then a
 *                              bump of cl_wake (kvp_rbox_ring)
 *   POSTED(s) -> TAKEN(s)      the agent (kvp_rbox_take), which copies
 *                              everything the client wrote into its own
 *                              memory before it reads any of it
 *   TAKEN(s): answers land     a FETCH's keys one by one as they arrive,
 *                              each published by its ready word
 *                              KVP_RA_READY(s) (kvp_rbox_answer_one)
 *   TAKEN(s) -> ANSWERING(s)   the agent claims the mailbox to answer
 *                              (kvp_rbox_answer_claim), writes every answer
 *   ANSWERING(s) -> DONE(s)    (kvp_rbox_answer_done), then bumps the
 *                              client's cs_io_futex
 *   DONE(s) -> FREE(s+1)       the client, after reading the answers
 *                              (kvp_rbox_free)
 *   POSTED|TAKEN(s) -> FREE(s+1)   the client gives up (kvp_rbox_withdraw),
 *                              or a new owner of the slot at kvp_open
 *                              (kvp_rbox_reset)
 *
 * This file owns rb_state, the request words, the answers (their fields
 * and ready words, and the private answers the agent composes before it
 * puts them) and the cluster thread's doorbell (cl_wake, in struct
 * kvp_cluster: the agent's other words there are agent/cluster_int.h's):
 * every write is a function here, and tests/structure/test_structure.sh
 * fails on a write anywhere else.
 *
 * Invariants and proof sketch (I37):
 *  M1. The client writes the mailbox only while it is FREE and publishes
 *      it with the POSTED release; the agent reads it only after its CAS
 *      POSTED -> TAKEN and copies it first, so a client that rewrites its
 *      mailbox later (it withdrew) changes nothing the agent acts on.
 *  M2. The agent writes an answer only while the mailbox is still the
 *      request it took (its exact TAKEN word, an acquire load before each
 *      early answer; a CAS TAKEN -> ANSWERING before the final ones) and
 *      its client slot still has the word it had (shm/kvp_slot.h, S1).  An
 *      early answer that races a withdrawal lands in a mailbox whose new
 *      request cleared its ready words: a ready word carries the sequence
 *      of the request it answers, and the client takes only its own.
 *  M3. The ready word and DONE are release stores after the fields they
 *      publish; the client reads answers after an acquire load that saw
 *      its own sequence, so it never reads a half-written answer.
 *  M4. A withdrawal (or a reset) moves the sequence on with a CAS from
 *      the exact word it saw, so a late CAS TAKEN -> ANSWERING fails and
 *      no DONE of the old request is ever taken for the new one's.
 */
#ifndef KVP_RBOX_H
#define KVP_RBOX_H

#include "shm/kvp_shm.h"

enum kvp_rb_state {
	KVP_RB_FREE = 0,
	KVP_RB_POSTED = 1,
	KVP_RB_TAKEN = 2,
	KVP_RB_DONE = 3,
	KVP_RB_ANSWERING = 4,
};
#define KVP_RB_STATE(w) ((unsigned)((w)&0xff)) /* [seq:56][state:8] */
#define KVP_RB_SEQ(w) ((uint64_t)(w) >> 8)
#define KVP_RB_WORD(seq, st) (((uint64_t)(seq) << 8) | (uint64_t)(st))
/* the same sequence, another state */
#define KVP_RB_WITH(w, st) KVP_RB_WORD(KVP_RB_SEQ(w), st)
enum kvp_rb_kind {
	KVP_RB_PROBE = 1, /* which keys does another node hold (no transfer) */
	KVP_RB_FETCH = 2, /* bring them into this pool */
};
/* An answer's ready word for the request of sequence seq (never 0). */
#define KVP_RA_READY(seq) ((unsigned)(((seq)&0x7fffffffu) << 1) | 1u)

/* Client slot's mailbox. */
KVP_INLINE struct kvp_rbox *
kvp__rbox(const struct kvp_seg *s, uint32_t slot)
{
	return (struct kvp_rbox *)(s->base + s->L.off[KVP_R_CLUSTER] +
				   ((uint64_t)slot + 1) *
					   ((uint64_t)s->g.g_rbox_kib << 10));
}

/* ---- the client's half ---- */

/*
 * Our mailbox back to FREE with the next sequence, from whatever a
 * previous call, or a previous owner of the slot, left (M4).  A mailbox
 * the agent is answering is waited for (it writes only a few KiB, then
 * DONE).  Returns the FREE word.
 */
KVP_INLINE uint64_t
kvp_rbox_reset(struct kvp_rbox *rb)
{
	unsigned spins = 0;

	for (;;) {
		/* acquire: the last word the agent or the owner wrote */
		uint64_t w = kvp_load_acquire(&rb->rb_state);
		uint64_t fresh = KVP_RB_WORD(KVP_RB_SEQ(w) + 1, KVP_RB_FREE);

		if (KVP_RB_STATE(w) == KVP_RB_FREE)
			return w;
		if (KVP_RB_STATE(w) == KVP_RB_ANSWERING && spins++ < 100000) {
			sched_yield();
			continue;
		}
		/* full CAS from the exact word: a late answer cannot land */
		if (kvp_cas(&rb->rb_state, w, fresh))
			return fresh;
	}
}

/* The answers' ready words of the next request, cleared (m answers): no
 * ready word of an earlier request (M2).  The mailbox is FREE. */
KVP_INLINE void
kvp_rbox_answers_clear(struct kvp_rbox *rb, size_t m)
{
	memset(rb + 1, 0, m * sizeof(struct kvp_rbox_ans));
}

/* The request's words (the data is written): kind, n keys, bytes of
 * namespace and keys.  The mailbox is FREE. */
KVP_INLINE void
kvp_rbox_request(struct kvp_rbox *rb, unsigned kind, uint64_t n, uint64_t bytes)
{
	/* relaxed: published by the POSTED release (kvp_rbox_post) */
	kvp_store_relaxed(&rb->rb_kind, kind);
	kvp_store_relaxed(&rb->rb_n, n);
	kvp_store_relaxed(&rb->rb_bytes, bytes);
}

/* FREE(w) -> POSTED: the request is the agent's to take.  Returns the
 * POSTED word. */
KVP_INLINE uint64_t
kvp_rbox_post(struct kvp_rbox *rb, uint64_t w)
{
	uint64_t posted = KVP_RB_WITH(w, KVP_RB_POSTED);

	/* release: the request before POSTED; pairs with the agent's
	 * acquire when it takes the mailbox (M1) */
	kvp_store_release(&rb->rb_state, posted);
	return posted;
}

/* Ring the cluster thread's doorbell: a mailbox was posted (or the agent
 * stops).  The thread's waker loads cl_wake (acquire) before it looks at
 * the mailboxes and sleeps on the value it loaded, so a post before the
 * bump is seen, or the bump ends its sleep. */
KVP_INLINE void
kvp_rbox_ring(struct kvp_cluster *cl)
{
	kvp_ifetch_add(&cl->cl_wake, 1); /* full: then wake */
	kvp_futex_wake(&cl->cl_wake);
}

/* The answers (DONE of the request posted as w) were read: FREE(s+1). */
KVP_INLINE void
kvp_rbox_free(struct kvp_rbox *rb, uint64_t w)
{
	/* release: our reads of the answers first; the mailbox is ours
	 * again */
	kvp_store_release(&rb->rb_state,
			  KVP_RB_WORD(KVP_RB_SEQ(w) + 1, KVP_RB_FREE));
}

/* Give up the request whose word is now cur: FREE(s+1) unless the word
 * changed meanwhile (M4). */
KVP_INLINE bool
kvp_rbox_withdraw(struct kvp_rbox *rb, uint64_t cur)
{
	/* full CAS from our exact word; the agent answers with a CAS from
	 * TAKEN, so it writes nothing into a withdrawn mailbox */
	return kvp_cas(&rb->rb_state, cur,
		       KVP_RB_WORD(KVP_RB_SEQ(cur) + 1, KVP_RB_FREE));
}

/* A private copy of answer *src (read after its ready word's acquire):
 * status and length, no ready word. */
KVP_INLINE void
kvp_rbox_ans_copy(struct kvp_rbox_ans *dst, const struct kvp_rbox_ans *src)
{
	dst->ra_status = src->ra_status;
	dst->ra_len = src->ra_len;
	dst->ra_ready = 0;
}

/* ---- the agent's half ---- */

/* A private answer (the agent's memory, put into the mailbox later by
 * kvp_rbox_answers_put): status and length. */
KVP_INLINE void
kvp_rbox_ans_set(struct kvp_rbox_ans *a, int32_t status, uint64_t len)
{
	a->ra_status = status;
	a->ra_len = len;
}

/* POSTED(w) -> TAKEN: the request is ours.  True with *taken its word. */
KVP_INLINE bool
kvp_rbox_take(struct kvp_rbox *rb, uint64_t w, uint64_t *taken)
{
	*taken = KVP_RB_WITH(w, KVP_RB_TAKEN);
	/* full CAS: the request is ours */
	return kvp_cas(&rb->rb_state, w, *taken);
}

/* One early answer, a at the request taken as 'taken' (the caller checked
 * the mailbox still has that word, M2). */
KVP_INLINE void
kvp_rbox_answer_one(struct kvp_rbox_ans *a, int32_t status, uint64_t len,
		    uint64_t taken)
{
	a->ra_status = status;
	a->ra_len = len;
	/* release: the answer before its ready word; pairs with the
	 * client's acquire */
	kvp_istore_release(&a->ra_ready, KVP_RA_READY(KVP_RB_SEQ(taken)));
}

/* TAKEN -> ANSWERING from the exact word taken: false when the client
 * withdrew it or a new owner reset it (then nothing may be written). */
KVP_INLINE bool
kvp_rbox_answer_claim(struct kvp_rbox *rb, uint64_t taken)
{
	/* full CAS: claim to answer (M2, M4) */
	return kvp_cas(&rb->rb_state, taken,
		       KVP_RB_WITH(taken, KVP_RB_ANSWERING));
}

/* Every answer at once (ANSWERING, ours): ans[0..n), private, with their
 * ready words set here, copied into the mailbox. */
KVP_INLINE void
kvp_rbox_answers_put(struct kvp_rbox *rb, struct kvp_rbox_ans *ans, uint64_t n,
		     uint64_t taken)
{
	uint64_t i;

	for (i = 0; i < n; i++)
		ans[i].ra_ready = KVP_RA_READY(KVP_RB_SEQ(taken));
	/* published by the DONE release (kvp_rbox_answer_done) */
	memcpy(rb + 1, ans, n * sizeof(*ans));
}

/* Every answer a MISS (ANSWERING, ours; the agent is stopping): the
 * first n answers, at most cap. */
KVP_INLINE void
kvp_rbox_answers_miss(struct kvp_rbox *rb, uint64_t n, uint64_t cap,
		      uint64_t taken)
{
	struct kvp_rbox_ans *a = (struct kvp_rbox_ans *)(rb + 1);
	uint64_t j;

	for (j = 0; j < n && j < cap; j++) {
		a[j].ra_status = -ENOENT;
		a[j].ra_len = 0;
		a[j].ra_ready = KVP_RA_READY(KVP_RB_SEQ(taken));
	}
}

/* ANSWERING -> DONE: the answers are complete (M3). */
KVP_INLINE void
kvp_rbox_answer_done(struct kvp_rbox *rb, uint64_t taken)
{
	/* release: the answers before DONE; pairs with the client's
	 * acquire */
	kvp_store_release(&rb->rb_state, KVP_RB_WITH(taken, KVP_RB_DONE));
}

#endif /* KVP_RBOX_H */
