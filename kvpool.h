/* SPDX-License-Identifier: MIT */
/*
 * kvpool.h - the kvpool client API.  This file is the contract: the types
 * and every call, with its arguments, context and return codes.  The code
 * lives in internal headers it includes at its end (shm/client_int.h).
 *
 * A client maps the pool's shared segment and claims a client slot.  A
 * DRAM hit (lookup, hold, copy, drop) takes no lock, makes no syscall and
 * talks to no server.  The agent (kvpoold) owns the segment's lifecycle,
 * evicts, serves reads off SSD, and reaps what dead clients held.
 *
 * Three ways in, from C11 or C++17:
 *   header only  #include "kvpool.h" (-I the source tree; with -std=c11
 *                define _GNU_SOURCE first), link -latomic_ops -lpthread:
 *                every call is inline.
 *   -lkvpool     #define KVP_LINK_SHARED before the #include, link
 *                -lkvpool: this file alone (declarations; struct
 *                kvp_client and struct kvp_pinset stay opaque).
 *   FFI          dlopen("libkvpool.so.1"): Python ctypes and the like.
 * libkvpool.so.1 exports exactly the calls below, nothing else
 * (libkvpool.map, version nodes KVPOOL_1.0 .. 1.5; KVPOOL_VERSION_*, below,
 * and kvp_version()).  The library's major version
 * changes when a call's signature, struct kvp_op, struct kvp_lease or a
 * status's meaning does; a new call comes in a new version node.  The
 * segment's ABI is another matter: a client and an agent built from
 * different layouts meet at kvp_open, which answers -EPROTO.
 *
 * Threads: a struct kvp_client is used by one thread at a time (it holds
 * private state without locks).  Open one client per thread that needs
 * the pool (each is a separate client slot).  The clients of one process
 * share one mapping of the segment (libkvpool.so's clients, or those of
 * one file that includes this header): a thread's new client takes no
 * page fault and no page tables for pages another already mapped.  A pinset belongs to the
 * client that made it.  No call aborts, exits, or reports through errno.
 *
 * Caveats (what the pool assumes of the processes that use it):
 *   fork()     A client handle belongs to the process that opened it.  A
 *              forked child must neither use nor close a handle it
 *              inherited (its slot, holds and liveness lock are the
 *              parent's; closing it would drop the parent's holds): open
 *              its own.  The Python binding refuses (kvpool.Forked).
 *   PID namespaces  Every process of a pool (agent and clients) must see
 *              one PID namespace and one /dev/shm (or hugetlbfs mount):
 *              the reaper checks a client's pid and start time in /proc.
 *              Containers of one node share the host's (--pid=host,
 *              -v /dev/shm:/dev/shm), or the pool is theirs alone.
 *   /dev/shm size  The segment is a file in /dev/shm (tmpfs), sized at
 *              creation and filled as it is used: the agent refuses to
 *              create it where /dev/shm has no room for all of it, but
 *              other files filling /dev/shm later leave its pages without
 *              memory (a SIGBUS for whoever touches them): keep the room.
 *              A container's default 64 MiB /dev/shm is too small for any
 *              real pool.
 *   Huge pages  With a hugetlbfs mount whose pool has room for the whole
 *              segment the agent puts it there (--hugepages auto): each
 *              process then maps it with 2 MiB pages (no faults per 4 KiB,
 *              page tables 1/512).  Huge pages are reserved at creation;
 *              without room the agent falls back to /dev/shm (auto) or
 *              refuses (on).  Transparent huge pages for tmpfs are not
 *              relied on.
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

#include <errno.h> /* the statuses */
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The storage class of the calls: static inline (header only), extern
 * (KVP_LINK_SHARED), or exported from libkvpool.so (ffi.c defines it). */
#ifndef KVP_API
#ifdef KVP_LINK_SHARED
#define KVP_API extern
#else
#define KVP_API static inline
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The limits and tiers the calls speak of (defined as shm/kvp_shm.h
 * defines them: the compiler warns if the two ever differ). */
