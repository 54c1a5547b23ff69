/* SPDX-License-Identifier: MIT */
/*
 * client_dev_int.h - values to and from GPU memory (kvpool.h, "GPU
 * endpoints"; docs/design.md, "The GPU endpoints").
 *
 * A get to the device holds each DRAM-resident value, queues its DMA on
 * the caller's stream straight from the pool and keeps the hold until
 * the copy is known done (kvp_dev_wait, or a sync the call makes itself
 * when it must reuse hold slots or the bounce buffer): rule 1 holds for
 * DMA readers exactly as for memcpy readers, nothing held is freed.
 * SSD-resident values are read by kvp_batch_get into a pinned bounce
 * buffer and copied from there.  A put from the device is kvp_put whose
 * copy is a DMA into its own runs, published once it landed.
 *
 * Pinned memory.  DMA needs page-locked memory; the pool's DRAM arena is
 * registered with cudaHostRegister once per process (the mapping the
 * process's handles share, shm/client_int.h), in KVP_DEV_CHUNK pieces by
 * a thread of its own, so that registering hundreds of GB (minutes)
 * blocks nobody.  A chunk's flag turns 1 only after the runtime said it
 * is registered; a copy whose bytes touch a chunk not registered (yet, or
 * refused) goes through the bounce buffer (pinned, of this handle).  The
 * registration is undone before the mapping goes away.
 *
 * The bounce buffer is reused only once every copy out of (or into) it
 * has finished: a call that needs more room waits for those copies
 * (their events) first.  Holds are dropped only after the copies that
 * read them are known done.
 *
 * Included by shm/client_int.h.
 */
#ifndef KVP_CLIENT_DEV_INT_H
#define KVP_CLIENT_DEV_INT_H

#include "tiers/kvp_cuda.h"
#include "tiers/kvp_hbm.h"

#define KVP_DEV_CHUNK (256ull << 20) /* registration granule */
#define KVP_DEV_MAX 64               /* device ordinals with our streams */
#define KVP_DEV_BOUNCE_MIN (16ull << 20)
#define KVP_DEV_BATCH 256 /* copies per runtime call */

/* A GPU's HBM pool as this process imported it (one per GPU slot and
 * generation; kept until the mapping goes). */
struct kvp__hbmimp {
	uint64_t hi_gen;        /* the slot generation imported; 0: none */
	void *hi_pool;          /* the imported pool */
	unsigned char *hi_base; /* the block, in this process */
	uint64_t hi_bytes;
	uint64_t hi_access; /* devices granted access (bit per ordinal) */
	uint64_t hi_fail_gen, hi_fail_ns; /* last failed import: retry 1 s on */
	/* earlier generations' imports, freed with the mapping */
	void *hi_old_pool[4];
	unsigned char *hi_old_base[4];
};

/* The registration of one mapping's arena (one per process mapping). */
struct kvp__devreg {
	pthread_mutex_t dr_mu;
	pthread_cond_t dr_cv;
	unsigned char *dr_base; /* the DRAM arena */
	uint64_t dr_bytes;
	uint32_t dr_nchunks;
	kvp_aword_t *dr_chunk;    /* 0 pending, 1 registered, 2 refused */
	kvp_aword_t dr_reg_bytes; /* registered so far */
	uint32_t dr_failed;       /* under dr_mu */
	int dr_device;
	bool dr_started, dr_stop, dr_finished; /* under dr_mu */
	pthread_t dr_thread;
	/* the handle whose counter shard shows dr_reg_bytes to the metrics
	 * (under dr_mu; NULL: the next handle that makes a device call) */
	struct kvp_client *dr_host;
	struct kvp__hbmimp dr_hbm[KVP_GPU_MAX]; /* under dr_mu */
};

/* Device copies in flight (private memory). */
struct kvp_dev_copy {
	struct kvp_dev_copy *next; /* the handle's copies not waited for */
	struct kvp_op *ops;
	size_t n;
	void *stream;
	void *ev; /* recorded after the last queued copy */
	int device;
	int err;          /* a status of a failed sync: every later key -EIO */
	bool bounce_used; /* some copy reads the bounce buffer */
	bool ev_live;     /* ev was recorded after the last queued copy */
	/* queued, not yet known done: their holds and their keys */
	int *hold;
	uint32_t nhold, cap_hold;
	uint32_t *key;
	uint32_t nkey, cap_key;
	/* copies gathered, not yet handed to the runtime */
	void *dst[KVP_DEV_BATCH];
	const void *src[KVP_DEV_BATCH];
	size_t size[KVP_DEV_BATCH];
	uint32_t ncopy;
};

/* A handle's device state (private memory, made at its first call). */
struct kvp__dev {
	struct kvp__devreg *reg; /* NULL: the mapping is not shared */
	void *stream[KVP_DEV_MAX];
	unsigned char *bounce;
	uint64_t bounce_cap, bounce_pos;
	struct kvp_dev_copy *live;
	uint64_t reg_charged; /* reg bytes shown in our counter shard */
	uint64_t h2d_keys, h2d_bytes, d2h_keys, d2h_bytes, bounce_bytes;
	uint64_t hbm_hits;
	/* a put's copies: into runs directly, or through the bounce buffer
	 * (copied into the runs once landed) */
	void *put_stream;
	int put_err;
	unsigned char *put_dst[KVP_DEV_BATCH];
	uint64_t put_boff[KVP_DEV_BATCH], put_n[KVP_DEV_BATCH];
	uint32_t put_npend;
};

/* ---- registration (per mapping) ---- */

KVP_INLINE void *
kvp__devreg_main(void *arg)
{
	struct kvp__devreg *r = (struct kvp__devreg *)arg;
	struct kvp_cuda *cu = kvp_cuda();
	uint32_t k;

	cu->SetDevice(r->dr_device);
	for (k = 0; k < r->dr_nchunks; k++) {
		uint64_t off = (uint64_t)k * KVP_DEV_CHUNK;
		uint64_t n = r->dr_bytes - off < KVP_DEV_CHUNK ?
				     r->dr_bytes - off :
				     KVP_DEV_CHUNK;
		bool stop;
		unsigned int err;

		pthread_mutex_lock(&r->dr_mu);
		stop = r->dr_stop;
		pthread_mutex_unlock(&r->dr_mu);
		if (stop)
			break;
		err = cu->HostRegister(r->dr_base + off, n,
				       KVP_CU_HOST_REGISTER_PORTABLE);
		if (err == KVP_CU_OK)
			/* relaxed: a statistic; the flag below publishes */
			kvp_store_relaxed(&r->dr_reg_bytes,
					  kvp_load_relaxed(&r->dr_reg_bytes) +
						  n);
		/* release: the runtime's registration before a copier's
		 * acquire of the flag sends DMA from this chunk */
		kvp_store_release(&r->dr_chunk[k], err == KVP_CU_OK ? 1 : 2);
		pthread_mutex_lock(&r->dr_mu);
		if (err != KVP_CU_OK)
			r->dr_failed++;
		pthread_cond_broadcast(&r->dr_cv);
		pthread_mutex_unlock(&r->dr_mu);
	}
	pthread_mutex_lock(&r->dr_mu);
	r->dr_finished = true;
	pthread_cond_broadcast(&r->dr_cv);
	pthread_mutex_unlock(&r->dr_mu);
	return NULL;
}

