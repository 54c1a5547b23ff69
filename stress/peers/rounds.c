/* SPDX-License-Identifier: MIT */
/*
 * rounds.c - what every system gets: the same data (the fill), then in
 * every round the same measurements (get, mixed, prefix and exists,
 * rtt), the systems in an order that rotates from round to round.
 * Round 0 is the warm-up: measured, checked, not printed.
 */
#include "stress/peers/peers_int.h"

static const char *const kvpb_sec_name[KVPB_NSEC] = {
	"get", "mixed", "prefix", "exists", "ssd", "rtt",
};

/* ---- the fill: every system gets the same keys and values ---- */

/* The value sets of the get and mixed sections, and the rtt set: each
 * value made once, then stored in every selected system in turn. */
int
kvpb_fill_values(void)
{
	uint64_t bad = 0, i;
	unsigned s, sys;
	unsigned char *buf = kvpb_alloc(kvpb_max_value());

	if (!buf)
		return -ENOMEM;
	for (s = 0; s <= KVPB_RTT; s++) {
		const struct kvpb_vset *v = &kvpb_vs[s];

		if (!v->keys)
			continue; /* sizes not given; or no rtt section */
		for (i = 0; i < v->n; i++) {
			kvpt_fill(buf, v->size, v->keys + i * KVPB_KLEN,
				  KVPB_KLEN, 1);
			for (sys = 0; sys < KVPB_NSYS; sys++) {
				const struct kvpb_driver *d = kvpb_drv[sys];

				if (d->fill_value && kvpb_store_on(d))
					bad += d->fill_value(v, i, buf);
			}
		}
	}
	free(buf);
	if (bad)
		kvpb_log("bench_peers: %llu puts of the value sets failed\n",
			 (unsigned long long)bad);
	return bad ? -EIO : 0;
}

/* Index set ix: kvpool's index full (at its limit) (what it kept is the set),
 * then the same keys into every peer. */
int
kvpb_fill_index(unsigned ix)
{
	uint64_t bad = 0;
	unsigned sys;
	int rc;

	rc = kvpb_kvpool_make_index(ix);
	if (rc)
		return rc;
	for (sys = 0; sys < KVPB_NSYS; sys++) {
		const struct kvpb_driver *d = kvpb_drv[sys];

		if (d->fill_index && kvpb_store_on(d))
			bad += d->fill_index(kvpb_ixkeys[ix],
					     kvpb_ctl->ix_n[ix]);
	}
	if (bad)
		kvpb_log("bench_peers: %llu index-set puts into peers failed\n",
			 (unsigned long long)bad);
	return bad ? -EIO : 0;
}

/* The store a system's data lives in (rpc1's is rpc's). */
static const struct kvpb_driver *
kvpb_store(unsigned sys)
{
	return kvpb_drv[sys]->shares ? kvpb_drv[sys]->shares : kvpb_drv[sys];
}

/* ---- the sections ---- */

static void
kvpb_cmd_init(struct kvpb_cmd *cmd, unsigned r, unsigned sec, unsigned sys,
	      unsigned s, unsigned procs, uint64_t iters)
{
	memset(cmd, 0, sizeof(*cmd));
	cmd->sec = sec;
	cmd->sys = sys;
	cmd->s = s;
	cmd->procs = procs;
	cmd->round = r;
	cmd->iters = iters;
}

/* After a mixed measurement: the store deletes the keys its workers
 * put (untimed). */
static void
kvpb_mixed_undo(const struct kvpb_driver *st, const struct kvpb_cmd *cmd)
{
	uint64_t nput = kvpb_mixed_puts(&kvpb_vs[cmd->s], cmd->iters), k;
	unsigned char *keys;
	unsigned w;

	if (!st->mixed_undo)
		return;
	keys = malloc(cmd->procs * nput * KVPB_KLEN);
	if (!keys) {
		kvpb_log("bench_peers: no memory to delete the mixed puts\n");
		return;
	}
	for (w = 0; w < cmd->procs; w++)
		for (k = 0; k < nput; k++)
			kvpb_mixed_key(keys + (w * nput + k) * KVPB_KLEN, cmd,
				       w, k);
	st->mixed_undo(keys, nput, cmd->procs);
	free(keys);
}

/* One get or mixed measurement: set s, procs workers, system sys. */
static int
kvpb_run_value(unsigned r, unsigned sec, unsigned s, unsigned procs,
	       unsigned sys)
{
	const struct kvpb_vset *v = &kvpb_vs[s];
	const struct kvpb_driver *d = kvpb_drv[sys], *st = kvpb_store(sys);
	struct kvpb_cmd cmd;
	struct kvpb_agg a;
	uint64_t iters;
	char sn[32];
	int rc;

	iters = sec == SEC_GET ? v->n * kvpb_cfg.passes : v->n;
	if (iters < 2 * v->batch)
		iters = 2 * v->batch;
	kvpb_cmd_init(&cmd, r, sec, sys, s, procs, iters);
	if (sec == SEC_MIXED && st->mixed_mark)
		st->mixed_mark();
	rc = kvpb_measure(&cmd, &a);
	if (rc) {
		kvpb_log("bench_peers: a worker stopped answering (%s)\n",
			 strerror(-rc));
		return rc;
	}
	if (sec == SEC_MIXED)
		kvpb_mixed_undo(st, &cmd);
	if (a.bad)
		kvpb_log("bench_peers: %s %s %s x%u: %llu failed\n",
			 kvpb_sec_name[sec], d->name,
			 kvpb_size_name(v->size, sn, sizeof(sn)), procs,
			 (unsigned long long)a.bad);
	if (r == 0)
		return 0;
	/* batch: keys per call (per request) */
	kvpb_emit(r, kvpb_sec_name[sec], d->name, v->size, procs,
		  d->per_key ? 1 : v->batch, a.bad, "GB/s",
		  (double)a.bytes / a.wall_s / 1e9, "Mop/s",
		  (double)a.ops / a.wall_s / 1e6, "ns/op",
		  a.busy_s * 1e9 / (double)a.ops, "s", a.wall_s,
		  (const char *)NULL);
	return 0;
}

