/* SPDX-License-Identifier: MIT */
/*
 * drv_kvpool.c - kvpool: kvp_get / kvp_batch_get (DRAM hits) into the
 * worker's private buffer; kvp_put; kvp_batch_exists_prefix, and
 * kvp_exists alone.
 *
 * Its pools (tests/agent/harness.c starts their agents): pool 0 holds
 * the value sets, in 16 KiB units, with --dram-high 100 so that nothing
 * is evicted during a measurement; pools 1.. hold one index set each.
 * An index set is made here, since it is whatever kvpool's index keeps
 * when full (at its --index-entries limit); the peers then get the same keys.
 */
#include "stress/peers/peers_int.h"

/* the parent's: agents and clients of pool 0 and of the index sets */
static struct kvpt_agent kvpb_agent[1 + KVPB_MAX_IX];
static bool kvpb_agent_up[1 + KVPB_MAX_IX];
static struct kvp_client *kvpb_pc[1 + KVPB_MAX_IX];
static uint64_t kvpb_used_before; /* pool 0's units before a mixed run */

/* a worker's */
static struct kvp_client *kvpb_wc[1 + KVPB_MAX_IX];
static struct kvp_op *kvpb_wops;                /* a batch of gets */
static struct kvp_op *kvpb_wixops[KVPB_MAX_IX]; /* an index set's keys */

/* ---- the parent: the pools and the fill ---- */

static int
kvpb_pool_start(unsigned k, uint64_t dram, const char *unit, uint64_t entries)
{
	char d[32], e[32];
	int rc;

	snprintf(d, sizeof(d), "%lluK", (unsigned long long)(dram >> 10));
	snprintf(e, sizeof(e), "%llu", (unsigned long long)entries);
	rc = kvpt_agent_start(&kvpb_agent[k], "--dram", d, "--dram-unit", unit,
			      "--index-entries", e, "--dram-high", "100",
			      "--dram-low", "99", NULL);
	if (rc) {
		char log[2200];

		kvpt_agent_log(kvpb_agent[k].pool, log, sizeof(log));
		kvpb_log(
			"bench_peers: cannot start kvpoold (%s/kvpoold --dram %s): %s; "
			"log %s\n",
			kvpt_bindir(), d, strerror(-rc), log);
		kvpt_agent_stop(&kvpb_agent[k]);
		return rc;
	}
	kvpb_agent_up[k] = true;
	snprintf(kvpb_ctl->pool[k], sizeof(kvpb_ctl->pool[k]), "%s",
		 kvpb_agent[k].pool);
	rc = kvp_open(kvpb_agent[k].pool, "bench", &kvpb_pc[k]);
	if (rc)
		kvpb_log("bench_peers: kvp_open: %s\n", kvp_strerror(rc));
	return rc;
}

/* Pool 0, when a section reads the value sets: DRAM for the sets and
 * for one mixed measurement's puts. */
static int
kvpb_kvpool_start(void)
{
	const struct kvpb_cfg *c = &kvpb_cfg;
	uint64_t dram = 64ull << 20;
	unsigned s;

	if (!(c->sec_mask &
	      ((1u << SEC_GET) | (1u << SEC_MIXED) | (1u << SEC_RTT))))
		return 0;
	for (s = 0; s <= KVPB_RTT; s++)
		dram += kvpb_vs[s].n * kvpb_vs[s].size;
	dram += (uint64_t)c->procs[c->nprocs - 1] *
		(c->ws / 2 + 16 * c->sizes[c->nsizes - 1]);
	return kvpb_pool_start(0, dram, "16K", 65536);
}

static uint64_t
kvpb_kvpool_fill_value(const struct kvpb_vset *v, uint64_t i, const void *val)
{
	int rc;

	while ((rc = kvp_put(kvpb_pc[0], v->keys + i * KVPB_KLEN, KVPB_KLEN,
			     val, v->size)) == -EBUSY)
		;
	return rc != 0;
}

/*
 * Index set ix: 1-byte values under 80-byte keys until kvpool's index
 * is full: 90% of its slots or, below that, --index-entries (a limit the
 * agent keeps: the fill stops just under its high mark, so nothing is
 * removed for it; a put into a full bucket pair makes the agent evict
 * another key of that pair, so the keys still present are kept, in
 * order).  The set's keys go to kvpb_ixkeys[ix], their count to
 * kvpb_ctl->ix_n[ix].  Started whether kvpool is selected or not: the
 * set is what its index keeps.
 */
