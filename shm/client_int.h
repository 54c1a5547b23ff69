/* SPDX-License-Identifier: MIT */
/*
 * client_int.h - the client's implementation, inline (kvpool.h is its
 * contract and documents every call; this file and the ones it includes
 * say how).  By concern:
 *   shm/client_int.h        private state (struct kvp_client), counters,
 *                           mapping the segment, open/close, holds, copies
 *   shm/client_write_int.h  put, delete, batch put; waking the evictor
 *   shm/client_read_int.h   the read engine: DRAM hits inline, SSD reads
 *                           through the agent's request ring; probes
 *   shm/client_pin_int.h    pinsets (lookup-and-pin) and leases
 *   shm/client_stat_int.h   kvp_stat, namespace counters
 *   shm/client_dev_int.h    the GPU endpoints
 *   shm/client_remote_int.h the remote step (a layer the read path, the
 *                           probes and the pin call): the mailbox call
 * Public calls are KVP_API (kvpool.h: static inline, or exported by
 * ffi.c); everything else is KVP_INLINE (static inline, never exported)
 * and named kvp__* unless a tool uses it too (kvp_seg_map).  Compiles as
 * C11 and as C++17 (shm/kvp_cdefs.h says what that rules out).
 *
 * Included by kvpool.h (never on its own: it needs kvpool.h's types).
 */
#ifndef KVP_CLIENT_INT_H
#define KVP_CLIENT_INT_H

#ifndef KVPOOL_H
#error "include kvpool.h, not shm/client_int.h"
#endif

#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "shm/kvp_ctr.h"
#include "tiers/kvp_dram.h"
#include "shm/kvp_slot.h"
#include "shm/kvp_ring.h"
#include "shm/kvp_span.h"
#include "shm/kvp_lease.h"
#include "shm/kvp_rbox.h"
#include "shm/kvp_wake.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

/* A lease this client took and has not released (private; see
 * kvp_lease_acquire and the pinned-bytes cap). */
struct kvp__lease_rec {
	uint32_t idx, gen; /* lease slot and its generation */
	uint64_t len;      /* value bytes it pins */
	uint64_t expiry;   /* CLOCK_MONOTONIC ns */
};

/* Private client state (not shared). */
struct kvp_client {
	struct kvp_seg seg;
	uint32_t slot;      /* client slot index */
	uint64_t slot_word; /* our cs_state value while LIVE */
	uint64_t nsid;      /* namespace id (kvp_ns_id of ns) */
	/* free hold slots, lowest first (bit k of word k/64: slot k free), so
	 * the high-water mark the agent scans to falls back when pins go */
	uint64_t *hold_map;
	uint32_t hold_low; /* no free slot in the words below this one */
	uint32_t hold_nfree;
	uint32_t hold_hwm;
	uint64_t put_wait_ns;  /* how long a put waits for the evictor */
	uint64_t pinned_bytes; /* held by this client's pinsets */
	uint64_t leased_bytes; /* pinned by its live leases (leases[]) */
	struct kvp__lease_rec *leases;
	uint32_t nleases, cap_leases;
	uint64_t agent_grace_ns; /* SSD reads wait this long for a dead agent */
	uint32_t call_ssd;       /* keys of the current read call sent to SSD */
	uint64_t tick;           /* the e_use tick of the call in progress */
	struct kvp__dev *dev;    /* device calls' state (client_dev_int.h) */
	unsigned remote_flags;   /* kvp_remote: KVP_REMOTE_* */
	uint64_t remote_wait_ns; /* a remote call's bound (KVP_REMOTE_WAIT_MS) */
	uint32_t ns_row1; /* its namespace's counter row + 1 (0: not yet) */
	char ns[KVP_NS_NAME_MAX + 1];
};