/* get and mixed: per size, per process count, every system. */
int
kvpb_run_values(unsigned r)
{
	const struct kvpb_cfg *c = &kvpb_cfg;
	unsigned sec, s, pi, k, np, plist[9];
	int rc;

	for (sec = SEC_GET; sec <= SEC_MIXED; sec++) {
		if (!kvpb_sec_on(sec))
			continue;
		np = c->nprocs;
		memcpy(plist, c->procs, sizeof(c->procs));
		/* the all-core limit, when no process count reaches it */
		if (c->procs[c->nprocs - 1] < c->nproc && sec == SEC_GET &&
		    kvpb_limit_on())
			plist[np++] = c->nproc < KVPB_MAX_PROCS ?
					      c->nproc :
					      KVPB_MAX_PROCS;
		for (s = 0; s < c->nsizes; s++) {
			for (pi = 0; pi < np; pi++) {
				/* every system, the order rotating with r */
				for (k = 0; k < KVPB_NSYS; k++) {
					unsigned sys = (k + r) % KVPB_NSYS;

					if (!kvpb_sys_on(sys) ||
					    (pi >= c->nprocs &&
					     !kvpb_drv[sys]->limit))
						continue;
					rc = kvpb_run_value(r, sec, s,
							    plist[pi], sys);
					if (rc)
						return rc;
				}
			}
		}
	}
	return 0;
}

/* prefix (every system with a prefix probe) and exists (kvpool's single
 * lookup), per index set, one worker. */
int
kvpb_run_index(unsigned r)
{
	unsigned ix, k;

	for (ix = 0; ix < kvpb_cfg.nix; ix++) {
		double load = (double)kvpb_ctl->ix_n[ix] /
			      (double)kvpb_ctl->ix_slots[ix];

		for (k = 0; k < KVPB_NSYS; k++) {
			unsigned sys = (k + r) % KVPB_NSYS;
			const struct kvpb_driver *d = kvpb_drv[sys];
			struct kvpb_cmd cmd;
			struct kvpb_agg a;

			if (!kvpb_sys_on(sys) || !d->prefix)
				continue;
			kvpb_cmd_init(&cmd, r, SEC_PREFIX, sys, ix, 1,
				      kvpb_cfg.prefix_batches);
			if (kvpb_measure(&cmd, &a))
				return -EPIPE;
			if (r && a.ops)
				kvpb_emit(r, "prefix", d->name,
					  kvpb_ctl->ix_slots[ix], 1,
					  KVPB_PREFIX, a.bad, "us/batch",
					  a.sum_ns / 1e3 * KVPB_PREFIX /
						  (double)a.ops,
					  "worst us", a.worst_ns / 1e3,
					  "Mlookup/s",
					  (double)a.ops * 1e3 / a.sum_ns,
					  "load", load, (const char *)NULL);
			if (!d->exists)
				continue;
			cmd.sec = SEC_EXISTS;
			cmd.iters = kvpb_cfg.exists_ops;
			if (kvpb_measure(&cmd, &a))
				return -EPIPE;
			if (r && a.ops)
				kvpb_emit(r, "exists", d->name,
					  kvpb_ctl->ix_slots[ix], 1, 1, a.bad,
					  "Mlookup/s",
					  (double)a.ops / a.wall_s / 1e6,
					  "ns/op",
					  a.wall_s * 1e9 / (double)a.ops,
					  "load", load, (const char *)NULL);
		}
	}
	return 0;
}

/*
 * The round trip: a 1-key get of a 4 KiB value, one worker, every call
 * timed.  kvpool (kvp_get), rpc1 (one request, one reply) and memcpy of
 * the same bytes out of tmpfs (the copy both of them include): the
 * systems whose driver says rtt.
 */
int
kvpb_run_rtt(unsigned r)
{
	unsigned sys_rtt[KVPB_NSYS], n = 0, k;

	for (k = 0; k < KVPB_NSYS; k++)
		if (kvpb_drv[k]->rtt)
			sys_rtt[n++] = k;
	for (k = 0; k < n; k++) {
		unsigned sys = sys_rtt[(k + r) % n]; /* rotate the order */
		const struct kvpb_driver *d = kvpb_drv[sys];
		struct kvpb_cmd cmd;
		struct kvpb_agg a;
		int rc;

		if (!kvpb_sys_on(sys))
			continue;
		kvpb_cmd_init(&cmd, r, SEC_RTT, sys, KVPB_RTT, 1,
			      kvpb_cfg.rtt_ops);
		rc = kvpb_measure(&cmd, &a);
		if (rc) {
			kvpb_log(
				"bench_peers: a worker stopped answering (%s)\n",
				strerror(-rc));
			return rc;
		}
		if (a.bad)
			kvpb_log("bench_peers: rtt %s: %llu failed\n", d->name,
				 (unsigned long long)a.bad);
		if (r == 0 || !a.ops)
			continue;
		kvpb_emit(r, "rtt", d->name, KVPB_RTT_SIZE, 1, 1, a.bad,
			  "us p50", a.p50_ns / 1e3, "us p99", a.p99_ns / 1e3,
			  "us mean", a.sum_ns / 1e3 / (double)a.ops, "us worst",
			  a.worst_ns / 1e3, (const char *)NULL);
	}
	return 0;
}