int
kvpb_kvpool_make_index(unsigned ix)
{
	uint64_t e = kvpb_cfg.ix_entries[ix],
		 nslots = kvpb_pow2_at_least(e + e / 4);
	uint64_t cap = nslots * 9 / 10, units = cap + cap / 16 + 64, next = 0,
		 n = 0, k;
	uint64_t fails = 0, nospc = 0, evicted = 0, kept;
	unsigned char *keys = kvpb_ixkeys[ix], one = 1;
	struct kvp_client *c;
	double t0 = kvpb_now_s();
	char name[64];

	if (kvpb_pool_start(1 + ix, units * 4096, "4K", e))
		return -EIO;
	c = kvpb_pc[1 + ix];
	nslots = c->seg.g.g_index_slots;
	if (cap > nslots * 9 / 10)
		cap = nslots * 9 / 10;
	/* the index limit's high mark (agent/evict.c): limit less half of
	 * 1/32 of it, less one */
	if (cap > e - (e / 32 ? e / 32 : 1) / 2 - 1)
		cap = e - (e / 32 ? e / 32 : 1) / 2 - 1;
	if (cap > kvpb_ixcap[ix])
		cap = kvpb_ixcap[ix];
	while (n < cap && fails < 10000) {
		int rc;

		kvpb_key(keys + n * KVPB_KLEN, KVPB_TAG_IX + ix, next++);
		while ((rc = kvp_put(c, keys + n * KVPB_KLEN, KVPB_KLEN, &one,
				     1)) == -EBUSY)
			/* the agent is making room: wait as the value fill
			 * does */
			;
		if (rc == -ENOSPC) {
			nospc++;
			fails++;
			continue;
		}
		if (rc) {
			kvpb_log("bench_peers: index fill: %s\n",
				 kvp_strerror(rc));
			return rc;
		}
		fails = 0;
		n++;
	}
	for (k = 0, kept = 0; k < n; k++) {
		if (kvp_exists(c, keys + k * KVPB_KLEN, KVPB_KLEN) != 1) {
			evicted++;
			continue;
		}
		memmove(keys + kept * KVPB_KLEN, keys + k * KVPB_KLEN,
			KVPB_KLEN);
		kept++;
	}
	n = kept;
	kvpb_ctl->ix_n[ix] = n;
	kvpb_ctl->ix_slots[ix] = nslots;
	snprintf(name, sizeof(name), "index%u_load", ix);
	kvpb_info(name,
		  "%.4f of %llu slots (%llu keys present; %llu refused, %llu "
		  "evicted from full bucket pairs; filled in %.1f s)",
		  (double)kvpt_count_state(&c->seg, KVP_IX_READY) /
			  (double)nslots,
		  (unsigned long long)nslots, (unsigned long long)n,
		  (unsigned long long)nospc, (unsigned long long)evicted,
		  kvpb_now_s() - t0);
	return 0;
}

static void
kvpb_kvpool_mixed_mark(void)
{
	kvpb_used_before = kvpt_units_used(&kvpb_pc[0]->seg);
}

/* Delete the new keys, then wait until the agent has reclaimed them. */
static void
kvpb_kvpool_mixed_undo(const unsigned char *keys, uint64_t nput, unsigned procs)
{
	struct kvpb_used u = { &kvpb_pc[0]->seg, kvpb_used_before };
	uint64_t k;

	for (k = 0; k < procs * nput; k++)
		kvp_delete(kvpb_pc[0], keys + k * KVPB_KLEN, KVPB_KLEN);
	if (kvpt_wait_until(kvpb_used_below, &u, 10000) < 0)
		kvpb_log(
			"bench_peers: kvpool took > 10 s to reclaim deleted values\n");
}

static void
kvpb_kvpool_stop(void)
{
	unsigned k;

	for (k = 0; k < 1 + KVPB_MAX_IX; k++) {
		if (kvpb_pc[k])
			kvp_close(kvpb_pc[k]);
		kvpb_pc[k] = NULL;
		if (kvpb_agent_up[k])
			kvpt_agent_stop(&kvpb_agent[k]);
		kvpb_agent_up[k] = false;
	}
}

/* ---- a worker ---- */