/* The mapping goes away (its last handle closed): stop registering,
 * undo what was registered, free r.  Called by kvp__map_release before
 * munmap. */
KVP_INLINE void
kvp__devreg_end(struct kvp__devreg *r)
{
	uint32_t k;
	bool started;

	if (!r)
		return;
	pthread_mutex_lock(&r->dr_mu);
	r->dr_stop = true;
	started = r->dr_started;
	pthread_mutex_unlock(&r->dr_mu);
	if (started) {
		pthread_join(r->dr_thread, NULL);
		for (k = 0; k < r->dr_nchunks; k++)
			/* acquire: pairs with the thread's release */
			if (kvp_load_acquire(&r->dr_chunk[k]) == 1)
				kvp_cuda()->HostUnregister(
					r->dr_base +
					(uint64_t)k * KVP_DEV_CHUNK);
	}
	for (k = 0; k < KVP_GPU_MAX; k++) {
		struct kvp__hbmimp *hi = &r->dr_hbm[k];
		unsigned j;

		if (hi->hi_base)
			kvp_cuda()->Free(hi->hi_base);
		if (hi->hi_pool)
			kvp_cuda()->MemPoolDestroy(hi->hi_pool);
		for (j = 0; j < 4; j++) {
			if (hi->hi_old_base[j])
				kvp_cuda()->Free(hi->hi_old_base[j]);
			if (hi->hi_old_pool[j])
				kvp_cuda()->MemPoolDestroy(hi->hi_old_pool[j]);
		}
	}
	pthread_cond_destroy(&r->dr_cv);
	pthread_mutex_destroy(&r->dr_mu);
	free(r->dr_chunk);
	free(r);
}

/* Are the arena bytes [p, p+n) registered? */
KVP_INLINE bool
kvp__devreg_covers(const struct kvp__devreg *r, const unsigned char *p,
		   uint64_t n)
{
	uint64_t off, k, last;

	if (!r || !n || p < r->dr_base ||
	    (uint64_t)(p - r->dr_base) >= r->dr_bytes)
		return false;
	off = (uint64_t)(p - r->dr_base);
	if (n > r->dr_bytes - off)
		return false;
	last = (off + n - 1) / KVP_DEV_CHUNK;
	for (k = off / KVP_DEV_CHUNK; k <= last; k++)
		/* acquire: pairs with the registering thread's release */
		if (kvp_load_acquire(&r->dr_chunk[k]) != 1)
			return false;
	return true;
}

/* Show the registration's progress in our counter shard (only the host
 * handle does, so the pool's metrics count each process once; it lags by
 * at most one device call, never shows more than registered). */
KVP_INLINE void
kvp__devreg_charge(struct kvp_client *c)
{
	struct kvp__dev *d = c->dev;
	struct kvp__devreg *r = d->reg;
	uint64_t now;

	if (!r)
		return;
	pthread_mutex_lock(&r->dr_mu);
	if (!r->dr_host)
		r->dr_host = c;
	if (r->dr_host == c) {
		/* relaxed: a statistic (grows only while registering) */
		now = kvp_load_relaxed(&r->dr_reg_bytes);
		kvp__ctr(c, KVP_CTR_DEV_REG_BYTES, now - d->reg_charged);
		d->reg_charged = now;
	}
	pthread_mutex_unlock(&r->dr_mu);
}

/* Find (or make) the registration of our mapping; start it on device.
 * Returns it, or NULL (a mapping outside the registry: everything goes
 * through the bounce buffer). */
KVP_INLINE struct kvp__devreg *
kvp__devreg_get(struct kvp_client *c, int device)
{
	struct kvp__maps *m = kvp__maps();
	struct kvp__map *e;
	struct kvp__devreg *r = NULL;
	pid_t me = kvp__maps_lock(m);

	for (e = m->head; e; e = e->next)
		if (e->pid == me && e->base == c->seg.base)
			break;
	if (e && !e->reg) {
		r = (struct kvp__devreg *)calloc(1, sizeof(*r));
		if (r) {
			r->dr_base = c->seg.arena;
			r->dr_bytes =
				c->seg.g.g_dram_pages * c->seg.g.g_dram_unit;
			r->dr_nchunks =
				(uint32_t)((r->dr_bytes + KVP_DEV_CHUNK - 1) /
					   KVP_DEV_CHUNK);
			r->dr_chunk = (kvp_aword_t *)calloc(
				r->dr_nchunks ? r->dr_nchunks : 1,
				sizeof(kvp_aword_t));
			if (!r->dr_chunk) {
				free(r);
				r = NULL;
			} else {
				pthread_mutex_init(&r->dr_mu, NULL);
				pthread_cond_init(&r->dr_cv, NULL);
				r->dr_device = device;
				e->reg = r;
			}
		}
	}
	r = e ? e->reg : NULL;
	kvp__maps_unlock(m);
	if (!r)
		return NULL;
	pthread_mutex_lock(&r->dr_mu);
	if (!r->dr_started && !r->dr_stop) {
		if (pthread_create(&r->dr_thread, NULL, kvp__devreg_main, r) ==
		    0)
			r->dr_started = true;
		else
			r->dr_finished =
				true; /* never: copies use the bounce */
	}
	pthread_mutex_unlock(&r->dr_mu);
	return r;
}

/* ---- a handle's device state ---- */

/* The runtime usable, our state made, device current (the caller's
 * device saved in *prev).  0 or -ENOTSUP, -ENODEV, -ENOMEM, -EINVAL. */
KVP_INLINE int
kvp__dev_enter(struct kvp_client *c, int device, int *prev)
{
	struct kvp_cuda *cu = kvp_cuda();
	unsigned int err;

	if (cu->cu_status)
		return cu->cu_status;
	if (device < 0 || device >= KVP_DEV_MAX || device >= cu->cu_devices)
		return device < 0 ? -EINVAL : -ENODEV;
	if (!c->dev) {
		c->dev = (struct kvp__dev *)calloc(1, sizeof(*c->dev));
		if (!c->dev)
			return -ENOMEM;
	}
	*prev = -1;
	if (cu->GetDevice(prev) != KVP_CU_OK)
		*prev = -1;
	if (*prev != device) {
		err = cu->SetDevice(device);
		if (err != KVP_CU_OK)
			return kvp_cuda_status(err);
	}
	if (!c->dev->reg)
		c->dev->reg = kvp__devreg_get(c, device);
	kvp__devreg_charge(c);
	return 0;
}

