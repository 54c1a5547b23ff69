/* SPDX-License-Identifier: MIT */
/*
 * ops.c - operations in flight on the SSD tier and their completions:
 * the bottom of the tier thread's layers (docs/design.md, "Who owns
 * what").  An operation (struct kvp_top) carries the callback that
 * completes it (kvp_top_get's done: set by whoever starts it, in move.c or
 * rings.c), so a completion is never dispatched back up the layers by
 * kind; its waiters are requests of the rings, answered here (I19).  An
 * operation in flight on an index slot makes it busy (t->busy, 16 bits:
 * I30): the orphan sweep keeps its DRAM and the evictor leaves it alone.
 * Also the tier's state the policy reads (write failing, deferred,
 * demotions at their limit).  Tier thread only.
 */
#include "agent/tier_int.h"

bool
kvp_tier_busy_agent(struct kvp_agent *a, uint64_t slot)
{
	return a->tier && a->tier->busy[slot];
}

/* SSD writes failed a moment ago (full, vetoed, I/O error): eviction
 * drops cold values instead of demoting them, for a second. */
bool
kvp_tier_write_failing_agent(struct kvp_agent *a)
{
	return a->tier &&
	       kvp_now_ns(CLOCK_MONOTONIC) < a->tier->write_fail_until;
}

/* The store has no room for a moment (its oldest segment is in use):
 * demotion waits, nothing is dropped. */
bool
kvp_tier_write_deferred_agent(struct kvp_agent *a)
{
	return a->tier &&
	       kvp_now_ns(CLOCK_MONOTONIC) < a->tier->write_defer_until;
}

/* The demotion bytes that may be in flight now: KVP_TIER_DEMOTE_BYTES,
 * or one batch's worth while reads are active (tier_int.h). */
uint64_t
kvp_tier_demote_budget(struct kvp_tier *t)
{
	if (t->reading || t->nunsub ||
	    kvp_now_ns(CLOCK_MONOTONIC) - t->read_seen_ns <
		    KVP_TIER_READ_ACTIVE_NS)
		return KVP_TIER_DEMOTE_YIELD_BYTES;
	return KVP_TIER_DEMOTE_BYTES;
}

/* Demotion writes in flight are at their limit (for reads, or at all). */
bool
kvp_tier_demote_full_agent(struct kvp_agent *a)
{
	struct kvp_tier *t = a->tier;

	if (!t)
		return false;
	if (t->demoting >= KVP_TIER_MAX_DEMOTING ||
	    t->demoting_bytes >= KVP_TIER_DEMOTE_BYTES)
		return true;
	if (t->demoting_bytes >= kvp_tier_demote_budget(t)) {
		t->yielded = true;
		return true;
	}
	return false;
}

bool
kvp_tier_demoting_agent(struct kvp_agent *a)
{
	return a->tier && a->tier->demoting;
}

/* A free operation of this kind, completed by done (never NULL for an op
 * that is submitted), its tag in *tag; NULL when all are in flight. */
struct kvp_top *
kvp_top_get(struct kvp_tier *t, int kind, kvp_top_done_fn done, uint64_t *tag)
{
	struct kvp_top *op;
	uint32_t k;

	if (!t->nfree)
		return NULL;
	k = t->freeops[--t->nfree];
	KVP_ASSERT(k < KVP_TIER_MAX_OPS && t->ops[k].kind == TOP_FREE, "I30");
	op = &t->ops[k];
	memset(op, 0, offsetof(struct kvp_top, iov));
	op->kind = kind;
	op->done = done;
	*tag = k + 1;
	return op;
}

void
kvp_top_put(struct kvp_tier *t, struct kvp_top *op)
{
	/* each op goes back once (a second put would hand it out twice) */
	KVP_ASSERT(op->kind != TOP_FREE && t->nfree < KVP_TIER_MAX_OPS, "I30");
	free(op->w);
	op->w = NULL;
	op->kind = TOP_FREE;
	op->done = NULL;
	t->freeops[t->nfree++] = (uint32_t)(op - t->ops);
}

