/* SPDX-License-Identifier: MIT */
/*
 * client_read_int.h - the read engine behind every get (kvpool.h
 * documents the calls), and the probes.
 *
 * A read looks the key up and holds it (index/kvp_index.h).  A DRAM hit
 * is copied at once and its hold dropped.  An SSD-resident key stays held
 * and is posted to this client's request ring in the segment; the agent
 * promotes it to DRAM or stages its extent in a span of the staging
 * arena, answers, and wakes us (docs/design.md, "SSD tier").  Probes
 * (exists, exists_prefix) only look.
 *
 * The calls (kvp_get, kvp_get_range, kvp_batch_get, at the end) are a
 * local pass, then, only for keys it missed, the remote step: a layer
 * below (shm/client_remote_int.h) that fetches them from other nodes and
 * hands each back here as it lands.  The probes (kvp_batch_exists_prefix,
 * kvp_batch_locate) are a local walk, then the same layer's answer for
 * the keys it missed.
 *
 * Included by shm/client_int.h.
 */
#ifndef KVP_CLIENT_READ_INT_H
#define KVP_CLIENT_READ_INT_H

/* The remote step (shm/client_remote_int.h; a layer the read path, the
 * probes and the pin call, which calls nothing of them): is there a
 * remote tier to ask; fetch the keys a local pass missed, fn(ctx, op,
 * status) for each as it lands (status 0: it is in this pool now); the
 * keys ops[from..n) another node holds (PROBE) or that were fetched here
 * (FETCH), as a prefix: their count; of the m keys a locate left
 * -ENOENT, those another node holds: their count. */
typedef void (*kvp__remote_landed_fn)(void *ctx, struct kvp_op *o, int status);
KVP_INLINE bool kvp__remote_up(const struct kvp_client *c, unsigned flag);
KVP_INLINE bool kvp__remote_fetch(struct kvp_client *c, struct kvp_op *ops,
				  size_t n, kvp__remote_landed_fn fn,
				  void *ctx);
KVP_INLINE size_t kvp__remote_prefix(struct kvp_client *c, unsigned kind,
				     struct kvp_op *ops, size_t from, size_t n);
KVP_INLINE size_t kvp__remote_locate(struct kvp_client *c, struct kvp_op *ops,
				     size_t n, int *tier, size_t m);

/* One SSD-resident key of a read call, held while it is resolved. */
struct kvp__pend {
	struct kvp_op *op;
	uint64_t slot, gen;
	uint64_t off, len; /* clipped range */
	int hold;
	bool pinned;     /* a pinset's hold: the pinset drops it, not us */
	int ring;        /* ring entry while posted, -1 otherwise */
	uint64_t rqword; /* our POSTED state word (seq) */
};

/* Release our bit of staging span 'head'; the last holder frees it. */
KVP_INLINE void
kvp__span_release(struct kvp_client *c, uint32_t head)
{
	struct kvp_seg *s = &c->seg;
	struct kvp_span *sp = &s->spans[head];
	uint64_t w;

	kvp_span_holder_done(sp, c->slot);
	kvp_crashpoint(C_SPAN_BIT_CLEARED);
	if (!kvp_span_unheld(sp))
		return;
	/* acquire: the span's state while we still own a share of it */
	w = kvp_load_acquire(&sp->sp_state);
	if (KVP_SP_STATE(w) != KVP_SP_READY)
		return;
	/* one freer, named in the word (if we die now the reaper finishes
	 * the free for us) */
	if (!kvp_span_free_begin(sp, w, c->slot + 1, &w))
		return;
	/* occupancy goes down by the span's slots (the winner of the
	 * FREEING CAS only, so once; an adopter does not subtract again),
	 * before the FREE stores */
	kvp_span_count_sub(s, KVP_SP_N(w));
	kvp_crashpoint(C_SPAN_FREEING);
	kvp_span_finish_free(s, head, w);
}

