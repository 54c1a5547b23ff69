/* SPDX-License-Identifier: MIT */
/*
 * client_pin_int.h - holds that outlive a call: pinsets (lookup-and-pin)
 * and leases (kvpool.h documents the calls; docs/design.md,
 * "Lookup-and-pin" and "Leases").
 *
 * A pin is an ordinary hold slot of this client, tagged KVP_HOLD_PIN, kept
 * until the pinset is released; the reaper drops it if the process dies.
 * A lease is a slot of the segment's lease table that the agent's hold
 * scan treats like a hold until it expires.  Both count against
 * --max-pinned-per-client for the handle that took them.
 *
 * Included by shm/client_int.h.
 */
#ifndef KVP_CLIENT_PIN_INT_H
#define KVP_CLIENT_PIN_INT_H

/*
 * Bytes this client pins now, as --max-pinned-per-client counts them: its
 * pinsets' values and its live leases' (a lease pins its value as surely
 * as a hold).  Leases that expired, or that were released or reclaimed
 * by anyone, are dropped from the private list first.  A lease outlives
 * the process that took it, but it is counted only against the handle
 * that took it: once that process is gone its leases count against
 * nobody (they still pin until they expire, at most an hour).
 */
KVP_INLINE uint64_t
kvp__pinned_total(struct kvp_client *c)
{
	uint64_t now = c->nleases ? kvp_now_ns(CLOCK_MONOTONIC) : 0;
	uint32_t k = 0;

	while (k < c->nleases) {
		struct kvp__lease_rec *r = &c->leases[k];
		/* acquire: a release or sweep of the lease (its CAS) */
		uint64_t w = kvp_load_acquire(&c->seg.leases[r->idx].ls_state);

		if (now < r->expiry &&
		    w == KVP_LS_WORD(r->gen, 0, KVP_LS_LIVE)) {
			k++;
			continue;
		}
		c->leased_bytes -= r->len;
		*r = c->leases[--c->nleases];
	}
	return c->pinned_bytes + c->leased_bytes;
}

/* A pinset: the holds of the leading present keys of one lookup (private
 * memory).  Each is an ordinary attributable hold (the reaper releases it
 * if the process dies; it never expires while the process lives). */
struct kvp_pinset {
	size_t count; /* keys pinned (a prefix of the lookup) */
	bool released;
	bool capped; /* the pinned-bytes cap cut the prefix short */
	uint64_t *slot, *gen, *len;
	int *hold;
	uint8_t *tier; /* tier when pinned (KVP_TIER_DRAM / KVP_TIER_SSD) */
};

/* kvp_pinset_release (kvpool.h) */
KVP_API void
kvp_pinset_release(struct kvp_client *c, struct kvp_pinset *ps)
{
	size_t k;

	if (!c || !ps || ps->released)
		return;
	for (k = 0; k < ps->count; k++) {
		kvp__drop(c, ps->hold[k]);
		kvp__ctr(c,
			 ps->tier[k] == KVP_TIER_DRAM ? KVP_CTR_PINNED_DRAM :
							KVP_CTR_PINNED_SSD,
			 (uint64_t)0 - ps->len[k]);
		c->pinned_bytes -= ps->len[k];
	}
	ps->released = true;
}

/* kvp_pinset_free (kvpool.h): one allocation holds the arrays. */
KVP_API void
kvp_pinset_free(struct kvp_client *c, struct kvp_pinset *ps)
{
	if (!ps)
		return;
	kvp_pinset_release(c, ps);
	free(ps->slot);
	free(ps);
}

/* kvp_pinset_count, kvp_pinset_tier, kvp_pinset_len (kvpool.h) */
KVP_API size_t
kvp_pinset_count(const struct kvp_pinset *ps)
{
	return ps && !ps->released ? ps->count : 0;
}

KVP_API int
kvp_pinset_tier(struct kvp_client *c, const struct kvp_pinset *ps, size_t k)
{
	if (!c || !ps || ps->released || k >= ps->count)
		return -EINVAL;
	/* acquire: pairs with the agent's release when it moves it */
	return (int)KVP_LOC_TIER(
		kvp_load_acquire(&c->seg.entries[ps->slot[k]].e_loc));
}

KVP_API uint64_t
kvp_pinset_len(const struct kvp_pinset *ps, size_t k)
{
	return ps && !ps->released && k < ps->count ? ps->len[k] : 0;
}

/* kvp_batch_lookup_pin (kvpool.h) in this pool: the walk of kvp_batch_exists_prefix,
 * holding each key it finds (a hold tagged KVP_HOLD_PIN); the pinset's
 * arrays are one allocation. */