#define KVP_KEY_MAX 255u     /* a key is 1..KVP_KEY_MAX bytes */
#define KVP_NS_NAME_MAX 255u /* a namespace is 1..KVP_NS_NAME_MAX bytes */
#define KVP_TIER_DRAM 1ull   /* where a value lives: kvp_pinset_tier, */
#define KVP_TIER_SSD 2ull    /* struct kvp_lease.tier, kvp_batch_locate */
#define KVP_TIER_REMOTE 4ull /* kvp_batch_locate: another node holds it */
#define KVP_REMOTE_GET 1u    /* kvp_remote: gets fetch from other nodes */
#define KVP_REMOTE_PROBE 2u  /* kvp_remote: probes count other nodes */

struct kvp_client; /* a client handle: kvp_open, kvp_close */
struct kvp_pinset; /* the holds of one kvp_batch_lookup_pin */

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

/* A lease handle, and what a remote reader needs to know of the value. */
struct kvp_lease {
	uint32_t idx; /* lease table slot */
	uint32_t gen; /* its generation (release is idempotent) */
	uint64_t len; /* value length */
	int tier;     /* KVP_TIER_DRAM or KVP_TIER_SSD when leased */
	/* DRAM, one run: the value's offset in the segment (for RDMA
	 * registration); 0 otherwise */
	uint64_t seg_off;
};

/* ---- open / close ---- */

/*
 * kvp_open - attach to pool 'pool' (NULL: "default") in namespace 'ns'
 * (model + KV layout fingerprint, 1..KVP_NS_NAME_MAX bytes; keys of
 * different namespaces never meet); *out is the new client.  Claims a
 * client slot whose liveness the agent checks with the kernel.  Works
 * while the agent is down, as long as its segment exists.
 * Context: any thread; may block briefly (mmap, a few syscalls).  Reads
 * KVP_PUT_WAIT_MS, KVP_AGENT_GRACE_MS, KVP_POPULATE (README).
 * Returns 0, -ENOTCONN (no segment: start kvpoold), -EPROTO (ABI
 * mismatch; a message on stderr says what to do), -EUSERS (every client
 * slot is taken: close a client, or give the agent a larger
 * --max-clients; not -EBUSY, as waiting alone may never help), -EACCES
 * (a segment of another user or writable by everyone, or no permission;
 * message on stderr), -EINVAL (bad pool or namespace name, out NULL),
 * -ENOMEM.
 */
KVP_API int kvp_open(const char *pool, const char *ns, struct kvp_client **out);

/*
 * kvp_close - drop every hold, fold this client's counters into the
 * pool's totals, free its slot, unmap, and free c (NULL is harmless).
 * Free its pinsets first (kvp_pinset_free needs c; close drops their
 * holds, not their memory).  Its leases live on until released or expired.
 * Context: the client's thread; never fails, never waits.
 */
KVP_API void kvp_close(struct kvp_client *c);

/* ---- put ---- */

/*
 * kvp_put - store len bytes at val under key (klen bytes) if the key is
 * absent.  Exactly one of several concurrent putters of one key copies;
 * the others get -EEXIST at once.  The value is invisible until all its
 * bytes are in place.  len is 1..--max-value (0 is -EINVAL).
 * Context: the client's thread.  Copies into DRAM without a syscall when
 * there is room; when DRAM is full, or the index holds --index-entries
 * entries, or both candidate buckets of the key are full, it wakes the
 * agent and sleeps (futex) at most KVP_PUT_WAIT_MS (default 50 ms) for
 * each.  Never evicts, never does I/O, never blocks forever.
 * Returns 0, -EEXIST, -EBUSY (no room yet; or a damaged allocator the
 * agent is repairing), -ENOSPC (everything left is held, or the key's
 * buckets stayed full), -ENOTCONN (full and no agent to make room),
 * -E2BIG (over --max-value or the whole arena), -EINVAL (c, key, klen,
 * val or len), -ESTALE (this client was reaped).
 */
KVP_API int kvp_put(struct kvp_client *c, const void *key, uint32_t klen,
		    const void *val, uint64_t len);

/* ---- get ---- */

/*
 * kvp_get - copy the whole value of key into buf (cap bytes).  Returns
 * its size, or -EMSGSIZE (cap too small; nothing copied), -ENOENT,
 * -EINVAL, -EBUSY (the agent kept the entry under CHECK for 1 s, the
 * staging arena stayed full for 30 s, or this client's pinsets hold every
 * hold slot), and for SSD-resident values -EIO/-EBADMSG (failed), -E2BIG
 * (larger than the whole staging arena), -ENOTCONN (no agent, or it went
 * away for KVP_AGENT_GRACE_MS, default 8 ms).
 * Context: the client's thread.  A DRAM hit takes no lock and makes no
 * syscall; an SSD-resident value is read by the agent (promoted to DRAM
 * or staged) while the caller sleeps on a futex.
 */