int
kvp_top_add_waiter(struct kvp_top *op, const struct kvp_waiter *w)
{
	if (op->nw == op->capw) {
		unsigned cap = op->capw ? op->capw * 2 : 4;
		struct kvp_waiter *n = realloc(op->w, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		op->w = n;
		op->capw = cap;
	}
	op->w[op->nw++] = *w;
	return 0;
}

/* Fill iovecs with the DRAM run chain of [first..) covering bytes. */
unsigned
kvp_runs_iov(struct kvp_seg *s, uint32_t first, uint64_t bytes,
	     struct iovec *iov, unsigned max)
{
	uint32_t p = first, next;
	unsigned n = 0;

	while (bytes && n < max && p < s->g.g_dram_pages) {
		uint64_t rb = 0;
		unsigned char *a = kvp_dram_run(s, p, &rb, &next);

		if (!a) /* a damaged chain: no I/O (the caller gives up) */
			return 0;
		iov[n].iov_base = a;
		iov[n].iov_len = rb < bytes ? rb : ((bytes + 4095) & ~4095ull);
		if (iov[n].iov_len > rb)
			iov[n].iov_len = rb;
		bytes -= rb < bytes ? rb : bytes;
		n++;
		if (!next)
			break;
		p = next - 1;
	}
	return bytes ? 0 : n;
}

/* One observation of d ns in the read stage st (single writer: the tier
 * thread; relaxed load + store, as the clients' shards). */
static void
kvp_io_observe(struct kvp_agent *a, unsigned st, uint64_t d, uint64_t n)
{
	kvp_aword_t *hw = a->seg.hdr->h_io_hist[st];
	unsigned b = kvp_hist_bucket(d);

	/* relaxed: statistics; this thread is the only writer */
	kvp_store_relaxed(&hw[b], kvp_load_relaxed(&hw[b]) + n);
	kvp_store_relaxed(&hw[KVP_HIST_SUM],
			  kvp_load_relaxed(&hw[KVP_HIST_SUM]) + d * n);
}

/* A read request taken this round: its wait in the queue, from the post
 * time the client wrote (untrusted: a time in the future, none, or one
 * more than a minute old is not counted). */
void
kvp_io_taken(struct kvp_agent *a, uint64_t posted)
{
	struct kvp_tier *t = a->tier;

	if (!t->t_take)
		t->t_take = kvp_now_ns(CLOCK_MONOTONIC);
	if (posted && posted <= t->t_take &&
	    t->t_take - posted < 60000000000ull)
		kvp_io_observe(a, KVP_IOS_QUEUE, t->t_take - posted, 1);
}

/* A read (STAGE, PROMOTE) queued on the drives: stamped when submitted. */
void
kvp_io_read_queued(struct kvp_tier *t, struct kvp_top *op)
{
	op->t_take = t->t_take ? t->t_take : kvp_now_ns(CLOCK_MONOTONIC);
	op->t_sub = 0;
	t->read_seen_ns = op->t_take;
	if (t->nunsub < KVP_TIER_MAX_OPS)
		t->unsub[t->nunsub++] = (uint32_t)(op - t->ops);
}

/* Send every queued I/O to the devices; the reads among them leave the
 * SUBMIT stage (and wait behind any demotion write in flight). */
void
kvp_tier_submit(struct kvp_agent *a)
{
	struct kvp_tier *t = a->tier;
	struct kvp_shm_header *h = a->seg.hdr;
	uint64_t now;
	unsigned k;

	kvp_drv_submit_agent(t->ssd);
	t->t_take = 0; /* the next round's requests stamp their own */
	if (!t->nunsub)
		return;
	now = kvp_now_ns(CLOCK_MONOTONIC);
	for (k = 0; k < t->nunsub; k++) {
		struct kvp_top *op = &t->ops[t->unsub[k]];

		if ((op->kind != TOP_STAGE && op->kind != TOP_PROMOTE) ||
		    op->t_sub)
			continue; /* completed already (an error), reused */
		op->t_sub = now;
		t->reading++;
		kvp_io_observe(a, KVP_IOS_SUBMIT, now - op->t_take, 1);
	}
	if (t->demoting)
		/* stat */
		kvp_actr_add(h, KVP_ACTR_READ_BEHIND_WRITES, t->nunsub);
	t->nunsub = 0;
}

/* Once a round: demotion held back for reads is counted. */
static void
kvp_tier_count_yield(struct kvp_agent *a)
{
	if (!a->tier->yielded)
		return;
	a->tier->yielded = false;
	/* stat */
	kvp_actr_add(a->seg.hdr, KVP_ACTR_DEMOTE_YIELDS, 1);
}

/* A completion from the drives: the op its tag names completes (its
 * callback), then its slot is no longer busy and the op is free. */
void
kvp_complete(struct kvp_agent *a, const struct kvp_ssd_cqe *cq)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	struct kvp_top *op;

	if (cq->tag == 0 || cq->tag > KVP_TIER_MAX_OPS)
		return;
	op = &t->ops[cq->tag - 1];
	if (cq->status && cq->status != -ENOSPC)
		/* stat */
		kvp_actr_add(s->hdr, KVP_ACTR_SSD_ERRORS, 1);
	if (cq->flags & (KVP_SSD_CQE_HDR_CACHED | KVP_SSD_CQE_HDR_READ))
		/* stat: one device operation per read, or two */
		kvp_actr_add(s->hdr,
			     cq->flags & KVP_SSD_CQE_HDR_CACHED ?
				     KVP_ACTR_SSD_HDR_CACHED :
				     KVP_ACTR_SSD_HDR_READ,
			     1);
	/* a free op has no callback: a stale tag completes nothing */
	if (!op->done)
		return;
	if ((op->kind == TOP_STAGE || op->kind == TOP_PROMOTE) && op->t_sub) {
		uint64_t now = kvp_now_ns(CLOCK_MONOTONIC);

		kvp_io_observe(a, KVP_IOS_DEVICE, now - op->t_sub, 1);
		t->reading--;
		t->read_seen_ns = now;
		if (t->nunwoken < KVP_TIER_MAX_OPS)
			t->unwoken[t->nunwoken++] = now;
	}
	/* the op's own completion: the layer that started it */
	op->done(a, op, cq);
	/* the op's slot is free of it (each op counted once: I30) */
	if (op->kind != TOP_TOMB) {
		KVP_ASSERT(t->busy[op->slot] > 0, "I30");
		t->busy[op->slot]--;
	}
	kvp_top_put(t, op);
}