/* A key of a read call is settled: its hold goes, unless a pinset owns it. */
KVP_INLINE void
kvp__settle(struct kvp_client *c, struct kvp__pend *p, int status)
{
	p->op->status = status;
	if (!p->pinned)
		kvp__drop(c, p->hold);
	p->hold = -1;
}

/*
 * Post up to m pending keys as one resolve call; returns how many.  No
 * more than the staging arena can take now: keys whose extents fit in
 * its free slots (and in the half of it one call may have, I18), at
 * least one.  Posting every waiting key each time one part completes
 * made the agent answer most of them BUSY, round after round (8 readers
 * of 2,664 keys through 8 slots: ~8 answers per value read, issue 29).
 * *slots: the slots the posted keys' extents need.  spare: a second call
 * posted right after a first that asked for *slots (not yet counted in
 * the arena's occupancy): only what fits besides them, maybe nothing.
 */
KVP_INLINE unsigned
kvp__post(struct kvp_client *c, struct kvp__pend *p, unsigned m, uint64_t call,
	  uint64_t *slots, bool spare)
{
	struct kvp_seg *s = &c->seg;
	struct kvp_req *ring = kvp_ring_of(s, c->slot);
	unsigned r = 0, k, posted = 0;
	/* the post time: the agent's queue stage (a statistic) */
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC);
	uint64_t S = s->g.g_staging_slots, sb = s->g.g_staging_slot_bytes,
		 /* relaxed: a hint (the agent decides) */
		used = kvp_load_relaxed(&s->hdr->h_staging_used),
		 room = used < S ? S - used : 0, want = 0;

	/* a spare call (a second one, posted right after the first): the
	 * first's slots may not be counted in h_staging_used yet */
	if (spare)
		room = room > *slots ? room - *slots : 0;
	if (room > S / 2)
		room = S / 2 ? S / 2 : 1;
	for (k = 0; k < m && r < s->g.g_ring_entries; k++) {
		uint64_t w;
		bool whole;

		if (p[k].ring >= 0 || p[k].hold < 0)
			continue; /* posted already, or answered */
		/* its extent in slots (4 KiB aligned, as the agent reads) */
		if (sb)
			want += ((((p[k].off + p[k].len + 4095) & ~4095ull) -
				  (p[k].off & ~4095ull)) +
				 sb - 1) /
				sb;
		else
			want++;
		/* a spare call posts only what fits; another posts at
		 * least one key (the first key of a call always fits, I18) */
		if ((posted || spare) && want > room)
			break;
		for (; r < c->seg.g.g_ring_entries; r++) {
			/* acquire: the agent's last word on this entry */
			w = kvp_load_acquire(&ring[r].rq_state);
			if (KVP_RQ_STATE(w) == KVP_RQ_FREE)
				break;
		}
		if (r == c->seg.g.g_ring_entries)
			break;
		/* relaxed: stable while held */
		whole = p[k].off == 0 && p[k].op->off == 0 &&
			p[k].len == kvp_load_relaxed(
					    &c->seg.entries[p[k].slot].e_len);
		p[k].rqword = kvp_ring_post(
			&ring[r], w, p[k].slot, p[k].gen, p[k].off, p[k].len,
			call | (posted == 0 ? KVP_RQ_FIRST : 0) |
				(whole ? KVP_RQ_WHOLE : 0),
			now);
		p[k].ring = (int)r++;
		posted++;
		*slots = want;
	}
	return posted;
}