KVP_INLINE void
kvp__dev_leave(int device, int prev)
{
	if (prev >= 0 && prev != device)
		kvp_cuda()->SetDevice(prev);
}

/* The stream to use: the caller's, or our own of that device. */
KVP_INLINE int
kvp__dev_stream(struct kvp_client *c, int device, void *given, void **out)
{
	unsigned int err;

	if (given) {
		*out = given;
		return 0;
	}
	if (!c->dev->stream[device]) {
		err = kvp_cuda()->StreamCreateWithFlags(
			&c->dev->stream[device], KVP_CU_STREAM_NON_BLOCKING);
		if (err != KVP_CU_OK) {
			c->dev->stream[device] = NULL;
			return kvp_cuda_status(err);
		}
	}
	*out = c->dev->stream[device];
	return 0;
}

/* The bounce buffer, at least large enough for any value. */
KVP_INLINE int
kvp__dev_bounce(struct kvp_client *c)
{
	struct kvp__dev *d = c->dev;
	uint64_t cap = KVP_DEV_BOUNCE_MIN, mv = c->seg.g.g_max_value;
	unsigned int err;

	if (d->bounce)
		return 0;
	while (cap < mv)
		cap *= 2;
	err = kvp_cuda()->MallocHost((void **)&d->bounce, cap);
	if (err != KVP_CU_OK) {
		d->bounce = NULL;
		return kvp_cuda_status(err) == -ENODEV ? -ENODEV : -ENOMEM;
	}
	d->bounce_cap = cap;
	d->bounce_pos = 0;
	return 0;
}

/* ---- a get's copies ---- */

/* Hand the gathered copies of x to the runtime as one batch (or one call
 * each where the runtime has no batch call).  0 or a status, kept in
 * x->err too: the keys of a refused batch are not copied. */
KVP_INLINE int
kvp__dev_issue(struct kvp_dev_copy *x)
{
	struct kvp_cuda *cu = kvp_cuda();
	unsigned int err = KVP_CU_OK;
	uint32_t k;

	if (!x->ncopy)
		return 0;
	if (cu->MemcpyBatchAsync13 || cu->MemcpyBatchAsync12) {
		struct kvp_cu_copy_attr a;
		size_t idx = 0, fail = 0;

		memset(&a, 0, sizeof(a));
		a.ca_src_access_order = KVP_CU_SRC_ACCESS_ORDER_STREAM;
		a.ca_src_hint.ml_type = KVP_CU_MEMLOC_HOST;
		a.ca_dst_hint.ml_type = KVP_CU_MEMLOC_DEVICE;
		a.ca_dst_hint.ml_id = x->device;
		err = cu->MemcpyBatchAsync13 ?
			      cu->MemcpyBatchAsync13(x->dst, x->src, x->size,
						     x->ncopy, &a, &idx, 1,
						     x->stream) :
			      cu->MemcpyBatchAsync12(x->dst, x->src, x->size,
						     x->ncopy, &a, &idx, 1,
						     &fail, x->stream);
	} else {
		for (k = 0; k < x->ncopy && err == KVP_CU_OK; k++)
			/* the runtime tells host from device (UVA): the
			 * batch mixes DRAM and HBM sources */
			err = cu->MemcpyAsync(x->dst[k], x->src[k], x->size[k],
					      KVP_CU_MEMCPY_DEFAULT, x->stream);
	}
	x->ncopy = 0;
	x->ev_live = false;
	if (err != KVP_CU_OK && !x->err)
		x->err = kvp_cuda_status(err) == -EINVAL ? -EINVAL : -EIO;
	return err == KVP_CU_OK ? 0 : x->err;
}

/* Settle what x queued (its copies are done or failed): on x->err its
 * keys not settled before get that status.  Its holds are dropped. */
KVP_INLINE void
kvp__dev_settle(struct kvp_client *c, struct kvp_dev_copy *x)
{
	uint32_t k;

	for (k = 0; k < x->nkey; k++)
		if (x->err && x->ops[x->key[k]].status == 0) {
			x->ops[x->key[k]].status = x->err;
			x->ops[x->key[k]].len = 0;
		}
	for (k = 0; k < x->nhold; k++)
		kvp__drop(c, x->hold[k]);
	x->nkey = 0;
	x->nhold = 0;
}

/* Wait until everything x queued is done (or failed), then settle it.
 * Returns x->err. */
KVP_INLINE int
kvp__dev_sync(struct kvp_client *c, struct kvp_dev_copy *x)
{
	struct kvp_cuda *cu = kvp_cuda();
	unsigned int err;

	kvp__dev_issue(x);
	if (!x->ev_live) {
		err = cu->EventRecord(x->ev, x->stream);
		x->ev_live = err == KVP_CU_OK;
	}
	/* without an event, the whole stream: nothing of ours in flight */
	err = x->ev_live ? cu->EventSynchronize(x->ev) :
			   cu->StreamSynchronize(x->stream);
	if (err != KVP_CU_OK && !x->err)
		x->err = -EIO;
	kvp__dev_settle(c, x);
	x->bounce_used = false;
	return x->err;
}

/* Make room for n bytes in the bounce buffer: once full, wait for every
 * copy that uses it (ours and earlier calls') and start over.  Returns
 * the offset, or a status. */
KVP_INLINE int64_t
kvp__dev_bounce_take(struct kvp_client *c, struct kvp_dev_copy *x, uint64_t n)
{
	struct kvp__dev *d = c->dev;
	struct kvp_dev_copy *y;
	uint64_t at;
	int rc = kvp__dev_bounce(c);

	if (rc)
		return rc;
	if (n > d->bounce_cap)
		return -E2BIG; /* never: the buffer holds any value */
	if (d->bounce_cap - d->bounce_pos < n) {
		if (x && x->bounce_used)
			kvp__dev_sync(c, x);
		for (y = d->live; y; y = y->next)
			if (y->bounce_used) {
				/* their copies out of the buffer are done;
				 * their holds stay until kvp_dev_wait */
				if (kvp_cuda()->EventSynchronize(y->ev) !=
				    KVP_CU_OK)
					y->err = -EIO;
				y->bounce_used = false;
			}
		d->bounce_pos = 0;
	}
	at = d->bounce_pos;
	d->bounce_pos += (n + 63) & ~63ull;
	if (d->bounce_pos > d->bounce_cap)
		d->bounce_pos = d->bounce_cap;
	return (int64_t)at;
}

