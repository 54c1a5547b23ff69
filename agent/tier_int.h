/* SPDX-License-Identifier: MIT */
/*
 * tier_int.h - internals of the agent's tier thread, shared by the files
 * cut by role, in layers that call only downward (docs/design.md, "Who
 * owns what"; tests/structure/test_structure.sh checks the calls):
 *  1. operations in flight and the mechanisms under them: ops.c (ops,
 *     their completion callbacks, answers to their waiters), drives.c
 *     (the SSD stores; their owner's callbacks come in a table),
 *     staging.c (the staging arena and its spans), dram.c (the allocator
 *     from the agent's side: deferred frees, orphan sweep, repair),
 *     populate.c (the populated capacity the watermarks aim at),
 *     ghost.c (the keys evicted lately: the eviction policy's memory)
 *  2. moving data: move.c (demotion, promotion, tombstones), victim.c
 *     (the CHECK verdict: relocate or remove a victim), rings.c (the
 *     request-ring server)
 *  3. policy: evict.c (DRAM eviction), recover.c (recovery), giveback.c
 *     (SSD segment give-back and reinsertion)
 *  4. tier.c (the SSD tier's lifecycle), loop.c (the round, the thread,
 *     the stop flush), and the agent's other roles above them.
 * Tier thread only, except where a function says otherwise.
 */
#ifndef KVP_TIER_INT_H
#define KVP_TIER_INT_H

#include <pthread.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "agent/agent_int.h"
#include "index/index_int.h"
#include "tiers/kvp_ssd.h"

#define KVP_TIER_MAX_OPS 1024u
/* demotion writes in flight: as many values, and as many bytes, as keep
 * the device busy (the store batches them: one write per batch) */
#define KVP_TIER_MAX_DEMOTING 256u
/* Demotion bytes in flight (ops.c, kvp_tier_demote_full_agent): enough
 * to keep a device's writes at full speed (fio on the dev VM: 1 MiB
 * writes reach their bandwidth at queue depth 1-4), and no more, because
 * a read sent to the device waits behind every byte queued there before
 * it (rule 9).  While reads are active (one queued, on the device, or
 * answered less than KVP_TIER_READ_ACTIVE_NS ago) demotion keeps to one
 * batch's worth: reads first, demotion gets what is left. */
#define KVP_TIER_DEMOTE_BYTES (8ull << 20)
#define KVP_TIER_DEMOTE_YIELD_BYTES (2ull << 20)
#define KVP_TIER_READ_ACTIVE_NS 5000000ull
#define KVP_AGENT_OWNER 0xfffeu /* claims made by the agent (recovery) */

enum {
	TOP_FREE = 0,
	TOP_STAGE,
	TOP_PROMOTE,
	TOP_DEMOTE,
	TOP_TOMB
};

struct kvp_waiter {
	uint32_t client, ring;
	uint64_t word; /* the TAKEN word we answer with a CAS */
	uint64_t cgen; /* the client slot's state word when taken */
	uint64_t skip; /* where its bytes start in the span */
};

/*
 * An operation in flight.  Its waiters are requests answered when it
 * completes: readers (STAGE, PROMOTE), or strict deletes (DEMOTE: the
 * tombstone follows once the value's location is known; TOMB: answered
 * when the tombstone is durable).
 */
struct kvp_top;
/* An op's completion (the layer that started it: move.c, rings.c): called
 * by kvp_complete, which then frees the op and unbusies its slot. */
typedef void (*kvp_top_done_fn)(struct kvp_agent *a, struct kvp_top *op,
				const struct kvp_ssd_cqe *cq);

struct kvp_top {
	int kind;
	kvp_top_done_fn done; /* set by kvp_top_get; NULL: free */
	uint64_t slot, gen, vlen;
	uint64_t astart, alen; /* STAGE: value extent read (4 KiB aligned) */
	uint32_t head, nslots; /* STAGE: span */
	uint32_t first;        /* PROMOTE, DEMOTE: DRAM first unit */
	struct kvp_waiter *w;
	unsigned nw, capw;
	/* a read's stages (STAGE, PROMOTE; enum kvp_io_stage): taken,
	 * submitted, completion reaped (CLOCK_MONOTONIC ns) */
	uint64_t t_take, t_sub, t_cqe;
	struct iovec iov[64];
	unsigned niov;
};

