/* SPDX-License-Identifier: MIT */
/*
 * kvpool.h - the kvpool client: header only.
 *
 * #include "kvpool.h" and link with -latomic_ops -lpthread: every call below
 * is inline.  The same code is exported from libkvpool.so (ffi.c) for
 * languages that cannot inline C.
 *
 * A client maps the pool's shared segment and claims a client slot.  A
 * DRAM hit (lookup, hold, copy, drop) takes no lock, makes no syscall and
 * talks to no server.  The agent (kvpoold) owns the segment's lifecycle,
 * evicts, and reaps what dead clients held.
 *
 * Threads: a struct kvp_client is used by one thread at a time.  Open one
 * client per thread that needs the pool (each is a separate client slot).
 *
 * Status codes (0 or negative errno, one meaning everywhere).  Every call
 * below lists the ones it can return; these are all of them, and
 * kvp_strerror() names each:
 *   0          OK
 *   -ENOENT    MISS: no such key (in this namespace)
 *   -EEXIST    put: the key exists or another process is putting it
 *   -EBUSY     BUSY, retry later: DRAM is full, or the index is at its
 *              --index-entries limit, and the agent is still making room;
 *              the entry is in the middle of being evicted;
 *              the staging arena stayed full; this client's own pinsets
 *              hold every one of its hold slots (--holds-per-client:
 *              release a pinset first); pinning more would pass
 *              --max-pinned-per-client; the lease table is full
 *   -E2BIG     TOO_LARGE: value larger than the pool's --max-value or its
 *              whole DRAM arena (put), or than its whole staging arena
 *              (a read off SSD)
 *   -ENOSPC    NOSPC: DRAM is full, or the index at its limit, and
 *              everything in it is held; or both candidate buckets of the
 *              key stayed full
 *   -EMSGSIZE  get: the buffer is smaller than the value (nothing copied)
 *   -EIO, -EBADMSG  FAILED: the key exists but cannot be read
 *   -ENOTCONN  UNAVAILABLE: no agent (and, at open, no segment)
 *   -ESTALE    this client was reaped (declared dead): close and reopen
 *   -EPROTO    the segment's ABI does not match this build
 *   -EUSERS    open: every client slot is taken (--max-clients)
 *   -EACCES    open: the segment is not safe or not permitted to use
 *              (another user's and not a --group segment of ours, writable
 *              by everyone, or no permission): a message on stderr says
 *              what to do
 *   -ENOMEM    out of memory (or of file descriptors or address space)
 *   -EINVAL    bad argument (key NULL, klen 0 or > 255, len 0, ...)
 * A batch call answers per key in ops[k].status, with the statuses of the
 * single-key call; batches larger than the staging arena or than this
 * client's hold slots are served in parts, never failed whole.
 */
#ifndef KVPOOL_H
#define KVPOOL_H

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "tiers/kvp_dram.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* One key of a batch.  Inputs: key, klen, buf, off, len.  Outputs:
 * status, and for batch gets len = bytes copied. */
struct kvp_op {
	const void *key;
	uint32_t klen;
	void *buf;
	uint64_t off;
	uint64_t len;
	int status;
};

/* A lease this client took and has not released (private; see
 * kvp_lease_acquire and the pinned-bytes cap). */
struct kvp__lease_rec {
	uint32_t idx, gen;    /* lease slot and its generation */
	uint64_t len;         /* value bytes it pins */
	uint64_t expiry;      /* CLOCK_MONOTONIC ns */
};

/* Private client state (not shared). */
struct kvp_client {
	struct kvp_seg seg;
	uint32_t slot;        /* client slot index */
	uint64_t slot_word;   /* our cs_state value while LIVE */
	uint64_t ns_id;
	kvp_aword_t *holds;   /* our hold slots in the segment */
	uint32_t *hold_free;  /* private stack of free hold slots */
	uint32_t hold_nfree;
	uint32_t hold_hwm;
	uint64_t put_wait_ns; /* how long a put waits for the evictor */
	uint64_t pinned_bytes; /* held by this client's pinsets */
	uint64_t leased_bytes; /* pinned by its live leases (leases[]) */
	struct kvp__lease_rec *leases;
	uint32_t nleases, cap_leases;
	uint64_t agent_grace_ns; /* SSD reads wait this long for a dead agent */
	uint32_t call_ssd;    /* keys of the current read call sent to SSD */
	char ns[KVP_NS_NAME_MAX + 1];
};

#define KVP_PUT_WAIT_NS_DEFAULT (50ull * 1000 * 1000)
#define KVP_RESOLVE_DEAD_NS (8ull * 1000 * 1000) /* -ENOTCONN after (default) */
#define KVP_CHECK_WAIT_NS (1000ull * 1000 * 1000)

KVP_INLINE const char *
kvp_strerror(int status)
{
	switch (status) {
	case 0: return "OK";
	case -ENOENT: return "MISS: no such key";
	case -EEXIST: return "key exists (or is being put)";
	case -EBUSY: return "BUSY: retry later";
	case -E2BIG: return "TOO_LARGE: value exceeds the pool's limit";
	case -ENOSPC: return "NOSPC: pool full";
	case -EMSGSIZE: return "buffer smaller than the value";
	case -EIO: return "FAILED: I/O error";
	case -EBADMSG: return "FAILED: bad checksum";
	case -ENOTCONN: return "UNAVAILABLE: agent not running";
	case -ESTALE: return "STALE: client was reaped or agent restarted";
	case -EPROTO: return "segment ABI mismatch";
	case -EUSERS: return "all client slots taken (--max-clients)";
	case -EACCES: return "permission denied (the pool's segment)";
	case -EINVAL: return "invalid argument";
	case -ENOMEM: return "out of memory";
	case -EUCLEAN: return "pool structure damaged";
	default: return "unknown status";
	}
}

/* Private counter shard: single writer (this client), so no RMW. */
KVP_INLINE void
kvp__ctr(struct kvp_client *c, enum kvp_ctr k, uint64_t d)
{
	kvp_aword_t *w = &c->seg.clients[c->slot].cs_ctr[k];

	/* relaxed: statistics; only this client writes its shard */
	kvp_store_relaxed(w, kvp_load_relaxed(w) + d);
}

/*
 * One call's latency into histogram h of our shard: t0 is the call's
 * first clock read (CLOCK_MONOTONIC), this is its second.  Single writer.
 */
KVP_INLINE void
kvp__hist(struct kvp_client *c, enum kvp_hist h, uint64_t t0)
{
	uint64_t ns = kvp_now_ns(CLOCK_MONOTONIC) - t0;
	kvp_aword_t *hw = c->seg.clients[c->slot].cs_hist[h];
	unsigned b = kvp_hist_bucket(ns);

	/* relaxed: statistics; only this client writes its shard */
	kvp_store_relaxed(&hw[b], kvp_load_relaxed(&hw[b]) + 1);
	kvp_store_relaxed(&hw[KVP_HIST_SUM], kvp_load_relaxed(&hw[KVP_HIST_SUM]) + ns);
}

/* Fold a shard (counters and histograms) into the pool's retired totals
 * and zero it: kvp_close, and the reaper for a dead client. */
KVP_INLINE void
kvp__shard_retire(struct kvp_shm_header *h, struct kvp_client_slot *cs)
{
	uint32_t k, j;

	for (k = 0; k < KVP_CTR_SLOTS; k++) {
		/* relaxed: statistics; the add is atomic */
		uint64_t v = kvp_load_relaxed(&cs->cs_ctr[k]);
		if (v)
			kvp_fetch_add(&h->h_actr[KVP_ACTR_RETIRED0 + k], v);
		kvp_store_relaxed(&cs->cs_ctr[k], 0);
	}
	for (k = 0; k < KVP_HIST_SLOTS; k++) {
		for (j = 0; j < KVP_HIST_WORDS; j++) {
			/* relaxed: statistics; the add is atomic */
			uint64_t v = kvp_load_relaxed(&cs->cs_hist[k][j]);
			if (v)
				kvp_fetch_add(&h->h_hist_retired[k][j], v);
			kvp_store_relaxed(&cs->cs_hist[k][j], 0);
		}
	}
}

KVP_INLINE int
kvp__key_ok(const void *key, uint32_t klen)
{
	return key && klen >= 1 && klen <= KVP_KEY_MAX;
}

/* Is our slot still ours?  (The reaper only takes slots of dead clients,
 * so this fails only after a false death verdict or a damaged segment.) */
KVP_INLINE int
kvp__live(const struct kvp_client *c)
{
	/* relaxed: a sanity check; the CAS that publishes decides */
	return kvp_load_relaxed(&c->seg.clients[c->slot].cs_state) == c->slot_word
		       ? 0 : -ESTALE;
}

KVP_INLINE void
kvp__seg_unmap(struct kvp_seg *s)
{
	if (s->base)
		munmap(s->base, s->size);
	if (s->fd >= 0)
		close(s->fd);
	s->base = NULL;
	s->fd = -1;
}

