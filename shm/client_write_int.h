/* SPDX-License-Identifier: MIT */
/*
 * client_write_int.h - puts and deletes (kvpool.h documents the calls).
 *
 * A put claims its slot (insert-if-absent, index/kvp_index.h), takes a
 * unit of the index count, allocates DRAM runs tagged with the slot,
 * copies and publishes (PENDING -> READY).  When something is full it
 * never makes room itself: it wakes the agent's evictor and sleeps on
 * the space futex until a deadline (docs/design.md, "Puts, gets,
 * deletes" and "The index limit").
 *
 * Included by shm/client_int.h.
 */
#ifndef KVP_CLIENT_WRITE_INT_H
#define KVP_CLIENT_WRITE_INT_H

/* ---- the index entry limit (docs/design.md, "The index limit") ---- */

/* A new kind in our cs_ix_resv (a new sequence every time). */
KVP_INLINE void
kvp__ixr_set(struct kvp_client *c, unsigned kind)
{
	kvp_ix_count_say_own(&c->seg.clients[c->slot], kind);
}

/*
 * Take a unit of the index entry count for PENDING slot i (state word w),
 * which this put has claimed.  At the limit, wake the evictor and wait
 * for room at most KVP_PUT_WAIT_MS, like a put that finds DRAM full.
 * 0 (our cs_ix_resv says HAVE_SLOT(i)), or -EBUSY, -ENOSPC (everything in
 * the index is held), -ENOTCONN (no agent to make room).
 */
KVP_INLINE int
kvp__ix_reserve(struct kvp_client *c, uint64_t i, uint64_t w)
{
	struct kvp_seg *s = &c->seg;
	uint64_t deadline = 0;

	/* after our last cs_ix_resv store (IDLE) */
	kvp_ix_count_name_slot(&s->clients[c->slot], i, KVP_IX_GEN(w));
	for (;;) {
		unsigned int seq = kvp_iload_acquire(&s->hdr->h_space_seq);
		uint64_t now;

		kvp__ixr_set(c, KVP_IXR_RESERVING);
		if (kvp_ix_count_take(s)) {
			kvp_crashpoint(C_IX_COUNTED);
			kvp__ixr_set(c, KVP_IXR_HAVE_SLOT);
			return 0;
		}
		kvp__ixr_set(c, KVP_IXR_IDLE);
		kvp_wake_index(&c->seg);
		now = kvp_now_ns(CLOCK_MONOTONIC);
		if (!deadline)
			deadline = now + c->put_wait_ns;
		if (now >= deadline || !kvp_shm_agent_alive(s))
			break;
		/* sleep until the evictor reports progress (no spinning) */
		kvp_futex_wait(&s->hdr->h_space_seq, seq, deadline - now);
	}
	if (!kvp_shm_agent_alive(s))
		return -ENOTCONN;
	/* relaxed: the evictor's verdict on its last pass */
	return kvp_load_relaxed(&s->hdr->h_evict_stuck) & KVP_STUCK_INDEX ?
		       -ENOSPC :
		       -EBUSY;
}

/* A put that holds a unit gives up: its slot and its unit go back. */
KVP_INLINE void
kvp__ix_release(struct kvp_client *c, uint64_t i, uint64_t w)
{
	if (kvp__live(c))
		return; /* reaped: the reaper took care of both */
	kvp__ixr_set(c, KVP_IXR_RELEASING);
	kvp_ix_abort(&c->seg, i, w);
	kvp_ix_count_give(&c->seg);
	kvp__ixr_set(c, KVP_IXR_IDLE);
}

KVP_INLINE bool
kvp__above_high(const struct kvp_seg *s)
{
	/* relaxed: a heuristic to wake the evictor early */
	uint64_t used = kvp_load_relaxed(&s->dram->dh_used_mirror);
	/* the agent's watermark: a hint (any value only wakes it sooner) */
	uint64_t high = *(const volatile uint32_t *)&s->hdr->h_dram_high_pct;

	return used * 100 > s->g.g_dram_pages * (high < 100 ? high : 100);
}

/*
 * Where a put's bytes come from when they are not in host memory (the
 * device calls, shm/client_dev_int.h): copy() queues n bytes from src for
 * dst, a run of the put's own; land() returns once every queued byte is
 * in place (or the copy failed: then they are not, and nothing is left
 * in flight).  Both answer 0 or a status (-EIO).  The put publishes only
 * after land() said 0, and never frees its runs with a copy in flight.
 */
struct kvp__put_src {
	int (*copy)(void *ctx, unsigned char *dst, const unsigned char *src,
		    uint64_t n);
	int (*land)(void *ctx);
	void *ctx;
};

