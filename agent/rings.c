/* SPDX-License-Identifier: MIT */
/*
 * rings.c - the request-ring server: what clients ask the agent.
 *
 * Each client has a ring of requests in the segment (struct kvp_req):
 * reads of SSD-resident values (whole or ranged) and, with --durability
 * strict, deletes.  The tier thread takes every POSTED entry of every
 * live client (a CAS to TAKEN), validates everything the client wrote
 * (slot, generation, range: nothing is trusted), and either answers at
 * once or leaves the request to an operation in flight that answers it
 * when it completes: a promotion (move.c), a staged read into a span
 * (staging.c), a tombstone.  Answers claim the entry first (TAKEN ->
 * ANSWERING, a CAS on the exact word: I19), so a withdrawn or reused
 * entry is never written.  One resolve call of a client gets at most half
 * the staging arena (I18); requests for bytes already in flight join
 * that read (single flight).
 */
#include "agent/tier_int.h"

/* completions of the ops started here (ops.c calls them) */
static void kvp_complete_stage(struct kvp_agent *a, struct kvp_top *op,
			       const struct kvp_ssd_cqe *cq);

struct kvp_callstate {
	uint32_t client;
	uint64_t call;
	uint64_t used; /* staging slots given to this call */
};

/* Join a read already in flight for these bytes (single flight). */
static bool
kvp_try_join(struct kvp_agent *a, uint64_t slot, uint64_t off, uint64_t len,
	     struct kvp_waiter *w)
{
	struct kvp_tier *t = a->tier;
	unsigned k;

	if (!t->busy[slot])
		return false;
	for (k = 0; k < KVP_TIER_MAX_OPS; k++) {
		struct kvp_top *op = &t->ops[k];

		if (op->slot != slot)
			continue;
		if (op->kind == TOP_PROMOTE ||
		    (op->kind == TOP_STAGE && off >= op->astart &&
		     off + len <= op->astart + op->alen)) {
			if (op->kind == TOP_STAGE) {
				w->skip = off - op->astart;
				kvp_span_set_holder(&a->seg.spans[op->head],
						    w->client);
			}
			if (kvp_top_add_waiter(op, w))
				return false;
			/* stat */
			kvp_actr_add(a->seg.hdr, KVP_ACTR_SINGLE_FLIGHT, 1);
			return true;
		}
	}
	return false;
}

/*
 * A strict delete (KVP_RQ_DELETE): the client asks the agent to delete
 * (slot, gen) and to answer once the value's tombstone is durable.  The
 * agent marks the entry DELETED itself (readers holding it finish their
 * copies; the evictor reclaims it later), then: a value with an SSD copy
 * gets its tombstone now, answered when written (strict durability: a
 * write completes once fdatasync'd); a value being demoted gets it when
 * the demotion completes; a DRAM-only value is answered at once (nothing
 * on disk can bring it back).  Answers: 0, -ENOENT (no longer there),
 * -EIO (deleted, but the tombstone could not be written).
 */
static void
kvp_serve_delete(struct kvp_agent *a, struct kvp_waiter *w, uint64_t slot,
		 uint64_t gen)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_top *dem;
	uint64_t mw, ssd;
	int tries;

	if (slot >= s->g.g_index_slots) {
		kvp_answer(a, w, -EINVAL, 0, -1);
		return;
	}
	for (tries = 0;; tries++) {
		/* acquire: pairs with the publish CAS */
		mw = kvp_load_acquire(&s->meta[slot]);
		if (KVP_IX_STATE(mw) != KVP_IX_READY ||
		    KVP_IX_GEN(mw) != (gen & KVP_IX_GEN_MASK) || tries > 64) {
			kvp_answer(a, w, -ENOENT, 0, -1);
			return;
		}
		/* as a client's delete does; no CHECK of ours is pending
		 * outside an eviction pass, so a flag found here is cleared
		 * with it */
		if (kvp_ix_delete(s, slot, mw))
			break;
	}
	kvp_wake_deleted(s); /* the reclaim pass has work */
	dem = kvp_demote_in_flight(a->tier, slot);
	if (dem) {
		/* the tombstone needs the record's location: after the write */
		if (kvp_top_add_waiter(dem, w))
			kvp_answer(a, w, -EIO, 0, -1);
		return;
	}
	/* relaxed: this thread is the only writer of SSD locations */
	ssd = kvp_load_relaxed(&s->entries[slot].e_ssd);
	if (!ssd || a->tier->tombed[slot] == KVP_TOMB_WRITTEN) {
		kvp_answer(a, w, 0, 0, -1);
		return;
	}
	/* one in flight already (a reclaim pass queued it): answered with
	 * it, when it is written */
	dem = kvp_tomb_in_flight(a->tier, slot);
	if (dem) {
		if (kvp_top_add_waiter(dem, w))
			kvp_answer(a, w, -EIO, 0, -1);
		return;
	}
	kvp_tomb_queue(a, slot, ssd, w, 1);
}