KVP_INLINE ssize_t
kvp__lookup_pin_local(struct kvp_client *c, struct kvp_op *ops, size_t n,
		      struct kvp_pinset **out)
{
	/* per key: slot, gen, len, hold, tier */
	const size_t per = 3 * sizeof(uint64_t) + sizeof(int) + 1;
	struct kvp_pinset *ps;
	uint64_t cap;
	size_t k;

	if (!c || (!ops && n) || !out)
		return -EINVAL;
	*out = NULL;
	/* n keys need n * sizeof(struct kvp_op) bytes of ops already: an n
	 * whose arrays cannot even be sized is not an array (-EINVAL) */
	if (n > SIZE_MAX / per)
		return -EINVAL;
	ps = (struct kvp_pinset *)calloc(1, sizeof(*ps));
	if (!ps)
		return -ENOMEM;
	ps->slot = (uint64_t *)malloc((n ? n : 1) * per);
	if (!ps->slot) {
		free(ps);
		return -ENOMEM;
	}
	ps->gen = ps->slot + n;
	ps->len = ps->gen + n;
	ps->hold = (int *)(ps->len + n);
	ps->tier = (uint8_t *)(ps->hold + n);
	cap = c->seg.hdr->h_max_pinned;
	if (cap)
		kvp__pinned_total(c); /* prunes c->leased_bytes */
	c->tick = kvp_tick_now();
	for (k = 0; k < n; k++) {
		uint64_t i = 0, len = 0;
		int h;

		if (!kvp__key_ok(ops[k].key, ops[k].klen)) {
			ops[k].status = -EINVAL;
			break;
		}
		h = kvp__lookup_hold_flags(c, ops[k].key, ops[k].klen, &i, &len,
					   KVP_HOLD_PIN);
		if (h < 0) {
			ops[k].status = h == -ENOBUFS ? -EBUSY : h;
			break;
		}
		if (cap && c->pinned_bytes + c->leased_bytes + len > cap) {
			kvp__drop(c, h);
			ops[k].status = -EBUSY;
			ps->capped = true;
			kvp__ctr(c, KVP_CTR_PIN_CAPPED, 1);
			break;
		}
		ps->slot[k] = i;
		/* acquire: the generation the hold was validated against */
		ps->gen[k] = KVP_IX_GEN(kvp_load_acquire(&c->seg.meta[i]));
		ps->len[k] = len;
		ps->hold[k] = h;
		/* acquire: stable enough while held (see kvp__read) */
		ps->tier[k] = (uint8_t)KVP_LOC_TIER(
			kvp_load_acquire(&c->seg.entries[i].e_loc));
		c->pinned_bytes += len;
		kvp__ctr(c,
			 ps->tier[k] == KVP_TIER_DRAM ? KVP_CTR_PINNED_DRAM :
							KVP_CTR_PINNED_SSD,
			 len);
		ops[k].status = 0;
		ps->count = k + 1;
		if (k == 1)
			kvp_crashpoint(C_PIN_TAKEN);
	}
	kvp__ctr(c, KVP_CTR_PIN, ps->count);
	*out = ps;
	return (ssize_t)ps->count;
}

/* kvp_batch_lookup_pin (kvpool.h): with KVP_REMOTE_PROBE, the part of the
 * prefix that other nodes hold is fetched into this pool first (the
 * remote step, shm/client_remote_int.h), then the whole prefix is pinned
 * here (a fetched page evicted before the pin ends the prefix, as any
 * absent key does). */
KVP_API ssize_t
kvp_batch_lookup_pin(struct kvp_client *c, struct kvp_op *ops, size_t n,
		     struct kvp_pinset **out)
{
	if (c && ops && n && out && kvp__remote_up(c, KVP_REMOTE_PROBE)) {
		ssize_t r = kvp__exists_prefix_local(c, ops, n);

		if (r >= 0 && (size_t)r < n && ops[r].status == -ENOENT)
			kvp__remote_prefix(c, KVP_RB_FETCH, ops, (size_t)r, n);
	}
	return kvp__lookup_pin_local(c, ops, n, out);
}

/* kvp_pinset_get (kvpool.h): the read engine over held keys. */
KVP_API ssize_t
kvp_pinset_get(struct kvp_client *c, struct kvp_pinset *ps, struct kvp_op *ops,
	       size_t n)
{
	struct kvp__pend pend[KVP_RING_ENTRIES];
	uint64_t t0;
	unsigned m = 0;
	size_t k, ok = 0;

	if (!c || !ps || ps->released || (!ops && n) || n > ps->count)
		return -EINVAL;
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	c->call_ssd = 0;
	for (k = 0; k < n; k++) {
		struct kvp_op *op = &ops[k];
		uint64_t i = ps->slot[k], vlen = ps->len[k], off = op->off, len;

		kvp__ctr(c, KVP_CTR_GET, 1);
		if (!op->buf || off > vlen) {
			op->status = -EINVAL;
			continue;
		}
		len = vlen - off < op->len ? vlen - off : op->len;
		m = kvp__read_held(c, op, i, ps->gen[k], off, len, ps->hold[k],
				   true, pend, m);
	}
	if (m)
		kvp__resolve(c, pend, m);
	for (k = 0; k < n; k++)
		ok += ops[k].status == 0;
	if (n)
		kvp__hist(c, c->call_ssd ? KVP_HIST_GET_SSD : KVP_HIST_GET_DRAM,
			  t0);
	return (ssize_t)ok;
}