KVP_INLINE int
kvp__dev_grow(void **arr, uint32_t *cap, uint32_t need, size_t each)
{
	void *p;
	uint32_t nc;

	if (need <= *cap)
		return 0;
	nc = *cap ? *cap * 2 : 64;
	while (nc < need)
		nc *= 2;
	p = realloc(*arr, (size_t)nc * each);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = nc;
	return 0;
}

/* Gather one copy of n bytes from host p (pool memory if reg covers it,
 * or already in the bounce buffer) to device dst. */
KVP_INLINE int
kvp__dev_gather(struct kvp_dev_copy *x, void *dst, const void *src, uint64_t n)
{
	int rc = 0;

	if (x->ncopy == KVP_DEV_BATCH)
		rc = kvp__dev_issue(x);
	if (rc)
		return rc;
	x->dst[x->ncopy] = dst;
	x->src[x->ncopy] = src;
	x->size[x->ncopy] = (size_t)n;
	x->ncopy++;
	return 0;
}

/* Queue n bytes of host memory at src (held pool bytes) for dst: direct
 * where registered, else through the bounce buffer. */
KVP_INLINE int
kvp__dev_piece(struct kvp_client *c, struct kvp_dev_copy *x, unsigned char *dst,
	       const unsigned char *src, uint64_t n)
{
	struct kvp__dev *d = c->dev;

	if (kvp__devreg_covers(d->reg, src, n))
		return kvp__dev_gather(x, dst, src, n);
	while (n) {
		uint64_t k = n < d->bounce_cap / 2 || !d->bounce_cap ?
				     n :
				     d->bounce_cap / 2;
		int64_t at = kvp__dev_bounce_take(c, x, k);
		int rc;

		if (at < 0)
			return (int)at;
		memcpy(d->bounce + at, src, k);
		x->bounce_used = true;
		d->bounce_bytes += k;
		kvp__ctr(c, KVP_CTR_DEV_BOUNCE_BYTES, k);
		rc = kvp__dev_gather(x, dst, d->bounce + at, k);
		if (rc)
			return rc;
		dst += k;
		src += k;
		n -= k;
	}
	return 0;
}

/* Queue [off, off+n) of held DRAM value i for dst, a piece per run
 * (kvp__value_walk: a damaged entry is -EIO, never a read outside the
 * arena). */
struct kvp__dev_walk {
	struct kvp_client *c;
	struct kvp_dev_copy *x;
	unsigned char *dst;
};

KVP_INLINE int
kvp__dev_visit(void *ctx, const unsigned char *src, uint64_t len)
{
	struct kvp__dev_walk *w = (struct kvp__dev_walk *)ctx;
	int rc = kvp__dev_piece(w->c, w->x, w->dst, src, len);

	w->dst += len;
	return rc;
}

KVP_INLINE int
kvp__dev_value(struct kvp_client *c, struct kvp_dev_copy *x, uint64_t i,
	       uint64_t off, unsigned char *dst, uint64_t n)
{
	struct kvp__dev_walk w = { c, x, dst };

	return kvp__value_walk(c, i, off, n, kvp__dev_visit, &w);
}

/* SSD-resident keys (ks[0..m)): read by kvp_batch_get into the bounce
 * buffer, as many as fit at a time, then queued from there. */
KVP_INLINE void
kvp__dev_ssd(struct kvp_client *c, struct kvp_dev_copy *x, const uint32_t *ks,
	     const uint64_t *lens, uint32_t m)
{
	struct kvp__dev *d = c->dev;
	struct kvp_op *tmp;
	uint32_t a = 0;

	tmp = (struct kvp_op *)calloc(m ? m : 1, sizeof(*tmp));
	if (!tmp) {
		for (a = 0; a < m; a++)
			x->ops[ks[a]].status = -ENOMEM;
		return;
	}
	while (a < m) {
		uint32_t b = a, j;
		int64_t at0 = kvp__dev_bounce_take(c, x, lens[a]);

		if (at0 < 0) {
			for (; a < m; a++)
				x->ops[ks[a]].status = (int)at0;
			break;
		}
		/* as many keys as fit after the first */
		tmp[b].buf = d->bounce + at0;
		for (b = a + 1; b < m; b++) {
			uint64_t need = (lens[b] + 63) & ~63ull;

			if (d->bounce_cap - d->bounce_pos < need)
				break;
			tmp[b].buf = d->bounce + d->bounce_pos;
			d->bounce_pos += need;
		}
		for (j = a; j < b; j++) {
			struct kvp_op *op = &x->ops[ks[j]];

			tmp[j].key = op->key;
			tmp[j].klen = op->klen;
			tmp[j].off = op->off;
			tmp[j].len = lens[j];
		}
		kvp_batch_get(c, tmp + a, b - a);
		for (j = a; j < b; j++) {
			struct kvp_op *op = &x->ops[ks[j]];
			int rc = tmp[j].status;

			if (!rc)
				rc = kvp__dev_gather(x, op->buf, tmp[j].buf,
						     tmp[j].len);
			if (!rc && kvp__dev_grow((void **)&x->key, &x->cap_key,
						 x->nkey + 1, sizeof(*x->key)))
				rc = -ENOMEM;
			op->status = rc;
			op->len = rc ? 0 : tmp[j].len;
			if (!rc) {
				x->key[x->nkey++] = ks[j];
				x->bounce_used = true;
				d->bounce_bytes += tmp[j].len;
				kvp__ctr(c, KVP_CTR_DEV_BOUNCE_BYTES,
					 tmp[j].len);
			}
		}
		a = b;
	}
	free(tmp);
}

KVP_INLINE void
kvp__dev_unlink(struct kvp_client *c, struct kvp_dev_copy *x)
{
	struct kvp_dev_copy **pp;

	for (pp = &c->dev->live; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			break;
		}
}

KVP_INLINE void
kvp__dev_free(struct kvp_dev_copy *x)
{
	if (!x)
		return;
	if (x->ev)
		kvp_cuda()->EventDestroy(x->ev);
	free(x->hold);
	free(x->key);
	free(x);
}

/* ---- HBM copies (docs/design.md, "The HBM tier") ---- */

/* Import GPU slot k's pool at generation gen (UP: the caller acquired the
 * state word) into r (under dr_mu): 0 or a status; a failure is not
 * retried for a second.  Only from the helper the segment names: its pid
 * and socket nonce (written before UP), of the segment owner's uid. */