/* The body of kvp_put (below); *counted is set once the call counts as a
 * put (it passed validation), so the caller times it.  The value's use
 * word gets the call's tick (c->tick, set by the caller) and 'ulow', the
 * bits below HIT (kvp_shm.h: its depth in its prefix chain, at most
 * KVP_USE_DEPTH_MAX, and maybe KVP_USE_CONT).  val is host memory, or ps says how to copy
 * it (NULL: memcpy).  No clock read. */
KVP_INLINE int
kvp__put_from(struct kvp_client *c, const void *key, uint32_t klen,
	      const void *val, uint64_t len, uint32_t ulow, bool *counted,
	      const struct kvp__put_src *ps)
{
	struct kvp_seg *s;
	uint64_t hash, w, deadline = 0, unit;
	int64_t i;
	uint32_t first = 0, p, next;
	const unsigned char *src = (const unsigned char *)val;
	int rc;

	if (!c || !kvp__key_ok(key, klen) || !val || len == 0)
		return -EINVAL;
	s = &c->seg;
	if (len > s->g.g_max_value)
		return -E2BIG;
	unit = s->g.g_dram_unit;
	if ((len + unit - 1) / unit > s->g.g_dram_pages)
		return -E2BIG;
	rc = kvp__live(c);
	if (rc)
		return rc;
	kvp__ctr(c, KVP_CTR_PUT, 1);
	*counted = true;
	hash = kvp_key_hash(c->nsid, key, klen);
	for (;;) {
		unsigned int seq = kvp_iload_acquire(&s->hdr->h_space_seq);
		uint64_t now;

		i = kvp_ix_claim(s, c->slot, c->nsid, hash, key, klen, &w);
		if (i != -ENOSPC)
			break;
		/* both buckets full: ask the evictor to free a slot in them */
		kvp_wake_hint(&c->seg, hash);
		now = kvp_now_ns(CLOCK_MONOTONIC);
		if (!deadline)
			deadline = now + c->put_wait_ns;
		if (now >= deadline || !kvp_shm_agent_alive(s))
			break;
		kvp_futex_wait(&s->hdr->h_space_seq, seq, deadline - now);
	}
	deadline = 0;
	if (i < 0) {
		kvp__ctr(c,
			 i == -EEXIST ? KVP_CTR_PUT_EXISTS : KVP_CTR_PUT_NOSPC,
			 1);
		return (int)i;
	}
	kvp_crashpoint(C_PUT_CLAIMED);
	/* the slot is ours, so no other putter of this key waits on us: now
	 * a unit of the index count (--index-entries), bounded wait */
	rc = kvp__ix_reserve(c, (uint64_t)i, w);
	if (rc) {
		kvp_ix_abort(s, (uint64_t)i, w);
		kvp__ctr(c,
			 rc == -ENOSPC ? KVP_CTR_PUT_NOSPC : KVP_CTR_PUT_BUSY,
			 1);
		return rc;
	}
	for (;;) {
		unsigned int seq = kvp_iload_acquire(&s->hdr->h_space_seq);
		uint64_t now;

		/* the first try does not wait for the allocator lock (and
		 * reads no clock); later ones wait until the deadline: a
		 * holder that is stopped cannot hold this put longer */
		rc = kvp_dram_alloc_until(s, len, (uint64_t)i, KVP_IX_GEN(w),
					  &first, deadline);
		if (rc == 0)
			break;
		now = kvp_now_ns(CLOCK_MONOTONIC);
		if (!deadline)
			deadline = now + c->put_wait_ns;
		if (rc == -EBUSY && now < deadline)
			continue; /* wait for the lock, until the deadline */
		if (rc != -ENOSPC && rc != -EUCLEAN)
			break;
		/* no room, or a damaged allocator the agent repairs */
		kvp_wake_need(&c->seg, (len + unit - 1) / unit);
		if (now >= deadline)
			break;
		/* sleep until the evictor reports progress (no spinning) */
		kvp_futex_wait(&s->hdr->h_space_seq, seq, deadline - now);
	}
	if (rc) {
		kvp__ix_release(c, (uint64_t)i, w);
		if (rc == -EUCLEAN)
			rc = -EBUSY; /* the agent is repairing the allocator */
		if (rc == -ENOSPC) {
			if (!kvp_shm_agent_alive(s))
				rc = -ENOTCONN;
			/* relaxed: the evictor's verdict on its last pass */
			else if (kvp_load_relaxed(&s->hdr->h_evict_stuck) &
				 KVP_STUCK_DRAM)
				rc = -ENOSPC;
			else
				rc = -EBUSY;
		}
		kvp__ctr(c,
			 rc == -ENOSPC ? KVP_CTR_PUT_NOSPC : KVP_CTR_PUT_BUSY,
			 1);
		return rc;
	}
	kvp_crashpoint(C_PUT_ALLOCATED);
	if (kvp__above_high(s))
		kvp_wake_need(&c->seg, 0);
	/* the run's length is ours to read: we own it until publish */
	kvp_ix_entry_put(s, i, len, first, s->pages[first].pg_npages,
			 (c->tick << KVP_USE_DEPTH_BITS) |
				 (ulow & KVP_USE_KEEP));
	for (p = first;;) {
		uint64_t rb = 0, k;
		unsigned char *dst = kvp_dram_run(s, p, &rb, &next);

		if (!dst || (len > rb && !next)) {
			/* our own chain was damaged under us (a hostile
			 * client): never write past a run; the agent frees
			 * the tagged runs and repairs the map (after the
			 * copies already queued into them have landed) */
			kvp_dram_report_damage(s);
			if (ps)
				ps->land(ps->ctx);
			kvp__ix_release(c, (uint64_t)i, w);
			kvp__ctr(c, KVP_CTR_PUT_BUSY, 1);
			return -EBUSY;
		}
		k = rb < len ? rb : len;
		if (!ps)
			memcpy(dst, src, k);
		else if ((rc = ps->copy(ps->ctx, dst, src, k)) != 0)
			break;
		src += k;
		len -= k;
		if (!len)
			break;
		p = next - 1;
	}
	if (ps) {
		/* every queued byte landed (or failed) before the runs are
		 * published or given back */
		int lrc = ps->land(ps->ctx);

		if (!rc)
			rc = lrc;
		if (rc) {
			/* nothing in flight into them: our runs go back now
			 * (a tag that is not ours frees nothing) */
			kvp_dram_free_chain(s, first, (uint64_t)i,
					    KVP_IX_GEN(w));
			kvp__ix_release(c, (uint64_t)i, w);
			kvp__ctr(c, KVP_CTR_PUT_BUSY, 1);
			return rc;
		}
	}
	kvp_crashpoint(C_PUT_COPIED);
	rc = kvp_ix_publish(s, (uint64_t)i, w);
	kvp_crashpoint(C_PUT_PUBLISHED);
	if (rc == 0) {
		/* the unit now belongs to the READY slot */
		kvp__ixr_set(c, KVP_IXR_IDLE);
		kvp__ctr(c, KVP_CTR_PUT_BYTES,
			 (uint64_t)(src - (const unsigned char *)val));
	}
	return rc;
}