/* Answer one waiter (I19).  The entry is claimed first, with a CAS from
 * the exact TAKEN word to ANSWERING: if the client withdrew the request,
 * or its slot was reaped and the entry reused, that CAS fails and nothing
 * at all is written into it (a span bit given to it is taken back).  Only
 * then the answer's fields, and DONE with a release. */
void
kvp_answer(struct kvp_agent *a, const struct kvp_waiter *w, int64_t res,
	   uint64_t where, int span_head)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_req *q = &kvp_ring_of(s, w->client)[w->ring];
	/* acquire: the slot must still be the client that asked */
	bool same = kvp_load_acquire(&s->clients[w->client].cs_state) ==
		    w->cgen;

	/* TAKEN(seq) -> ANSWERING(seq); the entry is ours to write */
	if (!same || !kvp_ring_answer_claim(q, w->word)) {
		if (span_head >= 0) {
			kvp_span_clear_holder(&s->spans[span_head], w->client);
			kvp_span_free_if_unheld(s, (uint32_t)span_head, true);
		}
		return;
	}
	kvp_ring_answer_write(q, res, where);
	kvp_crashpoint(A_REQ_ANSWERING);
	kvp_ring_answer_done(q, w->word);
	a->tier->wake[w->client] = true;
}

void
kvp_wake_clients(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	uint32_t c;

	for (c = 0; c < s->g.g_max_clients; c++) {
		if (!a->tier->wake[c])
			continue;
		a->tier->wake[c] = false;
		kvp_slot_wake(&s->clients[c]);
	}
	if (t->nunwoken) {
		uint64_t now = kvp_now_ns(CLOCK_MONOTONIC);
		unsigned k;

		for (k = 0; k < t->nunwoken; k++)
			kvp_io_observe(a, KVP_IOS_ANSWER, now - t->unwoken[k],
				       1);
		t->nunwoken = 0;
	}
	kvp_tier_count_yield(a);
	/* relaxed: gauges for tools (this thread's counts) */
	kvp_store_relaxed(&s->hdr->h_io_reads, t->reading);
	kvp_store_relaxed(&s->hdr->h_io_writes, t->demoting);
	kvp_store_relaxed(&s->hdr->h_io_write_bytes, t->demoting_bytes);
}
