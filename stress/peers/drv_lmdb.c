/* SPDX-License-Identifier: MIT */
/*
 * drv_lmdb.c - LMDB: one environment on /dev/shm, MDB_NOSYNC |
 * MDB_WRITEMAP, the main DB.  A read transaction per batch (reset and
 * renew, LMDB's fast path), each value copied out of the map into the
 * worker's private buffer; a write transaction per batch of puts with
 * MDB_RESERVE (one copy).  The prefix probe is one read transaction.
 */
#include <sys/stat.h>

#include <lmdb.h>

#include "stress/peers/peers_int.h"

static MDB_env *kvpb_penv; /* the parent's */
static MDB_dbi kvpb_pdbi;
static MDB_txn *kvpb_pfill; /* the fill's open write transaction */
static MDB_env *kvpb_wenv;  /* a worker's, and its read transaction */
static MDB_dbi kvpb_wdbi;
static MDB_txn *kvpb_wrtxn;

static void *
kvpb_unconst(const void *p)
{
	return (void *)(uintptr_t)p; /* LMDB's MDB_val is not const */
}

static int
kvpb_lmdb_open(MDB_env **env, MDB_dbi *dbi)
{
	MDB_txn *t;
	int rc;

	rc = mdb_env_create(env);
	if (!rc)
		rc = mdb_env_set_mapsize(*env, kvpb_ctl->lmdb_mapsize);
	if (!rc)
		rc = mdb_env_set_maxreaders(*env, 2 * KVPB_MAX_PROCS + 8);
	if (!rc)
		rc = mdb_env_open(*env, kvpb_ctl->lmdb_dir,
				  MDB_NOSYNC | MDB_WRITEMAP, 0600);
	if (!rc)
		rc = mdb_txn_begin(*env, NULL, 0, &t);
	if (!rc) {
		rc = mdb_dbi_open(t, NULL, 0, dbi);
		if (rc)
			mdb_txn_abort(t);
		else
			rc = mdb_txn_commit(t);
	}
	if (rc)
		kvpb_log("bench_peers: lmdb: %s\n", mdb_strerror(rc));
	return rc ? -EIO : 0;
}

/* ---- the parent: the environment and the fill ---- */

/* The environment in /dev/shm; its map: four times the value sets and
 * 1 GiB more (the index sets and the mixed puts go in too). */
static int
kvpb_lmdb_start(void)
{
	uint64_t total = 0;
	unsigned s;

	for (s = 0; s <= KVPB_RTT; s++)
		total += kvpb_vs[s].n * kvpb_vs[s].size;
	snprintf(kvpb_ctl->lmdb_dir, sizeof(kvpb_ctl->lmdb_dir),
		 "/dev/shm/kvpb-lmdb.%d", (int)getpid());
	kvpb_rm_rf(kvpb_ctl->lmdb_dir);
	kvpb_ctl->lmdb_mapsize = 4 * total + (1ull << 30);
	if (mkdir(kvpb_ctl->lmdb_dir, 0700))
		return -errno;
	return kvpb_lmdb_open(&kvpb_penv, &kvpb_pdbi);
}

/* A write transaction per 64 values of a set. */
static uint64_t
kvpb_lmdb_fill_value(const struct kvpb_vset *v, uint64_t i, const void *val)
{
	MDB_val k = { KVPB_KLEN, kvpb_unconst(v->keys + i * KVPB_KLEN) };
	MDB_val d = { v->size, kvpb_unconst(val) };
	uint64_t bad = 0;

	if (!kvpb_pfill && mdb_txn_begin(kvpb_penv, NULL, 0, &kvpb_pfill))
		return 1;
	bad += mdb_put(kvpb_pfill, kvpb_pdbi, &k, &d, 0) != 0;
	if (i % 64 == 63 || i + 1 == v->n) {
		bad += mdb_txn_commit(kvpb_pfill) != 0;
		kvpb_pfill = NULL;
	}
	return bad;
}

/* A write transaction per 4,096 keys. */
static uint64_t
kvpb_lmdb_fill_index(const unsigned char *keys, uint64_t n)
{
	unsigned char one = 1;
	uint64_t k, bad = 0;
	MDB_txn *t = NULL;

	for (k = 0; k < n; k++) {
		MDB_val kk = { KVPB_KLEN, kvpb_unconst(keys + k * KVPB_KLEN) },
			v = { 1, &one };

		if (!t && mdb_txn_begin(kvpb_penv, NULL, 0, &t))
			return bad + n - k;
		bad += mdb_put(t, kvpb_pdbi, &kk, &v, 0) != 0;
		if (k % 4096 == 4095 || k + 1 == n) {
			bad += mdb_txn_commit(t) != 0;
			t = NULL;
		}
	}
	return bad;
}