KVP_API ssize_t kvp_get(struct kvp_client *c, const void *key, uint32_t klen,
			void *buf, uint64_t cap);

/*
 * kvp_get_range - copy bytes [off, off+len) of key's value, clipped at its
 * end, into buf.  Returns the number of bytes copied (0 when off is the
 * value's size), -EINVAL (also: off past the end), or the other statuses
 * of kvp_get but -EMSGSIZE.  Off SSD, only the 4 KiB-rounded extent is
 * read from the device.  Context: as kvp_get.
 */
KVP_API ssize_t kvp_get_range(struct kvp_client *c, const void *key,
			      uint32_t klen, uint64_t off, void *buf,
			      uint64_t len);

/* ---- probes: hold nothing, stage nothing, never block ---- */

/*
 * kvp_exists - 1 if key has a readable value (in any tier), 0 if not,
 * -EINVAL (bad key or client).  Writes nothing shared but this client's
 * counters.  Context: the client's thread; no lock, no syscall.
 */
KVP_API int kvp_exists(struct kvp_client *c, const void *key, uint32_t klen);

/*
 * kvp_batch_exists_prefix - how many of ops[0..n), from the start, are
 * present (the prefix of a prompt's pages the pool can serve).  Sets
 * ops[k].status (0 present, -ENOENT absent, -EINVAL bad key) for the keys
 * it examined, up to and including the first absent one.  Returns the
 * count, or -EINVAL (c NULL, ops NULL with n > 0).  Nothing it counted is
 * promised to stay: kvp_batch_lookup_pin promises.  Context: as
 * kvp_exists (one pass, prefetching ahead).
 */
KVP_API ssize_t kvp_batch_exists_prefix(struct kvp_client *c,
					struct kvp_op *ops, size_t n);

/* ---- delete ---- */

/*
 * kvp_delete - make key unreachable.  Readers holding it finish their
 * copies; the agent frees the bytes once the last hold drops.  With the
 * agent's --durability strict the agent does the delete and the call
 * returns once the value's tombstone is on disk, so the key does not come
 * back after a crash or a restart.  Takes no hold.
 * Context: the client's thread.  Relaxed: no sleep (it yields while the
 * agent checks the entry, at most 1 s); strict: sleeps until the agent
 * answers (after an fdatasync).
 * Returns 0, -ENOENT, -EBUSY (the agent kept it under CHECK for 1 s),
 * -EINVAL; strict only: -EIO (deleted, but its tombstone could not be
 * written: it may come back after a restart), -ENOTCONN (no agent:
 * nothing was deleted, or, if the agent died while answering, the key is
 * deleted but maybe not durably).
 */
KVP_API int kvp_delete(struct kvp_client *c, const void *key, uint32_t klen);

/* ---- batches: any number of keys (2,000 and more) in one call ---- */

/*
 * Both return the number of keys with status 0, or -EINVAL (c NULL, ops
 * NULL with n > 0), and answer each key in ops[k].status.
 *
 * kvp_batch_put - kvp_put of each ops[k] (key, klen; the value is buf,
 * len bytes), with kvp_put's statuses and context (each key may wait).
 *
 * kvp_batch_get - copy [off, off+len) of each key's value, clipped at its
 * end, into buf, and set len to the bytes copied (off 0 with a buffer of
 * at least the value's size reads it whole).  Statuses and context of
 * kvp_get_range.  SSD-resident keys are read by the agent together, in
 * parts as the staging arena and this client's hold slots allow; a key is
 * -EBUSY only when the arena stayed full for 30 s or this client's
 * pinsets hold every one of its hold slots.
 */
KVP_API ssize_t kvp_batch_put(struct kvp_client *c, struct kvp_op *ops,
			      size_t n);
/*
 * kvp_batch_put_chain - kvp_batch_put of consecutive pages of one prefix
 * chain: ops[k] is the page at depth depth0 + k (a prompt's first page is
 * at depth 0).  Eviction keeps what is cached prefix-closed: among pages
 * last used at the same time, the deeper ones leave first.  kvp_batch_put
 * is this call with depth0 = 0, so an engine that puts the pages after a
 * hit prefix of d pages should say depth0 = d.  Statuses and context of
 * kvp_batch_put.
 */