/* Copy a finished request's bytes and settle its status. */
KVP_INLINE int
kvp__finish(struct kvp_client *c, struct kvp__pend *p, int64_t res,
	    uint64_t where)
{
	struct kvp_seg *s = &c->seg;

	if (res < 0)
		/* the agent's answer, told apart only where it means something
		 * to the caller: anything else is a failed read */
		return res == -E2BIG || res == -EBADMSG ? (int)res : -EIO;
	if (where & KVP_WHERE_DRAM) {
		/* promoted: the entry is DRAM-resident now, still held */
		/* acquire: pairs with the agent's release of e_loc */
		uint64_t loc = kvp_load_acquire(&s->entries[p->slot].e_loc),
			 t0 = kvp_now_ns(CLOCK_MONOTONIC);
		if (KVP_LOC_TIER(loc) != KVP_TIER_DRAM ||
		    !kvp__copy_out(c, p->slot, p->off, p->op->buf, p->len))
			return -EIO;
		kvp__hist(c, KVP_HIST_SSD_COPY, t0);
		return 0;
	} else {
		uint64_t head = (where & 0xffffffffull) - 1,
			 skip = (where >> 32) & 0x7fffffff;
		uint64_t sb = s->g.g_staging_slot_bytes,
			 t0 = kvp_now_ns(CLOCK_MONOTONIC);

		if (head >= s->g.g_staging_slots ||
		    (head * sb + skip + p->len) > s->g.g_staging_slots * sb)
			/* a damaged answer: never copy out of bounds */
			return -EIO;
		kvp_crashpoint(C_RESOLVE_ANSWERED);
		memcpy(p->op->buf, s->staging + head * sb + skip, p->len);
		kvp__span_release(c, (uint32_t)head);
		kvp__hist(c, KVP_HIST_SSD_COPY, t0);
		return 0;
	}
}

/*
 * Resolve m held SSD-resident keys through the agent: post them as one
 * call, sleep on our futex until answered, copy what was staged, and
 * repeat with the keys that came back BUSY (the arena gives one call at
 * most half of itself; the first key always fits) until every key has a
 * final answer.  Statuses go to p[k].op->status; holds are dropped.
 */
