/* SPDX-License-Identifier: MIT */
/*
 * client_remote_int.h - the client's side of the remote tier: keys this
 * pool does not hold, asked of the other nodes of a cluster (kvpoold
 * --cluster).  A client never talks to the network: it writes the keys
 * into its mailbox in the segment and sleeps on its futex; the agent asks
 * the directory (one round trip per call), fetches what other nodes hold
 * into this pool (FETCH) and answers (the protocol: shm/kvp_rbox.h;
 * the agent's side: agent/cluster_mailbox.c).  A FETCHed key is an
 * ordinary entry of this pool afterwards, read by the local path.
 *
 * The remote step is best effort: when the agent has no cluster, the
 * directory is down, no peer is up, or the agent is gone, a key absent
 * here stays a MISS (the local answer) and nothing waits.
 *
 * A layer below the read path: kvp_get and its kind (shm/client_read_int.h)
 * call kvp__remote_up and kvp__remote_fetch when their local pass missed
 * keys, and read each fetched key themselves as it lands; the probes
 * (kvp_batch_exists_prefix, kvp_batch_locate, in the read file) and the
 * pin (kvp_batch_lookup_pin, shm/client_pin_int.h) call
 * kvp__remote_prefix and kvp__remote_locate for the keys their local walk
 * missed.  Nothing here calls the read path or the pin: only the remote
 * step (the mailbox call) and kvp_remote.
 *
 * Included by shm/client_int.h (last).
 */
#ifndef KVP_CLIENT_REMOTE_INT_H
#define KVP_CLIENT_REMOTE_INT_H

/* Is there a remote tier to ask now?  The state word, and the cluster
 * thread's heartbeat: a thread that has not beaten for KVP_CL_STALE_MS
 * (stuck, or its agent stopped) is asked nothing, the keys stay MISS at
 * once.  A crashed agent leaves UP behind, which the beat (and the wait
 * below, the agent's lock) notices. */
KVP_INLINE bool
kvp__remote_up(const struct kvp_client *c, unsigned flag)
{
	uint64_t w;
	uint32_t beat, now;

	if (!(c->remote_flags & flag) || !c->seg.cluster)
		return false;
	/* acquire: pairs with the agent's release of UP */
	w = kvp_load_acquire(&c->seg.cluster->cl_state);
	if (KVP_CL_STATE(w) != KVP_CL_UP || KVP_CL_PEERS(w) == 0)
		return false;
	/* acquire: pairs with the thread's release of its beat (a clock
	 * reading; nothing else is read through it) */
	beat = kvp_iload_acquire(&c->seg.cluster->cl_beat);
	now = (uint32_t)(kvp_now_ns(CLOCK_MONOTONIC) / 1000000u);
	return (uint32_t)(now - beat) <= KVP_CL_STALE_MS;
}

/* Our mailbox back to FREE with the next sequence, from whatever a
 * previous call, or a previous owner of the slot, left (kvp_open, and a
 * call that finds it not FREE).  A mailbox the agent is answering is
 * waited for (it writes only a few KiB, then DONE). */
KVP_INLINE uint64_t
kvp__rbox_reset(struct kvp_client *c)
{
	return kvp_rbox_reset(kvp__rbox(&c->seg, c->slot));
}

/* Called for each answer of a call as it becomes final (a FETCH's keys
 * one by one as they land, the rest at DONE): k indexes the call's keys. */
typedef void (*kvp__rbox_ready_fn)(void *ctx, size_t k,
				   const struct kvp_rbox_ans *a);

/* Hand every final answer not handed yet to fn (seen[k] marks them);
 * returns how many it handed. */
KVP_INLINE size_t
kvp__rbox_take(const struct kvp_rbox_ans *ans, size_t m, uint64_t seq,
	       bool *seen, kvp__rbox_ready_fn fn, void *ctx)
{
	size_t k, got = 0;

	for (k = 0; k < m; k++) {
		struct kvp_rbox_ans a;

		if (seen[k] ||
		    /* acquire: pairs with the agent's release of the word */
		    kvp_iload_acquire(&ans[k].ra_ready) != KVP_RA_READY(seq))
			continue;
		/* a private copy; its ready word is none */
		kvp_rbox_ans_copy(&a, &ans[k]);
		seen[k] = true;
		fn(ctx, k, &a);
		got++;
	}
	return got;
}