KVP_API ssize_t kvp_batch_put_chain(struct kvp_client *c, struct kvp_op *ops,
				    size_t n, uint32_t depth0);
KVP_API ssize_t kvp_batch_get(struct kvp_client *c, struct kvp_op *ops,
			      size_t n);

/* ---- lookup-and-pin: a probe that promises ---- */

/*
 * kvp_batch_lookup_pin - as kvp_batch_exists_prefix, and a hold on each
 * present key in the same pass: the count is a promise.  The pinned
 * values are neither evicted, nor freed, nor their SSD segment reclaimed
 * until kvp_pinset_release (or the process dies and the reaper releases
 * them); they may move between DRAM and SSD.  The prefix stops early (the
 * call still succeeds) where pinning the next key would take this client
 * past --max-pinned-per-client bytes (its pinsets and live leases
 * together) or where its --holds-per-client hold slots run out: that key
 * is -EBUSY.  Sets ops[k].status (0, -ENOENT, -EINVAL, -EBUSY, also for a
 * key the agent kept under CHECK for 1 s).  Returns the count pinned and
 * *out (free it with kvp_pinset_free), or -EINVAL (c, out, ops NULL with
 * n > 0, an n whose pinset size overflows), -ENOMEM.
 * Context: the client's thread; no I/O, no sleep (it yields while the
 * agent checks an entry, at most 1 s); allocates the pinset.
 */
KVP_API ssize_t kvp_batch_lookup_pin(struct kvp_client *c, struct kvp_op *ops,
				     size_t n, struct kvp_pinset **out);

/*
 * kvp_pinset_get - load pinned keys: ops[k] (k < n <= count) reads pinned
 * key k, [off, off+len) clipped at its end (len set to the bytes copied).
 * Never a MISS: an SSD-resident key is staged (in parts when the arena is
 * busy) or promoted.  Takes no new hold; the pins stay.  Returns the
 * number of keys with status 0, or -EINVAL (bad c or ps, ps released,
 * n > count).  Per key: 0, -EINVAL (no buffer, off past the end), and for
 * SSD-resident keys -EIO/-EBADMSG, -E2BIG, -ENOTCONN, -EBUSY (the staging
 * arena stayed full).  Context: as kvp_batch_get.
 */
KVP_API ssize_t kvp_pinset_get(struct kvp_client *c, struct kvp_pinset *ps,
			       struct kvp_op *ops, size_t n);

/* Keys pinned (the prefix kvp_batch_lookup_pin returned); 0 once released
 * or for NULL. */
KVP_API size_t kvp_pinset_count(const struct kvp_pinset *ps);
/* Value length of pinned key k, or 0 (k out of range, released, NULL). */
KVP_API uint64_t kvp_pinset_len(const struct kvp_pinset *ps, size_t k);
/* The tier pinned key k lives in now (KVP_TIER_DRAM or KVP_TIER_SSD; it
 * may move between tiers while pinned, never away), or -EINVAL. */
KVP_API int kvp_pinset_tier(struct kvp_client *c, const struct kvp_pinset *ps,
			    size_t k);

/*
 * kvp_pinset_release - drop every hold of ps (releasing twice is
 * harmless); kvp_pinset_free - release if needed, and free ps (NULL is
 * harmless).  Context: the client's thread that made ps; never fail,
 * never wait.
 */
KVP_API void kvp_pinset_release(struct kvp_client *c, struct kvp_pinset *ps);
KVP_API void kvp_pinset_free(struct kvp_client *c, struct kvp_pinset *ps);

/* ---- the remote tier: other nodes of a cluster (kvpoold --cluster) ---- */