/*
 * Map a pool's segment without claiming a client slot (tools, the agent).
 * 'writable' maps it read-write.  0, or -EINVAL (bad pool name),
 * -ENOTCONN (no segment: no agent ever started, or it was removed),
 * -EPROTO (ABI mismatch, or a damaged header), -EACCES (a segment this
 * process must not trust: another user's, or writable by everyone,
 * kvp_shm_trusted; or no permission), -ENOMEM (descriptors, address
 * space); what happened and what to do is in msg.
 */
KVP_INLINE int
kvp_seg_map(const char *pool, bool writable, struct kvp_seg *s, char *msg, size_t cap)
{
	char name[KVP_POOL_NAME_MAX + 16];
	struct kvp_shm_header h;
	struct stat st;
	int rc;

	memset(s, 0, sizeof(*s));
	s->fd = -1;
	rc = kvp_shm_name(pool, name, sizeof(name));
	if (rc) {
		snprintf(msg, cap, "bad pool name (use 1-63 of [A-Za-z0-9_.-])");
		return rc;
	}
	/* O_NONBLOCK: a FIFO squatting the name must not block the open (a
	 * regular file ignores the flag); shm_open adds O_NOFOLLOW */
	s->fd = shm_open(name, (writable ? O_RDWR : O_RDONLY) | O_NONBLOCK | O_CLOEXEC, 0);
	if (s->fd < 0) {
		rc = errno;
		if (rc == ENOENT) {
			snprintf(msg, cap, "no pool '%s' (no /dev/shm%s): start the "
				 "agent first: kvpoold --pool %s", pool, name, pool);
			return -ENOTCONN;
		}
		snprintf(msg, cap, "cannot open /dev/shm%s: %s%s", name, strerror(rc),
			 rc == EACCES || rc == EPERM ? " (run as the pool's owner, or "
			 "start the agent with --group)" : "");
		/* one documented status each: permission, or a resource */
		return rc == EACCES || rc == EPERM ? -EACCES : -ENOMEM;
	}
	if (fstat(s->fd, &st) < 0) {
		rc = -errno;
		snprintf(msg, cap, "cannot stat /dev/shm%s: %s", name, strerror(-rc));
		goto err_close;
	}
	{
		char path[KVP_POOL_NAME_MAX + 32];

		snprintf(path, sizeof(path), "/dev/shm%s", name);
		rc = kvp_shm_trusted(&st, path, msg, cap);
		if (rc)
			goto err_close;
	}
	if ((uint64_t)st.st_size < sizeof(h) ||
	    pread(s->fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		snprintf(msg, cap, "segment /dev/shm%s is truncated", name);
		rc = -EPROTO;
		goto err_close;
	}
	rc = kvp_shm_check_header(&h, msg, cap);
	if (rc)
		goto err_close;
	s->size = (uint64_t)st.st_size;
	s->base = mmap(NULL, s->size, PROT_READ | (writable ? PROT_WRITE : 0),
		       MAP_SHARED, s->fd, 0);
	if (s->base == MAP_FAILED) {
		rc = errno;
		s->base = NULL;
		snprintf(msg, cap, "mmap of %llu bytes failed: %s",
			 (unsigned long long)s->size, strerror(rc));
		rc = rc == EACCES || rc == EPERM ? -EACCES : -ENOMEM;
		goto err_close;
	}
	s->hdr = (struct kvp_shm_header *)s->base;
	rc = kvp_shm_bind(s, msg, cap);
	if (rc)
		goto err_unmap;
	return 0;

err_unmap:
	munmap(s->base, s->size);
	s->base = NULL;
err_close:
	close(s->fd);
	s->fd = -1;
	return rc;
}

/*
 * kvp_open - attach to pool 'pool' (NULL: "default") in namespace 'ns'
 * (model + KV layout fingerprint; keys of different namespaces never
 * meet).  Claims a client slot whose liveness the agent checks with the
 * kernel.  Works while the agent is down, as long as its segment exists.
 *
 * Returns 0 and *out, or -ENOTCONN (no segment: start kvpoold), -EPROTO
 * (ABI mismatch; a message on stderr says what to do), -EUSERS (every
 * client slot is taken: close a client, or give the agent a larger
 * --max-clients; kept apart from -EBUSY because waiting alone may never
 * help), -EACCES (a segment of another user or writable by everyone, or
 * no permission: see kvp_seg_map; message on stderr), -EINVAL (bad pool
 * or namespace name, out NULL), -ENOMEM.  Any thread; may block briefly
 * (mmap, a few syscalls).
 */
KVP_INLINE int
kvp_open(const char *pool, const char *ns, struct kvp_client **out)
{
	struct kvp_client *c;
	char msg[512];
	uint32_t i, n;
	int rc;

	if (!out || !ns || !*ns || strlen(ns) > KVP_NS_NAME_MAX)
		return -EINVAL;
	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	rc = kvp_seg_map(pool ? pool : "default", true, &c->seg, msg, sizeof(msg));
	if (rc) {
		if (rc == -EPROTO || rc == -EACCES || getenv("KVP_VERBOSE"))
			fprintf(stderr, "kvpool: %s\n", msg);
		goto err_free;
	}
	n = c->seg.g.g_max_clients;
	for (i = 0; i < n; i++) {
		struct kvp_client_slot *cs = &c->seg.clients[i];
		/* relaxed: a hint; the CAS decides */
		uint64_t w = kvp_load_relaxed(&cs->cs_state);

		if ((w & 0xff) != KVP_CS_FREE)
			continue;
		if (kvp_shm_lock_take(c->seg.fd, KVP_LOCK_CLIENT0 + (off_t)i))
			continue; /* a live process still has this slot */
		/* full CAS: the slot is ours; its fields are written below */
		if (kvp_cas(&cs->cs_state, w, ((w >> 8) + 1) << 8 | KVP_CS_LIVE)) {
			c->slot = i;
			c->slot_word = ((w >> 8) + 1) << 8 | KVP_CS_LIVE;
			kvp_crashpoint(C_OPEN_CLAIMED);
			break;
		}
		{
			struct flock fl = { .l_type = F_UNLCK, .l_whence = SEEK_SET,
					    .l_start = KVP_LOCK_CLIENT0 + (off_t)i,
					    .l_len = 1 };
			fcntl(c->seg.fd, F_OFD_SETLK, &fl);
		}
	}
	if (i == n) {
		fprintf(stderr, "kvpool: all %u client slots are taken\n", n);
		rc = -EUSERS;
		goto err_unmap;
	}
	{
		struct kvp_client_slot *cs = &c->seg.clients[c->slot];
		uint32_t k;

		snprintf(c->ns, sizeof(c->ns), "%s", ns);
		c->ns_id = kvp_ns_id(ns);
		/* our name to the allocator lock (shm/kvp_shm.h) */
		c->seg.lock_token = c->slot + 1;
		c->seg.lock_claim = &cs->cs_alloc_claim;
		kvp_istore_release(&cs->cs_alloc_claim, 0); /* release: a fresh slot */
		c->holds = &c->seg.holds[(uint64_t)c->slot * c->seg.g.g_holds_per_client];
		c->hold_free = malloc(sizeof(uint32_t) * c->seg.g.g_holds_per_client);
		if (!c->hold_free) {
			rc = -ENOMEM;
			goto err_slot;
		}
		for (k = 0; k < c->seg.g.g_holds_per_client; k++)
			c->hold_free[k] = c->seg.g.g_holds_per_client - 1 - k;
		c->hold_nfree = c->seg.g.g_holds_per_client;
		/* relaxed: for humans and the reaper's fork check; the lock
		 * is the authority while these are still zero */
		kvp_store_relaxed(&cs->cs_start_time, kvp_proc_start_time((long)getpid()));
		kvp_store_relaxed(&cs->cs_pid, (uint64_t)getpid());
		kvp_store_relaxed(&cs->cs_open_ns, kvp_now_ns(CLOCK_REALTIME));
		kvp_store_relaxed(&cs->cs_ns_id, c->ns_id);
		/* release: no unit of the index count in hand (a FREE slot's
		 * word is IDLE already, unless someone wrote garbage there) */
		kvp_store_release(&cs->cs_ix_resv,
				  KVP_IXR_NEXT(kvp_load_relaxed(&cs->cs_ix_resv), KVP_IXR_IDLE));
		memset(cs->cs_ns, 0, sizeof(cs->cs_ns));
		memcpy(cs->cs_ns, ns, strlen(ns) < sizeof(cs->cs_ns) - 1 ? strlen(ns)
			: sizeof(cs->cs_ns) - 1);
	}
	/* map the index now (page tables only; the agent populated the
	 * memory): lookups then never take a minor fault.  The arena is
	 * mapped as it is touched, or now with KVP_POPULATE=all. */
	{
		uint64_t a0 = c->seg.L.off[KVP_R_META];
		uint64_t a1 = c->seg.L.off[KVP_R_DRAM];
		const char *e = getenv("KVP_POPULATE");

		if (e && !strcmp(e, "all"))
			a1 = c->seg.size;
		if (!e || strcmp(e, "none"))
			madvise(c->seg.base + a0, a1 - a0, MADV_POPULATE_WRITE);
	}
	if (c->seg.rings) {
		/* our request ring: whatever a previous owner left is void
		 * (the agent answers with a CAS on the exact word, so a late
		 * answer to it cannot land) */
		struct kvp_req *ring = &c->seg.rings[(uint64_t)c->slot *
						     c->seg.g.g_ring_entries];
		uint32_t k;

		for (k = 0; k < c->seg.g.g_ring_entries; k++) {
			/* acquire: the last word the agent or owner wrote */
			uint64_t w = kvp_load_acquire(&ring[k].rq_state);
			/* release: a fresh sequence, FREE */
			kvp_store_release(&ring[k].rq_state, (((w >> 8) + 1) << 8) | KVP_RQ_FREE);
		}
	}
	{
		/* KVP_AGENT_GRACE_MS: how long an SSD read waits for an agent
		 * that went away (a restart within it is served); default 8 ms,
		 * so UNAVAILABLE comes back within 10 ms */
		const char *e = getenv("KVP_AGENT_GRACE_MS");
		c->agent_grace_ns = e ? strtoull(e, NULL, 10) * 1000000ull : KVP_RESOLVE_DEAD_NS;
	}
	{
		const char *e = getenv("KVP_PUT_WAIT_MS");
		c->put_wait_ns = e ? strtoull(e, NULL, 10) * 1000000ull
				   : KVP_PUT_WAIT_NS_DEFAULT;
	}
	*out = c;
	kvp_crashpoint(C_OPEN_DONE);
	return 0;

err_slot:
	/* full CAS: give the slot back before dropping its lock */
	kvp_cas(&c->seg.clients[c->slot].cs_state, c->slot_word,
		c->slot_word & ~0xffull);
err_unmap:
	kvp__seg_unmap(&c->seg);
err_free:
	free(c);
	return rc;
}

/*
 * kvp_close - drop every hold, fold this client's counters into the
 * pool's retired totals, free the slot and unmap.  Never fails.
 */
KVP_INLINE void
kvp_close(struct kvp_client *c)
{
	struct kvp_client_slot *cs;
	uint32_t k;

	if (!c)
		return;
	cs = &c->seg.clients[c->slot];
	if (kvp__live(c) == 0) {
		for (k = 0; k < c->hold_hwm; k++)
			/* release: our copies are done before the slot clears */
			kvp_store_release(&c->holds[k], 0);
		kvp_store_relaxed(&cs->cs_hold_hwm, 0); /* relaxed: no holds left */
		kvp_crashpoint(C_CLOSE_HALF);
		kvp__shard_retire(c->seg.hdr, cs);
		kvp_store_relaxed(&cs->cs_pid, 0);
		kvp_store_relaxed(&cs->cs_start_time, 0);
		/* full CAS: FREE before our lock drops (fd close), so the
		 * reaper never sees a LIVE slot without its lock */
		kvp_cas(&cs->cs_state, c->slot_word, c->slot_word & ~0xffull);
	}
	kvp__seg_unmap(&c->seg);
	free(c->hold_free);
	free(c->leases);
	free(c);
}

/*
 * Take a hold on slot i whose state word was w (READY).  Returns the hold
 * slot (>= 0), -ENOENT if the value went away (the caller may look again),
 * -EBUSY if the agent kept it under CHECK for too long, -ENOBUFS if this
 * client has no free hold slot.  -ENOBUFS is internal: it never leaves
 * the library (a read resolves what it holds and tries again; what is
 * left is -EBUSY, see kvp__read).
 */
KVP_INLINE int
kvp__hold(struct kvp_client *c, uint64_t i, uint64_t w, uint64_t flags)
{
	unsigned waits = 0;
	uint32_t h;
	int rc;

	if (!c->hold_nfree)
		return -ENOBUFS;
	h = c->hold_free[--c->hold_nfree];
	if (h >= c->hold_hwm) {
		c->hold_hwm = h + 1;
		/* relaxed: ordered before the agent's scan by the fence in
		 * kvp_ix_hold */
		kvp_store_relaxed(&c->seg.clients[c->slot].cs_hold_hwm, c->hold_hwm);
	}
	/* the reader half of the hold protocol (index/kvp_index.h) */
	rc = kvp_ix_hold(&c->seg, &c->holds[h], i, w, flags, KVP_CHECK_WAIT_NS, &waits);
	if (waits)
		kvp__ctr(c, KVP_CTR_HOLD_RETRY, waits);
	if (rc) {
		c->hold_free[c->hold_nfree++] = h;
		return rc;
	}
	return (int)h;
}

KVP_INLINE void
kvp__drop(struct kvp_client *c, int h)
{
	kvp_ix_unhold(&c->holds[h]);
	c->hold_free[c->hold_nfree++] = (uint32_t)h;
}

/*
 * Find and hold the READY value of key.  Returns the hold slot and fills
 * *idx, *len; -ENOENT on a miss.  Retries when the slot changes under us.
 */
KVP_INLINE int
kvp__lookup_hold_flags(struct kvp_client *c, const void *key, uint32_t klen,
		       uint64_t *idx, uint64_t *len, uint64_t flags)
{
	uint64_t hash = kvp_key_hash(c->ns_id, key, klen), w;
	int tries, h = -ENOENT;

	for (tries = 0; tries < 8; tries++) {
		int64_t i = kvp_ix_find(&c->seg, c->ns_id, hash, key, klen,
					KVP_IX_M(KVP_IX_READY), &w);
		if (i < 0)
			return -ENOENT;
		h = kvp__hold(c, (uint64_t)i, w, flags);
		if (h == -ENOENT)
			continue;
		if (h < 0)
			return h;
		*idx = (uint64_t)i;
		/* relaxed: stable while held; published by the READY CAS */
		*len = kvp_load_relaxed(&c->seg.entries[i].e_len);
		if (!kvp_load_relaxed(&c->seg.entries[i].e_ref))
			/* relaxed: a CLOCK hint, written only when clear so
			 * readers of a hot value do not bounce its line */
			kvp_store_relaxed(&c->seg.entries[i].e_ref, 1); /* CLOCK hint */
		return h;
	}
	return h;
}

KVP_INLINE int
kvp__lookup_hold(struct kvp_client *c, const void *key, uint32_t klen,
		 uint64_t *idx, uint64_t *len)
{
	return kvp__lookup_hold_flags(c, key, klen, idx, len, 0);
}

/*
 * Copy [off, off+n) of held value i into dst.  The location and every run
 * of the chain are checked against our own view of the arena first: a
 * damaged entry or page map (a hostile or buggy client) makes this return
 * false (-EIO for the caller: held but unreadable), never a read outside
 * the arena.
 */
KVP_INLINE bool
kvp__copy_out(struct kvp_client *c, uint64_t i, uint64_t off, void *dst, uint64_t n)
{
	/* relaxed: stable while held */
	uint64_t loc = kvp_load_relaxed(&c->seg.entries[i].e_loc);
	uint64_t run = kvp_load_relaxed(&c->seg.entries[i].e_run);
	uint64_t unit = c->seg.g.g_dram_unit, np = c->seg.g.g_dram_pages, hops = 0;
	uint64_t p = KVP_LOC_VAL(loc);
	uint32_t next = 0;
	unsigned char *d = dst;

	/* one run covers the range (the usual case): no page-map read */
	if (p < np && run <= np - p && off <= run * unit && n <= run * unit - off) {
		memcpy(d, c->seg.arena + p * unit + off, n);
		return true;
	}
	while (n) {
		uint64_t rb = 0;
		unsigned char *src = p < np ? kvp_dram_run(&c->seg, (uint32_t)p, &rb, &next)
					    : NULL;

		if (!src || ++hops > np) {
			kvp_dram_report_damage(&c->seg);
			return false;
		}
		if (off < rb) {
			uint64_t k = rb - off < n ? rb - off : n;
			memcpy(d, src + off, k);
			d += k;
			n -= k;
			off = 0;
		} else {
			off -= rb;
		}
		if (!n)
			break;
		if (!next) {
			kvp_dram_report_damage(&c->seg); /* shorter than its length */
			return false;
		}
		p = next - 1;
	}
	return true;
}

/* Wake the evictor (at most one wake in flight); need_units > 0 says
 * how much room a waiting putter needs. */
KVP_INLINE void
kvp__kick_evictor(struct kvp_client *c, uint64_t need_units)
{
	struct kvp_shm_header *hd = c->seg.hdr;
	uint64_t cur;

	/* relaxed: a hint; the CAS loop only keeps the largest */
	while ((cur = kvp_load_relaxed(&hd->h_evict_need)) < need_units &&
	       !kvp_cas(&hd->h_evict_need, cur, need_units))
		;

	/* full CAS: only the first client to see the need pays the syscall;
	 * the agent clears h_evict_req before each pass */
	if (kvp_cas(&hd->h_evict_req, 0, 1)) {
		kvp_ifetch_add(&hd->h_evict_wake, 1);
		kvp_futex_wake(&hd->h_evict_wake);
	}
}

/* Both candidate buckets of hash are full: leave the hash in the hint
 * ring and wake the evictor, which frees an unheld slot there. */
KVP_INLINE void
kvp__hint_full_buckets(struct kvp_client *c, uint64_t hash)
{
	struct kvp_shm_header *hd = c->seg.hdr;
	/* full: a ring position of our own */
	uint64_t k = kvp_fetch_add(&hd->h_hint_seq, 1) % KVP_HINTS;

	/* release: the evictor takes it with a CAS; 0 means empty (a key
	 * whose hash is 0 gets no hint: its put may answer -ENOSPC) */
	kvp_store_release(&hd->h_hint[k], hash);
	kvp__kick_evictor(c, 0);
}

/* ---- the index entry limit (docs/design.md, "The index limit") ---- */

/* A new kind in our cs_ix_resv (a new sequence every time). */
KVP_INLINE void
kvp__ixr_set(struct kvp_client *c, unsigned kind)
{
	kvp_aword_t *w = &c->seg.clients[c->slot].cs_ix_resv;

	/* release: cs_ix_slot, and a publish or an abort, before the new
	 * kind; pairs with the agent's acquire in its recount and the
	 * reaper's (relaxed load: only we write it while we live) */
	kvp_store_release(w, KVP_IXR_NEXT(kvp_load_relaxed(w), kind));
}

/* The index is at its limit: wake the evictor (at most one wake in
 * flight), which removes cold entries. */
KVP_INLINE void
kvp__kick_index(struct kvp_client *c)
{
	struct kvp_shm_header *hd = c->seg.hdr;

	/* full CAS: only the first waiting putter pays the syscall; the
	 * agent clears h_ix_req before its pass */
	if (kvp_cas(&hd->h_ix_req, 0, 1)) {
		kvp_ifetch_add(&hd->h_evict_wake, 1);
		kvp_futex_wake(&hd->h_evict_wake);
	}
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

	/* release: after our last cs_ix_resv store (IDLE), so an agent that
	 * sees this slot sees that store too (its recount reads the slot,
	 * then the kind again, with acquire loads) */
	kvp_store_release(&s->clients[c->slot].cs_ix_slot, KVP_HOLD_MAKE(i, KVP_IX_GEN(w)));
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
		kvp__kick_index(c);
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
	return kvp_load_relaxed(&s->hdr->h_evict_stuck) & KVP_STUCK_INDEX ? -ENOSPC : -EBUSY;
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

/* The body of kvp_put (below); *counted is set once the call counts as a
 * put (it passed validation), so the caller times it.  No clock read. */
KVP_INLINE int
kvp__put(struct kvp_client *c, const void *key, uint32_t klen, const void *val, uint64_t len,
	 bool *counted)
{
	struct kvp_seg *s;
	uint64_t hash, w, deadline = 0, unit;
	int64_t i;
	uint32_t first = 0, p, next;
	const unsigned char *src = val;
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
	hash = kvp_key_hash(c->ns_id, key, klen);
	for (;;) {
		unsigned int seq = kvp_iload_acquire(&s->hdr->h_space_seq);
		uint64_t now;

		i = kvp_ix_claim(s, c->slot, c->ns_id, hash, key, klen, &w);
		if (i != -ENOSPC)
			break;
		/* both buckets full: ask the evictor to free a slot in them */
		kvp__hint_full_buckets(c, hash);
		now = kvp_now_ns(CLOCK_MONOTONIC);
		if (!deadline)
			deadline = now + c->put_wait_ns;
		if (now >= deadline || !kvp_shm_agent_alive(s))
			break;
		kvp_futex_wait(&s->hdr->h_space_seq, seq, deadline - now);
	}
	deadline = 0;
	if (i < 0) {
		kvp__ctr(c, i == -EEXIST ? KVP_CTR_PUT_EXISTS : KVP_CTR_PUT_NOSPC, 1);
		return (int)i;
	}
	kvp_crashpoint(C_PUT_CLAIMED);
	/* the slot is ours, so no other putter of this key waits on us: now
	 * a unit of the index count (--index-entries), bounded wait */
	rc = kvp__ix_reserve(c, (uint64_t)i, w);
	if (rc) {
		kvp_ix_abort(s, (uint64_t)i, w);
		kvp__ctr(c, rc == -ENOSPC ? KVP_CTR_PUT_NOSPC : KVP_CTR_PUT_BUSY, 1);
		return rc;
	}
	for (;;) {
		unsigned int seq = kvp_iload_acquire(&s->hdr->h_space_seq);
		uint64_t now;

		/* the first try does not wait for the allocator lock (and
		 * reads no clock); later ones wait until the deadline: a
		 * holder that is stopped cannot hold this put longer */
		rc = kvp_dram_alloc_until(s, len, (uint64_t)i, KVP_IX_GEN(w), &first, deadline);
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
		kvp__kick_evictor(c, (len + unit - 1) / unit);
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
			else if (kvp_load_relaxed(&s->hdr->h_evict_stuck) & KVP_STUCK_DRAM)
				rc = -ENOSPC;
			else
				rc = -EBUSY;
		}
		kvp__ctr(c, rc == -ENOSPC ? KVP_CTR_PUT_NOSPC : KVP_CTR_PUT_BUSY, 1);
		return rc;
	}
	kvp_crashpoint(C_PUT_ALLOCATED);
	if (kvp__above_high(s))
		kvp__kick_evictor(c, 0);
	/* relaxed: published by the READY CAS in kvp_ix_publish */
	kvp_store_relaxed(&s->entries[i].e_len, len);
	kvp_store_relaxed(&s->entries[i].e_loc, KVP_LOC_MAKE(KVP_TIER_DRAM, first));
	/* the run's length is ours to read: we own it until publish */
	kvp_store_relaxed(&s->entries[i].e_run, s->pages[first].pg_npages);
	/* no SSD copy yet: the slot's previous value may have had one, and
	 * an eviction would otherwise point this key at that record */
	kvp_store_relaxed(&s->entries[i].e_ssd, 0);
	for (p = first;;) {
		uint64_t rb = 0, k;
		unsigned char *dst = kvp_dram_run(s, p, &rb, &next);

		if (!dst || (len > rb && !next)) {
			/* our own chain was damaged under us (a hostile
			 * client): never write past a run; the agent frees
			 * the tagged runs and repairs the map */
			kvp_dram_report_damage(s);
			kvp__ix_release(c, (uint64_t)i, w);
			kvp__ctr(c, KVP_CTR_PUT_BUSY, 1);
			return -EBUSY;
		}
		k = rb < len ? rb : len;
		memcpy(dst, src, k);
		src += k;
		len -= k;
		if (!len)
			break;
		p = next - 1;
	}
	kvp_crashpoint(C_PUT_COPIED);
	rc = kvp_ix_publish(s, (uint64_t)i, w);
	kvp_crashpoint(C_PUT_PUBLISHED);
	if (rc == 0) {
		/* the unit now belongs to the READY slot */
		kvp__ixr_set(c, KVP_IXR_IDLE);
		kvp__ctr(c, KVP_CTR_PUT_BYTES, (uint64_t)(src - (const unsigned char *)val));
	}
	return rc;
}

/*
 * kvp_put - store a value under key if the key is absent.
 *
 * Exactly one of several concurrent putters of one key copies; the others
 * get -EEXIST at once.  The value is invisible until its bytes are all in
 * place.  When DRAM is full, or the index holds --index-entries entries,
 * the put wakes the agent's evictor and waits for room at most
 * KVP_PUT_WAIT_MS (default 50 ms) each, then answers -EBUSY (-ENOSPC when
 * everything left is held, -ENOTCONN when no agent runs).
 * len must be 1..max_value (zero-length values are refused: -EINVAL).
 * Returns 0, -EEXIST, -EBUSY, -ENOSPC (also: both candidate buckets of
 * the key stayed full), -ENOTCONN, -E2BIG (over --max-value or the whole
 * arena), -EINVAL, -ESTALE (this client was reaped).  A damaged
 * allocator (a hostile or buggy client wrote the page map) is -EBUSY
 * while the agent repairs it.
 */
KVP_INLINE int
kvp_put(struct kvp_client *c, const void *key, uint32_t klen, const void *val, uint64_t len)
{
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC);
	bool counted = false;
	int rc = kvp__put(c, key, klen, val, len, &counted);

	if (counted) /* a call that reached the index: timed */
		kvp__hist(c, KVP_HIST_PUT_DRAM, t0);
	return rc;
}