/*
 * One mailbox call: ask the agent about keys ops[idx[0..m)] (kind
 * KVP_RB_PROBE or KVP_RB_FETCH); each answer goes to fn as soon as it is
 * final (seen[0..m) false on entry).  Returns 0, or -ENOTCONN (no agent
 * to answer), -ETIMEDOUT (no answer for KVP_REMOTE_WAIT_MS;
 * withdrawn): keys not handed to fn then have no answer.  The caller made
 * sure the keys and the namespace fit (kvp__rbox_fit).
 */
KVP_INLINE int
kvp__rbox_call(struct kvp_client *c, unsigned kind, const struct kvp_op *ops,
	       const size_t *idx, size_t m, bool *seen, kvp__rbox_ready_fn fn,
	       void *ctx)
{
	struct kvp_seg *s = &c->seg;
	struct kvp_rbox *rb = kvp__rbox(s, c->slot);
	struct kvp_client_slot *cs = &s->clients[c->slot];
	unsigned char *data = (unsigned char *)(rb + 1);
	struct kvp_rbox_ans *ans = (struct kvp_rbox_ans *)data;
	size_t p = m * sizeof(struct kvp_rbox_ans), nsl = strlen(c->ns), k;
	uint64_t w = kvp__rbox_reset(c), posted, t0, dead_since = 0;

	kvp_rbox_answers_clear(rb, m); /* no ready word of an earlier one */
	data[p++] = (unsigned char)nsl;
	memcpy(data + p, c->ns, nsl);
	p += nsl;
	for (k = 0; k < m; k++) {
		data[p++] = (unsigned char)ops[idx[k]].klen;
		memcpy(data + p, ops[idx[k]].key, ops[idx[k]].klen);
		p += ops[idx[k]].klen;
	}
	kvp_rbox_request(rb, kind, m, p - m * sizeof(struct kvp_rbox_ans));
	posted = 1; /* posted at the loop's first turn */
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	for (;;) {
		/* acquire: pairs with the agent's bump after DONE */
		unsigned int fseq = kvp_iload_acquire(&cs->cs_io_futex);
		uint64_t now;

		if (posted) {
			w = kvp_rbox_post(rb, w);
			kvp_rbox_ring(s->cluster); /* the cluster thread */
			posted = 0;
		}
		/* acquire: pairs with the agent's DONE release */
		if (kvp_load_acquire(&rb->rb_state) ==
		    KVP_RB_WITH(w, KVP_RB_DONE)) {
			kvp__rbox_take(ans, m, KVP_RB_SEQ(w), seen, fn, ctx);
			kvp_rbox_free(rb, w); /* the mailbox is ours again */
			return 0;
		}
		/* the keys that landed so far, while the rest are in flight
		 * (answers moving: the backstop counts from the last) */
		if (kvp__rbox_take(ans, m, KVP_RB_SEQ(w), seen, fn, ctx))
			t0 = kvp_now_ns(CLOCK_MONOTONIC);
		kvp_futex_wait(&cs->cs_io_futex, fseq, KVP_RESOLVE_SLICE_NS);
		now = kvp_now_ns(CLOCK_MONOTONIC);
		if (kvp_shm_agent_alive(s))
			dead_since = 0;
		else if (!dead_since)
			dead_since = now;
		if ((dead_since && now - dead_since >= c->agent_grace_ns) ||
		    now - t0 >= c->remote_wait_ns) {
			/* withdraw (a CAS from our exact word: the agent
			 * writes nothing into a withdrawn mailbox) */
			/* acquire: the agent's last word (ANSWERING, DONE) */
			uint64_t cur = kvp_load_acquire(&rb->rb_state);

			if (KVP_RB_STATE(cur) == KVP_RB_ANSWERING ||
			    KVP_RB_STATE(cur) == KVP_RB_DONE)
				continue; /* the answer is landing: take it */
			if (!kvp_rbox_withdraw(rb, cur))
				continue;
			return dead_since ? -ENOTCONN : -ETIMEDOUT;
		}
	}
}

/* How many of ops[idx[from..m)] fit one mailbox call (at least one key
 * always fits: a mailbox holds 16 KiB at least). */