/*
 * kvp_remote - what this client handle asks other nodes of the cluster
 * for, when its agent runs with --cluster: KVP_REMOTE_GET (the default)
 * makes kvp_get, kvp_get_range and kvp_batch_get fetch keys this pool
 * misses from the node that holds them (into this pool, in parts, like
 * SSD values; they are then ordinary entries here); KVP_REMOTE_PROBE
 * makes kvp_batch_exists_prefix count and kvp_batch_lookup_pin fetch and
 * pin the part of the prefix other nodes hold, and kvp_batch_locate
 * report it (off by default: a remote hit costs a network transfer).
 * Without a cluster, with the directory or every peer down, or the agent
 * gone, keys absent here stay -ENOENT and nothing waits.  Remote outcomes
 * per key: 0, -ENOENT (no node holds it, or the directory was stale),
 * -EIO (the transfer failed: a peer died, a lease ran out), -EBUSY (no
 * room here for it now), -E2BIG (larger than --max-value here or the
 * agent's receive buffer).  Returns the previous flags, or -EINVAL.
 * Context: the client's thread; never waits.
 */
KVP_API int kvp_remote(struct kvp_client *c, unsigned flags);

/*
 * kvp_batch_locate - where each key lives: tier[k] = KVP_TIER_DRAM,
 * KVP_TIER_SSD, KVP_TIER_REMOTE (another node holds it: only with
 * KVP_REMOTE_PROBE, one directory round trip for the batch), or 0
 * (absent, status -ENOENT; -EINVAL for a bad key).  A probe: holds
 * nothing, stages nothing, copies nothing.  Returns the keys present,
 * or -EINVAL (c NULL, ops or tier NULL with n > 0).
 * Context: the client's thread; no syscall unless it asks other nodes.
 */
KVP_API ssize_t kvp_batch_locate(struct kvp_client *c, struct kvp_op *ops,
				 size_t n, int *tier);

/* ---- leases: a pin for a reader that cannot hold (RDMA, a NIC) ---- */

/*
 * kvp_lease_acquire - pin key's value for ttl_ms (1 ms .. 1 hour): it is
 * neither evicted, nor moved, nor its SSD segment reclaimed until the
 * lease is released or expires (the agent frees expired leases).  A lease
 * outlives the process that took it, even its death.  It counts against
 * --max-pinned-per-client like a pin, for this client handle, until it is
 * released or expires.  *out says where the value is (struct kvp_lease).
 * Returns 0, -ENOENT, -EBUSY (lease table full, the value is being moved,
 * this client's pinsets hold every hold slot, or the lease would take
 * this client past --max-pinned-per-client: release a lease or a pinset),
 * -EINVAL, -ENOMEM.  Context: the client's thread; no I/O, no sleep (it
 * yields while the agent checks the entry, at most 1 s).
 */
KVP_API int kvp_lease_acquire(struct kvp_client *c, const void *key,
			      uint32_t klen, uint32_t ttl_ms,
			      struct kvp_lease *out);

/* kvp_lease_release - end a lease now.  Releasing twice, or after it
 * expired and was reclaimed, is harmless.  Returns 0 or -EINVAL.
 * Context: the client's thread; never waits. */
KVP_API int kvp_lease_release(struct kvp_client *c, const struct kvp_lease *l);

/* ---- statistics ---- */

/* What kvp_stat reports: the pool as this client sees it now, and the
 * calls of this client handle since kvp_open.  Every figure is a
 * statistic read without a lock (words others write may move meanwhile).
 * Later versions only append fields: a caller passes the size it knows. */
struct kvp_stat {
	uint64_t size;       /* bytes kvp_stat filled in (its struct) */
	uint64_t dram_bytes; /* the DRAM tier's bytes in service (populated) */
	uint64_t dram_total_bytes; /* ... once populated (--dram) */
	uint64_t dram_used_bytes;  /* allocated to values (whole units) */
	uint64_t entries;          /* index entries counted against the limit */
	uint64_t entries_max;      /* --index-entries */
	uint64_t ssd_bytes;        /* SSD capacity (0: no SSD tier) */
	uint64_t ssd_used_bytes;   /* SSD on-disk bytes in use */
	uint64_t max_value;        /* --max-value */
	uint32_t clients;          /* client slots in use (every process) */
	uint32_t max_clients;      /* --max-clients */
	int agent_up; /* 1: the agent is running (kernel-checked) */
	int pad_;
	/* this client handle's calls (kvp_put, kvp_get, kvp_exists and the
	 * batch calls count per key) */
	uint64_t puts, put_bytes;
	uint64_t gets, get_hits, get_misses, get_bytes;
	uint64_t exists, exists_hits;
	/* the pool's totals over every client, live and gone */
	uint64_t pool_puts, pool_gets, pool_get_hits;
};