/* Ops in flight on one index slot are counted in 16 bits: each op counts
 * once, so the count never exceeds KVP_TIER_MAX_OPS, however many reads
 * of one key clients post (a wrap would let the orphan sweep free DRAM a
 * promotion is still reading into). */
_Static_assert(KVP_TIER_MAX_OPS <= UINT16_MAX, "per-slot op count width");

/*
 * The drives (drives.c): one SSD store per --ssd-dir.  A location names its
 * drive in its top 4 bits (KVP_DRV_OF, shm/kvp_shm.h: the drive's id,
 * stable across restarts), the store's location in the rest.
 */

struct kvp_drives;
struct kvp_wait;

struct kvp_drive {
	struct kvp_drives *all;
	struct kvp_ssd *ssd; /* NULL: not serving (MISSING) */
	char dir[1024];
	unsigned id;     /* its "drive-id" file: its locations' top bits */
	unsigned state;  /* enum kvp_drive_state */
	uint64_t errors; /* I/O errors seen */
	uint64_t until;  /* FAILED, FULL: writes are tried again then */
	dev_t dev;       /* the directory it opened, to notice it gone */
	ino_t ino;
	uint64_t total;         /* --ssd-size, or its file system's size */
	struct kvp_ssd_usage u; /* as last published */
	int64_t recovered;      /* records recovered, or -errno */
	uint64_t recover_ns;
};

/* The drives' owner (tier.c hands it to kvp_drv_open_agent): what the
 * stores' callbacks reach, with the drive's id added to locations, so the
 * drives never call up the layers.  recover: a record found at start
 * (called on several threads at once: every drive recovers in parallel,
 * each on several threads; it must be safe for that);
 * prefetch: a hint of the next; giveback: a segment the store wants back
 * (0: give it, or a veto); reinserted: where a kept record went;
 * drop_drives: entries naming these drives (a bit per id) lose their SSD
 * copy, returns how many left the index. */
struct kvp_drv_owner {
	int (*recover)(void *arg, const struct kvp_ssd_rec *r);
	void (*prefetch)(void *arg, uint64_t hash, unsigned stage);
	int (*giveback)(void *arg, struct kvp_drive *d, uint32_t seg);
	void (*reinserted)(void *arg, uint64_t tag, uint64_t old_loc,
			   uint64_t new_loc);
	uint64_t (*drop_drives)(struct kvp_agent *a, unsigned ids);
};

struct kvp_drives {
	struct kvp_drive d[KVP_SSD_DRIVES]; /* in --ssd-dir order */
	struct kvp_drive *by_id[KVP_SSD_DRIVES];
	unsigned n;    /* drives configured */
	unsigned next; /* the drive the next poll starts with */
	int efd;       /* every store signals it on a completion; -1: none */
	struct kvp_wait *w; /* the tier thread's sleep (tiers/kvp_wait.h) */
	bool wait_failed;   /* none: the sleep is in slices */
	uint64_t checked_ns;
	struct kvp_agent *a;
	const struct kvp_drv_owner *own;
};