KVP_INLINE int
kvp__hbm_import_locked(struct kvp_client *c, struct kvp__devreg *r, unsigned k,
		       uint64_t gen)
{
	struct kvp__hbmimp *hi = &r->dr_hbm[k];
	const struct kvp_gpu_slot *gs = &c->seg.hdr->h_gpu[k];
	struct kvp_cuda *cu = kvp_cuda();
	struct kvp_hbm_msg m;
	void *pool = NULL, *base = NULL;
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC), hpid, nonce;
	struct stat st;
	unsigned j;
	int fd = -1, rc;

	if (hi->hi_gen == gen && hi->hi_base)
		return 0;
	if (hi->hi_fail_gen == gen && now - hi->hi_fail_ns < 1000000000ull)
		return -ENOTCONN;
	if (!cu->MemPoolCreate)
		return -ENOTSUP;
	/* relaxed: written before UP, which the caller acquired; a later
	 * generation's values (the slot moved on meanwhile) name a helper
	 * that serves another name or answers another generation: refused */
	hpid = kvp_load_relaxed(&gs->gs_pid);
	nonce = kvp_load_relaxed(&gs->gs_nonce);
	if (fstat(c->seg.fd, &st) < 0 || hpid == 0 || hpid > INT32_MAX)
		rc = -EPERM;
	else
		rc = kvp_hbm_fetch(c->seg.hdr->h_pool, k, gen, nonce,
				   (pid_t)hpid, st.st_uid, &m, &fd);
	if (!rc && cu->MemPoolImportFromShareableHandle(
			   &pool, (void *)(uintptr_t)fd, KVP_CU_HANDLE_POSIX_FD,
			   0) != KVP_CU_OK)
		rc = -EIO;
	if (fd >= 0)
		close(fd); /* the runtime keeps its own reference */
	if (!rc &&
	    cu->MemPoolImportPointer(&base, pool, &m.hm_export) != KVP_CU_OK)
		rc = -EIO;
	if (rc) {
		if (pool)
			cu->MemPoolDestroy(pool);
		hi->hi_fail_gen = gen;
		hi->hi_fail_ns = now;
		return rc;
	}
	/* an earlier generation's import stays mapped until the mapping
	 * goes (a copy of ours may still read it); four are kept, older
	 * ones are freed (their copies long done) */
	if (hi->hi_base) {
		if (hi->hi_old_base[3]) {
			cu->Free(hi->hi_old_base[3]);
			cu->MemPoolDestroy(hi->hi_old_pool[3]);
		}
		for (j = 3; j > 0; j--) {
			hi->hi_old_base[j] = hi->hi_old_base[j - 1];
			hi->hi_old_pool[j] = hi->hi_old_pool[j - 1];
		}
		hi->hi_old_base[0] = hi->hi_base;
		hi->hi_old_pool[0] = hi->hi_pool;
	}
	hi->hi_gen = gen;
	hi->hi_pool = pool;
	hi->hi_base = (unsigned char *)base;
	hi->hi_bytes = m.hm_bytes;
	hi->hi_access = 0;
	return 0;
}

/*
 * The HBM copy of held slot i (generation gen, bytes [0, end) wanted), as
 * a device pointer this process can copy from on device dev, or NULL: no
 * copy, a stale word (another generation of the slot or of the GPU's
 * pool), the GPU's tier down, or a word out of the pool's bounds (the map
 * is shared memory: a word is checked, never trusted).
 */
KVP_INLINE const unsigned char *
kvp__dev_hbm_src(struct kvp_client *c, uint64_t i, uint32_t gen, uint64_t end,
		 int dev)
{
	struct kvp__devreg *r = c->dev->reg;
	const struct kvp_gpu_slot *gs = c->seg.hdr->h_gpu;
	const unsigned char *p = NULL;
	uint64_t w, gw, unit, bytes, off;
	unsigned k;

	if (!r)
		return NULL;
	/* acquire: pairs with the agent's release when it published it
	 * (the helper's copy into the block finished before) */
	w = kvp_load_acquire(&c->seg.hbm[i]);
	if (!(w & KVP_HBM_VALID) || KVP_HBM_IXGEN(w) != (gen & 0xffffff))
		return NULL;
	k = KVP_HBM_GPU(w);
	gs += k; /* a slot of the header's table (k < 8: 3 bits) */
	/* acquire: pairs with the agent's UP release (the fields first) */
	gw = kvp_load_acquire(&gs->gs_state);
	if (KVP_GS_STATE(gw) != KVP_GPU_UP ||
	    (KVP_GS_GEN(gw) & 0xfff) != KVP_HBM_GGEN(w))
		return NULL;
	/* relaxed: written before UP (above) */
	unit = kvp_load_relaxed(&gs->gs_unit);
	bytes = kvp_load_relaxed(&gs->gs_bytes);
	off = KVP_HBM_UNIT(w) * unit;
	if (!unit || off > bytes || end > bytes - off)
		return NULL;
	pthread_mutex_lock(&r->dr_mu);
	if (kvp__hbm_import_locked(c, r, k, KVP_GS_GEN(gw)) == 0 &&
	    off <= r->dr_hbm[k].hi_bytes &&
	    end <= r->dr_hbm[k].hi_bytes - off) {
		struct kvp__hbmimp *hi = &r->dr_hbm[k];
		/* relaxed: written before UP */
		int pdev = (int)kvp_load_relaxed(&gs->gs_device);

		if (dev != pdev && dev < 64 && !(hi->hi_access >> dev & 1)) {
			struct kvp_cu_access ac;

			memset(&ac, 0, sizeof(ac));
			ac.ac_location.ml_type = KVP_CU_MEMLOC_DEVICE;
			ac.ac_location.ml_id = dev;
			ac.ac_flags = KVP_CU_ACCESS_RW;
			if (kvp_cuda()->MemPoolSetAccess(hi->hi_pool, &ac, 1) ==
			    KVP_CU_OK)
				hi->hi_access |= 1ull << dev;
		}
		if (dev == pdev || (dev < 64 && (hi->hi_access >> dev & 1)))
			p = hi->hi_base + off;
	}
	pthread_mutex_unlock(&r->dr_mu);
	return p;
}

/* kvpool-gpud's copy (agent/gpud.c): slot i, whose state word was w, to
 * device memory dst, whole, on stream; waits for it.  0, -ENOENT (the
 * slot moved on), -EAGAIN (not DRAM-resident now), -EIO, -ENOBUFS. */