static int
kvpb_kvpool_open(struct kvpb_worker *W, unsigned pool)
{
	(void)W;
	if (!kvpb_wops) {
		kvpb_wops = calloc(KVPB_MAX_CALL, sizeof(*kvpb_wops));
		if (!kvpb_wops)
			return -ENOMEM;
	}
	return kvpb_wc[pool] ?
		       0 :
		       kvp_open(kvpb_ctl->pool[pool], "bench", &kvpb_wc[pool]);
}

/* The prefix and exists sections: index set ix as an array of ops. */
static int
kvpb_kvpool_prepare(struct kvpb_worker *W, const struct kvpb_cmd *cmd)
{
	unsigned ix = cmd->s;
	uint64_t k, n;

	(void)W;
	if ((cmd->sec != SEC_PREFIX && cmd->sec != SEC_EXISTS) ||
	    kvpb_wixops[ix])
		return 0;
	n = kvpb_ctl->ix_n[ix];
	kvpb_wixops[ix] = calloc(n ? n : 1, sizeof(struct kvp_op));
	if (!kvpb_wixops[ix])
		return -ENOMEM;
	for (k = 0; k < n; k++) {
		kvpb_wixops[ix][k].key = kvpb_ixkeys[ix] + k * KVPB_KLEN;
		kvpb_wixops[ix][k].klen = KVPB_KLEN;
	}
	return 0;
}

static uint64_t
kvpb_kvpool_get(struct kvpb_worker *W, const struct kvpb_vset *v,
		const uint64_t *idx, unsigned m, const unsigned char **first)
{
	uint64_t sz = v->size;
	unsigned k;

	(void)first;
	if (m == 1)
		return kvp_get(kvpb_wc[0], v->keys + idx[0] * KVPB_KLEN,
			       KVPB_KLEN, W->dst, sz) != (ssize_t)sz;
	for (k = 0; k < m; k++) {
		kvpb_wops[k].key = v->keys + idx[k] * KVPB_KLEN;
		kvpb_wops[k].klen = KVPB_KLEN;
		kvpb_wops[k].buf = W->dst + k * sz;
		kvpb_wops[k].off = 0;
		kvpb_wops[k].len = sz;
	}
	return m - (uint64_t)kvp_batch_get(kvpb_wc[0], kvpb_wops, m);
}

static uint64_t
kvpb_kvpool_put(struct kvpb_worker *W, const unsigned char *keys, unsigned m,
		uint64_t sz, uint64_t slot)
{
	uint64_t bad = 0;
	unsigned k;

	(void)slot;
	for (k = 0; k < m; k++)
		bad += kvp_put(kvpb_wc[0], keys + k * KVPB_KLEN, KVPB_KLEN,
			       W->src, sz) != 0;
	return bad;
}

static uint64_t
kvpb_kvpool_prefix(struct kvpb_worker *W, unsigned ix,
		   const unsigned char *keys, uint64_t first)
{
	ssize_t got;

	(void)W;
	(void)keys;
	got = kvp_batch_exists_prefix(kvpb_wc[1 + ix], kvpb_wixops[ix] + first,
				      KVPB_PREFIX);
	return got < 0 ? 0 : (uint64_t)got;
}

static bool
kvpb_kvpool_exists(unsigned ix, const unsigned char *key)
{
	return kvp_exists(kvpb_wc[1 + ix], key, KVPB_KLEN) == 1;
}

static void
kvpb_kvpool_close(void)
{
	unsigned k;

	for (k = 0; k < 1 + KVPB_MAX_IX; k++)
		if (kvpb_wc[k])
			kvp_close(kvpb_wc[k]);
}

const struct kvpb_driver kvpb_drv_kvpool = {
	.name = "kvpool",
	.rtt = true,
	.start = kvpb_kvpool_start,
	.fill_value = kvpb_kvpool_fill_value,
	.mixed_mark = kvpb_kvpool_mixed_mark,
	.mixed_undo = kvpb_kvpool_mixed_undo,
	.stop = kvpb_kvpool_stop,
	.open = kvpb_kvpool_open,
	.prepare = kvpb_kvpool_prepare,
	.get = kvpb_kvpool_get,
	.put = kvpb_kvpool_put,
	.prefix = kvpb_kvpool_prefix,
	.exists = kvpb_kvpool_exists,
	.close = kvpb_kvpool_close,
};
