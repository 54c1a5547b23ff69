/* SPDX-License-Identifier: MIT */
/*
 * client_stat_int.h - kvp_stat: what the pool holds and what this client
 * did, read from the segment without a lock or a syscall (but the agent
 * liveness check, one fcntl).  Every value is a statistic: relaxed loads of
 * words other processes write, reported as read, never used to index or
 * size anything.  Included by shm/client_int.h only.
 */
#ifndef KVP_CLIENT_STAT_INT_H
#define KVP_CLIENT_STAT_INT_H

/* The pool's total of counter k: live clients' shards plus the retired
 * totals of gone ones.  A client closing meanwhile may be counted twice
 * or not at all for one read: a statistic. */
KVP_INLINE uint64_t
kvp__stat_pool_ctr(const struct kvp_seg *s, enum kvp_ctr k)
{
	/* relaxed: statistics (kvp_ctr_retire adds atomically) */
	uint64_t v = kvp_load_relaxed(&s->hdr->h_actr[KVP_ACTR_RETIRED0 + k]);
	uint32_t i;

	for (i = 0; i < s->g.g_max_clients; i++) {
		const struct kvp_client_slot *cs = &s->clients[i];
		/* relaxed: a statistic; the slot's state is not acted on */
		uint64_t st = kvp_load_relaxed(&cs->cs_state);

		if (KVP_CS_STATE(st) == KVP_CS_LIVE)
			v += kvp_load_relaxed(
				&cs->cs_ctr[k]); /* relaxed: stat */
	}
	return v;
}

KVP_API int
kvp_stat(struct kvp_client *c, struct kvp_stat *out, size_t size)
{
	struct kvp_stat st;
	const struct kvp_seg *s;
	const kvp_aword_t *mine;
	uint64_t unit;
	uint32_t i;

	if (!c || !out || size == 0)
		return -EINVAL;
	s = &c->seg;
	if (kvp__live(c))
		return -ESTALE;
	memset(&st, 0, sizeof(st));
	st.size = sizeof(st);
	unit = s->g.g_dram_unit;
	st.dram_bytes = kvp_dram_capacity(s) * unit;
	st.dram_total_bytes = s->g.g_dram_pages * unit;
	/* relaxed: statistics the agent or the allocator's holder write */
	st.dram_used_bytes = kvp_load_relaxed(&s->dram->dh_used_mirror) * unit;
	st.entries = kvp_load_relaxed(&s->hdr->h_ix_used);
	st.entries_max = s->g.g_index_limit;
	st.ssd_bytes = kvp_load_relaxed(&s->hdr->h_ssd_total_bytes);
	st.ssd_used_bytes = kvp_load_relaxed(&s->hdr->h_ssd_used_bytes);
	st.max_value = s->g.g_max_value;
	st.max_clients = s->g.g_max_clients;
	for (i = 0; i < s->g.g_max_clients; i++)
		/* relaxed: a count for humans */
		st.clients += KVP_CS_STATE(kvp_load_relaxed(
				      &s->clients[i].cs_state)) == KVP_CS_LIVE;
	st.agent_up = kvp_shm_agent_alive(s);
	mine = s->clients[c->slot].cs_ctr;
	/* relaxed: our own shard (we are its only writer) */
	st.puts = kvp_load_relaxed(&mine[KVP_CTR_PUT]);
	st.put_bytes = kvp_load_relaxed(&mine[KVP_CTR_PUT_BYTES]);
	st.gets = kvp_load_relaxed(&mine[KVP_CTR_GET]);
	st.get_hits = kvp_load_relaxed(&mine[KVP_CTR_GET_HIT]);
	st.get_misses = kvp_load_relaxed(&mine[KVP_CTR_GET_MISS]);
	st.get_bytes = kvp_load_relaxed(&mine[KVP_CTR_GET_BYTES]);
	st.exists = kvp_load_relaxed(&mine[KVP_CTR_EXISTS]);
	st.exists_hits = kvp_load_relaxed(&mine[KVP_CTR_EXISTS_HIT]);
	st.pool_puts = kvp__stat_pool_ctr(s, KVP_CTR_PUT);
	st.pool_gets = kvp__stat_pool_ctr(s, KVP_CTR_GET);
	st.pool_get_hits = kvp__stat_pool_ctr(s, KVP_CTR_GET_HIT);
	memcpy(out, &st, size < sizeof(st) ? size : sizeof(st));
	return 0;
}

/* ---- an engine adapter's counters, per namespace (kvpool.h) ---- */

/* kvp_ns_event_name (kvpool.h) */
KVP_API const char *
kvp_ns_event_name(unsigned event)
{
	static const char *const names[] = {
#define KVP__NSE_NAME(e, name) name,
		KVP_NS_EVENTS(KVP__NSE_NAME)
#undef KVP__NSE_NAME
	};

	return event < KVP_NSE__N ? names[event] : NULL;
}
KVP_STATIC_ASSERT(KVP_NSE__N <= KVP_NS_STAT_CTRS, "namespace counter row");

/*
 * This client's namespace row: found, or taken with a CAS of a free row's
 * id (open addressing from id % rows).  A row another client is still
 * naming is ours already (the id is what counts).  -ENOSPC when every row
 * belongs to another namespace.
 */
KVP_INLINE int
kvp__ns_row(struct kvp_client *c)
{
	struct kvp_ns_stat *rows = c->seg.ns_stats;
	uint32_t k, r;

	for (k = 0; k < KVP_NS_STAT_ROWS; k++) {
		struct kvp_ns_stat *row;
		uint64_t id;

		r = (uint32_t)((c->nsid + k) % KVP_NS_STAT_ROWS);
		row = &rows[r];
		/* acquire: pairs with the claiming CAS (the row is a
		 * statistic; the name follows under ns_named) */
		id = kvp_load_acquire(&row->ns_id);
		if (id == 0 &&
		    /* full CAS: one namespace takes a free row */
		    kvp_cas(&row->ns_id, 0, c->nsid)) {
			size_t len = strlen(c->ns);

			if (len > sizeof(row->ns_name) - 1)
				len = sizeof(row->ns_name) - 1; /* truncated */
			memcpy(row->ns_name, c->ns, len);
			row->ns_name[len] = '\0';
			/* release: the name before the flag; pairs with the
			 * metrics' acquire of ns_named */
			kvp_store_release(&row->ns_named, 1);
			id = c->nsid;
		} else if (id == 0) {
			/* acquire: the CAS lost: whose is it now */
			id = kvp_load_acquire(&row->ns_id);
		}
		if (id == c->nsid) {
			c->ns_row1 = r + 1;
			return 0;
		}
	}
	return -ENOSPC;
}

/* kvp_ns_count (kvpool.h) */
KVP_API int
kvp_ns_count(struct kvp_client *c, unsigned event, uint64_t n)
{
	int rc;

	if (!c || event >= KVP_NSE__N)
		return -EINVAL;
	if (kvp__live(c))
		return -ESTALE;
	if (!c->ns_row1 && (rc = kvp__ns_row(c)) != 0)
		return rc;
	if (n)
		/* atomic add: counters of every client of the namespace;
		 * read relaxed by the metrics (statistics) */
		kvp_fetch_add(&c->seg.ns_stats[c->ns_row1 - 1].ns_ctr[event],
			      n);
	return 0;
}

#endif /* KVP_CLIENT_STAT_INT_H */