struct kvp_tier {
	/* the SSD drives (drives.c; kvp_drv_* calls mirror kvp_ssd_*) */
	struct kvp_drives *ssd;
	struct kvp_top ops[KVP_TIER_MAX_OPS];
	uint32_t freeops[KVP_TIER_MAX_OPS];
	uint32_t nfree;
	uint16_t *busy; /* per index slot: ops in flight on it */
	/* per index slot, a DELETED value's tombstone (enum kvp_tomb): none
	 * yet, queued (its op's completion names the slot), or written; the
	 * slot leaves the index only once it is written (I20) */
	uint8_t *tombed;
	unsigned demoting;
	uint64_t demoting_bytes; /* value bytes of those writes */
	/* after an SSD write error: drop, not demote */
	uint64_t write_fail_until;
	/* the store has no room yet (its oldest segment is in use): no
	 * demotion until then, nothing dropped; since when it has been so */
	uint64_t write_defer_until, write_defer_since;
	bool *wake;           /* per client: answered this round */
	uint64_t total_bytes; /* --ssd-size, or the file system's size */
	struct kvp_tomb_later *later; /* tombstones the store could not take */
	size_t nlater, caplater;
	uint64_t published_ns; /* last SSD usage published to the header */
	/* the drives' pacer counts already added to h_actr (tier.c) */
	uint64_t pacer_seen[3];
	/* per index slot: the tick (kvp_tick_now) its SSD record was written
	 * (demotion, reinsertion) or found (recovery): a use word later than
	 * that is a read since it was written (reclaim keeps the record) */
	uint32_t *wtick;
	/* entries whose records a reclaim keeps, under CHECK until the store
	 * says where they went (giveback.c); reset when none is pending */
	struct kvp_keep *keep;
	unsigned nkeep, capkeep, keep_pending;
	/* the read stages (ops.c): when this round took its requests; reads
	 * queued but not yet submitted (op indexes); completion times of
	 * reads answered but whose clients are not yet woken; reads on the
	 * devices now */
	uint64_t t_take;
	uint32_t unsub[KVP_TIER_MAX_OPS];
	unsigned nunsub;
	uint64_t unwoken[KVP_TIER_MAX_OPS];
	unsigned nunwoken;
	unsigned reading;
	/* the staging slot after the last span allocated (next fit) */
	uint32_t stage_hint;
	uint64_t read_seen_ns; /* a read last queued or completed */
	bool yielded;          /* demotion held back for reads this round */
};

/* An entry a reclaim keeps (giveback.c): its slot, its state word under
 * CHECK, its value's length. */
struct kvp_keep {
	uint64_t slot, word, vlen;
};

/* drives.c */
int kvp_drv_open_agent(struct kvp_agent *a, const struct kvp_drv_owner *own,
		       struct kvp_drives **out);
void kvp_drv_close_agent(struct kvp_drives *dv);
int64_t kvp_drv_recovered_agent(const struct kvp_drives *dv);
bool kvp_drv_writable_agent(const struct kvp_drives *dv);
int kvp_drv_write_agent(struct kvp_drives *dv, uint64_t tag, uint64_t ns,
			const void *key, uint32_t klen, const struct iovec *src,
			unsigned nsrc, unsigned flags);
int kvp_drv_tombstone_agent(struct kvp_drives *dv, uint64_t tag, uint64_t ns,
			    const void *key, uint32_t klen, uint64_t target);
int kvp_drv_read_agent(struct kvp_drives *dv, uint64_t tag,
		       const struct kvp_ssd_read *rd);
void kvp_drv_submit_agent(struct kvp_drives *dv);
unsigned kvp_drv_outstanding_agent(const struct kvp_drives *dv);
/* the write pacer's counts, summed over the drives open now: write
 * operations sent, pieces cut, writes held back for a read */
void kvp_drv_pacer_agent(struct kvp_drives *dv, uint64_t out[3]);
int kvp_drv_poll_agent(struct kvp_drives *dv, struct kvp_ssd_cqe *cq,
		       unsigned max, int timeout_ms);
int kvp_drv_wait_agent(struct kvp_drives *dv, const kvp_aint_t *word,
		       unsigned val, int timeout_ms);
int kvp_drv_eventfd_agent(struct kvp_drives *dv);
int kvp_drv_record_dead_agent(struct kvp_drives *dv, uint64_t loc,
			      uint64_t vlen);
uint64_t kvp_drv_max_value_agent(const struct kvp_drives *dv);
bool kvp_drv_has_segment_agent(const struct kvp_drives *dv, uint64_t loc);
void kvp_drv_register_buffers_agent(struct kvp_drives *dv,
				    const struct iovec *reg, unsigned n);
void kvp_drv_usage_agent(struct kvp_drives *dv, struct kvp_ssd_usage *u,
			 uint64_t *total);