KVP_INLINE void
kvp__resolve(struct kvp_client *c, struct kvp__pend *p, unsigned m)
{
	struct kvp_seg *s = &c->seg;
	struct kvp_client_slot *cs = &s->clients[c->slot];
	struct kvp_req *ring = kvp_ring_of(s, c->slot);
	uint64_t t_busy = kvp_now_ns(CLOCK_MONOTONIC), dead_since = 0, slots;
	unsigned left = m, k;

	for (k = 0; k < m; k++)
		p[k].ring = -1;
	while (left) {
		unsigned int fseq = kvp_iload_acquire(&cs->cs_io_futex);
		unsigned int sseq = kvp_iload_acquire(&s->hdr->h_staging_seq);
		unsigned pending = 0, progress = 0, last_progress = 0;
		uint64_t call = kvp_slot_call_next(cs);

		if (!s->rings || !s->hdr->h_ssd_enabled ||
		    !kvp_shm_agent_alive(s)) {
			for (k = 0; k < m; k++)
				if (p[k].hold >= 0)
					kvp__settle(c, &p[k], -ENOTCONN);
			return;
		}
		slots = 0;
		if (kvp__post(c, p, m, call & 0xffffffffull, &slots, false) <
		    left) {
			/* keys left after this call's share: a second call
			 * for the other half of the arena, in flight while
			 * this one's are (its answers come in one round:
			 * with one call at a time the device sat idle while
			 * they were copied and the next part was posted) */
			call = kvp_slot_call_next(cs);
			kvp__post(c, p, m, call & 0xffffffffull, &slots, true);
		}
		kvp_crashpoint(C_RESOLVE_POSTED);
		kvp_wake_agent(s);
		for (;;) {
			pending = 0;
			for (k = 0; k < m; k++) {
				struct kvp_req *q;
				uint64_t w;
				int64_t res;

				if (p[k].ring < 0)
					continue;
				q = &ring[p[k].ring];
				/* acquire: pairs with the agent's DONE
				 * release */
				w = kvp_load_acquire(&q->rq_state);
				if (!kvp_ring_is_done(w, p[k].rqword)) {
					pending++;
					continue;
				}
				res = (int64_t)kvp_load_relaxed(&q->rq_result);
				if (res == -EBUSY) {
					kvp__ctr(c, KVP_CTR_RESOLVE_BUSY, 1);
				} else {
					/* the key is held, so it exists: an
					 * answer that cannot find it is a
					 * failed read, never a miss
					 * (kvp__finish makes it -EIO) */
					int st = kvp__finish(
						c, &p[k], res,
						kvp_load_relaxed(&q->rq_where));
					kvp__ctr(c,
						 st == 0 ?
							 KVP_CTR_RESOLVE_OK :
							 KVP_CTR_RESOLVE_FAILED,
						 1);
					if (st == 0)
						kvp__ctr(c,
							 KVP_CTR_GET_SSD_BYTES,
							 p[k].len);
					kvp__settle(c, &p[k], st);
					left--;
					progress++;
				}
				kvp_ring_free(q, w);
				p[k].ring = -1;
			}
			/* keys came back done, so their spans are free again:
			 * ask again at once for the ones that were BUSY, as a
			 * new call, while the rest are still in flight (keeps
			 * the arena busy instead of waiting for every answer)
			 */
			if (progress > last_progress && pending &&
			    left > pending) {
				unsigned posted;

				last_progress = progress;
				call = kvp_slot_call_next(cs);
				slots = 0;
				posted = kvp__post(c, p, m,
						   call & 0xffffffffull, &slots,
						   false);
				if (posted) {
					pending += posted;
					kvp_wake_agent(s);
				}
			}
			if (!pending)
				break;
			/* sleep until the agent answers; check it is alive */
			kvp_futex_wait(&cs->cs_io_futex, fseq,
				       KVP_RESOLVE_SLICE_NS);
			fseq = kvp_iload_acquire(&cs->cs_io_futex);
			if (kvp_shm_agent_alive(s)) {
				dead_since = 0;
				continue;
			}
			if (!dead_since) {
				dead_since = kvp_now_ns(CLOCK_MONOTONIC);
				continue;
			}
			if (kvp_now_ns(CLOCK_MONOTONIC) - dead_since <
			    c->agent_grace_ns)
				continue;
			/* the agent is gone: withdraw what is left (a CAS on
			 * the exact word, so a late answer cannot land in a
			 * reused entry) and answer UNAVAILABLE */
			for (k = 0; k < m; k++) {
				if (p[k].ring >= 0) {
					struct kvp_req *q = &ring[p[k].ring];
					/* acquire */
					uint64_t w =
						kvp_load_acquire(&q->rq_state);
					kvp_ring_withdraw(q, w);
					p[k].ring = -1;
				}
				if (p[k].hold >= 0)
					kvp__settle(c, &p[k], -ENOTCONN);
			}
			return;
		}
		if (!left)
			break;
		if (progress) {
			t_busy = kvp_now_ns(CLOCK_MONOTONIC);
			continue;
		}
		/* every key BUSY: others hold the whole arena; sleep until a
		 * span is freed (bounded), then ask again */
		if (kvp_now_ns(CLOCK_MONOTONIC) - t_busy >
		    KVP_RESOLVE_BUSY_NS) {
			for (k = 0; k < m; k++)
				if (p[k].hold >= 0)
					kvp__settle(c, &p[k], -EBUSY);
			return;
		}
		kvp_futex_wait(&s->hdr->h_staging_seq, sseq,
			       KVP_RESOLVE_SLICE_NS);
	}
}

/*
 * One held key of a read call: a DRAM hit is copied now (the hold dropped
 * unless a pinset owns it); an SSD-resident key joins pend[], resolved
 * when the ring's worth is full.  Returns the new pend count.
 */
KVP_INLINE unsigned
kvp__read_held(struct kvp_client *c, struct kvp_op *op, uint64_t i,
	       uint64_t gen, uint64_t off, uint64_t len, int h, bool pinned,
	       struct kvp__pend *pend, unsigned m)
{
	/* acquire: pairs with the agent's release when it moves the value;
	 * any location read under the hold stays valid until it drops */
	uint64_t loc = kvp_load_acquire(&c->seg.entries[i].e_loc);