/*
 * kvp_stat - fill the first size bytes of *out (at most sizeof(struct
 * kvp_stat) of this build; out->size says how many were meaningful).
 * Returns 0, -EINVAL (c or out NULL, size 0), -ESTALE (this client was
 * reaped).  Context: the client's thread; no lock, one fcntl (is the
 * agent up), a pass over the client slots (--max-clients).
 */
KVP_API int kvp_stat(struct kvp_client *c, struct kvp_stat *out, size_t size);

/* ---- an engine adapter's counters, per namespace ---- */

/*
 * What an engine adapter (kvpool.sglang, kvpool.vllm, or yours) counts for
 * its namespace, beside the pool's own per-call counters: the agent exports
 * each as kvpool_namespace_events_total{namespace="...",event="NAME"}
 * (kvpool stat --json: "namespaces").  The list is declared here once:
 * X(ENUM, "name").
 */
#define KVP_NS_EVENTS(X)                                                      \
	X(LOOKUP_KEYS, "lookup_keys")   /* keys (pages) asked about */        \
	X(HIT_KEYS, "hit_keys")         /* ... answered present */            \
	X(LOAD_PAGES, "load_pages")     /* pages loaded into the engine */    \
	X(LOAD_BYTES, "load_bytes")     /* ... their bytes */                 \
	X(LOAD_FAILED, "load_failed")   /* pages a load could not deliver */  \
	X(STORE_PAGES, "store_pages")   /* pages stored (or already there) */ \
	X(STORE_BYTES, "store_bytes")   /* ... their bytes */                 \
	X(STORE_FAILED, "store_failed") /* pages a store could not keep */    \
	X(REFUSED, "refused")           /* pool kinds or requests refused */  \
	X(ERRORS, "errors")             /* calls that failed on an error */
enum kvp_ns_event {
#define KVP__NSE_ENUM(e, name) KVP_NSE_##e,
	KVP_NS_EVENTS(KVP__NSE_ENUM)
#undef KVP__NSE_ENUM
	KVP_NSE__N
};

/*
 * kvp_ns_count - add n to event's counter of this client's namespace.  The
 * counters live in the segment (a row per namespace, KVP_NS_STAT_ROWS
 * rows; taken by the first count and kept while the segment lives), so
 * they outlive the process and never go down.  Returns 0, -EINVAL (c NULL,
 * event >= KVP_NSE__N), -ENOSPC (every row is taken by other namespaces:
 * nothing counted), -ESTALE (this client was reaped).  Context: the
 * client's thread; an atomic add (the first call looks its row up).
 */
KVP_API int kvp_ns_count(struct kvp_client *c, unsigned event, uint64_t n);
/* kvp_ns_event_name - event's name ("lookup_keys" ...), NULL past the end */
KVP_API const char *kvp_ns_event_name(unsigned event);

/* ---- GPU endpoints: values to and from device memory (CUDA) ---- */

/*
 * The CUDA runtime is loaded when a device call first needs it (dlopen of
 * $KVPOOL_CUDART, else libcudart.so.13, .12), never at link time: a
 * program using kvpool needs no CUDA to build or to run, and these calls
 * answer -ENOTSUP where no runtime loads and -ENODEV where it finds no
 * device or no driver.  "device" is the CUDA device ordinal the device
 * pointers belong to (the calls make it current and restore the caller's
 * after); "stream" a cudaStream_t of that device, or NULL for one of this
 * client's own (non-blocking) streams.
 *
 * Copies to the GPU come from pinned memory: the process registers the
 * pool's DRAM with the runtime (cudaHostRegister) in chunks, on a thread
 * of its own, starting at its first device call (or kvp_dev_register);
 * a value in a chunk not registered yet is copied through a small pinned
 * bounce buffer.  kvp_dev_info says how far registration has come.
 */
struct kvp_dev_copy; /* device copies in flight: their holds, completion */