int kvp_drv_segment_foreach_agent(struct kvp_drive *d, uint32_t seg,
				  kvp_ssd_rec_fn cb, void *arg);
int kvp_drv_reinsert_agent(struct kvp_drive *d, const struct kvp_ssd_rec *r,
			   uint64_t tag);

/* A request being answered, and the call it belongs to (rings.c). */
struct kvp_callstate;

/* ops.c: operations in flight, completions, answers */
struct kvp_top *kvp_top_get(struct kvp_tier *t, int kind, kvp_top_done_fn done,
			    uint64_t *tag);
void kvp_top_put(struct kvp_tier *t, struct kvp_top *op);
int kvp_top_add_waiter(struct kvp_top *op, const struct kvp_waiter *w);
unsigned kvp_runs_iov(struct kvp_seg *s, uint32_t first, uint64_t bytes,
		      struct iovec *iov, unsigned max);
void kvp_complete(struct kvp_agent *a, const struct kvp_ssd_cqe *cq);
void kvp_answer(struct kvp_agent *a, const struct kvp_waiter *w, int64_t res,
		uint64_t where, int span_head);
void kvp_wake_clients(struct kvp_agent *a);
/* the read stages: a request taken (its post time, the client's), a
 * read queued (after kvp_drv_read_agent succeeded), the submit that
 * sends every queued I/O to the devices */
void kvp_io_taken(struct kvp_agent *a, uint64_t posted);
void kvp_io_read_queued(struct kvp_tier *t, struct kvp_top *op);
void kvp_tier_submit(struct kvp_agent *a);
/* the demotion bytes that may be in flight now (reads first) */
uint64_t kvp_tier_demote_budget(struct kvp_tier *t);

/* tier.c: the SSD tier's lifecycle */
void kvp_tier_publish(struct kvp_agent *a);

/* staging.c */
bool kvp_span_free_if_unheld(struct kvp_seg *s, uint32_t head,
			     bool count_expired);
uint32_t kvp_staging_find(struct kvp_seg *s, unsigned need, uint32_t *hint);
int64_t kvp_staging_alloc_agent(struct kvp_seg *s, uint32_t *hint,
				unsigned need, uint64_t slot, uint64_t astart,
				uint64_t extent, uint32_t client);
void kvp_staging_abort_agent(struct kvp_seg *s, uint32_t head, unsigned need,
			     uint32_t client);
void kvp_staging_account(struct kvp_seg *s, unsigned need);
uint64_t kvp_staging_reconcile(struct kvp_seg *s);

/* rings.c */
unsigned kvp_serve_rings(struct kvp_agent *a);

/* move.c */
/* t->tombed[slot]: the tombstone of a DELETED slot's SSD copy */
enum kvp_tomb {
	KVP_TOMB_NONE = 0, /* not queued (or the slot has no SSD copy) */
	KVP_TOMB_QUEUED,   /* a TOMB op in flight names the slot */
	KVP_TOMB_WRITTEN /* on disk (or its drive is gone): may be forgotten */
};
/* Ops kept for reads: a tombstone nobody waits for is queued only while
 * more than this many are free (a mass delete must not starve gets). */
#define KVP_TOMB_OPS_RESERVE 64u
uint64_t kvp_entry_key(const struct kvp_entry *e, unsigned char key[256]);
void kvp_read_identity(const struct kvp_entry *e, struct kvp_ssd_read *rd);
int kvp_tomb_queue(struct kvp_agent *a, uint64_t slot, uint64_t target,
		   const struct kvp_waiter *w, unsigned nw);
struct kvp_top *kvp_demote_in_flight(struct kvp_tier *t, uint64_t slot);
struct kvp_top *kvp_tomb_in_flight(struct kvp_tier *t, uint64_t slot);
size_t kvp_tomb_retry_agent(struct kvp_agent *a);
/* Owe a tombstone for (ns, key) naming the record at target: written by
 * the next rounds (kvp_tomb_retry_agent) or the stop flush. */