#define KVP_PUT_WAIT_NS_DEFAULT (50ull * 1000 * 1000)
#define KVP_RESOLVE_DEAD_NS (8ull * 1000 * 1000) /* -ENOTCONN after (default) */
#define KVP_CHECK_WAIT_NS (1000ull * 1000 * 1000) /* CHECK: -EBUSY after */
#define KVP_RESOLVE_SLICE_NS (2ull * 1000 * 1000) /* agent check period */
/* a remote call's backstop (KVP_REMOTE_WAIT_MS; client_remote_int.h) */
#define KVP_REMOTE_WAIT_NS_DEFAULT (60ull * 1000 * 1000 * 1000)
#define KVP_RESOLVE_BUSY_NS (30ull * 1000 * 1000 * 1000) /* give up on BUSY */

KVP_API const char *
kvp_strerror(int status)
{
	switch (status) {
#define KVP__STATUS_TEXT(name, value, text) \
	case (value):                       \
		return text;
		KVP_STATUSES(KVP__STATUS_TEXT)
#undef KVP__STATUS_TEXT
	default:
		return "unknown status";
	}
}

/* kvp_status_name (kvpool.h) */
KVP_API const char *
kvp_status_name(int status)
{
	switch (status) {
#define KVP__STATUS_NAME(name, value, text) \
	case (value):                       \
		return #name;
		KVP_STATUSES(KVP__STATUS_NAME)
#undef KVP__STATUS_NAME
	default:
		return NULL;
	}
}

/* kvp_statuses (kvpool.h) */
KVP_API unsigned
kvp_statuses(int *out, unsigned cap)
{
	static const int all[] = {
#define KVP__STATUS_VALUE(name, value, text) (value),
		KVP_STATUSES(KVP__STATUS_VALUE)
#undef KVP__STATUS_VALUE
	};
	unsigned k, n = (unsigned)(sizeof(all) / sizeof(all[0]));

	for (k = 0; k < n && k < cap && out; k++)
		out[k] = all[k];
	return n;
}

/* kvp_version (kvpool.h) */
KVP_API const char *
kvp_version(int *major, int *minor, int *patch)
{
	if (major)
		*major = KVPOOL_VERSION_MAJOR;
	if (minor)
		*minor = KVPOOL_VERSION_MINOR;
	if (patch)
		*patch = KVPOOL_VERSION_PATCH;
	return KVPOOL_VERSION_STRING;
}

/* Our counter shard (shm/kvp_ctr.h: single writer, so no RMW). */
KVP_INLINE void
kvp__ctr(struct kvp_client *c, enum kvp_ctr k, uint64_t d)
{
	kvp_ctr_add(&c->seg.clients[c->slot], k, d);
}

/*
 * One call's latency into histogram h of our shard: t0 is the call's
 * first clock read (CLOCK_MONOTONIC), this is its second.
 */