	op->len = len;
	if (KVP_LOC_TIER(loc) == KVP_TIER_DRAM || len == 0) {
		bool ok = kvp__copy_out(c, i, off, op->buf, len);

		kvp_crashpoint(C_COPY_DONE);
		if (!pinned)
			kvp__drop(c, h);
		if (!ok) {
			/* held, but its DRAM location is damaged: FAILED */
			op->status = -EIO;
			op->len = 0;
			kvp__ctr(c, KVP_CTR_RESOLVE_FAILED, 1);
			return m;
		}
		op->status = 0;
		kvp__ctr(c, KVP_CTR_GET_HIT, 1);
		kvp__ctr(c, KVP_CTR_GET_BYTES, len);
		return m;
	}
	c->call_ssd++;
	pend[m].op = op;
	pend[m].slot = i;
	pend[m].gen = gen;
	pend[m].off = off;
	pend[m].len = len;
	pend[m].hold = h;
	pend[m].pinned = pinned;
	if (++m == KVP_RING_ENTRIES ||
	    (c->seg.rings && m == c->seg.g.g_ring_entries)) {
		kvp__resolve(c, pend, m);
		m = 0;
	}
	return m;
}

/*
 * The read engine behind every get.  exact: kvp_get semantics (the whole
 * value, -EMSGSIZE when ops->len is too small); else [off, off+len)
 * clipped.  DRAM hits are copied at once (their hold dropped at once);
 * SSD-resident keys stay held in pend[] and are resolved through the
 * agent in parts of at most one ring, or sooner when this client's hold
 * slots run out, so any number of keys is served with any number of hold
 * slots.  Only a client whose own pinsets hold every hold slot gets
 * -EBUSY.  Sets status and len.
 */
KVP_INLINE size_t
kvp__read(struct kvp_client *c, struct kvp_op *ops, size_t n, bool exact)
{
	struct kvp__pend pend[KVP_RING_ENTRIES];
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC);
	unsigned m = 0;
	size_t j, ok = 0;

	c->call_ssd = 0;
	c->tick = t0 >> KVP_TICK_SHIFT;
	for (j = 0; j < n; j++) {
		struct kvp_op *op = &ops[j];
		uint64_t i = 0, vlen = 0, off = exact ? 0 : op->off, len;
		int h;

		kvp__ctr(c, KVP_CTR_GET, 1);
		if (!kvp__key_ok(op->key, op->klen) || (!op->buf && op->len)) {
			op->status = -EINVAL;
			continue;
		}
		h = kvp__lookup_hold(c, op->key, op->klen, &i, &vlen);
		if (h == -ENOBUFS && m) {
			/* every hold slot is taken: the SSD-resident keys
			 * held in pend[] are resolved now (their holds drop)
			 * and the key is looked up again */
			kvp__resolve(c, pend, m);
			m = 0;
			h = kvp__lookup_hold(c, op->key, op->klen, &i, &vlen);
		}
		if (h < 0) {
			if (h == -ENOENT)
				kvp__ctr(c, KVP_CTR_GET_MISS, 1);
			/* still no hold slot: this client's pinsets hold all
			 * of them; retry once one is released */
			op->status = h == -ENOBUFS ? -EBUSY : h;
			continue;
		}
		if ((exact && vlen > op->len) || (!exact && off > vlen) ||
		    !op->buf) {
			op->status = exact && vlen > op->len ? -EMSGSIZE :
							       -EINVAL;
			kvp__drop(c, h);
			continue;
		}
		len = exact ? vlen :
			      (vlen - off < op->len ? vlen - off : op->len);
		m = kvp__read_held(
			c, op, i, KVP_IX_GEN(kvp_load_acquire(&c->seg.meta[i])),
			off, len, h, false, pend, m);
	}
	if (m)
		kvp__resolve(c, pend, m);
	for (j = 0; j < n; j++)
		ok += ops[j].status == 0;
	if (n)
		kvp__hist(c, c->call_ssd ? KVP_HIST_GET_SSD : KVP_HIST_GET_DRAM,
			  t0);
	return ok;
}