void kvp_tomb_later(struct kvp_tier *t, uint64_t ns, const unsigned char *key,
		    uint32_t klen, uint64_t target);
bool kvp_promote_start_agent(struct kvp_agent *a, const struct kvp_waiter *w,
			     uint64_t slot, uint64_t gen, uint64_t vlen,
			     uint64_t ssd);

/* recover.c */
int kvp_recover_cb(void *arg, const struct kvp_ssd_rec *r);
void kvp_recover_prefetch(void *arg, uint64_t hash, unsigned stage);
int64_t kvp_recover_find(struct kvp_seg *s, const struct kvp_ssd_rec *r,
			 uint64_t hash, uint64_t *w);
void kvp_recover_lost_agent(struct kvp_agent *a);
uint64_t kvp_recover_drop_drives_agent(struct kvp_agent *a, unsigned ids);
void kvp_recover_in_flight_agent(struct kvp_agent *a);

/* giveback.c: a segment the store gives back, records it keeps */
int kvp_giveback_segment_cb(void *arg, struct kvp_drive *d, uint32_t seg);
void kvp_reinsert_cb(void *arg, uint64_t tag, uint64_t old_loc,
		     uint64_t new_loc);

/* ghost.c: keys evicted lately (tier thread) */
uint64_t kvp_ghost_key_agent(const struct kvp_agent *a, uint64_t i);
/* the next kvp_ghost_evicted_agent's value was judged by evict.c's order
 * and left under a weight (never used since its put) or not; one not told
 * (an index bucket's, a give-back's) counts for no weight */
void kvp_ghost_weighed_agent(struct kvp_agent *a, bool weighted);
void kvp_ghost_unweighed_agent(struct kvp_agent *a);
void kvp_ghost_evicted_agent(struct kvp_agent *a, uint64_t i, uint64_t h);
/* a READY slot seen by a scan: whether its value is a readmission, and of
 * a key that left under a weight or not; *ago: evictions since it left */
enum kvp_ghost_back {
	KVP_GHOST_NONE = 0,
	KVP_GHOST_BACK_UNJUDGED,
	KVP_GHOST_BACK_PLAIN,
	KVP_GHOST_BACK_WEIGHTED
};
enum kvp_ghost_back kvp_ghost_seen_agent(struct kvp_agent *a, uint64_t i,
					 uint32_t gen, uint64_t *ago);
/* the ghost set's length in keys (0: off) */
uint64_t kvp_ghost_length_agent(const struct kvp_agent *a);

/* distinct.c: distinct keys a window, the hit-rate ceiling (tier thread) */
#define KVP_HLL_P 14 /* 2^14 registers: 0.81% standard error */
struct kvp_hll {
	uint8_t reg[1u << KVP_HLL_P];
};
void kvp_hll_clear(struct kvp_hll *h);
void kvp_hll_add(struct kvp_hll *h, uint64_t key);
double kvp_hll_estimate(const struct kvp_hll *h);
struct kvp_distinct {
	struct kvp_hll hll;
	uint64_t end_ns;   /* the window's end (CLOCK_MONOTONIC; 0: none) */
	uint64_t fed_tick; /* the start of the last whole scan */
	uint64_t lookups0, stores0; /* the counters at the window's start */
};
void kvp_distinct_seen_agent(struct kvp_agent *a, uint64_t i, uint64_t use);
void kvp_distinct_scanned_agent(struct kvp_agent *a, uint64_t start);
void kvp_distinct_round_agent(struct kvp_agent *a);
void kvp_distinct_free_agent(struct kvp_agent *a);
bool kvp_ghost_readmitted_agent(const struct kvp_agent *a, uint64_t i,
				uint32_t gen);
void kvp_ghost_free_agent(struct kvp_agent *a);

/* victim.c: the verdict of the CHECK protocol on one candidate */
void kvp__release_check(struct kvp_seg *s, const struct kvp_cand *c);
uint64_t kvp__remove_agent(struct kvp_agent *a, const struct kvp_cand *c,
			   enum kvp_actr why);

#endif /* KVP_TIER_INT_H */