KVP_INLINE size_t
kvp__rbox_fit(const struct kvp_client *c, const struct kvp_op *ops,
	      const size_t *idx, size_t from, size_t m)
{
	uint64_t cap =
		((uint64_t)c->seg.g.g_rbox_kib << 10) - sizeof(struct kvp_rbox);
	uint64_t used = 1 + strlen(c->ns);
	size_t k;

	for (k = from; k < m; k++) {
		uint64_t need =
			sizeof(struct kvp_rbox_ans) + 1 + ops[idx[k]].klen;

		if (used + need > cap)
			break;
		used += need;
	}
	return k - from;
}

/* A call's answer k is key from + k of the whole ask. */
struct kvp__ask_shift_ctx {
	kvp__rbox_ready_fn fn;
	void *ctx;
	size_t from;
	bool absent;
};
KVP_INLINE void
kvp__ask_shifted(void *ctx, size_t k, const struct kvp_rbox_ans *a)
{
	struct kvp__ask_shift_ctx *sh = (struct kvp__ask_shift_ctx *)ctx;

	sh->absent |= a->ra_status == -ENOENT;
	sh->fn(sh->ctx, sh->from + k, a);
}

/* Ask about keys ops[idx[0..m)] in as many calls as their size needs;
 * each answer goes to fn(ctx, k, answer) with k indexing idx, as soon as
 * it is final; keys no call answered (the agent went away, the call timed
 * out) are not handed to fn.  stop_absent: a prefix walk (no further call
 * after one with a key no node holds).  Returns the calls made. */
KVP_INLINE unsigned
kvp__remote_ask(struct kvp_client *c, unsigned kind, const struct kvp_op *ops,
		const size_t *idx, size_t m, kvp__rbox_ready_fn fn, void *ctx,
		bool stop_absent)
{
	struct kvp__ask_shift_ctx sh;
	bool *seen;
	size_t from = 0;
	unsigned calls = 0;

	seen = (bool *)malloc(m ? m : 1);
	if (!seen)
		return 0;
	sh.fn = fn;
	sh.ctx = ctx;
	while (from < m) {
		size_t part = kvp__rbox_fit(c, ops, idx, from, m);

		if (!part)
			break;
		memset(seen, 0, part);
		sh.from = from;
		sh.absent = false;
		if (kvp__rbox_call(c, kind, ops, idx + from, part, seen,
				   kvp__ask_shifted, &sh))
			break;
		calls++;
		from += part;
		if (stop_absent && sh.absent)
			break;
	}
	free(seen);
	return calls;
}

/* A FETCH answer as a get's status: the agent's -ENOSPC (no room here
 * for the page) is backpressure, like a full staging arena. */
KVP_INLINE int
kvp__remote_get_status(int st)
{
	switch (st) {
	case 0:
	case -ENOENT:
	case -EIO:
	case -EBUSY:
	case -E2BIG:
		return st;
	case -ENOSPC:
		return -EBUSY;
	default:
		return -EIO;
	}
}

/* A FETCH's answers as they land, handed to the read path's fn with the
 * op they answer and the op's status (0: the key is in this pool now). */
struct kvp__rfetch_ctx {
	struct kvp_op *ops;
	const size_t *idx;
	kvp__remote_landed_fn fn;
	void *ctx;
};

KVP_INLINE void
kvp__rfetch_one(void *ctx, size_t k, const struct kvp_rbox_ans *a)
{
	struct kvp__rfetch_ctx *r = (struct kvp__rfetch_ctx *)ctx;

	r->fn(r->ctx, &r->ops[r->idx[k]],
	      a->ra_status ? kvp__remote_get_status(a->ra_status) : 0);
}

/* The keys of ops[0..n) the local read missed (-ENOENT), fetched from
 * other nodes into this pool: fn(ctx, op, status) for each key as its
 * answer lands, while the rest are in flight (the read path reads it
 * there; an op whose key is not answered is left as it was).  False when
 * nothing was asked (no key missed, or no memory). */
KVP_INLINE bool
kvp__remote_fetch(struct kvp_client *c, struct kvp_op *ops, size_t n,
		  kvp__remote_landed_fn fn, void *ctx)
{
	struct kvp__rfetch_ctx r;
	size_t *idx, m = 0, k;

	for (k = 0; k < n; k++)
		m += ops[k].status == -ENOENT;
	if (!m)
		return false;
	idx = (size_t *)malloc(m * sizeof(size_t));
	if (!idx)
		return false;
	m = 0;
	for (k = 0; k < n; k++)
		if (ops[k].status == -ENOENT)
			idx[m++] = k;
	r.ops = ops;
	r.idx = idx;
	r.fn = fn;
	r.ctx = ctx;
	kvp__remote_ask(c, KVP_RB_FETCH, ops, idx, m, kvp__rfetch_one, &r,
			false);
	free(idx);
	return true;
}