KVP_INLINE int
kvp__dev_copy_slot(struct kvp_client *c, int device, void *stream, uint64_t i,
		   uint64_t w, void *dst, uint64_t cap)
{
	struct kvp_dev_copy *x;
	uint64_t len, loc;
	int prev = -1, h, rc;

	if (i >= c->seg.g.g_index_slots)
		return -EINVAL;
	rc = kvp__dev_enter(c, device, &prev);
	if (rc)
		return rc;
	h = kvp__hold(c, i, w, 0);
	if (h < 0) {
		kvp__dev_leave(device, prev);
		return h == -ENOBUFS ? -ENOBUFS : -ENOENT;
	}
	/* relaxed: stable while held */
	len = kvp_load_relaxed(&c->seg.entries[i].e_len);
	/* acquire: stable while held (see kvp__read) */
	loc = kvp_load_acquire(&c->seg.entries[i].e_loc);
	x = (struct kvp_dev_copy *)calloc(1, sizeof(*x));
	if (!x) {
		kvp__drop(c, h);
		kvp__dev_leave(device, prev);
		return -ENOMEM;
	}
	x->stream = stream;
	x->device = device;
	if (KVP_LOC_TIER(loc) != KVP_TIER_DRAM || len > cap)
		rc = len > cap ? -E2BIG : -EAGAIN;
	else if (kvp_cuda()->EventCreateWithFlags(
			 &x->ev, KVP_CU_EVENT_DISABLE_TIMING) != KVP_CU_OK)
		rc = -EIO;
	else
		rc = kvp__dev_value(c, x, i, 0, (unsigned char *)dst, len);
	if (x->ev && kvp__dev_sync(c, x) && !rc)
		rc = -EIO;
	kvp__drop(c, h);
	kvp__dev_free(x);
	kvp__dev_leave(device, prev);
	return rc;
}

/* kvp_batch_get_dev (kvpool.h) */
KVP_API ssize_t
kvp_batch_get_dev(struct kvp_client *c, int device, void *stream,
		  struct kvp_op *ops, size_t n, struct kvp_dev_copy **out)
{
	struct kvp_dev_copy *x;
	uint32_t *ssd = NULL, nssd = 0;
	uint64_t *ssd_len = NULL, t0;
	size_t k, queued = 0;
	int prev = -1, rc;
	unsigned int err;

	if (!c || (!ops && n) || !out || device < 0 || n > UINT32_MAX)
		return -EINVAL;
	*out = NULL;
	rc = kvp__live(c);
	if (rc)
		return rc;
	rc = kvp__dev_enter(c, device, &prev);
	if (rc)
		return rc;
	x = (struct kvp_dev_copy *)calloc(1, sizeof(*x));
	ssd = (uint32_t *)malloc((n ? n : 1) * sizeof(*ssd));
	ssd_len = (uint64_t *)malloc((n ? n : 1) * sizeof(*ssd_len));
	if (!x || !ssd || !ssd_len) {
		rc = -ENOMEM;
		goto err_free;
	}
	x->ops = ops;
	x->n = n;
	x->device = device;
	rc = kvp__dev_stream(c, device, stream, &x->stream);
	if (rc)
		goto err_free;
	err = kvp_cuda()->EventCreateWithFlags(&x->ev,
					       KVP_CU_EVENT_DISABLE_TIMING);
	if (err != KVP_CU_OK) {
		x->ev = NULL;
		rc = kvp_cuda_status(err);
		goto err_free;
	}
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	c->tick = t0 >> KVP_TICK_SHIFT;
	c->call_ssd = 0;
	for (k = 0; k < n; k++) {
		struct kvp_op *op = &ops[k];
		uint64_t i = 0, vlen = 0, len, loc;
		const unsigned char *hsrc;
		int h;

		kvp__ctr(c, KVP_CTR_GET, 1);
		op->status = -EINVAL;
		if (!op->buf || !kvp__key_ok(op->key, op->klen))
			continue;
		h = kvp__lookup_hold(c, op->key, op->klen, &i, &vlen);
		if (h == -ENOBUFS && x->nhold) {
			/* out of hold slots: finish what holds them */
			kvp__dev_sync(c, x);
			h = kvp__lookup_hold(c, op->key, op->klen, &i, &vlen);
		}
		if (h < 0) {
			op->status = h == -ENOBUFS ? -EBUSY : h;
			if (h == -ENOENT)
				kvp__ctr(c, KVP_CTR_GET_MISS, 1);
			continue;
		}
		kvp__ctr(c, KVP_CTR_GET_HIT, 1);
		if (op->off > vlen) {
			kvp__drop(c, h);
			continue;
		}
		len = vlen - op->off < op->len ? vlen - op->off : op->len;
		/* an HBM copy first: device to device */
		hsrc = len ? kvp__dev_hbm_src(
				     c, i,
				     /* acquire: the generation we hold */
				     KVP_IX_GEN(
					     kvp_load_acquire(&c->seg.meta[i])),
				     op->off + len, device) :
			     NULL;
		if (hsrc) {
			if (kvp__dev_grow((void **)&x->hold, &x->cap_hold,
					  x->nhold + 1, sizeof(*x->hold)) ||
			    kvp__dev_grow((void **)&x->key, &x->cap_key,
					  x->nkey + 1, sizeof(*x->key))) {
				kvp__drop(c, h);
				op->status = -ENOMEM;
				continue;
			}
			x->hold[x->nhold++] = h;
			rc = kvp__dev_gather(x, op->buf, hsrc + op->off, len);
			op->status = rc;
			op->len = rc ? 0 : len;
			if (!rc) {
				x->key[x->nkey++] = (uint32_t)k;
				kvp__ctr(c, KVP_CTR_GET_BYTES, len);
				kvp__ctr(c, KVP_CTR_DEV_HBM_HITS, 1);
				kvp__ctr(c, KVP_CTR_DEV_HBM_BYTES, len);
				c->dev->hbm_hits++;
			}
			continue;
		}
		/* acquire: stable while held (see kvp__read) */
		loc = kvp_load_acquire(&c->seg.entries[i].e_loc);
		if (KVP_LOC_TIER(loc) != KVP_TIER_DRAM) {
			/* read by the agent below, through kvp_batch_get,
			 * which counts the key (not twice) */
			kvp__drop(c, h);
			kvp__ctr(c, KVP_CTR_GET, (uint64_t)0 - 1);
			kvp__ctr(c, KVP_CTR_GET_HIT, (uint64_t)0 - 1);
			ssd[nssd] = (uint32_t)k;
			ssd_len[nssd++] = len;
			continue;
		}
		if (kvp__dev_grow((void **)&x->hold, &x->cap_hold, x->nhold + 1,
				  sizeof(*x->hold)) ||
		    kvp__dev_grow((void **)&x->key, &x->cap_key, x->nkey + 1,
				  sizeof(*x->key))) {
			kvp__drop(c, h);
			op->status = -ENOMEM;
			continue;
		}
		x->hold[x->nhold++] = h;
		rc = len ? kvp__dev_value(c, x, i, op->off,
					  (unsigned char *)op->buf, len) :
			   0;
		op->status = rc;
		op->len = rc ? 0 : len;
		if (!rc) {
			x->key[x->nkey++] = (uint32_t)k;
			kvp__ctr(c, KVP_CTR_GET_BYTES, len);
		}
	}
	if (nssd)
		kvp__dev_ssd(c, x, ssd, ssd_len, nssd);
	rc = kvp__dev_issue(x);
	if (!rc) {
		err = kvp_cuda()->EventRecord(x->ev, x->stream);
		rc = kvp_cuda_status(err);
		x->ev_live = err == KVP_CU_OK;
	}
	if (rc) { /* nothing more can be waited for: settle now */
		if (!x->err)
			x->err = rc;
		kvp__dev_sync(c, x);
	}
	for (k = 0; k < n; k++)
		if (ops[k].status == 0) {
			queued++;
			c->dev->h2d_bytes += ops[k].len;
			kvp__ctr(c, KVP_CTR_DEV_H2D_BYTES, ops[k].len);
		}
	c->dev->h2d_keys += queued;
	kvp__ctr(c, KVP_CTR_DEV_KEYS, queued);
	if (n)
		kvp__hist(c, nssd ? KVP_HIST_GET_SSD : KVP_HIST_GET_DRAM, t0);
	x->next = c->dev->live;
	c->dev->live = x;
	free(ssd);
	free(ssd_len);
	kvp__dev_leave(device, prev);
	*out = x;
	return (ssize_t)queued;

err_free:
	kvp__dev_free(x);
	free(ssd);
	free(ssd_len);
	kvp__dev_leave(device, prev);
	return rc;
}