KVP_INLINE int
kvp__put(struct kvp_client *c, const void *key, uint32_t klen, const void *val,
	 uint64_t len, uint32_t ulow, bool *counted)
{
	return kvp__put_from(c, key, klen, val, len, ulow, counted, NULL);
}

/* kvp_put (kvpool.h): kvp__put, timed. */
KVP_API int
kvp_put(struct kvp_client *c, const void *key, uint32_t klen, const void *val,
	uint64_t len)
{
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC);
	bool counted = false;
	int rc;

	if (c)
		c->tick = t0 >> KVP_TICK_SHIFT;
	rc = kvp__put(c, key, klen, val, len, 0, &counted);

	if (counted) /* a call that reached the index: timed */
		kvp__hist(c, KVP_HIST_PUT_DRAM, t0);
	return rc;
}

/*
 * A strict delete: the agent deletes (slot i, generation of w) and answers
 * once the value's tombstone is durable (kvp_delete, --durability strict).
 * One request in our ring; we sleep on our futex like a read does, and
 * withdraw it (a CAS on the exact word) if the agent goes away.
 */
KVP_INLINE int
kvp__delete_durable(struct kvp_client *c, uint64_t i, uint64_t w)
{
	struct kvp_seg *s = &c->seg;
	struct kvp_client_slot *cs = &s->clients[c->slot];
	struct kvp_req *ring = kvp_ring_of(s, c->slot), *q = NULL;
	uint64_t rw = 0, word, dead_since = 0, call;
	unsigned r;

	for (r = 0; r < s->g.g_ring_entries; r++) {
		/* acquire: the agent's last word on this entry */
		rw = kvp_load_acquire(&ring[r].rq_state);
		if (KVP_RQ_STATE(rw) == KVP_RQ_FREE) {
			q = &ring[r];
			break;
		}
	}
	if (!q)
		return -EBUSY; /* cannot happen: our calls are sequential */
	if (!kvp_shm_agent_alive(s))
		return -ENOTCONN;
	call = kvp_slot_call_next(cs);
	word = kvp_ring_post(q, rw, i, KVP_IX_GEN(w), 0, 0,
			     (call & 0xffffffffull) | KVP_RQ_DELETE, 0);
	kvp_wake_agent(s);
	for (;;) {
		unsigned int fseq = kvp_iload_acquire(&cs->cs_io_futex);
		/* acquire: pairs with the agent's DONE release */
		uint64_t st = kvp_load_acquire(&q->rq_state);

		if (kvp_ring_is_done(st, word)) {
			int res = (int)(int64_t)kvp_load_relaxed(&q->rq_result);

			kvp_ring_free(q, st);
			return res;
		}
		if (kvp_shm_agent_alive(s)) {
			dead_since = 0;
		} else if (!dead_since) {
			dead_since = kvp_now_ns(CLOCK_MONOTONIC);
		} else if (kvp_now_ns(CLOCK_MONOTONIC) - dead_since >=
				   c->agent_grace_ns &&
			   /* withdraw it unless answered meanwhile */
			   kvp_ring_withdraw(q, st)) {
			return -ENOTCONN;
		}
		kvp_futex_wait(&cs->cs_io_futex, fseq, KVP_RESOLVE_SLICE_NS);
	}
}