/* One key as a batch of one (a designated initializer is not C++17). */
KVP_INLINE void
kvp__op_init(struct kvp_op *op, const void *key, uint32_t klen, void *buf,
	     uint64_t off, uint64_t len)
{
	op->key = key;
	op->klen = klen;
	op->buf = buf;
	op->off = off;
	op->len = len;
	op->status = 0;
}

/* Is the value in slot i (just found READY) SSD-resident?  For the
 * per-tier counters only: the entry's first line was read by the lookup. */
KVP_INLINE bool
kvp__resident_ssd(const struct kvp_client *c, uint64_t i)
{
	/* relaxed: a statistic; the location may change right after */
	return KVP_LOC_TIER(kvp_load_relaxed(&c->seg.entries[i].e_loc)) ==
	       KVP_TIER_SSD;
}

/* kvp_exists (kvpool.h): one lookup, no hold. */
KVP_API int
kvp_exists(struct kvp_client *c, const void *key, uint32_t klen)
{
	uint64_t w, t0;
	int64_t i;
	bool ssd;

	if (!c || !kvp__key_ok(key, klen))
		return -EINVAL;
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	c->tick = t0 >> KVP_TICK_SHIFT;
	kvp__ctr(c, KVP_CTR_EXISTS, 1);
	i = kvp_ix_find(&c->seg, c->nsid, kvp_key_hash(c->nsid, key, klen), key,
			klen, KVP_IX_M(KVP_IX_READY), &w);
	if (i < 0) {
		kvp__hist(c, KVP_HIST_EXISTS_DRAM, t0);
		return 0;
	}
	ssd = kvp__resident_ssd(c, (uint64_t)i);
	kvp__touch(c, (uint64_t)i); /* a probe predicts a load */
	kvp__ctr(c, KVP_CTR_EXISTS_HIT, 1);
	kvp__ctr(c, ssd ? KVP_CTR_EXISTS_HIT_SSD : KVP_CTR_EXISTS_HIT_DRAM, 1);
	kvp__hist(c, ssd ? KVP_HIST_EXISTS_SSD : KVP_HIST_EXISTS_DRAM, t0);
	return 1;
}

/* Pipeline helpers for batch lookups: hash key k into ring[k % n] and
 * prefetch its two buckets' state words. */
KVP_INLINE void
kvp__prefetch_buckets(struct kvp_client *c, const struct kvp_op *ops, size_t k,
		      uint64_t *ring, size_t n)
{
	uint64_t h;

	if (!kvp__key_ok(ops[k].key, ops[k].klen))
		return;
	h = kvp_key_hash(c->nsid, ops[k].key, ops[k].klen);
	ring[k % n] = h;
	__builtin_prefetch(&c->seg.meta[kvp_ix_cand(&c->seg, h, 0)]);
	__builtin_prefetch(&c->seg.meta[kvp_ix_cand(&c->seg, h, KVP_IX_WAYS)]);
}

/* Prefetch the entry lines of the slot whose fingerprint matches. */
KVP_INLINE void
kvp__prefetch_entry(struct kvp_client *c, uint64_t h)
{
	unsigned fp = kvp_ix_fp(h), pos;

	for (pos = 0; pos < KVP_IX_CANDS; pos++) {
		uint64_t i = kvp_ix_cand(&c->seg, h, pos);
		/* relaxed: a prefetch hint only */
		uint64_t w = kvp_load_relaxed(&c->seg.meta[i]);

		if (KVP_IX_STATE(w) == KVP_IX_READY && KVP_IX_FP(w) == fp) {
			const char *e = (const char *)&c->seg.entries[i];
			__builtin_prefetch(e);
			__builtin_prefetch(e + 64);
			__builtin_prefetch(e + 128);
			return;
		}
	}
}