KVP_INLINE void
kvp__hist(struct kvp_client *c, enum kvp_hist h, uint64_t t0)
{
	kvp_ctr_hist(&c->seg.clients[c->slot], h,
		     kvp_now_ns(CLOCK_MONOTONIC) - t0);
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
	return kvp_load_relaxed(&c->seg.clients[c->slot].cs_state) ==
			       c->slot_word ?
		       0 :
		       -ESTALE;
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
 * Map a pool's segment without claiming a client slot: the tools' entry
 * (the agent, the CLI, the tests), not part of the API of kvpool.h nor
 * exported by libkvpool.so (what it fills in, struct kvp_seg, is the
 * segment's layout, which changes with every ABI major).
 * 'writable' maps it read-write.  0, or -EINVAL (bad pool name),
 * -ENOTCONN (no segment: no agent ever started, or it was removed),
 * -EPROTO (ABI mismatch, or a damaged header), -EACCES (a segment this
 * process must not trust: another user's, or writable by everyone,
 * kvp_shm_trusted; or no permission), -ENOMEM (descriptors, address
 * space); what happened and what to do is in msg.
 */
KVP_INLINE int
kvp_seg_map(const char *pool, bool writable, struct kvp_seg *s, char *msg,
	    size_t cap)
{
	char name[KVP_POOL_NAME_MAX + 16];
	struct kvp_shm_header h;
	struct stat st;
	int rc;

	memset(s, 0, sizeof(*s));
	s->fd = -1;
	rc = kvp_shm_name(pool, name, sizeof(name));
	if (rc) {
		snprintf(msg, cap,
			 "bad pool name (use 1-63 of [A-Za-z0-9_.-])");
		return rc;
	}
	/* O_NONBLOCK: a FIFO squatting the name must not block the open (a
	 * regular file ignores the flag) */
	s->fd = kvp_shm_open_path(name,
				  (writable ? O_RDWR : O_RDONLY) | O_NONBLOCK,
				  s->path, sizeof(s->path));
	if (s->fd < 0) {
		rc = -s->fd;
		s->fd = -1;
		if (rc == ENOENT) {
			snprintf(msg, cap,
				 "no pool '%s' (no /dev/shm%s, nor on a "
				 "hugetlbfs mount): start the agent first: "
				 "kvpoold --pool %s",
				 pool, name, pool);
			return -ENOTCONN;
		}
		snprintf(msg, cap, "cannot open %s: %s%s", s->path,
			 strerror(rc),
			 rc == EACCES || rc == EPERM ?
				 " (run as the pool's owner, or "
				 "start the agent with --group)" :
				 "");
		/* one documented status each: permission, or a resource */
		return rc == EACCES || rc == EPERM ? -EACCES : -ENOMEM;
	}
	if (fstat(s->fd, &st) < 0) {
		rc = -errno;
		snprintf(msg, cap, "cannot stat %s: %s", s->path,
			 strerror(-rc));
		goto err_close;
	}
	rc = kvp_shm_trusted(&st, s->path, msg, cap);
	if (rc)
		goto err_close;
	if ((uint64_t)st.st_size < sizeof(h) ||
	    pread(s->fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		snprintf(msg, cap, "segment %s is truncated", s->path);
		rc = -EPROTO;
		goto err_close;
	}
	rc = kvp_shm_check_header(&h, msg, cap);
	if (rc)
		goto err_close;
	s->size = (uint64_t)st.st_size;
	s->base = (unsigned char *)mmap(NULL, s->size,
					PROT_READ | (writable ? PROT_WRITE : 0),
					MAP_SHARED, s->fd, 0);
	if ((void *)s->base == MAP_FAILED) {
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
 * One mapping per process and segment, shared by the client handles of
 * this program (of this translation unit: libkvpool.so, or each file that
 * includes kvpool.h): a thread's handle reuses the pages the others
 * mapped, so it takes no minor fault and adds no page tables for them
 * (per handle and GiB of arena touched with 4 KiB pages: 2 MiB of page
 * tables and 262,144 faults).  Only the mapping: each handle keeps its
 * own open file description, whose OFD lock is its liveness, so handles
 * of one process still see each other's locks (a shared OFD would judge
 * a live thread's handle dead: its locks are our own).  A forked child
 * maps anew (an entry records the pid that made it).
 *
 * ThreadSanitizer builds register mappings but never share them
 * (KVP_SHARE_MAPPINGS 0): TSan cannot see the agent's synchronization (it
 * is another process), so with one mapping every reuse of arena memory
 * the agent mediates (thread A's value evicted by the agent, its units
 * given to thread B's put) looks to it like a race between A and B.
 * Apart, each handle's accesses are at addresses of its own, as before
 * the mapping was shared; the registry and its lock are still checked.
 */
#ifndef KVP_SHARE_MAPPINGS
#if defined(__SANITIZE_THREAD__)
#define KVP_SHARE_MAPPINGS 0
#else
#define KVP_SHARE_MAPPINGS 1
#endif
#endif
struct kvp__map {
	dev_t dev;
	ino_t ino;
	pid_t pid;
	unsigned char *base;
	uint64_t size;
	uint32_t refs;
	struct kvp__devreg *reg; /* its registration with CUDA, or NULL */
	struct kvp__map *next;
};

/* shm/client_dev_int.h: undo the mapping's registration (before munmap) */
struct kvp__devreg;
KVP_INLINE void kvp__devreg_end(struct kvp__devreg *r);

struct kvp__maps {
	kvp_aword_t owner; /* pid holding the lock, 0 when free */
	struct kvp__map *head;
};

KVP_INLINE struct kvp__maps *
kvp__maps(void)
{
	static struct kvp__maps m; /* zero: free, empty */

	return &m;
}

/* The registry's lock: a word holding the locker's pid.  A thread of this
 * process that finds our pid there waits (yielding); any other pid is a
 * lock a parent held when it forked us, which no thread of ours will
 * release: taken over.  Open and close only. */
KVP_INLINE pid_t
kvp__maps_lock(struct kvp__maps *m)
{
	pid_t me = getpid();

	for (;;) {
		/* acquire: pairs with the release in kvp__maps_unlock */
		uint64_t o = kvp_load_acquire(&m->owner);

		/* full CAS: the registry is ours from here */
		if (o != (uint64_t)me && kvp_cas(&m->owner, o, (uint64_t)me))
			return me;
		if (o == (uint64_t)me)
			sched_yield();
	}
}

KVP_INLINE void
kvp__maps_unlock(struct kvp__maps *m)
{
	/* release: the registry's changes before the next locker's acquire */
	kvp_store_release(&m->owner, 0);
}

/* Share an existing mapping of s's segment (the same file, of the same
 * size, mapped by this process) in place of the one kvp_seg_map just
 * made, or register s's.  0, or a status of kvp_shm_bind (-EPROTO: the
 * header changed between the two maps), -ENOMEM. */
KVP_INLINE int
kvp__map_share(struct kvp_seg *s, char *msg, size_t cap)
{
	struct kvp__maps *m = kvp__maps();
	struct kvp__map *e;
	struct stat st;
	pid_t me;

	if (fstat(s->fd, &st) < 0)
		return -ENOMEM;
	me = kvp__maps_lock(m);
	for (e = KVP_SHARE_MAPPINGS ? m->head : NULL; e; e = e->next)
		if (e->pid == me && e->dev == st.st_dev &&
		    e->ino == st.st_ino && e->size == s->size)
			break;
	if (e) {
		e->refs++;
		kvp__maps_unlock(m);
		munmap(s->base, s->size);
		s->base = e->base;
		s->hdr = (struct kvp_shm_header *)s->base;
		return kvp_shm_bind(s, msg, cap);
	}
	e = (struct kvp__map *)calloc(1, sizeof(*e));
	if (e) {
		e->dev = st.st_dev;
		e->ino = st.st_ino;
		e->pid = me;
		e->base = s->base;
		e->size = s->size;
		e->refs = 1;
		e->next = m->head;
		m->head = e;
	}
	kvp__maps_unlock(m);
	return e ? 0 : -ENOMEM;
}

/* Close s's descriptor (its locks go with it) and drop its share of the
 * mapping; the last share unmaps.  A mapping not in the registry (a
 * forked child's inherited one, a share that failed) is unmapped as
 * kvp_seg_map made it. */
KVP_INLINE void
kvp__map_release(struct kvp_seg *s)
{
	struct kvp__maps *m = kvp__maps();
	struct kvp__map **pp, *e;
	bool last;
	pid_t me;

	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	if (!s->base)
		return;
	me = kvp__maps_lock(m);
	for (pp = &m->head; (e = *pp); pp = &e->next)
		if (e->pid == me && e->base == s->base)
			break;
	last = !e || --e->refs == 0; /* decided under the lock */
	if (e && last)
		*pp = e->next; /* unlinked: ours alone from here */
	kvp__maps_unlock(m);
	if (e && last)
		kvp__devreg_end(e->reg); /* its DMA registration first */
	if (last)
		munmap(s->base, s->size);
	free(e && last ? e : NULL);
	s->base = NULL;
}

/* kvp_open (kvpool.h): map the segment, claim a free client slot (its OFD
 * lock first, then a CAS on its word), fill it in, reset our ring. */
KVP_INLINE uint64_t kvp__rbox_reset(struct kvp_client *c);

KVP_API int
kvp_open(const char *pool, const char *ns, struct kvp_client **out)
{
	struct kvp_client *c;
	char msg[512];
	uint32_t i, n;
	int rc;

	if (!out || !ns || !*ns || strlen(ns) > KVP_NS_NAME_MAX)
		return -EINVAL;
	*out = NULL;
	c = (struct kvp_client *)calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	rc = kvp_seg_map(pool ? pool : "default", true, &c->seg, msg,
			 sizeof(msg));
	if (rc) {
		if (rc == -EPROTO || rc == -EACCES || getenv("KVP_VERBOSE"))
			fprintf(stderr, "kvpool: %s\n", msg);
		goto err_free;
	}
	rc = kvp__map_share(&c->seg, msg, sizeof(msg));
	if (rc) {
		if (rc == -EPROTO)
			fprintf(stderr, "kvpool: %s\n", msg);
		goto err_unmap;
	}
	n = c->seg.g.g_max_clients;
	for (i = 0; i < n; i++) {
		struct kvp_client_slot *cs = &c->seg.clients[i];
		/* relaxed: a hint; the CAS decides */
		uint64_t w = kvp_load_relaxed(&cs->cs_state);

		if (KVP_CS_STATE(w) != KVP_CS_FREE)
			continue;
		if (kvp_shm_lock_take(c->seg.fd, KVP_LOCK_CLIENT0 + (off_t)i))
			continue; /* a live process still has this slot */
		/* the slot is ours; its fields are written below */
		if (kvp_slot_claim(cs, w, &c->slot_word)) {
			c->slot = i;
			kvp_crashpoint(C_OPEN_CLAIMED);
			break;
		}
		{
			struct flock fl;

			memset(&fl, 0, sizeof(fl));
			fl.l_type = F_UNLCK;
			fl.l_whence = SEEK_SET;
			fl.l_start = KVP_LOCK_CLIENT0 + (off_t)i;
			fl.l_len = 1;
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
		c->nsid = kvp_ns_id(ns);
		/* our name to the allocator lock (shm/kvp_shm.h) */
		kvp_dram_claim_bind(&c->seg, c->slot + 1);
		c->hold_map = (uint64_t *)calloc(
			(c->seg.g.g_holds_per_client + 63u) / 64u,
			sizeof(uint64_t));
		if (!c->hold_map) {
			rc = -ENOMEM;
			goto err_slot;
		}
		for (k = 0; k < c->seg.g.g_holds_per_client; k++)
			c->hold_map[k / 64u] |= 1ull << (k % 64u);
		c->hold_low = 0;
		c->hold_nfree = c->seg.g.g_holds_per_client;
		kvp_slot_identity_set(cs, (uint64_t)getpid(),
				      kvp_proc_start_time((long)getpid()));
		kvp_slot_describe(cs, kvp_now_ns(CLOCK_REALTIME), c->nsid, ns);
		/* no unit of the index count in hand (a FREE slot's word
		 * is IDLE already, unless someone wrote garbage there) */
		kvp_ix_count_say_own(cs, KVP_IXR_IDLE);
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
		struct kvp_req *ring = kvp_ring_of(&c->seg, c->slot);
		uint32_t k;

		for (k = 0; k < c->seg.g.g_ring_entries; k++)
			kvp_ring_reset(&ring[k]);
	}
	c->remote_flags = KVP_REMOTE_GET;
	{
		/* KVP_REMOTE_WAIT_MS: how long a call waits for the remote
		 * tier's answer (the agent bounds its own work; this is a
		 * backstop) */
		const char *e = getenv("KVP_REMOTE_WAIT_MS");
		c->remote_wait_ns = e ? strtoull(e, NULL, 10) * 1000000ull :
					KVP_REMOTE_WAIT_NS_DEFAULT;
	}
	if (c->seg.cluster)
		kvp__rbox_reset(c); /* void whatever a previous owner left */
	{
		/* KVP_AGENT_GRACE_MS: how long an SSD read waits for an agent
		 * that went away (a restart within it is served); default 8 ms,
		 * so UNAVAILABLE comes back within 10 ms */
		const char *e = getenv("KVP_AGENT_GRACE_MS");
		c->agent_grace_ns = e ? strtoull(e, NULL, 10) * 1000000ull :
					KVP_RESOLVE_DEAD_NS;
	}
	{
		const char *e = getenv("KVP_PUT_WAIT_MS");
		c->put_wait_ns = e ? strtoull(e, NULL, 10) * 1000000ull :
				     KVP_PUT_WAIT_NS_DEFAULT;
	}
	*out = c;
	kvp_crashpoint(C_OPEN_DONE);
	return 0;

err_slot:
	/* give the slot back before dropping its lock */
	kvp_slot_giveback(&c->seg.clients[c->slot], c->slot_word);
err_unmap:
	kvp__map_release(&c->seg);
err_free:
	free(c);
	return rc;
}

KVP_INLINE void kvp__dev_close(struct kvp_client *c, bool live);

/* kvp_close (kvpool.h): holds, then counters, then the slot's FREE CAS
 * before the fd (our lock) goes. */
KVP_API void
kvp_close(struct kvp_client *c)
{
	struct kvp_client_slot *cs;

	if (!c)
		return;
	cs = &c->seg.clients[c->slot];
	/* device copies done before holds drop */
	kvp__dev_close(c, kvp__live(c) == 0);
	if (kvp__live(c) == 0) {
		kvp_slot_close_holds(&c->seg, c->slot, c->hold_hwm);
		kvp_crashpoint(C_CLOSE_HALF);
		kvp_ctr_retire(c->seg.hdr, cs);
		kvp_slot_identity_clear(cs);
		/* FREE before our lock drops (fd close) */
		kvp_slot_giveback(cs, c->slot_word);
	}
	kvp__map_release(&c->seg);
	free(c->hold_map);
	free(c->leases);
	free(c);
}

/* A use of slot i (a hit, a probe, a pin, a lease) at the call's tick
 * (index/kvp_index.h, kvp_ix_use_touch). */
KVP_INLINE void
kvp__touch(struct kvp_client *c, uint64_t i)
{
	kvp_ix_use_touch(&c->seg, i, c->tick);
}

/*
 * Give hold slot h (cleared, or never stored) back to the free map.  When
 * it was the highest in use, the high-water mark falls to the highest
 * slot still in use, so the agent's hold scans (evictor, reaper) stop
 * scanning the slots a large pinset used once.  Lowering the mark is safe:
 * every slot at or above it is clear (a hold taken later raises the mark
 * again before its fence, kvp__hold).
 */
KVP_INLINE void
kvp__hold_free(struct kvp_client *c, uint32_t h)
{
	uint32_t hwm = c->hold_hwm;

	c->hold_map[h / 64u] |= 1ull << (h % 64u);
	if (h / 64u < c->hold_low)
		c->hold_low = h / 64u;
	c->hold_nfree++;
	if (h + 1 != hwm)
		return;
	while (hwm && (c->hold_map[(hwm - 1) / 64u] >> ((hwm - 1) % 64u) & 1))
		hwm--;
	c->hold_hwm = hwm;
	/* every slot at or above hwm is clear (shm/kvp_slot.h, S3) */
	kvp_slot_hwm_lower(&c->seg, c->slot, hwm);
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
	while (!c->hold_map[c->hold_low])
		c->hold_low++;
	h = c->hold_low * 64u +
	    (uint32_t)__builtin_ctzll(c->hold_map[c->hold_low]);
	c->hold_map[c->hold_low] &= c->hold_map[c->hold_low] - 1;
	c->hold_nfree--;
	if (h >= c->hold_hwm) {
		c->hold_hwm = h + 1;
		/* before the hold's fence (shm/kvp_slot.h, S3) */
		kvp_slot_hwm_raise(&c->seg, c->slot, c->hold_hwm);
	}
	/* the reader half of the hold protocol (index/kvp_index.h) */
	rc = kvp_slot_hold(&c->seg, c->slot, h, i, w, flags, KVP_CHECK_WAIT_NS,
			   &waits);
	if (waits)
		kvp__ctr(c, KVP_CTR_HOLD_RETRY, waits);
	if (rc) {
		kvp__hold_free(c, h);
		return rc;
	}
	return (int)h;
}

KVP_INLINE void
kvp__drop(struct kvp_client *c, int h)
{
	kvp_slot_unhold(&c->seg, c->slot, (uint32_t)h);
	kvp__hold_free(c, (uint32_t)h);
}

/*
 * Find and hold the READY value of key.  Returns the hold slot and fills
 * *idx, *len; -ENOENT on a miss.  Retries when the slot changes under us.
 */
KVP_INLINE int
kvp__lookup_hold_flags(struct kvp_client *c, const void *key, uint32_t klen,
		       uint64_t *idx, uint64_t *len, uint64_t flags)
{
	uint64_t hash = kvp_key_hash(c->nsid, key, klen), w;
	int tries, h = -ENOENT;

	for (tries = 0; tries < 8; tries++) {
		int64_t i = kvp_ix_find(&c->seg, c->nsid, hash, key, klen,
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
		kvp__touch(c, (uint64_t)i);
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
 * Visit bytes [off, off+n) of held value i run by run, in order:
 * visit(ctx, src, len) for each piece.  The location and every run of the
 * chain are checked against our own view of the arena first: a damaged
 * entry or page map (a hostile or buggy client) is reported and answers
 * -EIO (held but unreadable), never a read outside the arena.  0, -EIO,
 * or the first status visit returned.  (One walk for the memcpy of a hit
 * and the DMA of a device get, shm/client_dev_int.h.)
 */
KVP_INLINE int
kvp__value_walk(struct kvp_client *c, uint64_t i, uint64_t off, uint64_t n,
		int (*visit)(void *ctx, const unsigned char *src, uint64_t len),
		void *ctx)
{
	/* relaxed: stable while held */
	uint64_t loc = kvp_load_relaxed(&c->seg.entries[i].e_loc);
	uint64_t run = kvp_load_relaxed(&c->seg.entries[i].e_run);
	uint64_t unit = c->seg.g.g_dram_unit, np = c->seg.g.g_dram_pages,
		 hops = 0;
	uint64_t p = KVP_LOC_VAL(loc);
	uint32_t next = 0;
	int rc;

	/* one run covers the range (the usual case): no page-map read */
	if (p < np && run <= np - p && off <= run * unit &&
	    n <= run * unit - off)
		return visit(ctx, c->seg.arena + p * unit + off, n);
	while (n) {
		uint64_t rb = 0;
		unsigned char *src = p < np ? kvp_dram_run(&c->seg, (uint32_t)p,
							   &rb, &next) :
					      NULL;

		if (!src || ++hops > np) {
			kvp_dram_report_damage(&c->seg);
			return -EIO;
		}
		if (off < rb) {
			uint64_t k = rb - off < n ? rb - off : n;

			rc = visit(ctx, src + off, k);
			if (rc)
				return rc;
			n -= k;
			off = 0;
		} else {
			off -= rb;
		}
		if (!n)
			break;
		if (!next) {
			/* shorter than its length */
			kvp_dram_report_damage(&c->seg);
			return -EIO;
		}
		p = next - 1;
	}
	return 0;
}

KVP_INLINE int
kvp__copy_visit(void *ctx, const unsigned char *src, uint64_t len)
{
	unsigned char **d = (unsigned char **)ctx;

	memcpy(*d, src, len);
	*d += len;
	return 0;
}

/* Copy [off, off+n) of held value i into dst (kvp__value_walk): false
 * for a damaged entry (-EIO for the caller). */
KVP_INLINE bool
kvp__copy_out(struct kvp_client *c, uint64_t i, uint64_t off, void *dst,
	      uint64_t n)
{
	unsigned char *d = (unsigned char *)dst;

	return kvp__value_walk(c, i, off, n, kvp__copy_visit, &d) == 0;
}

#include "shm/client_write_int.h"
#include "shm/client_read_int.h"
#include "shm/client_pin_int.h"
#include "shm/client_stat_int.h"
#include "shm/client_dev_int.h"
#include "shm/client_remote_int.h"

#endif /* KVP_CLIENT_INT_H */