/* kvp_delete (kvpool.h): READY -> DELETED, unless the agent is deciding
 * (CHECK) or deletes are strict (the agent deletes: kvp__delete_durable). */
KVP_API int
kvp_delete(struct kvp_client *c, const void *key, uint32_t klen)
{
	uint64_t hash, w, t0 = 0;
	int64_t i;

	if (!c || !kvp__key_ok(key, klen))
		return -EINVAL;
	kvp__ctr(c, KVP_CTR_DELETE, 1);
	hash = kvp_key_hash(c->nsid, key, klen);
	for (;;) {
		i = kvp_ix_find(&c->seg, c->nsid, hash, key, klen,
				KVP_IX_M(KVP_IX_READY), &w);
		if (i < 0)
			return -ENOENT;
		/* the agent's --durability (a hint it publishes at attach) */
		if (c->seg.rings &&
		    *(const volatile uint32_t *)&c->seg.hdr->h_durability == 1)
			return kvp__delete_durable(c, (uint64_t)i, w);
		/* under CHECK the agent is deciding: wait for its verdict */
		if (!(w & KVP_IX_CHECK) &&
		    kvp_ix_delete(&c->seg, (uint64_t)i, w)) {
			kvp_crashpoint(C_DELETE_MARKED);
			kvp_wake_deleted(&c->seg);
			return 0; /* the evictor reclaims it on its next pass */
		}
		if (!t0)
			t0 = kvp_now_ns(CLOCK_MONOTONIC);
		else if (kvp_now_ns(CLOCK_MONOTONIC) - t0 > KVP_CHECK_WAIT_NS)
			return -EBUSY;
		sched_yield();
	}
}

/* kvp_batch_put_chain (kvpool.h): one tick and one histogram observation
 * for the batch; ops[k] at depth depth0 + k.  A call whose hit prefix
 * (depth0) is at least half its request (depth0 + n) is a continuation
 * (a conversation's next turn, an agent's next step): every page gets
 * KVP_USE_CONT, which spares it the probation of a never-hit value
 * (agent/evict.c).  depth0 = 0 (kvp_batch_put) never is. */
KVP_API ssize_t
kvp_batch_put_chain(struct kvp_client *c, struct kvp_op *ops, size_t n,
		    uint32_t depth0)
{
	uint64_t t0;
	uint32_t cont;
	bool counted = false;
	size_t k, ok = 0;

	if (!c || (!ops && n))
		return -EINVAL;
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	c->tick = t0 >> KVP_TICK_SHIFT;
	cont = depth0 && (uint64_t)depth0 >= n ? KVP_USE_CONT : 0;
	for (k = 0; k < n; k++) {
		uint64_t d = (uint64_t)depth0 + k;

		ops[k].status = kvp__put(
			c, ops[k].key, ops[k].klen, ops[k].buf, ops[k].len,
			(d > KVP_USE_DEPTH_MAX ? KVP_USE_DEPTH_MAX :
						 (uint32_t)d) |
				cont,
			&counted);
		ok += ops[k].status == 0;
	}
	if (counted) /* one observation for the whole batch */
		kvp__hist(c, KVP_HIST_PUT_DRAM, t0);
	return (ssize_t)ok;
}

/* kvp_batch_put (kvpool.h): a chain from depth 0. */
KVP_API ssize_t
kvp_batch_put(struct kvp_client *c, struct kvp_op *ops, size_t n)
{
	return kvp_batch_put_chain(c, ops, n, 0);
}

#endif /* KVP_CLIENT_WRITE_INT_H */