/* ---- timed leases ---- */

/* kvp_lease_acquire (kvpool.h): hold the entry, check the cap, take a
 * lease slot (FREE -> RESERVED naming us -> LIVE), drop the hold. */
KVP_API int
kvp_lease_acquire(struct kvp_client *c, const void *key, uint32_t klen,
		  uint32_t ttl_ms, struct kvp_lease *out)
{
	struct kvp_seg *s;
	uint64_t i = 0, len = 0, n, k, loc, cap, expiry;
	int h;

	if (!c || !kvp__key_ok(key, klen) || !out || ttl_ms == 0 ||
	    ttl_ms > 3600000)
		return -EINVAL;
	s = &c->seg;
	n = s->g.g_max_leases;
	c->tick = kvp_tick_now();
	h = kvp__lookup_hold(c, key, klen, &i, &len);
	if (h < 0)
		return h == -ENOBUFS ? -EBUSY : h;
	/* the agent's policy: a plain word it sets at start */
	cap = s->hdr->h_max_pinned;
	if (cap && kvp__pinned_total(c) + len > cap) {
		kvp__drop(c, h);
		kvp__ctr(c, KVP_CTR_PIN_CAPPED, 1);
		return -EBUSY;
	}
	if (c->nleases == c->cap_leases) {
		uint32_t nc = c->cap_leases ? c->cap_leases * 2 : 16;
		struct kvp__lease_rec *nl = (struct kvp__lease_rec *)realloc(
			c->leases, nc * sizeof(*nl));

		if (!nl) {
			kvp__drop(c, h);
			return -ENOMEM;
		}
		c->leases = nl;
		c->cap_leases = nc;
	}
	for (k = 0; k < n; k++) {
		uint64_t j = (c->slot * 131 + k) % n;
		struct kvp_lease_slot *ls = &s->leases[j];
		/* relaxed: a hint; the CAS decides */
		uint64_t w = kvp_load_relaxed(&ls->ls_state);
		uint32_t gen;

		/* the lease slot is ours to fill in (shm/kvp_lease.h) */
		if (!kvp_ls_reserve(ls, w, c->slot + 1, &gen))
			continue;
		kvp_crashpoint(C_LEASE_RESERVED);
		expiry = kvp_now_ns(CLOCK_MONOTONIC) +
			 (uint64_t)ttl_ms * 1000000ull;
		/* LIVE while our hold is still up */
		kvp_ls_publish(ls, gen, i, c->slot + 1, expiry);
		kvp_crashpoint(C_LEASE_LIVE);
		/* acquire: the location under our hold */
		loc = kvp_load_acquire(&s->entries[i].e_loc);
		out->idx = (uint32_t)j;
		out->gen = (uint32_t)gen;
		out->len = len;
		out->tier = (int)KVP_LOC_TIER(loc);
		out->seg_off = 0;
		if (KVP_LOC_TIER(loc) == KVP_TIER_DRAM &&
		    /* relaxed: stable while held */
		    kvp_load_relaxed(&s->entries[i].e_run) * s->g.g_dram_unit >=
			    len)
			out->seg_off = s->L.off[KVP_R_ARENA] +
				       KVP_LOC_VAL(loc) * s->g.g_dram_unit;
		/* counted against the pinned-bytes cap until released or
		 * expired (room in the list was made above) */
		{
			struct kvp__lease_rec *r = &c->leases[c->nleases++];

			r->idx = (uint32_t)j;
			r->gen = gen;
			r->len = len;
			r->expiry = expiry;
		}
		c->leased_bytes += len;
		kvp__drop(c, h);
		return 0;
	}
	kvp__drop(c, h);
	return -EBUSY;
}

/* kvp_lease_release (kvpool.h): LIVE -> FREE of this generation only. */
KVP_API int
kvp_lease_release(struct kvp_client *c, const struct kvp_lease *l)
{
	struct kvp_lease_slot *ls;

	if (!c || !l || l->idx >= c->seg.g.g_max_leases)
		return -EINVAL;
	ls = &c->seg.leases[l->idx];
	/* of this generation only */
	kvp_ls_release(ls, l->gen);
	kvp__pinned_total(c); /* it no longer counts against the cap */
	return 0;
}

#endif /* KVP_CLIENT_PIN_INT_H */