/* kvp_batch_exists_prefix (kvpool.h), this pool only: lookups,
 * pipelined (the call, below, adds the other nodes). */
KVP_INLINE ssize_t
kvp__exists_prefix_local(struct kvp_client *c, struct kvp_op *ops, size_t n)
{
	/* a two-stage software pipeline: FAR keys ahead, hash and prefetch
	 * both candidate buckets; NEAR keys ahead, find the fingerprint
	 * match in the (now cached) state words and prefetch its entry */
	enum {
		FAR = 16,
		NEAR = 8,
		RING = 32
	};
	uint64_t hashes[RING], t0, nssd = 0;
	size_t k;

	if (!c || (!ops && n))
		return -EINVAL;
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	c->tick = t0 >> KVP_TICK_SHIFT;
	kvp__ctr(c, KVP_CTR_EXISTS, n);
	for (k = 0; k < n && k < FAR; k++)
		kvp__prefetch_buckets(c, ops, k, hashes, RING);
	for (k = 0; k < n; k++) {
		uint64_t w;
		int64_t i;

		if (!kvp__key_ok(ops[k].key, ops[k].klen)) {
			ops[k].status = -EINVAL;
			break;
		}
		if (k + FAR < n)
			kvp__prefetch_buckets(c, ops, k + FAR, hashes, RING);
		if (k + NEAR < n &&
		    kvp__key_ok(ops[k + NEAR].key, ops[k + NEAR].klen))
			kvp__prefetch_entry(c, hashes[(k + NEAR) % RING]);
		i = kvp_ix_find(&c->seg, c->nsid, hashes[k % RING], ops[k].key,
				ops[k].klen, KVP_IX_M(KVP_IX_READY), &w);
		if (i < 0) {
			ops[k].status = -ENOENT;
			break;
		}
		nssd += kvp__resident_ssd(c, (uint64_t)i);
		kvp__touch(c, (uint64_t)i); /* a probe predicts a load */
		ops[k].status = 0;
	}
	kvp__ctr(c, KVP_CTR_EXISTS_HIT, k);
	kvp__ctr(c, KVP_CTR_EXISTS_HIT_DRAM, k - nssd);
	kvp__ctr(c, KVP_CTR_EXISTS_HIT_SSD, nssd);
	if (n)
		kvp__hist(c, nssd ? KVP_HIST_EXISTS_SSD : KVP_HIST_EXISTS_DRAM,
			  t0);
	return (ssize_t)k;
}

/* kvp_batch_exists_prefix (kvpool.h): the local walk, then, with
 * KVP_REMOTE_PROBE, the rest of the prefix that other nodes hold. */
KVP_API ssize_t
kvp_batch_exists_prefix(struct kvp_client *c, struct kvp_op *ops, size_t n)
{
	ssize_t r = kvp__exists_prefix_local(c, ops, n);
	size_t got;

	if (r < 0 || (size_t)r >= n || ops[r].status != -ENOENT ||
	    !kvp__remote_up(c, KVP_REMOTE_PROBE))
		return r;
	got = kvp__remote_prefix(c, KVP_RB_PROBE, ops, (size_t)r, n);
	kvp__ctr(c, KVP_CTR_REMOTE_PROBED, got);
	return r + (ssize_t)got;
}

/* kvp_batch_locate (kvpool.h): where each key lives; with
 * KVP_REMOTE_PROBE, the keys missed here that other nodes hold. */