/*
 * kvp_batch_get_dev - kvp_batch_get into device memory: ops[k].buf is a
 * device pointer of "device", and [off, off+len) of key k's value,
 * clipped at its end, is copied there; ops[k].len is set to the bytes
 * copied.  DRAM-resident values are held and copied by DMA straight from
 * the pool (one batched copy for the batch, cudaMemcpyBatchAsync where
 * the runtime has it); SSD-resident ones are read by the agent in parts,
 * as kvp_batch_get reads them, into a pinned buffer and copied from
 * there.  The copies are queued on stream and *out (never NULL when the
 * call returns >= 0) keeps the holds of the values being copied until
 * kvp_dev_wait: ops and the device buffers must stay until then.  Work
 * queued on stream after this call sees the bytes.  A batch larger than
 * this client's hold slots or the bounce buffer is served in parts (the
 * call waits for earlier parts' copies to finish before reusing them).
 * Statuses per key: those of kvp_batch_get, and -EIO for a copy the
 * runtime failed (set by kvp_dev_wait).  Returns the number of keys whose
 * copies were queued, or -EINVAL (c NULL, ops NULL with n > 0, out NULL,
 * a negative device), -ENOTSUP, -ENODEV, -EIO (the runtime refused the
 * stream or device), -ENOMEM.
 * Context: the client's thread; SSD-resident keys sleep as kvp_batch_get.
 */
KVP_API ssize_t kvp_batch_get_dev(struct kvp_client *c, int device,
				  void *stream, struct kvp_op *ops, size_t n,
				  struct kvp_dev_copy **out);

/*
 * kvp_dev_wait - wait until the copies of x are done (the stream's work
 * up to them), settle each key's status (-EIO where the runtime reported
 * a failed copy), drop x's holds and free x (NULL is harmless).  Returns
 * the number of keys with status 0, or -EIO (the runtime failed the
 * stream: every key not yet known good is -EIO).
 * kvp_dev_done - 1 if x's copies are done (kvp_dev_wait will not block),
 * 0 if not, -EIO if the runtime reports an error.
 * Context: the thread of the client that made x.
 */
KVP_API ssize_t kvp_dev_wait(struct kvp_client *c, struct kvp_dev_copy *x);
KVP_API int kvp_dev_done(struct kvp_client *c, struct kvp_dev_copy *x);

/*
 * kvp_batch_put_dev - kvp_batch_put from device memory: ops[k].buf is a
 * device pointer of "device" holding len bytes.  Each value is copied
 * (DMA, after the work already queued on stream) straight into its DRAM
 * runs and published once its bytes have landed, so the call returns
 * when every value is visible or has its status.  Statuses of
 * kvp_batch_put, and -EIO for a copy the runtime failed (nothing is
 * published then).  Returns the number of keys stored, or -EINVAL,
 * -ENOTSUP, -ENODEV, -EIO (as kvp_batch_get_dev).
 * Context: as kvp_batch_put; waits for its copies.
 */
KVP_API ssize_t kvp_batch_put_dev(struct kvp_client *c, int device,
				  void *stream, struct kvp_op *ops, size_t n);

/* kvp_get_dev / kvp_put_dev - one key (kvp_get / kvp_put statuses, and
 * those of the batch calls); kvp_get_dev waits for its copy. */
KVP_API ssize_t kvp_get_dev(struct kvp_client *c, int device, void *stream,
			    const void *key, uint32_t klen, void *dptr,
			    uint64_t cap);
KVP_API int kvp_put_dev(struct kvp_client *c, int device, void *stream,
			const void *key, uint32_t klen, const void *dptr,
			uint64_t len);

/*
 * kvp_dev_register - start registering the pool's DRAM with the CUDA
 * runtime in this process (device calls start it too) and wait up to
 * wait_ms for it to finish.  Returns 0 (all registered), -EINPROGRESS
 * (still going: copies meanwhile use the bounce buffer for the rest),
 * -ENOTSUP, -ENODEV, -EIO (the runtime refused a chunk: those chunks stay
 * on the bounce path; kvp_dev_info says how much).
 * Context: any thread of the client's; sleeps at most wait_ms.
 */
KVP_API int kvp_dev_register(struct kvp_client *c, uint32_t wait_ms);