/*
 * Stage [off, off + len) of SSD-resident slot (value vlen bytes, record
 * at ssd) for waiter w: the 4 KiB-rounded extent is read into a span of
 * the staging arena; one resolve call gets at most half of the arena
 * (I18: the rest is -EBUSY, asked again); a value larger than the whole
 * arena is -E2BIG.  Answered at the read's completion (kvp_complete_stage).
 */
static void
kvp_stage_read(struct kvp_agent *a, struct kvp_waiter *w,
	       struct kvp_callstate *cs, uint64_t slot, uint64_t gen,
	       uint64_t vlen, uint64_t ssd, uint64_t off, uint64_t len)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	uint64_t S = s->g.g_staging_slots, sb = s->g.g_staging_slot_bytes,
		 tag = 0, extent;
	struct kvp_ssd_read rd;
	struct kvp_top *op;
	uint32_t dst_off = 0;
	unsigned need;
	int64_t head;
	int rc;

	extent = kvp_ssd_extent(off, len, &dst_off);
	need = (unsigned)((extent + sb - 1) / sb);
	if (need == 0)
		need = 1;
	if (need > S) {
		kvp_answer(a, w, -E2BIG, 0, -1);
		return;
	}
	if (cs->used && cs->used + need > S / 2)
		goto busy;
	op = kvp_top_get(t, TOP_STAGE, kvp_complete_stage, &tag);
	if (!op)
		goto busy;
	head = kvp_staging_alloc_agent(s, &t->stage_hint, need, slot,
				       off - dst_off, extent, w->client);
	if (head < 0) {
		kvp_top_put(t, op);
		goto busy;
	}
	w->skip = dst_off;
	op->slot = slot;
	op->gen = gen;
	op->vlen = vlen;
	op->head = (uint32_t)head;
	op->nslots = need;
	op->astart = off - dst_off;
	op->alen = extent;
	op->iov[0].iov_base = s->staging + (uint64_t)head * sb;
	op->iov[0].iov_len = (size_t)((uint64_t)need * sb);
	op->niov = 1;
	memset(&rd, 0, sizeof(rd));
	rd.loc = ssd;
	rd.vlen = vlen;
	rd.off = off;
	rd.len = len;
	rd.ndst = 1;
	rd.dst = op->iov;
	kvp_read_identity(&s->entries[slot], &rd);
	cs->used += need;
	rc = kvp_top_add_waiter(op, w);
	if (rc == 0)
		rc = kvp_drv_read_agent(t->ssd, tag, &rd);
	if (rc) {
		kvp_staging_abort_agent(s, (uint32_t)head, need, w->client);
		kvp_top_put(t, op);
		kvp_answer(a, w, rc == -EBUSY ? -EBUSY : -EIO, 0, -1);
		return;
	}
	KVP_ASSERT(t->busy[slot] < KVP_TIER_MAX_OPS, "I30");
	t->busy[slot]++;
	kvp_io_read_queued(t, op);
	kvp_crashpoint(A_STAGE_SUBMITTED);
	return;
busy:
	kvp_actr_add(s->hdr, KVP_ACTR_BUSY_REJECT, 1); /* stat */
	kvp_answer(a, w, -EBUSY, 0, -1);
}

/*
 * A read of held slot (generation gen), bytes [off, off + len) of its
 * value; whole: the client asked for the whole value (it may be
 * promoted).  Everything here came from the client: the slot is
 * range-checked, the generation and state compared with the state word,
 * the range clipped to the value.  A DRAM-resident value is answered at
 * once (the client copies it); an SSD-resident one joins a read of the
 * same bytes in flight, or is promoted (move.c), or staged.
 */
static void
kvp_serve_read(struct kvp_agent *a, struct kvp_waiter *w,
	       struct kvp_callstate *cs, uint64_t slot, uint64_t gen,
	       uint64_t off, uint64_t len, bool whole)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_entry *e;
	uint64_t mw, loc, ssd, vlen;

	if (slot >= s->g.g_index_slots) {
		kvp_answer(a, w, -EINVAL, 0, -1);
		return;
	}
	e = &s->entries[slot];
	/* acquire: pairs with the publish CAS */
	mw = kvp_load_acquire(&s->meta[slot]);
	if (KVP_IX_GEN(mw) != (gen & KVP_IX_GEN_MASK) ||
	    (KVP_IX_STATE(mw) != KVP_IX_READY &&
	     KVP_IX_STATE(mw) != KVP_IX_DELETED)) {
		kvp_log(KVP_LOG_DEBUG, "io",
			"request for slot %llu gen %llu: slot is at "
			"gen %u state %u",
			(unsigned long long)slot, (unsigned long long)gen,
			KVP_IX_GEN(mw), KVP_IX_STATE(mw));
		kvp_answer(a, w, -ENOENT, 0, -1);
		return;
	}
	/* relaxed: this thread is the only writer of locations */
	loc = kvp_load_relaxed(&e->e_loc);
	ssd = kvp_load_relaxed(&e->e_ssd);
	vlen = kvp_load_relaxed(&e->e_len);
	if (KVP_LOC_TIER(loc) == KVP_TIER_DRAM) {
		kvp_answer(a, w, 0, KVP_WHERE_DRAM, -1);
		return;
	}
	if (off > vlen || !ssd) {
		kvp_answer(a, w, off > vlen ? -EINVAL : -EIO, 0, -1);
		return;
	}
	if (len > vlen - off)
		len = vlen - off;
	if (kvp_try_join(a, slot, off, len, w))
		return;
	if (whole && off == 0 && len == vlen &&
	    kvp_promote_start_agent(a, w, slot, KVP_IX_GEN(mw), vlen, ssd))
		return;
	kvp_stage_read(a, w, cs, slot, KVP_IX_GEN(mw), vlen, ssd, off, len);
}