/* kvp_dev_done (kvpool.h) */
KVP_API int
kvp_dev_done(struct kvp_client *c, struct kvp_dev_copy *x)
{
	unsigned int err;

	if (!c || !x)
		return -EINVAL;
	if (x->err)
		return -EIO;
	if (!x->ev_live)
		return 1;
	err = kvp_cuda()->EventQuery(x->ev);
	if (err == KVP_CU_ERR_NOT_READY)
		return 0;
	return err == KVP_CU_OK ? 1 : -EIO;
}

/* kvp_dev_wait (kvpool.h) */
KVP_API ssize_t
kvp_dev_wait(struct kvp_client *c, struct kvp_dev_copy *x)
{
	size_t k, ok = 0;
	int rc;

	if (!x)
		return 0;
	if (!c || !c->dev)
		return -EINVAL;
	rc = kvp__dev_sync(c, x);
	kvp__dev_unlink(c, x);
	for (k = 0; k < x->n; k++)
		ok += x->ops[k].status == 0;
	kvp__dev_free(x);
	return rc && !ok ? -EIO : (ssize_t)ok;
}

/* kvp_get_dev (kvpool.h): a batch of one, waited for. */
KVP_API ssize_t
kvp_get_dev(struct kvp_client *c, int device, void *stream, const void *key,
	    uint32_t klen, void *dptr, uint64_t cap)
{
	struct kvp_op op;
	struct kvp_dev_copy *x = NULL;
	uint64_t i = 0, vlen = 0;
	ssize_t r;
	int h;

	if (!c || !kvp__key_ok(key, klen) || !dptr || device < 0)
		return -EINVAL;
	/* the value's size first: a buffer too small copies nothing */
	h = kvp__lookup_hold(c, key, klen, &i, &vlen);
	if (h < 0)
		return h == -ENOBUFS ? -EBUSY : h;
	kvp__drop(c, h);
	if (vlen > cap)
		return -EMSGSIZE;
	memset(&op, 0, sizeof(op));
	op.key = key;
	op.klen = klen;
	op.buf = dptr;
	op.len = cap;
	r = kvp_batch_get_dev(c, device, stream, &op, 1, &x);
	if (r < 0)
		return r;
	kvp_dev_wait(c, x);
	return op.status ? op.status : (ssize_t)op.len;
}

/* ---- puts from the device ---- */

/* The put's copy (struct kvp__put_src): DMA into the run where it is
 * registered, else into the bounce buffer, copied into the run once
 * landed. */
KVP_INLINE int kvp__dev_put_land(void *ctx);

KVP_INLINE int
kvp__dev_put_copy(void *ctx, unsigned char *dst, const unsigned char *src,
		  uint64_t n)
{
	struct kvp_client *c = (struct kvp_client *)ctx;
	struct kvp__dev *d = c->dev;
	struct kvp_cuda *cu = kvp_cuda();
	unsigned int err;

	if (d->put_err)
		return d->put_err;
	if (kvp__devreg_covers(d->reg, dst, n)) {
		err = cu->MemcpyAsync(dst, src, n, KVP_CU_MEMCPY_D2H,
				      d->put_stream);
		if (err != KVP_CU_OK)
			d->put_err = kvp_cuda_status(err) == -EINVAL ? -EINVAL :
								       -EIO;
		return d->put_err;
	}
	while (n) {
		/* the buffer was made by kvp_batch_put_dev */
		uint64_t k = n < d->bounce_cap / 2 ? n : d->bounce_cap / 2;
		int64_t at;

		if (d->put_npend == KVP_DEV_BATCH ||
		    d->bounce_cap - d->bounce_pos < k) {
			/* land our pending copies before the buffer is
			 * reused */
			int rc = kvp__dev_put_land(c);

			if (rc)
				return rc;
		}
		at = kvp__dev_bounce_take(c, NULL, k);
		if (at < 0)
			return d->put_err = (int)at;
		err = cu->MemcpyAsync(d->bounce + at, src, k, KVP_CU_MEMCPY_D2H,
				      d->put_stream);
		if (err != KVP_CU_OK) {
			d->put_err = kvp_cuda_status(err) == -EINVAL ? -EINVAL :
								       -EIO;
			return d->put_err;
		}
		d->put_dst[d->put_npend] = dst;
		d->put_boff[d->put_npend] = (uint64_t)at;
		d->put_n[d->put_npend++] = k;
		d->bounce_bytes += k;
		kvp__ctr(c, KVP_CTR_DEV_BOUNCE_BYTES, k);
		dst += k;
		src += k;
		n -= k;
	}
	return 0;
}

KVP_INLINE int
kvp__dev_put_land(void *ctx)
{
	struct kvp_client *c = (struct kvp_client *)ctx;
	struct kvp__dev *d = c->dev;
	unsigned int err = kvp_cuda()->StreamSynchronize(d->put_stream);
	uint32_t k;

	if (err != KVP_CU_OK && !d->put_err)
		d->put_err = -EIO;
	if (!d->put_err)
		for (k = 0; k < d->put_npend; k++)
			memcpy(d->put_dst[k], d->bounce + d->put_boff[k],
			       d->put_n[k]);
	d->put_npend = 0;
	return d->put_err;
}