KVP_API ssize_t
kvp_batch_locate(struct kvp_client *c, struct kvp_op *ops, size_t n, int *tier)
{
	size_t k, m = 0, present = 0;

	if (!c || (!ops && n) || (!tier && n))
		return -EINVAL;
	c->tick = kvp_tick_now();
	for (k = 0; k < n; k++) {
		uint64_t w;
		int64_t i;

		tier[k] = 0;
		if (!kvp__key_ok(ops[k].key, ops[k].klen)) {
			ops[k].status = -EINVAL;
			continue;
		}
		i = kvp_ix_find(&c->seg, c->nsid,
				kvp_key_hash(c->nsid, ops[k].key, ops[k].klen),
				ops[k].key, ops[k].klen, KVP_IX_M(KVP_IX_READY),
				&w);
		if (i < 0) {
			ops[k].status = -ENOENT;
			m++;
			continue;
		}
		/* relaxed: a report; the value may move right after */
		tier[k] = (int)KVP_LOC_TIER(
			kvp_load_relaxed(&c->seg.entries[i].e_loc));
		ops[k].status = 0;
		present++;
	}
	kvp__ctr(c, KVP_CTR_EXISTS, n);
	if (m && kvp__remote_up(c, KVP_REMOTE_PROBE))
		present += kvp__remote_locate(c, ops, n, tier, m);
	return (ssize_t)present;
}

/* A key fetched from another node, read here as soon as it lands (while
 * the rest are still in flight), into the caller's buffer. */
struct kvp__rread_ctx {
	struct kvp_client *c;
	bool exact;
	size_t hits;
};

KVP_INLINE void
kvp__rread_one(void *ctx, struct kvp_op *o, int status)
{
	struct kvp__rread_ctx *r = (struct kvp__rread_ctx *)ctx;
	struct kvp_op sub;

	if (status != 0) {
		o->status = status;
		return;
	}
	sub = *o; /* the caller's buffer and length (a miss left them) */
	sub.status = 0;
	kvp__read(r->c, &sub, 1, r->exact);
	o->status = sub.status;
	o->len = sub.len;
	r->hits += sub.status == 0;
}

/* The read engine with the remote step: a local pass, then, only if it
 * missed keys, those keys from other nodes (KVP_REMOTE_GET).  A batch
 * that hits here pays nothing for the cluster.  Returns the keys read. */
KVP_INLINE size_t
kvp__read_remote(struct kvp_client *c, struct kvp_op *ops, size_t n, bool exact)
{
	size_t r = kvp__read(c, ops, n, exact);

	if (r < n && kvp__remote_up(c, KVP_REMOTE_GET)) {
		struct kvp__rread_ctx x;

		x.c = c;
		x.exact = exact;
		x.hits = 0;
		if (kvp__remote_fetch(c, ops, n, kvp__rread_one, &x))
			kvp__ctr(c, KVP_CTR_REMOTE_HIT, x.hits);
		r += x.hits;
	}
	return r;
}

/* kvp_get (kvpool.h): the read engine, exact size. */
KVP_API ssize_t
kvp_get(struct kvp_client *c, const void *key, uint32_t klen, void *buf,
	uint64_t cap)
{
	struct kvp_op op;

	if (!c || !kvp__key_ok(key, klen) || (!buf && cap))
		return -EINVAL;
	kvp__op_init(&op, key, klen, buf, 0, cap);
	kvp__read_remote(c, &op, 1, true);
	return op.status ? op.status : (ssize_t)op.len;
}

/* kvp_get_range (kvpool.h): the read engine, clipped. */
KVP_API ssize_t
kvp_get_range(struct kvp_client *c, const void *key, uint32_t klen,
	      uint64_t off, void *buf, uint64_t len)
{
	struct kvp_op op;

	if (!c || !kvp__key_ok(key, klen) || (!buf && len))
		return -EINVAL;
	kvp__op_init(&op, key, klen, buf, off, len);
	kvp__read_remote(c, &op, 1, false);
	return op.status ? op.status : (ssize_t)op.len;
}

/* kvp_batch_get (kvpool.h): the read engine, clipped, over n keys. */
KVP_API ssize_t
kvp_batch_get(struct kvp_client *c, struct kvp_op *ops, size_t n)
{
	if (!c || (!ops && n))
		return -EINVAL;
	return (ssize_t)kvp__read_remote(c, ops, n, false);
}

#endif /* KVP_CLIENT_READ_INT_H */