/* ---- reads: DRAM hits inline, SSD-resident values through the agent ---- */

/* One SSD-resident key of a read call, held while it is resolved. */
struct kvp__pend {
	struct kvp_op *op;
	uint64_t slot, gen;
	uint64_t off, len; /* clipped range */
	int hold;
	bool pinned;       /* a pinset's hold: the pinset drops it, not us */
	int ring;          /* ring entry while posted, -1 otherwise */
	uint64_t rqword;   /* our POSTED state word (seq) */
};

#define KVP_RESOLVE_SLICE_NS (2ull * 1000 * 1000)     /* agent check period */
#define KVP_RESOLVE_BUSY_NS (30ull * 1000 * 1000 * 1000) /* give up on BUSY */

/* Release our bit of staging span 'head'; the last holder frees it. */
KVP_INLINE void
kvp__span_release(struct kvp_client *c, uint32_t head)
{
	struct kvp_seg *s = &c->seg;
	struct kvp_span *sp = &s->spans[head];
	uint64_t bit = 1ull << (c->slot % 64), w, k;
	unsigned word = c->slot / 64;

	for (;;) {
		/* relaxed: the CAS below decides */
		uint64_t old = kvp_load_relaxed(&sp->sp_holders[word]);
		/* full CAS: clear our bit; pairs with the other holders' CAS
		 * and the reaper's (a CAS loop: AND is not in every AO) */
		if (kvp_cas(&sp->sp_holders[word], old, old & ~bit))
			break;
	}
	kvp_crashpoint(C_SPAN_BIT_CLEARED);
	for (k = 0; k < KVP_SPAN_HOLDER_WORDS; k++)
		/* acquire: pairs with the other holders' CAS */
		if (kvp_load_acquire(&sp->sp_holders[k]))
			return;
	/* acquire: the span's state while we still own a share of it */
	w = kvp_load_acquire(&sp->sp_state);
	if (KVP_SP_STATE(w) != KVP_SP_READY)
		return;
	/* full CAS: exactly one freer, named in the word (if we die now
	 * the reaper finishes the free for us) */
	if (!kvp_cas(&sp->sp_state, w,
		     KVP_SP_WORDF(KVP_SP_GEN(w), KVP_SP_N(w), KVP_SP_FREEING, c->slot + 1)))
		return;
	w = KVP_SP_WORDF(KVP_SP_GEN(w), KVP_SP_N(w), KVP_SP_FREEING, c->slot + 1);
	/* full: occupancy goes down by the span's slots (the winner of the
	 * FREEING CAS only, so once; an adopter does not subtract again);
	 * before the FREE stores, so an agent that sees the span FREE
	 * (acquire) sees this too */
	kvp_fetch_add(&s->hdr->h_staging_used, (uint64_t)0 - KVP_SP_N(w));
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

/* Post up to m pending keys as one resolve call; returns how many. */
KVP_INLINE unsigned
kvp__post(struct kvp_client *c, struct kvp__pend *p, unsigned m, uint64_t call)
{
	struct kvp_req *ring = &c->seg.rings[(uint64_t)c->slot * c->seg.g.g_ring_entries];
	unsigned r = 0, k, posted = 0;

	for (k = 0; k < m && r < c->seg.g.g_ring_entries; k++) {
		struct kvp_req *q;
		uint64_t w, seq;

		if (p[k].ring >= 0 || p[k].hold < 0)
			continue; /* posted already, or answered */
		for (; r < c->seg.g.g_ring_entries; r++) {
			/* acquire: the agent's last word on this entry */
			w = kvp_load_acquire(&ring[r].rq_state);
			if ((w & 0xff) == KVP_RQ_FREE)
				break;
		}
		if (r == c->seg.g.g_ring_entries)
			break;
		q = &ring[r];
		seq = (w >> 8) + 1;
		/* relaxed: published by the POSTED store-release below */
		kvp_store_relaxed(&q->rq_slot, p[k].slot);
		kvp_store_relaxed(&q->rq_gen, p[k].gen);
		kvp_store_relaxed(&q->rq_off, p[k].off);
		kvp_store_relaxed(&q->rq_len, p[k].len);
		kvp_store_relaxed(&q->rq_call, call | (posted == 0 ? KVP_RQ_FIRST : 0) |
				  (p[k].off == 0 && p[k].op->off == 0 &&
				   p[k].len == kvp_load_relaxed(&c->seg.entries[p[k].slot].e_len)
					   ? KVP_RQ_WHOLE : 0));
		kvp_store_relaxed(&q->rq_result, 0);
		kvp_store_relaxed(&q->rq_where, 0);
		p[k].rqword = (seq << 8) | KVP_RQ_POSTED;
		/* release: the request's fields before its POSTED state */
		kvp_store_release(&q->rq_state, p[k].rqword);
		p[k].ring = (int)r++;
		posted++;
	}
	return posted;
}

/* Copy a finished request's bytes and settle its status. */
KVP_INLINE int
kvp__finish(struct kvp_client *c, struct kvp__pend *p, int64_t res, uint64_t where)
{
	struct kvp_seg *s = &c->seg;

	if (res < 0)
		/* the agent's answer, told apart only where it means something
		 * to the caller: anything else is a failed read */
		return res == -E2BIG || res == -EBADMSG ? (int)res : -EIO;
	if (where & KVP_WHERE_DRAM) {
		/* promoted: the entry is DRAM-resident now, still held */
		/* acquire: pairs with the agent's release of e_loc */
		uint64_t loc = kvp_load_acquire(&s->entries[p->slot].e_loc);
		if (KVP_LOC_TIER(loc) != KVP_TIER_DRAM ||
		    !kvp__copy_out(c, p->slot, p->off, p->op->buf, p->len))
			return -EIO;
		return 0;
	} else {
		uint64_t head = (where & 0xffffffffull) - 1, skip = (where >> 32) & 0x7fffffff;
		uint64_t sb = s->g.g_staging_slot_bytes;

		if (head >= s->g.g_staging_slots ||
		    (head * sb + skip + p->len) > s->g.g_staging_slots * sb)
			return -EIO; /* a damaged answer: never copy out of bounds */
		kvp_crashpoint(C_RESOLVE_ANSWERED);
		memcpy(p->op->buf, s->staging + head * sb + skip, p->len);
		kvp__span_release(c, (uint32_t)head);
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
	struct kvp_req *ring = &s->rings[(uint64_t)c->slot * s->g.g_ring_entries];
	uint64_t t_busy = kvp_now_ns(CLOCK_MONOTONIC), dead_since = 0;
	unsigned left = m, k;

	for (k = 0; k < m; k++)
		p[k].ring = -1;
	while (left) {
		unsigned int fseq = kvp_iload_acquire(&cs->cs_io_futex);
		unsigned int sseq = kvp_iload_acquire(&s->hdr->h_staging_seq);
		unsigned pending = 0, progress = 0, last_progress = 0;
		uint64_t call = kvp_load_relaxed(&cs->cs_call_seq) + 1;

		kvp_store_relaxed(&cs->cs_call_seq, call); /* relaxed: ours */
		if (!s->rings || !s->hdr->h_ssd_enabled || !kvp_shm_agent_alive(s)) {
			for (k = 0; k < m; k++)
				if (p[k].hold >= 0)
					kvp__settle(c, &p[k], -ENOTCONN);
			return;
		}
		kvp__post(c, p, m, call & 0xffffffffull);
		kvp_crashpoint(C_RESOLVE_POSTED);
		kvp_ifetch_add(&s->hdr->h_evict_wake, 1); /* full: wake the agent */
		kvp_futex_wake(&s->hdr->h_evict_wake);
		for (;;) {
			pending = 0;
			for (k = 0; k < m; k++) {
				struct kvp_req *q;
				uint64_t w;
				int64_t res;

				if (p[k].ring < 0)
					continue;
				q = &ring[p[k].ring];
				/* acquire: pairs with the agent's DONE release */
				w = kvp_load_acquire(&q->rq_state);
				if (w != ((p[k].rqword & ~0xffull) | KVP_RQ_DONE)) {
					pending++;
					continue;
				}
				res = (int64_t)kvp_load_relaxed(&q->rq_result);
				if (res == -EBUSY) {
					kvp__ctr(c, KVP_CTR_RESOLVE_BUSY, 1);
				} else {
					/* the key is held, so it exists: an
					 * answer that cannot find it is a
					 * failed read, never a miss (kvp__finish
					 * makes it -EIO) */
					int st = kvp__finish(c, &p[k], res,
							     kvp_load_relaxed(&q->rq_where));
					kvp__ctr(c, st == 0 ? KVP_CTR_RESOLVE_OK
							    : KVP_CTR_RESOLVE_FAILED, 1);
					if (st == 0)
						kvp__ctr(c, KVP_CTR_GET_SSD_BYTES, p[k].len);
					kvp__settle(c, &p[k], st);
					left--;
					progress++;
				}
				/* release: the entry is ours to post again */
				kvp_store_release(&q->rq_state, (w & ~0xffull) | KVP_RQ_FREE);
				p[k].ring = -1;
			}
			/* keys came back done, so their spans are free again:
			 * ask again at once for the ones that were BUSY, as a
			 * new call, while the rest are still in flight (keeps
			 * the arena busy instead of waiting for every answer) */
			if (progress > last_progress && pending && left > pending) {
				unsigned posted;

				last_progress = progress;
				call = kvp_load_relaxed(&cs->cs_call_seq) + 1;
				kvp_store_relaxed(&cs->cs_call_seq, call); /* relaxed: ours */
				posted = kvp__post(c, p, m, call & 0xffffffffull);
				if (posted) {
					pending += posted;
					kvp_ifetch_add(&s->hdr->h_evict_wake, 1); /* full */
					kvp_futex_wake(&s->hdr->h_evict_wake);
				}
			}
			if (!pending)
				break;
			/* sleep until the agent answers; check it is alive */
			kvp_futex_wait(&cs->cs_io_futex, fseq, KVP_RESOLVE_SLICE_NS);
			fseq = kvp_iload_acquire(&cs->cs_io_futex);
			if (kvp_shm_agent_alive(s)) {
				dead_since = 0;
				continue;
			}
			if (!dead_since) {
				dead_since = kvp_now_ns(CLOCK_MONOTONIC);
				continue;
			}
			if (kvp_now_ns(CLOCK_MONOTONIC) - dead_since < c->agent_grace_ns)
				continue;
			/* the agent is gone: withdraw what is left (a CAS on
			 * the exact word, so a late answer cannot land in a
			 * reused entry) and answer UNAVAILABLE */
			for (k = 0; k < m; k++) {
				if (p[k].ring >= 0) {
					struct kvp_req *q = &ring[p[k].ring];
					uint64_t w = kvp_load_acquire(&q->rq_state); /* acquire */
					kvp_cas(&q->rq_state, w, (w & ~0xffull) | KVP_RQ_FREE);
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
		if (kvp_now_ns(CLOCK_MONOTONIC) - t_busy > KVP_RESOLVE_BUSY_NS) {
			for (k = 0; k < m; k++)
				if (p[k].hold >= 0)
					kvp__settle(c, &p[k], -EBUSY);
			return;
		}
		kvp_futex_wait(&s->hdr->h_staging_seq, sseq, KVP_RESOLVE_SLICE_NS);
	}
}

/*
 * One held key of a read call: a DRAM hit is copied now (the hold dropped
 * unless a pinset owns it); an SSD-resident key joins pend[], resolved
 * when the ring's worth is full.  Returns the new pend count.
 */
KVP_INLINE unsigned
kvp__read_held(struct kvp_client *c, struct kvp_op *op, uint64_t i, uint64_t gen,
	       uint64_t off, uint64_t len, int h, bool pinned, struct kvp__pend *pend,
	       unsigned m)
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
	if (++m == KVP_RING_ENTRIES || (c->seg.rings && m == c->seg.g.g_ring_entries)) {
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
		if ((exact && vlen > op->len) || (!exact && off > vlen) || !op->buf) {
			op->status = exact && vlen > op->len ? -EMSGSIZE : -EINVAL;
			kvp__drop(c, h);
			continue;
		}
		len = exact ? vlen : (vlen - off < op->len ? vlen - off : op->len);
		m = kvp__read_held(c, op, i, KVP_IX_GEN(kvp_load_acquire(&c->seg.meta[i])),
				   off, len, h, false, pend, m);
	}
	if (m)
		kvp__resolve(c, pend, m);
	for (j = 0; j < n; j++)
		ok += ops[j].status == 0;
	if (n)
		kvp__hist(c, c->call_ssd ? KVP_HIST_GET_SSD : KVP_HIST_GET_DRAM, t0);
	return ok;
}

/*
 * kvp_get - copy the whole value of key into buf.  Returns its size, or
 * -EMSGSIZE (cap too small; nothing copied), -ENOENT, -EINVAL, -EBUSY
 * (the agent kept the entry under CHECK too long, the staging arena
 * stayed full, or this client's pinsets hold every hold slot), and for
 * SSD-resident values -EIO/-EBADMSG (failed), -E2BIG (larger than the
 * whole staging arena) or -ENOTCONN (no agent).  A DRAM hit takes no
 * lock and no syscall.
 */
KVP_INLINE ssize_t
kvp_get(struct kvp_client *c, const void *key, uint32_t klen, void *buf, uint64_t cap)
{
	struct kvp_op op = { .key = key, .klen = klen, .buf = buf, .off = 0, .len = cap };

	if (!c || !kvp__key_ok(key, klen) || (!buf && cap))
		return -EINVAL;
	kvp__read(c, &op, 1, true);
	return op.status ? op.status : (ssize_t)op.len;
}

/*
 * kvp_get_range - copy bytes [off, off+len) of key's value (clipped at
 * its end) into buf.  Returns the number of bytes copied (0 when off is
 * the value's size), -EINVAL when off is past the end, or the other
 * statuses of kvp_get but -EMSGSIZE.  Off SSD, only the 4 KiB-rounded
 * extent is read from the device.
 */
KVP_INLINE ssize_t
kvp_get_range(struct kvp_client *c, const void *key, uint32_t klen, uint64_t off,
	      void *buf, uint64_t len)
{
	struct kvp_op op = { .key = key, .klen = klen, .buf = buf, .off = off, .len = len };

	if (!c || !kvp__key_ok(key, klen) || (!buf && len))
		return -EINVAL;
	kvp__read(c, &op, 1, false);
	return op.status ? op.status : (ssize_t)op.len;
}

/* Is the value in slot i (just found READY) SSD-resident?  For the
 * per-tier counters only: the entry's first line was read by the lookup. */
KVP_INLINE bool
kvp__resident_ssd(const struct kvp_client *c, uint64_t i)
{
	/* relaxed: a statistic; the location may change right after */
	return KVP_LOC_TIER(kvp_load_relaxed(&c->seg.entries[i].e_loc)) == KVP_TIER_SSD;
}

/* kvp_exists - 1 if key has a readable value, 0 if not, -EINVAL (bad
 * key or client).  Holds nothing, stages nothing, writes nothing shared
 * but a counter. */
KVP_INLINE int
kvp_exists(struct kvp_client *c, const void *key, uint32_t klen)
{
	uint64_t w, t0;
	int64_t i;
	bool ssd;

	if (!c || !kvp__key_ok(key, klen))
		return -EINVAL;
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	kvp__ctr(c, KVP_CTR_EXISTS, 1);
	i = kvp_ix_find(&c->seg, c->ns_id, kvp_key_hash(c->ns_id, key, klen), key,
			klen, KVP_IX_M(KVP_IX_READY), &w);
	if (i < 0) {
		kvp__hist(c, KVP_HIST_EXISTS_DRAM, t0);
		return 0;
	}
	ssd = kvp__resident_ssd(c, (uint64_t)i);
	kvp__ctr(c, KVP_CTR_EXISTS_HIT, 1);
	kvp__ctr(c, ssd ? KVP_CTR_EXISTS_HIT_SSD : KVP_CTR_EXISTS_HIT_DRAM, 1);
	kvp__hist(c, ssd ? KVP_HIST_EXISTS_SSD : KVP_HIST_EXISTS_DRAM, t0);
	return 1;
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
	struct kvp_req *ring = &s->rings[(uint64_t)c->slot * s->g.g_ring_entries], *q = NULL;
	uint64_t rw = 0, word, dead_since = 0, call;
	unsigned r;

	for (r = 0; r < s->g.g_ring_entries; r++) {
		/* acquire: the agent's last word on this entry */
		rw = kvp_load_acquire(&ring[r].rq_state);
		if ((rw & 0xff) == KVP_RQ_FREE) {
			q = &ring[r];
			break;
		}
	}
	if (!q)
		return -EBUSY; /* cannot happen: our calls are sequential */
	if (!kvp_shm_agent_alive(s))
		return -ENOTCONN;
	call = kvp_load_relaxed(&cs->cs_call_seq) + 1;
	kvp_store_relaxed(&cs->cs_call_seq, call); /* relaxed: ours */
	/* relaxed: published by the POSTED store-release below */
	kvp_store_relaxed(&q->rq_slot, i);
	kvp_store_relaxed(&q->rq_gen, KVP_IX_GEN(w));
	kvp_store_relaxed(&q->rq_off, 0);
	kvp_store_relaxed(&q->rq_len, 0);
	kvp_store_relaxed(&q->rq_call, (call & 0xffffffffull) | KVP_RQ_DELETE);
	kvp_store_relaxed(&q->rq_result, 0);
	kvp_store_relaxed(&q->rq_where, 0);
	word = (((rw >> 8) + 1) << 8) | KVP_RQ_POSTED;
	/* release: the request's fields before its POSTED state */
	kvp_store_release(&q->rq_state, word);
	kvp_ifetch_add(&s->hdr->h_evict_wake, 1); /* full: wake the agent */
	kvp_futex_wake(&s->hdr->h_evict_wake);
	for (;;) {
		unsigned int fseq = kvp_iload_acquire(&cs->cs_io_futex);
		/* acquire: pairs with the agent's DONE release */
		uint64_t st = kvp_load_acquire(&q->rq_state);

		if (st == ((word & ~0xffull) | KVP_RQ_DONE)) {
			int res = (int)(int64_t)kvp_load_relaxed(&q->rq_result);
			/* release: the entry is ours to post again */
			kvp_store_release(&q->rq_state, (st & ~0xffull) | KVP_RQ_FREE);
			return res;
		}
		if (kvp_shm_agent_alive(s)) {
			dead_since = 0;
		} else if (!dead_since) {
			dead_since = kvp_now_ns(CLOCK_MONOTONIC);
		} else if (kvp_now_ns(CLOCK_MONOTONIC) - dead_since >= c->agent_grace_ns &&
			   /* full CAS: withdraw it unless answered meanwhile */
			   kvp_cas(&q->rq_state, st, (st & ~0xffull) | KVP_RQ_FREE)) {
			return -ENOTCONN;
		}
		kvp_futex_wait(&cs->cs_io_futex, fseq, KVP_RESOLVE_SLICE_NS);
	}
}

/*
 * kvp_delete - make key unreachable.  Readers holding it finish their
 * copies; the agent frees the bytes once the last hold drops.  With the
 * agent's --durability strict, the agent does the delete and the call
 * returns once the value's tombstone is on disk (fdatasync'd), so the key
 * does not come back after a crash or a restart.  Returns 0, -ENOENT,
 * -EBUSY (the agent kept it under CHECK too long), -EINVAL; strict only:
 * -EIO (deleted, but its tombstone could not be written: it may come back
 * after a restart), -ENOTCONN (no agent: nothing was deleted, or, if the
 * agent died while answering, the key is deleted but maybe not durably).
 * Takes no hold.
 */
KVP_INLINE int
kvp_delete(struct kvp_client *c, const void *key, uint32_t klen)
{
	uint64_t hash, w, t0 = 0;
	int64_t i;

	if (!c || !kvp__key_ok(key, klen))
		return -EINVAL;
	kvp__ctr(c, KVP_CTR_DELETE, 1);
	hash = kvp_key_hash(c->ns_id, key, klen);
	for (;;) {
		i = kvp_ix_find(&c->seg, c->ns_id, hash, key, klen,
				KVP_IX_M(KVP_IX_READY), &w);
		if (i < 0)
			return -ENOENT;
		/* the agent's --durability (a hint it publishes at attach) */
		if (c->seg.rings && *(const volatile uint32_t *)&c->seg.hdr->h_durability == 1)
			return kvp__delete_durable(c, (uint64_t)i, w);
		/* under CHECK the agent is deciding: wait for its verdict */
		if (!(w & KVP_IX_CHECK) && kvp_ix_delete(&c->seg, (uint64_t)i, w)) {
			kvp_crashpoint(C_DELETE_MARKED);
			/* full: tells the agent a reclaim pass has work */
			kvp_fetch_add(&c->seg.hdr->h_delete_seq, 1);
			return 0; /* the evictor reclaims it on its next pass */
		}
		if (!t0)
			t0 = kvp_now_ns(CLOCK_MONOTONIC);
		else if (kvp_now_ns(CLOCK_MONOTONIC) - t0 > KVP_CHECK_WAIT_NS)
			return -EBUSY;
		sched_yield();
	}
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
	h = kvp_key_hash(c->ns_id, ops[k].key, ops[k].klen);
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

/* Batches: per-key status in ops[k].status; the return is the number of
 * keys with status 0 (or -EINVAL for bad arguments to the call itself).
 * Any number of keys (2,000 and more) in one call.  kvp_batch_put: the
 * statuses of kvp_put per key. */
KVP_INLINE ssize_t
kvp_batch_put(struct kvp_client *c, struct kvp_op *ops, size_t n)
{
	uint64_t t0;
	bool counted = false;
	size_t k, ok = 0;

	if (!c || (!ops && n))
		return -EINVAL;
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
	for (k = 0; k < n; k++) {
		ops[k].status = kvp__put(c, ops[k].key, ops[k].klen, ops[k].buf, ops[k].len,
					 &counted);
		ok += ops[k].status == 0;
	}
	if (counted) /* one observation for the whole batch */
		kvp__hist(c, KVP_HIST_PUT_DRAM, t0);
	return (ssize_t)ok;
}

/* Batch get: for each key copies [off, off+len) of its value, clipped at
 * the value's end, and sets len to the bytes copied (so off 0 with a
 * buffer of at least the value's size reads it whole).  Status as for
 * kvp_get_range.  Any number of keys, whatever the size of the staging
 * arena or of --holds-per-client: served in parts.  A key is -EBUSY only
 * when the staging arena stayed full for 30 s or this client's pinsets
 * hold every one of its hold slots. */
KVP_INLINE ssize_t
kvp_batch_get(struct kvp_client *c, struct kvp_op *ops, size_t n)
{
	if (!c || (!ops && n))
		return -EINVAL;
	return (ssize_t)kvp__read(c, ops, n, false);
}

/*
 * kvp_batch_exists_prefix - how many keys, from the start, are present.
 * Sets status (0 present, -ENOENT absent, -EINVAL bad key) for the keys
 * it examined (up to and including the first absent one).  Takes no
 * holds, touches no tier, stages nothing.
 */
KVP_INLINE ssize_t
kvp_batch_exists_prefix(struct kvp_client *c, struct kvp_op *ops, size_t n)
{
	/* a two-stage software pipeline: FAR keys ahead, hash and prefetch
	 * both candidate buckets; NEAR keys ahead, find the fingerprint
	 * match in the (now cached) state words and prefetch its entry */
	enum { FAR = 16, NEAR = 8, RING = 32 };
	uint64_t hashes[RING], t0, nssd = 0;
	size_t k;

	if (!c || (!ops && n))
		return -EINVAL;
	t0 = kvp_now_ns(CLOCK_MONOTONIC);
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
		if (k + NEAR < n && kvp__key_ok(ops[k + NEAR].key, ops[k + NEAR].klen))
			kvp__prefetch_entry(c, hashes[(k + NEAR) % RING]);
		i = kvp_ix_find(&c->seg, c->ns_id, hashes[k % RING], ops[k].key, ops[k].klen,
				KVP_IX_M(KVP_IX_READY), &w);
		if (i < 0) {
			ops[k].status = -ENOENT;
			break;
		}
		nssd += kvp__resident_ssd(c, (uint64_t)i);
		ops[k].status = 0;
	}
	kvp__ctr(c, KVP_CTR_EXISTS_HIT, k);
	kvp__ctr(c, KVP_CTR_EXISTS_HIT_DRAM, k - nssd);
	kvp__ctr(c, KVP_CTR_EXISTS_HIT_SSD, nssd);
	if (n)
		kvp__hist(c, nssd ? KVP_HIST_EXISTS_SSD : KVP_HIST_EXISTS_DRAM, t0);
	return (ssize_t)k;
}

/* ---- lookup-and-pin ---- */

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

		if (now < r->expiry && w == KVP_LS_WORD(r->gen, 0, KVP_LS_LIVE)) {
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
	size_t count;     /* keys pinned (a prefix of the lookup) */
	bool released;
	bool capped;      /* the pinned-bytes cap cut the prefix short */
	uint64_t *slot, *gen, *len;
	int *hold;
	uint8_t *tier;    /* tier when pinned (KVP_TIER_DRAM / KVP_TIER_SSD) */
};

/* Drop every hold of a pinset.  Releasing twice is harmless. */
KVP_INLINE void
kvp_pinset_release(struct kvp_client *c, struct kvp_pinset *ps)
{
	size_t k;

	if (!c || !ps || ps->released)
		return;
	for (k = 0; k < ps->count; k++) {
		kvp__drop(c, ps->hold[k]);
		kvp__ctr(c, ps->tier[k] == KVP_TIER_DRAM ? KVP_CTR_PINNED_DRAM
							  : KVP_CTR_PINNED_SSD,
			 (uint64_t)0 - ps->len[k]);
		c->pinned_bytes -= ps->len[k];
	}
	ps->released = true;
}

/* Release (if needed) and free a pinset. */
KVP_INLINE void
kvp_pinset_free(struct kvp_client *c, struct kvp_pinset *ps)
{
	if (!ps)
		return;
	kvp_pinset_release(c, ps);
	free(ps->slot);
	free(ps);
}

KVP_INLINE size_t
kvp_pinset_count(const struct kvp_pinset *ps)
{
	return ps && !ps->released ? ps->count : 0;
}

/* The tier a pinned key lives in now (KVP_TIER_DRAM or KVP_TIER_SSD; it
 * may move between tiers while pinned, never away), or -EINVAL. */
KVP_INLINE int
kvp_pinset_tier(struct kvp_client *c, const struct kvp_pinset *ps, size_t k)
{
	if (!c || !ps || ps->released || k >= ps->count)
		return -EINVAL;
	/* acquire: pairs with the agent's release when it moves it */
	return (int)KVP_LOC_TIER(kvp_load_acquire(&c->seg.entries[ps->slot[k]].e_loc));
}

/* Value length of pinned key k (or 0). */
KVP_INLINE uint64_t
kvp_pinset_len(const struct kvp_pinset *ps, size_t k)
{
	return ps && !ps->released && k < ps->count ? ps->len[k] : 0;
}

/*
 * kvp_batch_lookup_pin - how many keys, from the start, are present, and
 * a hold on each of them in the same pass: the count is a promise.  The
 * pinned values are neither evicted, nor freed, nor their SSD segment
 * reclaimed until kvp_pinset_release (or the process dies and the reaper
 * releases them).  If pinning the next key would take this client past
 * the pool's --max-pinned-per-client bytes (its pinsets and its live
 * leases together), the prefix stops there (the call still succeeds;
 * ps->capped says so).  Each pin takes one of this
 * client's --holds-per-client hold slots: when none is left the prefix
 * stops there too.  Sets ops[k].status like kvp_batch_exists_prefix (0,
 * -ENOENT, -EINVAL), and -EBUSY for the key where the cap or the hold
 * slots stopped the prefix (or that the agent kept under CHECK too
 * long).  Returns the count pinned (>= 0) and *out, or -EINVAL (also for
 * an n whose pinset size would overflow), -ENOMEM.
 * The plain probe, kvp_batch_exists_prefix, is unchanged: it holds
 * nothing.
 */
KVP_INLINE ssize_t
kvp_batch_lookup_pin(struct kvp_client *c, struct kvp_op *ops, size_t n,
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
	ps = calloc(1, sizeof(*ps));
	if (!ps)
		return -ENOMEM;
	ps->slot = malloc((n ? n : 1) * per);
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
	for (k = 0; k < n; k++) {
		uint64_t i = 0, len = 0;
		int h;

		if (!kvp__key_ok(ops[k].key, ops[k].klen)) {
			ops[k].status = -EINVAL;
			break;
		}
		h = kvp__lookup_hold_flags(c, ops[k].key, ops[k].klen, &i, &len, KVP_HOLD_PIN);
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
		ps->tier[k] = (uint8_t)KVP_LOC_TIER(kvp_load_acquire(&c->seg.entries[i].e_loc));
		c->pinned_bytes += len;
		kvp__ctr(c, ps->tier[k] == KVP_TIER_DRAM ? KVP_CTR_PINNED_DRAM : KVP_CTR_PINNED_SSD,
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

/*
 * kvp_pinset_get - load pinned keys: ops[k] (k < n <= count) reads pinned
 * key k, [off, off+len) clipped at the value's end (len set to the bytes
 * copied; off 0 with a buffer of the value's size reads it whole).  Never
 * a MISS: an SSD-resident key is staged (in parts when the arena is busy)
 * or promoted.  Returns the number of keys with status 0, or -EINVAL.
 * Per key: 0, -EINVAL (no buffer, off past the end), and for
 * SSD-resident keys -EIO/-EBADMSG, -E2BIG, -ENOTCONN, -EBUSY (the staging
 * arena stayed full).  Takes no new hold.  The holds stay until
 * kvp_pinset_release.
 */
KVP_INLINE ssize_t
kvp_pinset_get(struct kvp_client *c, struct kvp_pinset *ps, struct kvp_op *ops, size_t n)
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
		m = kvp__read_held(c, op, i, ps->gen[k], off, len, ps->hold[k], true, pend, m);
	}
	if (m)
		kvp__resolve(c, pend, m);
	for (k = 0; k < n; k++)
		ok += ops[k].status == 0;
	if (n)
		kvp__hist(c, c->call_ssd ? KVP_HIST_GET_SSD : KVP_HIST_GET_DRAM, t0);
	return (ssize_t)ok;
}

/* ---- timed leases ---- */

/* A lease handle, and what a remote reader needs to know of the value. */
struct kvp_lease {
	uint32_t idx;      /* lease table slot */
	uint32_t gen;      /* its generation (release is idempotent) */
	uint64_t len;      /* value length */
	int tier;          /* KVP_TIER_DRAM or KVP_TIER_SSD when leased */
	uint64_t seg_off;  /* DRAM, one run: the value's offset in the segment
			    * (for RDMA registration); 0 otherwise */
};

/*
 * kvp_lease_acquire - pin key's value for ttl_ms (1 ms .. 1 hour) for a
 * reader that cannot take a hold (a remote reader, a NIC doing DMA): the
 * value is neither evicted nor moved nor its SSD segment reclaimed until
 * the lease is released or expires; the agent's reaper frees expired
 * leases.  A lease outlives the holds of the process that took it, even
 * its death.  A lease counts against --max-pinned-per-client like a pin,
 * for this client handle, until it is released or expires (see
 * kvp__pinned_total).  Returns 0 and *out, -ENOENT, -EBUSY (lease table
 * full, the value is being moved, this client's pinsets hold every hold
 * slot, or the lease would take this client past --max-pinned-per-client:
 * release a lease or a pinset), -EINVAL, -ENOMEM.
 */
KVP_INLINE int
kvp_lease_acquire(struct kvp_client *c, const void *key, uint32_t klen, uint32_t ttl_ms,
		  struct kvp_lease *out)
{
	struct kvp_seg *s;
	uint64_t i = 0, len = 0, n, k, loc, cap, expiry;
	int h;

	if (!c || !kvp__key_ok(key, klen) || !out || ttl_ms == 0 || ttl_ms > 3600000)
		return -EINVAL;
	s = &c->seg;
	n = s->g.g_max_leases;
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
		struct kvp__lease_rec *nl = realloc(c->leases, nc * sizeof(*nl));

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
		uint32_t gen = KVP_LS_GEN(w) + 1;

		if (KVP_LS_STATE(w) != KVP_LS_FREE ||
		    /* full CAS: the lease slot is ours to fill in; the word
		     * names us, so the reaper can free it if we die now */
		    !kvp_cas(&ls->ls_state, w, KVP_LS_WORD(gen, c->slot + 1, KVP_LS_RESERVED)))
			continue;
		kvp_crashpoint(C_LEASE_RESERVED);
		kvp_store_relaxed(&ls->ls_slot, i);       /* relaxed: published below */
		kvp_store_relaxed(&ls->ls_owner, c->slot + 1);
		expiry = kvp_now_ns(CLOCK_MONOTONIC) + (uint64_t)ttl_ms * 1000000ull;
		kvp_store_relaxed(&ls->ls_expiry, expiry);
		/* release: the fields before LIVE; the agent's hold scan
		 * acquires it; our hold is still up, so the value is safe
		 * until the lease is visible */
		kvp_store_release(&ls->ls_state, KVP_LS_WORD(gen, 0, KVP_LS_LIVE));
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
		    kvp_load_relaxed(&s->entries[i].e_run) * s->g.g_dram_unit >= len)
			out->seg_off = s->L.off[KVP_R_ARENA] +
				       KVP_LOC_VAL(loc) * s->g.g_dram_unit;
		/* counted against the pinned-bytes cap until released or
		 * expired (room in the list was made above) */
		c->leases[c->nleases++] = (struct kvp__lease_rec){ (uint32_t)j, gen, len, expiry };
		c->leased_bytes += len;
		kvp__drop(c, h);
		return 0;
	}
	kvp__drop(c, h);
	return -EBUSY;
}

/* kvp_lease_release - end a lease now.  Releasing twice, or after it
 * expired and was reclaimed, is harmless.  Returns 0 or -EINVAL. */
KVP_INLINE int
kvp_lease_release(struct kvp_client *c, const struct kvp_lease *l)
{
	struct kvp_lease_slot *ls;

	if (!c || !l || l->idx >= c->seg.g.g_max_leases)
		return -EINVAL;
	ls = &c->seg.leases[l->idx];
	/* full CAS: only the lease of this generation; pairs with the
	 * agent's acquire in its hold scan */
	kvp_cas(&ls->ls_state, KVP_LS_WORD(l->gen, 0, KVP_LS_LIVE),
		KVP_LS_WORD(l->gen + 1, 0, KVP_LS_FREE));
	kvp__pinned_total(c); /* it no longer counts against the cap */
	return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_H */