/* Handle one TAKEN request.  Answers at once, or leaves it to an I/O. */
static void
kvp_serve_one(struct kvp_agent *a, struct kvp_waiter *w,
	      struct kvp_callstate *cs)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_req *q =
		&s->rings[(uint64_t)w->client * s->g.g_ring_entries + w->ring];
	/* relaxed: published by the client's POSTED release, acquired by
	 * our CAS to TAKEN; untrusted, validated by the callees */
	uint64_t slot = kvp_load_relaxed(&q->rq_slot),
		 gen = kvp_load_relaxed(&q->rq_gen);
	uint64_t off = kvp_load_relaxed(&q->rq_off),
		 len = kvp_load_relaxed(&q->rq_len);
	uint64_t call = kvp_load_relaxed(&q->rq_call);

	if (call & KVP_RQ_DELETE) {
		kvp_serve_delete(a, w, slot, gen);
		return;
	}
	/* a new resolve call starts a new staging budget (I18) */
	if (call & KVP_RQ_FIRST || cs->client != w->client ||
	    cs->call != (call & 0xffffffffull)) {
		cs->client = w->client;
		cs->call = call & 0xffffffffull;
		cs->used = 0;
	}
	/* relaxed: the client's post time, a hint (ops.c clamps it) */
	kvp_io_taken(a, kvp_load_relaxed(&q->rq_result));
	kvp_serve_read(a, w, cs, slot, gen, off, len,
		       (call & KVP_RQ_WHOLE) != 0);
}

/* A staged read completed: the span is READY (release: its bytes first),
 * each waiter is answered with where its bytes start, and the span goes
 * as soon as no waiter holds it.  On an error nobody keeps a bit. */
static void
kvp_complete_stage(struct kvp_agent *a, struct kvp_top *op,
		   const struct kvp_ssd_cqe *cq)
{
	int status = cq->status;
	struct kvp_seg *s = &a->seg;
	struct kvp_span *sp = &s->spans[op->head];
	/* acquire: our own READING word */
	uint64_t w = kvp_load_acquire(&sp->sp_state);
	unsigned k;

	/* the bytes before READY (shm/kvp_span.h) */
	kvp_span_ready_agent(sp, w, op->nslots);
	kvp_crashpoint(A_STAGE_READY);
	for (k = 0; k < op->nw; k++) {
		if (status) {
			kvp_span_clear_holder(sp, op->w[k].client);
			kvp_answer(a, &op->w[k],
				   status == -ENOENT ? -EIO : status, 0, -1);
		} else {
			kvp_answer(a, &op->w[k], 0,
				   (uint64_t)(op->head + 1) |
					   (op->w[k].skip << 32),
				   (int)op->head);
		}
	}
	if (!status) {
		kvp_actr_add(s->hdr, KVP_ACTR_STAGED, 1); /* stat */
		kvp_actr_add(s->hdr, KVP_ACTR_SSD_READ_BYTES, op->alen);
	}
	kvp_span_free_if_unheld(s, op->head, false);
}

/* Take every POSTED request of every live client. */
unsigned
kvp_serve_rings(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_callstate cs = { UINT32_MAX, 0, 0 };
	uint32_t c, r, n = 0;

	for (c = 0; c < s->g.g_max_clients; c++) {
		/* acquire: pairs with the claim CAS */
		uint64_t cw = kvp_load_acquire(&s->clients[c].cs_state);
		struct kvp_req *ring = kvp_ring_of(s, c);

		if (KVP_CS_STATE(cw) != KVP_CS_LIVE)
			continue;
		for (r = 0; r < s->g.g_ring_entries; r++) {
			/* acquire: pairs with the client's POSTED release */
			uint64_t w = kvp_load_acquire(&ring[r].rq_state);
			struct kvp_waiter wt;

			if (KVP_RQ_STATE(w) != KVP_RQ_POSTED)
				continue;
			wt.client = c;
			wt.ring = r;
			wt.cgen = cw;
			wt.skip = 0;
			wt.word = KVP_RQ_WITH(w, KVP_RQ_TAKEN);
			if (!kvp_ring_take(&ring[r], w))
				continue;
			kvp_crashpoint(A_REQ_TAKEN);
			kvp_serve_one(a, &wt, &cs);
			n++;
		}
	}
	return n;
}