/* Answers kept as they come: st[k], len[k] (st preset to -ENOENT). */
struct kvp__rkeep_ctx {
	int *st;
	uint64_t *len;
};

KVP_INLINE void
kvp__rkeep_one(void *ctx, size_t k, const struct kvp_rbox_ans *a)
{
	struct kvp__rkeep_ctx *r = (struct kvp__rkeep_ctx *)ctx;

	r->st[k] = a->ra_status;
	r->len[k] = a->ra_len;
}

/* kvp__remote_ask, keeping the answers in st[], len[] (-ENOENT, 0 for a
 * key not answered). */
KVP_INLINE void
kvp__remote_ask_keep(struct kvp_client *c, unsigned kind,
		     const struct kvp_op *ops, const size_t *idx, size_t m,
		     int *st, uint64_t *len, bool stop_absent)
{
	struct kvp__rkeep_ctx r;
	size_t k;

	for (k = 0; k < m; k++) {
		st[k] = -ENOENT;
		len[k] = 0;
	}
	r.st = st;
	r.len = len;
	kvp__remote_ask(c, kind, ops, idx, m, kvp__rkeep_one, &r, stop_absent);
}

/* The keys ops[from..n) another node holds, as a prefix: statuses 0 up
 * to the first key no node holds (-ENOENT); its length in *len when
 * len is not NULL.  Returns how many. */
KVP_INLINE size_t
kvp__remote_prefix(struct kvp_client *c, unsigned kind, struct kvp_op *ops,
		   size_t from, size_t n)
{
	size_t m = n - from, *idx, k, got = 0;
	int *st;
	uint64_t *len;

	idx = (size_t *)malloc(
		m * (sizeof(size_t) + sizeof(int) + sizeof(uint64_t)));
	if (!idx)
		return 0;
	len = (uint64_t *)(idx + m);
	st = (int *)(len + m);
	for (k = 0; k < m; k++) {
		if (!kvp__key_ok(ops[from + k].key, ops[from + k].klen))
			break;
		idx[k] = from + k;
	}
	m = k;
	if (m)
		kvp__remote_ask_keep(c, kind, ops, idx, m, st, len, true);
	for (k = 0; k < m; k++) {
		if (st[k] != 0) {
			ops[from + k].status =
				kind == KVP_RB_PROBE ?
					-ENOENT :
					kvp__remote_get_status(st[k]);
			break;
		}
		ops[from + k].status = 0;
		got++;
	}
	free(idx);
	return got;
}

/* kvp_batch_locate's remote half: of the m keys of ops[0..n) its local
 * walk left -ENOENT, those another node holds get status 0 and tier
 * KVP_TIER_REMOTE.  Returns how many. */
KVP_INLINE size_t
kvp__remote_locate(struct kvp_client *c, struct kvp_op *ops, size_t n,
		   int *tier, size_t m)
{
	size_t k, present = 0, *idx;
	uint64_t *len;
	int *st;

	idx = (size_t *)malloc(
		m * (sizeof(size_t) + sizeof(int) + sizeof(uint64_t)));
	if (!idx)
		return 0;
	len = (uint64_t *)(idx + m);
	st = (int *)(len + m);
	m = 0;
	for (k = 0; k < n; k++)
		if (ops[k].status == -ENOENT)
			idx[m++] = k;
	kvp__remote_ask_keep(c, KVP_RB_PROBE, ops, idx, m, st, len, false);
	for (k = 0; k < m; k++) {
		if (st[k] != 0)
			continue;
		ops[idx[k]].status = 0;
		tier[idx[k]] = (int)KVP_TIER_REMOTE;
		present++;
		kvp__ctr(c, KVP_CTR_REMOTE_PROBED, 1);
	}
	free(idx);
	return present;
}

/* kvp_remote (kvpool.h) */
KVP_API int
kvp_remote(struct kvp_client *c, unsigned flags)
{
	int old;

	if (!c || (flags & ~(unsigned)(KVP_REMOTE_GET | KVP_REMOTE_PROBE)))
		return -EINVAL;
	old = (int)c->remote_flags;
	c->remote_flags = flags;
	return old;
}

#endif /* KVP_CLIENT_REMOTE_INT_H */