/* What kvp_dev_info reports (appended to only, as struct kvp_stat). */
struct kvp_dev_info {
	uint64_t size;       /* bytes filled in */
	int status;          /* 0 ok, -ENOTSUP, -ENODEV: as the calls answer */
	int devices;         /* CUDA devices seen (0 without a runtime) */
	int runtime_version; /* cudaRuntimeGetVersion, e.g. 13000 */
	int driver_version;  /* cudaDriverGetVersion (0: no driver) */
	int batch_copy;      /* 1: cudaMemcpyBatchAsync in use */
	int reg_failed;      /* chunks the runtime refused to register */
	uint64_t reg_bytes;  /* the pool's DRAM registered in this process */
	uint64_t reg_total_bytes; /* ... of this much */
	/* this client handle's device copies since kvp_open */
	uint64_t h2d_keys, h2d_bytes, d2h_keys, d2h_bytes;
	uint64_t bounce_bytes; /* of those, through the pinned bounce buffer */
	uint64_t hbm_hits; /* gets served device to device from HBM copies */
};
KVP_API int kvp_dev_info(struct kvp_client *c, struct kvp_dev_info *out,
			 size_t size);

/* ---- statuses ---- */

/*
 * Every status of this API, declared once (the comment at the top says
 * which call answers which): X(NAME, value, "text"), the value 0 or a
 * negative errno.  kvp_strerror, kvp_status_name, enum kvp_status and the
 * Python binding's constants (kvpool.MISS ...) come from this list.
 */
#define KVP_STATUSES(X)                                                   \
	X(OK, 0, "OK")                                                    \
	X(MISS, -ENOENT, "MISS: no such key")                             \
	X(EXISTS, -EEXIST, "key exists (or is being put)")                \
	X(BUSY, -EBUSY, "BUSY: retry later")                              \
	X(TOO_LARGE, -E2BIG, "TOO_LARGE: value exceeds the pool's limit") \
	X(NOSPC, -ENOSPC, "NOSPC: pool full")                             \
	X(MSGSIZE, -EMSGSIZE, "buffer smaller than the value")            \
	X(FAILED, -EIO, "FAILED: I/O error")                              \
	X(BADMSG, -EBADMSG, "FAILED: bad checksum")                       \
	X(UNAVAILABLE, -ENOTCONN, "UNAVAILABLE: agent not running")       \
	X(STALE, -ESTALE, "STALE: client was reaped or agent restarted")  \
	X(PROTO, -EPROTO, "segment ABI mismatch")                         \
	X(USERS, -EUSERS, "all client slots taken (--max-clients)")       \
	X(ACCES, -EACCES, "permission denied (the pool's segment)")       \
	X(NOMEM, -ENOMEM, "out of memory")                                \
	X(INVAL, -EINVAL, "invalid argument")                             \
	X(NOTSUP, -ENOTSUP, "no CUDA runtime (device calls)")             \
	X(NODEV, -ENODEV, "no CUDA device or driver")                     \
	X(INPROGRESS, -EINPROGRESS, "in progress")                        \
	X(UCLEAN, -EUCLEAN, "pool structure damaged")
enum kvp_status {
#define KVP__STATUS_ENUM(name, value, text) KVP_S_##name = (value),
	KVP_STATUSES(KVP__STATUS_ENUM)
#undef KVP__STATUS_ENUM
};

/* kvp_strerror - a static, human name for a status of this API (the
 * table above; "unknown status" for anything else).  Any thread. */
KVP_API const char *kvp_strerror(int status);
/* kvp_status_name - "MISS", "BUSY" ... for a status of the table above;
 * NULL for anything else.  Any thread. */
KVP_API const char *kvp_status_name(int status);
/* kvp_statuses - the statuses of the table, in its order, into out[0 ..
 * cap) (out may be NULL when cap is 0); returns how many there are. */
KVP_API unsigned kvp_statuses(int *out, unsigned cap);

/* ---- version ---- */

/* This header's version: the library's (libkvpool.so.MAJOR.MINOR.PATCH).
 * MINOR grows with each set of new calls (the KVPOOL_1.MINOR symbol
 * version); MAJOR only if a call changes (never so far). */
#define KVPOOL_VERSION_MAJOR 1
#define KVPOOL_VERSION_MINOR 5
#define KVPOOL_VERSION_PATCH 0
#define KVPOOL_VERSION_STRING "1.5.0"
/* kvp_version - the version of the library in use (for libkvpool.so, the
 * one loaded, which may be newer than the header a program was built
 * with): the string, and each part where the pointers are not NULL. */
KVP_API const char *kvp_version(int *major, int *minor, int *patch);

#ifdef __cplusplus
}
#endif

/* The implementation: inline, unless the program links -lkvpool. */
#ifndef KVP_LINK_SHARED
#include "shm/client_int.h"
#endif

#endif /* KVPOOL_H */