/* kvp_batch_put_dev (kvpool.h) */
KVP_API ssize_t
kvp_batch_put_dev(struct kvp_client *c, int device, void *stream,
		  struct kvp_op *ops, size_t n)
{
	struct kvp__put_src ps;
	struct kvp__dev *d;
	uint64_t t0;
	bool counted = false;
	size_t k, ok = 0;
	int prev = -1, rc;

	if (!c || (!ops && n) || device < 0)
		return -EINVAL;
	rc = kvp__live(c);
	if (rc)
		return rc;
	rc = kvp__dev_enter(c, device, &prev);
	if (rc)
		return rc;
	d = c->dev;
	rc = kvp__dev_stream(c, device, stream, &d->put_stream);
	if (!rc)
		rc = kvp__dev_bounce(c);
	if (rc) {
		kvp__dev_leave(device, prev);
		return rc;
	}
	ps.copy = kvp__dev_put_copy;
	ps.land = kvp__dev_put_land;
	ps.ctx = c;
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	c->tick = t0 >> KVP_TICK_SHIFT;
	for (k = 0; k < n; k++) {
		d->put_err = 0;
		d->put_npend = 0;
		ops[k].status = kvp__put_from(c, ops[k].key, ops[k].klen,
					      ops[k].buf, ops[k].len, 0,
					      &counted, &ps);
		if (ops[k].status == 0) {
			ok++;
			d->d2h_keys++;
			d->d2h_bytes += ops[k].len;
			kvp__ctr(c, KVP_CTR_DEV_KEYS, 1);
			kvp__ctr(c, KVP_CTR_DEV_D2H_BYTES, ops[k].len);
		}
	}
	if (counted)
		kvp__hist(c, KVP_HIST_PUT_DRAM, t0);
	kvp__dev_leave(device, prev);
	return (ssize_t)ok;
}

/* kvp_put_dev (kvpool.h) */
KVP_API int
kvp_put_dev(struct kvp_client *c, int device, void *stream, const void *key,
	    uint32_t klen, const void *dptr, uint64_t len)
{
	struct kvp_op op;
	ssize_t r;

	memset(&op, 0, sizeof(op));
	op.key = key;
	op.klen = klen;
	op.buf = (void *)(uintptr_t)dptr;
	op.len = len;
	r = kvp_batch_put_dev(c, device, stream, &op, 1);
	return r < 0 ? (int)r : op.status;
}

/* ---- registration and information ---- */

/* kvp_dev_register (kvpool.h) */
KVP_API int
kvp_dev_register(struct kvp_client *c, uint32_t wait_ms)
{
	struct kvp__devreg *r;
	struct timespec ts;
	int prev = -1, dev = 0, rc;

	if (!c)
		return -EINVAL;
	if (kvp_cuda()->cu_status)
		return kvp_cuda()->cu_status;
	/* registered on the caller's current device (portable: for all) */
	if (kvp_cuda()->GetDevice(&dev) != KVP_CU_OK)
		dev = 0;
	rc = kvp__dev_enter(c, dev, &prev);
	if (rc)
		return rc;
	kvp__dev_leave(dev, prev);
	r = c->dev->reg;
	if (!r)
		return -EIO; /* a mapping of its own: nothing to register */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += wait_ms / 1000;
	ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&r->dr_mu);
	while (!r->dr_finished && wait_ms &&
	       pthread_cond_timedwait(&r->dr_cv, &r->dr_mu, &ts) == 0)
		;
	rc = !r->dr_finished ? -EINPROGRESS : r->dr_failed ? -EIO : 0;
	pthread_mutex_unlock(&r->dr_mu);
	kvp__devreg_charge(c);
	return rc;
}

/* kvp_dev_info (kvpool.h) */
KVP_API int
kvp_dev_info(struct kvp_client *c, struct kvp_dev_info *out, size_t size)
{
	struct kvp_dev_info v;
	struct kvp_cuda *cu;

	if (!c || !out || !size)
		return -EINVAL;
	cu = kvp_cuda();
	memset(&v, 0, sizeof(v));
	v.status = cu->cu_status;
	v.devices = cu->cu_devices;
	v.runtime_version = cu->cu_runtime_version;
	v.driver_version = cu->cu_driver_version;
	v.batch_copy = cu->MemcpyBatchAsync13 || cu->MemcpyBatchAsync12;
	v.reg_total_bytes = c->seg.g.g_dram_pages * c->seg.g.g_dram_unit;
	if (c->dev) {
		struct kvp__dev *d = c->dev;

		if (d->reg) {
			pthread_mutex_lock(&d->reg->dr_mu);
			v.reg_failed = (int)d->reg->dr_failed;
			pthread_mutex_unlock(&d->reg->dr_mu);
			/* relaxed: a statistic */
			v.reg_bytes = kvp_load_relaxed(&d->reg->dr_reg_bytes);
			kvp__devreg_charge(c);
		}
		v.h2d_keys = d->h2d_keys;
		v.h2d_bytes = d->h2d_bytes;
		v.d2h_keys = d->d2h_keys;
		v.d2h_bytes = d->d2h_bytes;
		v.bounce_bytes = d->bounce_bytes;
		v.hbm_hits = d->hbm_hits;
	}
	if (size > sizeof(v))
		size = sizeof(v);
	v.size = size;
	memcpy(out, &v, size);
	return 0;
}

/* kvp_close's part: every copy of ours done before the holds go (a
 * reaped handle's holds are the reaper's: not touched), our streams and
 * bounce buffer freed, our share of the registration's figure taken back
 * from our shard. */
KVP_INLINE void
kvp__dev_close(struct kvp_client *c, bool live)
{
	struct kvp__dev *d = c->dev;
	struct kvp_dev_copy *x;
	int k;

	if (!d)
		return;
	while ((x = d->live)) {
		if (live)
			kvp__dev_sync(c, x);
		else if (x->ev_live)
			kvp_cuda()->EventSynchronize(x->ev);
		d->live = x->next;
		kvp__dev_free(x);
	}
	for (k = 0; k < KVP_DEV_MAX; k++)
		if (d->stream[k])
			kvp_cuda()->StreamDestroy(d->stream[k]);
	if (d->bounce)
		kvp_cuda()->FreeHost(d->bounce);
	if (d->reg) {
		pthread_mutex_lock(&d->reg->dr_mu);
		if (d->reg->dr_host == c)
			d->reg->dr_host = NULL;
		pthread_mutex_unlock(&d->reg->dr_mu);
		if (live)
			kvp__ctr(c, KVP_CTR_DEV_REG_BYTES,
				 (uint64_t)0 - d->reg_charged);
	}
	free(d);
	c->dev = NULL;
}

#endif /* KVP_CLIENT_DEV_INT_H */