/* A write transaction per worker. */
static void
kvpb_lmdb_mixed_undo(const unsigned char *keys, uint64_t nput, unsigned procs)
{
	uint64_t k;
	unsigned w;

	for (w = 0; w < procs; w++) {
		MDB_txn *t;

		if (mdb_txn_begin(kvpb_penv, NULL, 0, &t))
			return;
		for (k = w * nput; k < (w + 1) * nput; k++) {
			MDB_val kk = { KVPB_KLEN,
				       kvpb_unconst(keys + k * KVPB_KLEN) };

			mdb_del(t, kvpb_pdbi, &kk, NULL);
		}
		mdb_txn_commit(t);
	}
}

static void
kvpb_lmdb_stop(void)
{
	if (kvpb_penv)
		mdb_env_close(kvpb_penv);
	kvpb_penv = NULL;
	if (kvpb_ctl->lmdb_dir[0])
		kvpb_rm_rf(kvpb_ctl->lmdb_dir);
}

/* ---- a worker ---- */

static int
kvpb_lmdb_wopen(struct kvpb_worker *W, unsigned pool)
{
	int rc = 0;

	(void)W;
	(void)pool;
	if (!kvpb_wenv) {
		rc = kvpb_lmdb_open(&kvpb_wenv, &kvpb_wdbi);
		if (!rc &&
		    mdb_txn_begin(kvpb_wenv, NULL, MDB_RDONLY, &kvpb_wrtxn))
			rc = -EIO;
		if (!rc)
			mdb_txn_reset(kvpb_wrtxn);
	}
	return rc;
}

static uint64_t
kvpb_lmdb_get(struct kvpb_worker *W, const struct kvpb_vset *v,
	      const uint64_t *idx, unsigned m, const unsigned char **first)
{
	uint64_t sz = v->size, bad = 0;
	unsigned k;

	(void)first;
	if (mdb_txn_renew(kvpb_wrtxn))
		return m;
	for (k = 0; k < m; k++) {
		MDB_val key = { KVPB_KLEN,
				kvpb_unconst(v->keys + idx[k] * KVPB_KLEN) };
		MDB_val val;

		if (mdb_get(kvpb_wrtxn, kvpb_wdbi, &key, &val) ||
		    val.mv_size != sz) {
			bad++;
			continue;
		}
		memcpy(W->dst + k * sz, val.mv_data, sz);
	}
	mdb_txn_reset(kvpb_wrtxn);
	return bad;
}

static uint64_t
kvpb_lmdb_put(struct kvpb_worker *W, const unsigned char *keys, unsigned m,
	      uint64_t sz, uint64_t slot)
{
	uint64_t bad = 0;
	MDB_txn *t;
	unsigned k;

	(void)slot;
	if (mdb_txn_begin(kvpb_wenv, NULL, 0, &t))
		return m;
	for (k = 0; k < m; k++) {
		MDB_val key = { KVPB_KLEN, kvpb_unconst(keys + k * KVPB_KLEN) };
		MDB_val val = { sz, NULL };

		if (mdb_put(t, kvpb_wdbi, &key, &val,
			    MDB_RESERVE | MDB_NOOVERWRITE)) {
			bad++;
			continue;
		}
		memcpy(val.mv_data, W->src, sz);
	}
	if (mdb_txn_commit(t))
		bad = m;
	return bad;
}

static uint64_t
kvpb_lmdb_prefix(struct kvpb_worker *W, unsigned ix, const unsigned char *keys,
		 uint64_t first)
{
	unsigned k;

	(void)W;
	(void)ix;
	(void)first;
	if (mdb_txn_renew(kvpb_wrtxn))
		return 0;
	for (k = 0; k < KVPB_PREFIX; k++) {
		MDB_val key = { KVPB_KLEN, kvpb_unconst(keys + k * KVPB_KLEN) };
		MDB_val val;

		if (mdb_get(kvpb_wrtxn, kvpb_wdbi, &key, &val))
			break;
	}
	mdb_txn_reset(kvpb_wrtxn);
	return k;
}

static void
kvpb_lmdb_close(void)
{
	if (kvpb_wenv) {
		mdb_txn_abort(kvpb_wrtxn);
		mdb_env_close(kvpb_wenv);
	}
	kvpb_wenv = NULL;
}

const struct kvpb_driver kvpb_drv_lmdb = {
	.name = "lmdb",
	.start = kvpb_lmdb_start,
	.fill_value = kvpb_lmdb_fill_value,
	.fill_index = kvpb_lmdb_fill_index,
	.mixed_undo = kvpb_lmdb_mixed_undo,
	.stop = kvpb_lmdb_stop,
	.open = kvpb_lmdb_wopen,
	.get = kvpb_lmdb_get,
	.put = kvpb_lmdb_put,
	.prefix = kvpb_lmdb_prefix,
	.close = kvpb_lmdb_close,
};
