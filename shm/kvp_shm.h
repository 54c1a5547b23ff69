/* SPDX-License-Identifier: MIT */
/*
 * kvp_shm.h - the shared segment: its header, client table and the helpers
 * that every process uses to reach it.
 *
 * Layout: the regions of enum kvp_region below, in address order, each
 * page aligned, computed from the geometry by kvp_layout_compute (the one
 * layout table: creation, binding, the checker, the tests and the table
 * in docs/design.md all follow it).  The shared types carry field lists
 * (KVP_FIELDS_*) from which kvp_layout_sig() hashes every offset.
 *
 * Nothing in the segment is a pointer, an fd or a pid used as identity:
 * locations are offsets or indexes, checked before use.
 *
 * Liveness: byte 0 of the segment file carries the agent's OFD write lock,
 * byte KVP_LOCK_CLIENT0 + slot the lock of client slot 'slot'.  The kernel
 * drops an OFD lock when the last descriptor of its open file description
 * is closed (process death included), so F_OFD_GETLK answers "alive?"
 * without trusting anything a process wrote and without PID-reuse races.
 */
#ifndef KVP_SHM_H
#define KVP_SHM_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm/kvp_atomic.h"
#include "shm/kvp_crash.h"
#include "shm/kvp_env.h"
#include "shm/kvp_hash.h"

/* Linux values, for builds that did not define _GNU_SOURCE before
 * including <fcntl.h> (the rest of the client needs _DEFAULT_SOURCE). */
#ifndef F_OFD_GETLK
#define F_OFD_GETLK 36
#define F_OFD_SETLK 37
#endif

#ifndef KVP_INLINE
#define KVP_INLINE static inline
#endif

typedef uint64_t kvp_off_t; /* offset from the segment base; 0 = none */

#define KVP_SHM_MAGIC 0x4c4f4f5056504b01ull /* "\1KVPPOOL" little endian */
/* 5.0: the layout signature covers every field's offset; 7.0: SSD drives,
 * the arena populated behind the ready agent; 10.0: the cluster thread's
 * heartbeat, 32 cluster counters; 11.0: the HBM helper's socket name has an
 * unguessable part (gs_nonce), the header two pages; each drive id records
 * its directory (h_drive_dir_*); 13.0: the SSD read stages and queues
 * (h_io_*), the client's copy-out histogram; 14.0: the use word's CONT
 * bit (depth 18 bits), three eviction-policy counters; 15.0 and 16.0
 * (one release): the SSD header cache's counters, the eviction weight and
 * the hit-rate ceiling's window gauges in h_actr; 17.0: the SSD write
 * pacer's counters in h_actr, h_io_wake (no writer) reserved */
#define KVP_ABI_MAJOR 17
#define KVP_ABI_MINOR 0
#define KVP_FEATURES 0u /* feature bits; none defined in ABI 1.0 */

#define KVP_PAGE 4096u
/* the header's region: two pages (ABI 10: the GPU slots outgrew one) */
#define KVP_HEADER_BYTES (2u * KVP_PAGE)
#define KVP_CACHELINE 64u
#define KVP_KEY_MAX 255u
#define KVP_POOL_NAME_MAX 64u

/* SSD drives: one SSD store per --ssd-dir, at most 16 (a location's top 4
 * bits name the drive: its id, stable across restarts; the store's
 * location in the rest) */
#define KVP_SSD_DRIVES 16u
#define KVP_DRV_SHIFT 60
#define KVP_DRV_OF(loc) ((unsigned)((loc) >> KVP_DRV_SHIFT))
#define KVP_DRV_RAW(loc) ((loc) & ((1ull << KVP_DRV_SHIFT) - 1))
#define KVP_DRV_LOC(id, raw) (((uint64_t)(id) << KVP_DRV_SHIFT) | (raw))
enum kvp_drive_state {
	KVP_DRIVE_NONE = 0,    /* no such drive */
	KVP_DRIVE_OK = 1,      /* serving reads and writes */
	KVP_DRIVE_FULL = 2,    /* writes refused for lack of room */
	KVP_DRIVE_FAILED = 3,  /* I/O errors: no writes for a while */
	KVP_DRIVE_MISSING = 4, /* could not be opened at start */
	KVP_DRIVE_GONE = 5,    /* its directory disappeared while running */
};
#define KVP_DRIVE_WORD(st, err) (((uint64_t)(err) << 8) | (uint64_t)(st))
#define KVP_DRIVE_STATE(w) ((unsigned)((w)&0xff))
#define KVP_DRIVE_ERRORS(w) ((w) >> 8)
#define KVP_NS_NAME_MAX 255u
#define KVP_LOCK_AGENT 0
#define KVP_LOCK_CLIENT0 1

/* Client slot states: the format of cs_state and its protocol are in
 * shm/kvp_slot.h. */

/*
 * Per-client counters: one shard per client slot, written only by that
 * client (relaxed load + store, no RMW: a single writer), summed by readers.
 */
enum kvp_ctr {
	KVP_CTR_PUT = 0,
	KVP_CTR_PUT_BYTES,
	KVP_CTR_PUT_EXISTS,
	KVP_CTR_PUT_BUSY,
	KVP_CTR_PUT_NOSPC,
	KVP_CTR_GET,
	KVP_CTR_GET_HIT,
	KVP_CTR_GET_MISS,
	KVP_CTR_GET_BYTES,
	KVP_CTR_EXISTS,
	KVP_CTR_EXISTS_HIT,
	KVP_CTR_DELETE,
	KVP_CTR_HOLD_RETRY,
	KVP_CTR_RESOLVE_OK, /* SSD reads: final answers only */
	KVP_CTR_RESOLVE_MISS,
	KVP_CTR_RESOLVE_FAILED,
	KVP_CTR_RESOLVE_BUSY, /* BUSY answers of one part (not outcomes) */
	KVP_CTR_PIN,          /* keys pinned by kvp_batch_lookup_pin */
	/* lookups cut short, leases refused: pinned-bytes cap */
	KVP_CTR_PIN_CAPPED,
	/* gauge: bytes pinned, DRAM-resident at pin time */
	KVP_CTR_PINNED_DRAM,
	KVP_CTR_PINNED_SSD, /* gauge: bytes pinned, SSD-resident at pin time */
	/* bytes copied out of SSD reads (staged/promoted) */
	KVP_CTR_GET_SSD_BYTES,
	KVP_CTR_EXISTS_HIT_DRAM, /* exists hits by the tier the value was in */
	KVP_CTR_EXISTS_HIT_SSD,
	KVP_CTR_DEV_KEYS,         /* keys copied to or from a GPU */
	KVP_CTR_DEV_H2D_BYTES,    /* bytes copied to GPUs */
	KVP_CTR_DEV_D2H_BYTES,    /* bytes copied from GPUs */
	KVP_CTR_DEV_BOUNCE_BYTES, /* of those, through a bounce buffer */
	KVP_CTR_DEV_REG_BYTES,    /* gauge: DRAM registered (per process) */
	KVP_CTR_DEV_HBM_HITS,     /* device gets served from an HBM copy */
	KVP_CTR_DEV_HBM_BYTES,    /* ... their bytes (device to device) */
	KVP_CTR_REMOTE_HIT,    /* keys read after a fetch from another node */
	KVP_CTR_REMOTE_PROBED, /* keys probes counted as held by another node */
	KVP_CTR__N,
};
#define KVP_CTR_SLOTS 40
KVP_STATIC_ASSERT(KVP_CTR__N <= KVP_CTR_SLOTS, "counter shard too small");

/*
 * Latency histograms: one per (operation, tier), a shard per client like
 * the counters (single writer, relaxed load + store).  One observation per
 * call (a batch is one call), timed with one clock read pair; the tier of
 * a call is the slowest tier it touched.  Bucket b counts calls that took
 * at most 2^(b + KVP_HIST_SHIFT) ns (256 ns .. 68.7 s); the last bucket
 * is +Inf.  Buckets are not cumulative in the segment (readers sum them);
 * word KVP_HIST_SUM is the sum of the durations in ns, and the call count
 * is the sum of the buckets.
 */
enum kvp_hist {
	KVP_HIST_PUT_DRAM = 0,
	KVP_HIST_GET_DRAM,
	KVP_HIST_GET_SSD,
	KVP_HIST_EXISTS_DRAM,
	KVP_HIST_EXISTS_SSD,
	KVP_HIST__N, /* the op histograms (one observation per call) */
	/* the client's stage of an SSD read: copying one value out of its
	 * staging span (one observation per value); with the agent's
	 * stages (h_io_hist) the breakdown of a cold read */
	KVP_HIST_SSD_COPY = KVP_HIST__N,
	KVP_HIST__ALL,
};
#define KVP_HIST_SLOTS 8 /* room for the HBM tier */
#define KVP_HIST_WORDS 32
#define KVP_HIST_BUCKETS 30 /* 29 bounded + Inf */
#define KVP_HIST_SUM 30     /* word: sum of durations (ns) */
#define KVP_HIST_SHIFT 8    /* bucket 0: <= 256 ns */
KVP_STATIC_ASSERT(KVP_HIST__ALL <= KVP_HIST_SLOTS, "histogram shard too small");
KVP_STATIC_ASSERT(KVP_HIST_SUM >= KVP_HIST_BUCKETS &&
			  KVP_HIST_SUM < KVP_HIST_WORDS,
		  "hist");

/*
 * The stages of an SSD read the agent serves (a request of a client's
 * ring: staged or promoted), timed by the tier thread, one observation
 * per request, in h_io_hist (kvp_hist_bucket buckets, KVP_HIST_SUM the
 * sum).  The client's own stage (copy-out) is KVP_HIST_SSD_COPY.
 */
enum kvp_io_stage {
	/* posted by the client -> taken by the agent (the post time is the
	 * client's, in rq_result while POSTED: a hint, clamped) */
	KVP_IOS_QUEUE = 0,
	KVP_IOS_SUBMIT, /* taken -> its read submitted to the device */
	KVP_IOS_DEVICE, /* submitted -> its completion reaped */
	KVP_IOS_ANSWER, /* completion reaped -> its client woken */
	KVP_IOS__N,
};

/* The bucket of a duration of ns nanoseconds. */
KVP_INLINE unsigned
kvp_hist_bucket(uint64_t ns)
{
	unsigned b;

	if (ns <= (1ull << KVP_HIST_SHIFT))
		return 0;
	/* ceil(log2) */
	b = 64u - (unsigned)__builtin_clzll(ns - 1) - KVP_HIST_SHIFT;
	return b < KVP_HIST_BUCKETS - 1 ? b : KVP_HIST_BUCKETS - 1;
}

/*
 * A client's share of the index entry count (h_ix_used), in its slot:
 * cs_ix_resv is [seq:56][kind:8], written only by the client (and by the
 * reaper once it is dead), every store a new seq, so the agent can tell
 * that nothing changed between two looks; cs_ix_slot names the index slot
 * (KVP_HOLD_MAKE(slot, gen)) of a HAVE_SLOT unit.  The protocol and why
 * the count stays exact are in docs/design.md ("The index limit").
 */
enum kvp_ixr_kind {
	KVP_IXR_IDLE = 0,      /* no unit of the count in hand */
	KVP_IXR_RESERVING = 1, /* taking a unit (h_ix_used CAS around now) */
	/* holds a unit for the PENDING slot in cs_ix_slot */
	KVP_IXR_HAVE_SLOT = 2,
	KVP_IXR_RELEASING = 3, /* giving its unit back (and its slot) */
};
#define KVP_IXR_KIND(w) ((unsigned)((w)&0xff))
#define KVP_IXR_NEXT(w, kind) \
	(((((uint64_t)(w) >> 8) + 1) << 8) | (uint64_t)(kind))

/* One client slot: 38 cache lines (6 of state and counters, 32 of
 * histograms), never shared hot with another client. */
struct kvp_client_slot {
	kvp_aword_t cs_state;      /* [gen:56][state:8] shm/kvp_slot.h     */
	kvp_aword_t cs_pid;        /* for humans and the fork check        */
	kvp_aword_t cs_start_time; /* /proc/pid/stat starttime (ticks)      */
	kvp_aword_t cs_open_ns;    /* CLOCK_REALTIME at kvp_open            */
	kvp_aword_t cs_hold_hwm;   /* hold slots in use are below this      */
	kvp_aword_t cs_ns_id;      /* namespace id (hash of the name)       */
	kvp_aint_t cs_io_futex; /* the agent bumps it when a request is done */
	kvp_aint_t cs_alloc_claim; /* the allocator lock word this client holds
				    * or is taking (0: none) */
	/* client-private call numbering (informative) */
	kvp_aword_t cs_call_seq;
	char cs_ns[48];         /* namespace name, truncated, for humans */
	kvp_aword_t cs_ix_resv; /* [seq:56][kind:8] enum kvp_ixr_kind */
	kvp_aword_t cs_ix_slot; /* HAVE_SLOT: KVP_HOLD_MAKE(slot, gen) */
	kvp_aword_t cs_ctr[KVP_CTR_SLOTS];
	kvp_aword_t cs_hist[KVP_HIST_SLOTS][KVP_HIST_WORDS]; /* enum kvp_hist */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_client_slot) == 2496, "client slot size");
KVP_STATIC_ASSERT(offsetof(struct kvp_client_slot, cs_ctr) == 128,
		  "ctr offset");
KVP_STATIC_ASSERT(offsetof(struct kvp_client_slot, cs_ix_resv) == 112,
		  "ix resv offset");
KVP_STATIC_ASSERT(offsetof(struct kvp_client_slot, cs_hist) == 448,
		  "hist offset");

#define KVP_HINTS 16
#define KVP_STUCK_DRAM 1u  /* h_evict_stuck: DRAM full of held values */
#define KVP_STUCK_INDEX 2u /* h_evict_stuck: index at its limit, all held */
#define KVP_MAX_LEASES 4096

/* Agent-wide counters kept in the header (agent threads add atomically). */
enum kvp_actr {
	KVP_ACTR_EVICT = 0,
	KVP_ACTR_EVICT_BYTES,
	KVP_ACTR_EVICT_BACKOFF, /* victim was held: left alone */
	KVP_ACTR_DELETE_RECLAIM,
	KVP_ACTR_REAP_CLIENTS,
	KVP_ACTR_REAP_HOLDS,
	KVP_ACTR_REAP_PENDING,
	KVP_ACTR_REAP_PAGES,
	KVP_ACTR_ORPHAN_PAGES,  /* runs freed by the restart sweep */
	KVP_ACTR_ALLOC_RECOVER, /* allocator lock taken over (dead holder) */
	/* evictions from the index: a full bucket pair, or the limit */
	KVP_ACTR_EVICT_INDEX,
	KVP_ACTR_DEMOTE, /* values written to SSD */
	KVP_ACTR_DEMOTE_BYTES,
	KVP_ACTR_PROMOTE,     /* SSD reads that landed in DRAM */
	KVP_ACTR_STAGED,      /* SSD reads served through the staging arena */
	KVP_ACTR_BUSY_REJECT, /* requests answered BUSY (arena budget) */
	/* spans freed by a sweep, not by their holders */
	KVP_ACTR_STAGING_EXPIRED,
	KVP_ACTR_SEGMENT_RECLAIM, /* SSD segments given back */
	KVP_ACTR_SSD_READ_BYTES,
	KVP_ACTR_SSD_WRITE_BYTES,
	KVP_ACTR_SSD_ERRORS,
	KVP_ACTR_SINGLE_FLIGHT, /* requests that joined a read in flight */
	KVP_ACTR_LEASE_EXPIRED, /* leases reclaimed after their expiry */
	KVP_ACTR_REAP_PINS,     /* pins (pinset holds) released by the reaper */
	KVP_ACTR_EVICT_SSD, /* SSD-only values that left with their segment */
	/* index evictions (KVP_ACTR_EVICT_INDEX) of values with an SSD copy:
	 * the SSD tier had room for them, the index did not */
	KVP_ACTR_EVICT_INDEX_SSD,
	/* SSD records a segment reclaim rewrote at the head of the log (read
	 * since they were written), and their value bytes */
	KVP_ACTR_SSD_REINSERT,
	KVP_ACTR_SSD_REINSERT_BYTES,
	KVP_ACTR_HBM_COPIES,        /* values copied into HBM pools */
	KVP_ACTR_HBM_EVICTIONS,     /* HBM copies dropped for room */
	KVP_ACTR_HBM_HELPER_DEATHS, /* GPU helpers that died or failed */
	/* SSD reads submitted while demotion writes were in flight on the
	 * devices (each waits behind what is queued there before it) */
	KVP_ACTR_READ_BEHIND_WRITES,
	/* demotions the tier thread held back because reads were waiting
	 * (rule 9: reads first), one per round that held any back */
	KVP_ACTR_DEMOTE_YIELDS,
	/* SSD reads (format 3) whose batch header came from the agent's
	 * header cache (one device operation), and those that read it from
	 * the device beside the value */
	KVP_ACTR_SSD_HDR_CACHED,
	KVP_ACTR_SSD_HDR_READ,
	/* the eviction policy (agent/ghost.c, evict.c): values put again
	 * soon after their eviction (readmitted from the ghost set), the
	 * ghost set's keys now (a gauge), and evictions of values on
	 * probation (never used, not a continuation, not readmitted) */
	KVP_ACTR_GHOST_HITS,
	KVP_ACTR_GHOST_KEYS,
	KVP_ACTR_EVICT_PROBATION,
	/* the weight a never-used value's age counts now, in % (a gauge:
	 * --evict-probation as ARC's rule has left it, agent/evict.c) */
	KVP_ACTR_EVICT_WEIGHT,
	/* the last window of --ceiling-window (gauges, agent/distinct.c):
	 * distinct keys used or stored (a HyperLogLog), keys looked up,
	 * values stored, and the window's length in seconds */
	KVP_ACTR_WINDOW_KEYS,
	KVP_ACTR_WINDOW_LOOKUPS,
	KVP_ACTR_WINDOW_STORES,
	KVP_ACTR_WINDOW_SECONDS,
	/* the SSD write pacer (tiers/ssd_io.c, kvp_wr_pump), every drive:
	 * write operations sent (parts and pieces), parts cut into pieces
	 * while reads were about, and the times a write was held back
	 * because a read was on the device */
	KVP_ACTR_SSD_WRITE_OPS,
	KVP_ACTR_SSD_WRITE_PIECES,
	KVP_ACTR_SSD_WRITE_HELD_READ,
	KVP_ACTR_RETIRED0, /* + enum kvp_ctr: counters of gone clients */
	KVP_ACTR__N = KVP_ACTR_RETIRED0 + KVP_CTR_SLOTS,
};

/*
 * Geometry: every count, size and bound that locates something in the
 * segment, fixed when the agent creates it.  The header carries two
 * copies, each with a checksum, for tools and for the next process that
 * maps the segment; a process validates one when it maps the segment
 * (kvp_shm_bind: limits, checksum, and the layout it implies must end at
 * the file's size) and from then on uses only its private copy (struct
 * kvp_seg.g).  So nothing a client writes into the header later can move
 * a bound that the agent or another client relies on (DESIGN-NOTES 9),
 * and one stray write cannot make the pool unopenable: the other copy
 * still validates, and the agent rewrites a copy that no longer matches
 * its own.
 */
struct kvp_geom {
	uint64_t g_seg_size;      /* bytes: the layout's end, the file's size */
	uint64_t g_index_slots;   /* power of two, 16 .. 2^36 */
	uint64_t g_index_limit;   /* --index-entries: live entries allowed */
	uint64_t g_dram_unit;     /* power of two, 4 KiB .. 4 MiB */
	uint64_t g_dram_pages;    /* arena units, 1 .. 2^32 - 2 */
	uint64_t g_max_value;     /* 1 .. the arena's bytes */
	uint64_t g_staging_slots; /* 0 without an SSD tier, else 1 .. 65535 */
	uint64_t g_staging_slot_bytes; /* multiple of 4 KiB, <= 1 GiB */
	uint32_t g_max_clients;        /* 1 .. 65534 (256 with an SSD tier) */
	uint32_t g_holds_per_client;   /* 16 .. 2^20 */
	uint32_t g_ring_entries;       /* 0 without an SSD tier, else 1 .. 64 */
	uint32_t g_max_leases;         /* 1 .. 65536 */
	/* each client's remote mailbox (struct kvp_rbox + its data), KiB:
	 * 0 (no remote tier) or 16 .. 16384 */
	uint32_t g_rbox_kib;
	uint32_t g_pad;
	uint64_t g_sum; /* kvp_hash of the bytes above */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_geom) == 96, "geometry size");

/*
 * A GPU's HBM pool, as the agent publishes it.  gs_state is
 * [generation:48][enum kvp_gpu_state:8]: the generation grows every time a
 * helper comes up with a new pool, so an HBM map word (below) names the
 * pool it was written for; readers use a copy only while the slot is UP
 * at that generation.  The other fields are written before UP is
 * published (release) and stay until the state changes.
 */
#define KVP_GPU_MAX 8
enum kvp_gpu_state {
	KVP_GPU_OFF = 0, /* no HBM tier on this slot */
	KVP_GPU_STARTING = 1,
	KVP_GPU_UP = 2,
	KVP_GPU_DOWN = 3, /* its helper died or failed: copies invalid */
};
#define KVP_GS_STATE(w) ((unsigned)((w)&0xff))
#define KVP_GS_GEN(w) ((w) >> 8)
#define KVP_GS_WORD(gen, st) (((uint64_t)(gen) << 8) | (uint64_t)(st))
struct kvp_gpu_slot {
	kvp_aword_t gs_state;
	kvp_aword_t gs_device; /* the CUDA device ordinal (in the agent's view) */
	kvp_aword_t gs_bytes; /* the pool's block */
	kvp_aword_t gs_unit;  /* allocation unit (bytes, a power of two) */
	kvp_aword_t gs_used;  /* units allocated to copies (a statistic) */
	/* the helper's pid: workers import the pool only from a socket
	 * whose server (SO_PEERCRED) is this process */
	kvp_aword_t gs_pid;
	kvp_aword_t gs_copies; /* copies placed since it came up (a statistic) */
	/* the unguessable part of the helper's socket name, drawn by the
	 * helper at each start (tiers/kvp_hbm.h): no one can bind the name
	 * before it */
	kvp_aword_t gs_nonce;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_gpu_slot) == 64, "gpu slot size");

/*
 * The HBM map (region KVP_R_HBMMAP): one word per index slot naming an
 * HBM copy of that slot's value, [1][gpu:3][pool gen:12][slot gen:24]
 * [unit:24]; 0 = none.  A copy is an extra: the entry's e_loc (DRAM or
 * SSD) still holds the value.  A reader holding slot i at generation G
 * (24 bits, the index's own) uses the word only if its slot gen is G and
 * GPU slot gpu is UP at a generation whose low 12 bits are the word's;
 * otherwise the word is stale and ignored.  Units are of gs_unit bytes
 * (at least 64 KiB: 2^24 units cover 1 TiB).  Written only by the
 * agent's tier thread; a GPU's words are cleared when its helper goes,
 * so a pool generation that wraps never meets an old word.
 */
#define KVP_HBM_VALID (1ull << 63)
#define KVP_HBM_WORD(gpu, ggen, ixgen, unit)           \
	(KVP_HBM_VALID | ((uint64_t)((gpu)&7) << 60) | \
	 ((uint64_t)((ggen)&0xfff) << 48) |            \
	 ((uint64_t)((ixgen)&0xffffff) << 24) | ((uint64_t)(unit)&0xffffff))
#define KVP_HBM_GPU(w) ((unsigned)(((w) >> 60) & 7))
#define KVP_HBM_GGEN(w) (((w) >> 48) & 0xfff)
#define KVP_HBM_IXGEN(w) (((w) >> 24) & 0xffffff)
#define KVP_HBM_UNIT(w) ((w)&0xffffffull)
#define KVP_HBM_UNIT_MIN (64u << 10)
#define KVP_HBM_UNITS_MAX (1u << 24)

struct kvp_shm_header {
	uint64_t h_magic;
	uint16_t h_abi_major;
	uint16_t h_abi_minor;
	uint32_t h_features;
	uint64_t h_layout_sig; /* kvp_layout_sig(): see below */
	uint64_t h_create_ns;  /* CLOCK_REALTIME at creation */
	char h_pool[KVP_POOL_NAME_MAX];
	struct kvp_geom h_geom[2]; /* two copies (see struct kvp_geom) */

	/* agent state */
	kvp_aword_t h_incarnation; /* bumped by every agent that attaches */
	kvp_aword_t h_agent_pid;   /* for humans; liveness is the OFD lock */
	kvp_aword_t h_agent_start_ns;
	/* KVP_STUCK_*: last pass found nothing evictable */
	kvp_aword_t h_evict_stuck;
	kvp_aint_t h_evict_wake;  /* futex: clients bump to wake the evictor */
	kvp_aint_t h_space_seq;   /* futex: evictor bumps after freeing */
	kvp_aword_t h_evict_req;  /* 1: a wake is already pending */
	kvp_aword_t h_evict_need; /* largest unit count a putter waits for */
	kvp_aword_t h_hint_seq;   /* index-pressure hints: next ring slot */
	/* bumped by every delete: work for the agent */
	kvp_aword_t h_delete_seq;
	kvp_aword_t h_ix_used; /* index entries counted against g_index_limit */
	kvp_aword_t h_ix_req;  /* 1: a putter waits for room in the index */
	uint64_t h_max_pinned; /* --max-pinned-per-client bytes; 0: no cap */
	uint32_t h_dram_high_pct; /* the agent's watermarks (clients: a hint */
	uint32_t h_dram_low_pct; /* to wake the evictor early; set at attach) */
	kvp_aword_t h_hint[KVP_HINTS]; /* key hashes whose buckets are full */

	/* SSD tier (0 when the agent has no --ssd-dir) */
	uint32_t h_ssd_enabled; /* set by the agent that attaches */
	/* the agent's --durability: 1 strict (a hint that routes deletes
	 * through the agent) */
	uint32_t h_durability;
	kvp_aint_t h_agent_alloc_claim; /* the agent's allocator lock claim */
	uint32_t h_pad3;
	uint32_t h_pad4;          /* reserved (was h_io_wake: no writer) */
	kvp_aint_t h_staging_seq; /* futex: bumped when spans are freed */
	/* slots in use: the agent adds at allocation, the freer of a span
	 * subtracts (exact) */
	kvp_aword_t h_staging_used;
	kvp_aword_t h_staging_peak; /* highest h_staging_used since creation */

	kvp_aword_t h_actr[KVP_ACTR__N];

	/* observability: written by the agent, read by tools */
	/* gone clients */
	kvp_aword_t h_hist_retired[KVP_HIST_SLOTS][KVP_HIST_WORDS];
	/* the SSD read stages (enum kvp_io_stage), the tier thread's */
	kvp_aword_t h_io_hist[KVP_IOS__N][KVP_HIST_WORDS];
	/* the devices' queues now (gauges, the tier thread's): reads in
	 * flight, demotion writes in flight and their bytes */
	kvp_aword_t h_io_reads;
	kvp_aword_t h_io_writes;
	kvp_aword_t h_io_write_bytes;
#ifndef KVP_TEST_SWAP_HEADER
	kvp_aword_t h_ssd_used_bytes; /* SSD on-disk bytes (segments) */
	kvp_aword_t h_ssd_live_bytes; /* SSD bytes of live records */
#else /* tests/shm/test_layout_swap.c: same sizes, the other order */
	kvp_aword_t h_ssd_live_bytes;
	kvp_aword_t h_ssd_used_bytes;
#endif
	/* --ssd-size, or the file system's size */
	kvp_aword_t h_ssd_total_bytes;
	kvp_aword_t h_metrics_port; /* the agent's /metrics TCP port; 0 = off */
	/* SSD drives (one per --ssd-dir), by drive id (the top 4 bits of an
	 * SSD location): written by the agent, read by tools.  State word:
	 * [I/O errors:56][enum kvp_drive_state:8]; 0 = no such drive */
	kvp_aword_t h_drive_state[KVP_SSD_DRIVES];
	kvp_aword_t h_drive_used[KVP_SSD_DRIVES];  /* on-disk bytes */
	kvp_aword_t h_drive_total[KVP_SSD_DRIVES]; /* its capacity */
	/* the directory whose records a drive id's locations name (st_dev,
	 * st_ino as the agent opened it; 0 = none), written by the agent
	 * only: an agent that re-attaches compares, and entries naming an id
	 * whose directory changed (a copied DRIVE file, a replaced
	 * directory) lose their SSD copy (agent/drives.c, I32) */
	kvp_aword_t h_drive_dir_dev[KVP_SSD_DRIVES];
	kvp_aword_t h_drive_dir_ino[KVP_SSD_DRIVES];
	/* the HBM tier: one slot per GPU the agent serves (--hbm-gpu),
	 * written by the agent only (design.md, "The HBM tier") */
	struct kvp_gpu_slot h_gpu[KVP_GPU_MAX];
};
KVP_STATIC_ASSERT(sizeof(struct kvp_shm_header) <= KVP_HEADER_BYTES,
		  "header fits its region");
KVP_STATIC_ASSERT(offsetof(struct kvp_shm_header, h_magic) == 0, "magic first");
KVP_STATIC_ASSERT(offsetof(struct kvp_shm_header, h_abi_major) == 8,
		  "abi at 8");
KVP_STATIC_ASSERT(offsetof(struct kvp_shm_header, h_layout_sig) == 16, "sig");
KVP_STATIC_ASSERT(offsetof(struct kvp_shm_header, h_geom) % 8 == 0, "aligned");
KVP_STATIC_ASSERT(offsetof(struct kvp_shm_header, h_incarnation) % 8 == 0,
		  "aligned");
KVP_STATIC_ASSERT(offsetof(struct kvp_shm_header, h_hist_retired) % 8 == 0,
		  "aligned");

/*
 * Requests to the agent: one ring per client (g_ring_entries entries, at
 * most KVP_RING_ENTRIES).  The word's format, its transitions and their
 * proof: shm/kvp_ring.h.  Most requests read a value off SSD;
 * KVP_RQ_DELETE asks the agent to delete a key and answer once its
 * tombstone is durable (--durability strict).
 */
#define KVP_RING_ENTRIES 64

struct kvp_req {
	kvp_aword_t rq_state; /* [seq:56][state:8] */
	kvp_aword_t rq_slot;  /* index slot (held by the client) */
	kvp_aword_t rq_gen;   /* its generation */
	kvp_aword_t rq_off;   /* byte range of the value */
	kvp_aword_t rq_len;
	kvp_aword_t rq_call; /* call number | KVP_RQ_FIRST | KVP_RQ_WHOLE */
	/* the answer: a status as (uint64_t)(int64_t); while POSTED, the
	 * client's post time (CLOCK_MONOTONIC ns) for the agent's queue
	 * stage (KVP_IOS_QUEUE: a hint, never trusted beyond a statistic) */
	kvp_aword_t rq_result;
	/* span head + 1 | skip << 32, or KVP_WHERE_DRAM */
	kvp_aword_t rq_where;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_req) == 64, "request size");

/*
 * A staging span: the agent allocates it (it alone), sets a bit for every
 * client that will read it, reads the extent, and marks it READY; the
 * last holder frees it.  The word's format, its transitions and their
 * proof: shm/kvp_span.h.
 */
#define KVP_SPAN_HOLDER_WORDS 4 /* 256 clients */
#define KVP_MAX_CLIENTS_STAGING (KVP_SPAN_HOLDER_WORDS * 64)

struct kvp_span {
	/* KVP_SP_WORDF: the protocol is shm/kvp_span.h */
	kvp_aword_t sp_state;
	kvp_aword_t sp_holders[KVP_SPAN_HOLDER_WORDS];
	kvp_aword_t sp_slot; /* index slot + 1 whose bytes it stages */
	kvp_aword_t sp_off;  /* value offset of the staged extent */
	kvp_aword_t sp_len;  /* bytes staged */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_span) == 64, "span size");

/*
 * A timed lease: pins an entry (no eviction, relocation or reclaim of its
 * segment) until ls_expiry (CLOCK_MONOTONIC ns) or release, whoever holds
 * or does not hold it.  For readers that cannot take a hold: a remote
 * reader, a NIC doing DMA.  The reaper frees expired leases.  The word's
 * format, its transitions and their proof: shm/kvp_lease.h.
 */
struct kvp_lease_slot {
	kvp_aword_t ls_state;  /* [gen:32][owner:16][0:8][state:8] */
	kvp_aword_t ls_slot;   /* index slot */
	kvp_aword_t ls_expiry; /* CLOCK_MONOTONIC ns */
	kvp_aword_t ls_owner;  /* client slot + 1 that took it (for humans) */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_lease_slot) == 32, "lease size");
/*
 * One namespace's row of engine-adapter counters (kvp_ns_count, enum
 * kvp_ns_event in kvpool.h).  A client takes a free row with a CAS of
 * ns_id 0 -> its namespace id (open addressing from id % rows), writes the
 * name and sets ns_named (release); rows are never given back while the
 * segment lives (KVP_NS_STAT_ROWS namespaces; later ones count nothing).
 * Counters are atomic adds.  Everything here is written by clients: the
 * agent reads it for metrics only, escapes the name and trusts no index.
 */
#define KVP_NS_STAT_ROWS 256u
#define KVP_NS_STAT_CTRS 16u
struct kvp_ns_stat {
	kvp_aword_t ns_id;    /* 0: free; the namespace id (kvp_ns_id) */
	kvp_aword_t ns_named; /* 1: ns_name is written */
	char ns_name[48];     /* the name, truncated, for humans */
	kvp_aword_t ns_ctr[KVP_NS_STAT_CTRS]; /* enum kvp_ns_event */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_ns_stat) == 192, "ns stat row size");

/*
 * The remote tier (kvpoold --cluster).  Region KVP_R_CLUSTER: a struct
 * kvp_cluster, then one mailbox per client slot (g_rbox_kib KiB each: a
 * struct kvp_rbox, then its data).  The mailbox's format, its transitions
 * and their proof: shm/kvp_rbox.h.
 */
#define KVP_RBOX_KIB_DEFAULT 256u
#define KVP_RBOX_KIB_MAX 16384u
enum kvp_cl_state {
	KVP_CL_OFF = 0,  /* no remote tier (no --cluster, or the agent left) */
	KVP_CL_DOWN = 1, /* configured; the directory cannot be reached */
	KVP_CL_UP = 2,
	KVP_CL_CLASH = 3, /* another agent holds this node's name */
};
/* cl_state: [incarnation:32][peers:16][bad:8][state:8]; bad: members whose
 * node entry the agent refused (malformed, or its address killed a
 * probe), at most 255 */
#define KVP_CL_WORD(inc, peers, st)          \
	(((uint64_t)(uint32_t)(inc) << 32) | \
	 ((uint64_t)((peers)&0xffffu) << 16) | (uint64_t)(st))
#define KVP_CL_WORD_BAD(bad) ((uint64_t)((bad) < 255u ? (bad) : 255u) << 8)
#define KVP_CL_STATE(w) ((unsigned)((w)&0xff))
#define KVP_CL_BEAT_MS 200u   /* the thread beats at least this often */
#define KVP_CL_STALE_MS 1500u /* a beat older than this: stalled */
#define KVP_CL_PEERS(w) ((unsigned)(((w) >> 16) & 0xffffu))
#define KVP_CL_BAD(w) ((unsigned)(((w) >> 8) & 0xffu))
enum kvp_cl_ctr {
	KVP_CLC_LOOKUPS = 0,  /* mailbox calls answered */
	KVP_CLC_LOOKUP_KEYS,  /* keys they asked about */
	KVP_CLC_FOUND,        /* keys the directory named a node for */
	KVP_CLC_FETCHED,      /* keys fetched from a peer into this pool */
	KVP_CLC_FETCH_BYTES,  /* their bytes */
	KVP_CLC_FAILED,       /* keys whose fetch failed (FAILED/BUSY) */
	KVP_CLC_DIR_RTT,      /* directory round trips (one per lookup) */
	KVP_CLC_DIR_ERRORS,   /* directory commands that failed */
	KVP_CLC_PUBLISHED,    /* keys published (HSET) */
	KVP_CLC_UNPUBLISHED,  /* keys unpublished (HDEL) */
	KVP_CLC_SERVED,       /* keys served to peers */
	KVP_CLC_SERVED_BYTES, /* their bytes */
	KVP_CLC_REFUSED,      /* peer requests refused (not a member, bad) */
	KVP_CLC_STALE,        /* directory said yes, the owner said no */
	KVP_CLC_BAD_MAILBOX,  /* client mailboxes refused (bad input) */
	KVP_CLC_CORRUPT,      /* pages whose bytes failed their CRC */
	KVP_CLC_STALLED,      /* peers dropped: they stopped taking our sends */
	KVP_CLC_NAME_CLASH,   /* claims of the node name found another's */
	KVP_CLC__N,
};
#define KVP_CL_CTRS 32
KVP_STATIC_ASSERT(KVP_CLC__N <= KVP_CL_CTRS, "cluster counters");
struct kvp_cluster {
	kvp_aword_t cl_state; /* KVP_CL_WORD: written by the agent only */
	kvp_aint_t cl_wake;   /* futex: clients bump after posting */
	/* the cluster thread's heartbeat: CLOCK_MONOTONIC in ms (low 32
	 * bits), stored at least every KVP_CL_BEAT_MS while it runs; a
	 * client asks nothing of a thread that has not beaten for
	 * KVP_CL_STALE_MS (it answers MISS at once) */
	kvp_aint_t cl_beat;
	kvp_aword_t cl_pub_lag_ns; /* last publish pass: a change's age */
	kvp_aword_t cl_pub_max_ns; /* the largest lag since the agent started */
	kvp_aword_t cl_dir_rtt_ns; /* the last directory round trip */
	kvp_aword_t cl_ctr[KVP_CL_CTRS]; /* enum kvp_cl_ctr */
	/* latency of a FETCH call (taken to answered), kvp_hist_bucket */
	kvp_aword_t cl_lat[KVP_HIST_WORDS];
	char cl_node[64]; /* this node's name (agent-written, for tools) */
};
struct kvp_rbox {
	kvp_aword_t rb_state; /* [seq:56][state:8], shm/kvp_rbox.h */
	kvp_aword_t rb_kind;  /* enum kvp_rb_kind */
	kvp_aword_t rb_n;     /* keys */
	kvp_aword_t rb_bytes; /* namespace + keys, after the answers */
	kvp_aword_t rb_pad[4];
};
KVP_STATIC_ASSERT(sizeof(struct kvp_rbox) == 64, "rbox size");
/* One key's answer: status 0 (PROBE: another node holds it; FETCH: it is
 * in this pool now), -ENOENT, -EIO (failed), -EBUSY, -ENOSPC, -E2BIG;
 * len: the value's length (status 0).  ra_ready: KVP_RA_READY(seq) once
 * the answer is final, stored with a release after the two fields, so a
 * FETCH's keys are answered one by one as they land (the client reads
 * them while the rest are in flight); a word of another request's
 * sequence is not an answer. */
struct kvp_rbox_ans {
	int32_t ra_status;
	kvp_aint_t ra_ready;
	uint64_t ra_len;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_rbox_ans) == 16, "rbox answer size");

/* Tier tags in the top bits of an entry's location word. */
#define KVP_TIER_SHIFT 60
#define KVP_TIER_NONE 0ull
#define KVP_TIER_DRAM 1ull
#define KVP_TIER_SSD 2ull
#define KVP_TIER_HBM 3ull
#define KVP_TIER_REMOTE 4ull /* reported only: never in a location word */
#define KVP_LOC_MAKE(tier, v) (((uint64_t)(tier) << KVP_TIER_SHIFT) | (v))
#define KVP_LOC_TIER(l) ((uint64_t)(l) >> KVP_TIER_SHIFT)
#define KVP_LOC_VAL(l) ((uint64_t)(l) & ((1ull << KVP_TIER_SHIFT) - 1))

/*
 * One index entry.  Its fields are written only by whoever owns the slot
 * (the claimant while RESERVED, the putter while PENDING, the agent while
 * the CHECK flag is set) and published by a release on the slot's state
 * word.  Readers validate with the state word (seqlock style), so every
 * field is read and written with relaxed atomics: torn reads are detected,
 * never acted on.
 */
struct kvp_entry {
	kvp_aword_t e_loc;  /* tier tag | DRAM: first page of the run chain */
	kvp_aword_t e_len;  /* value length in bytes */
	kvp_aword_t e_ns;   /* namespace id */
	kvp_aword_t e_hash; /* full 64-bit key hash */
	kvp_aword_t e_klen; /* key length, 1..255 */
	kvp_aword_t e_use;  /* last use: KVP_USE_MAKE(tick, depth) */
	kvp_aword_t e_ssd;  /* reserved for the SSD tier */
	kvp_aword_t e_run;  /* DRAM: units in the first run (copy fast path) */
	kvp_aword_t e_key[32]; /* key bytes, zero padded */
};
KVP_STATIC_ASSERT(sizeof(struct kvp_entry) == 320, "entry size");
KVP_STATIC_ASSERT(offsetof(struct kvp_entry, e_key) == 64, "key on line 2");

/*
 * The use word of an entry (e_use): when the value was last used, in
 * ticks of 2^20 ns (about 1 ms, CLOCK_MONOTONIC: one clock for every
 * process of the node), whether it was used since its put (KVP_USE_HIT),
 * whether its put continued a hit prefix of at least half its request
 * (KVP_USE_CONT), and its depth in its prefix chain (the k-th page of a
 * chain is at depth k: a put of a chain says so, kvp_batch_put_chain; 18
 * bits).  Written by the putter before publishing (HIT clear), then by
 * every hit, probe, pin and lease (kvp__touch: one relaxed store, only
 * when the word changes, so the line of a hot value is not bounced; it
 * keeps the bits below HIT).  The eviction policy (agent/evict.c) evicts
 * the oldest use first (a value with neither HIT nor CONT, and not
 * readmitted from the agent's ghost set, counts its age x
 * --evict-probation) and, within a tick, the deepest page first, which
 * keeps the cached set prefix-closed.  A hint, never trusted for
 * safety: a client may write anything here and only its own values' order
 * suffers.
 */
#define KVP_TICK_SHIFT 20u /* ns >> 20: a tick is 1.05 ms */
#define KVP_USE_DEPTH_BITS 20u
#define KVP_USE_HIT (1u << (KVP_USE_DEPTH_BITS - 1)) /* used since put */
/* put as a continuation: kvp_batch_put_chain of n pages at depth0 with
 * depth0 * 2 >= depth0 + n (its hit prefix is at least half the request);
 * written by the putter only, kept by a hit */
#define KVP_USE_CONT (KVP_USE_HIT >> 1)
#define KVP_USE_DEPTH_MAX (KVP_USE_CONT - 1) /* 18 bits */
/* what a hit keeps of the word: the depth and the CONT bit */
#define KVP_USE_KEEP (KVP_USE_HIT - 1)
#define KVP_USE_MAKE(tick, depth)                   \
	(((uint64_t)(tick) << KVP_USE_DEPTH_BITS) | \
	 ((uint64_t)(depth) > KVP_USE_DEPTH_MAX ?   \
		  (uint64_t)KVP_USE_DEPTH_MAX :     \
		  (uint64_t)(depth)))
#define KVP_USE_TICK(u) ((uint64_t)(u) >> KVP_USE_DEPTH_BITS)
#define KVP_USE_DEPTH(u) ((uint32_t)((u)&KVP_USE_DEPTH_MAX))
#define KVP_USE_HITS(u) (((u)&KVP_USE_HIT) != 0)
#define KVP_USE_CONTS(u) (((u)&KVP_USE_CONT) != 0)

/* The tick now (e_use's clock). */
KVP_INLINE uint64_t
kvp_tick_now(void)
{
	return kvp_now_ns(CLOCK_MONOTONIC) >> KVP_TICK_SHIFT;
}

/* DRAM page map: meaningful at the first and last page of each run. */
enum kvp_pg_state {
	KVP_PG_NONE = 0, /* interior page of a run */
	KVP_PG_FREE = 1,
	KVP_PG_USED = 2,
};

struct kvp_page {
	uint32_t pg_state;
	uint32_t pg_npages;    /* run length (first page) */
	uint32_t pg_owner;     /* USED: owning entry slot + 1 */
	uint32_t pg_owner_gen; /* USED: owning entry generation */
	/* USED: next run of the value (+1); FREE: bin next (+1) */
	uint32_t pg_next;
	uint32_t pg_prev; /* FREE: bin prev (+1) */
	uint32_t pg_head; /* last page of a run: its first page (+1) */
	uint32_t pg_pad;
};
KVP_STATIC_ASSERT(sizeof(struct kvp_page) == 32, "page map entry size");

#define KVP_DRAM_BINS 32
/* The owner tag (pg_owner) of the arena's not yet populated tail: no
 * entry slot + 1 reaches it (index slots <= KVP_MAX_INDEX_SLOTS, 2^31). */
#define KVP_DRAM_OWNER_UNPOP 0xffffffffu
/*
 * The allocator lock word (a futex): 0 when free, else the holder's
 * [waiters:1][seq:15][token:16], token = client slot + 1 or
 * KVP_LOCK_TOKEN_AGENT.  Before it takes the lock a holder writes the
 * exact word it is about to install into its claim (cs_alloc_claim, or
 * h_agent_alloc_claim for the agent), so a word whose token's claim does
 * not name it was not written by a holder (a stray or hostile write) and
 * may be taken over; a holder whose process is dead (kernel-checked,
 * kvp_shm_client_alive) likewise, followed by a rebuild of the bins.  Not
 * a pthread mutex: glibc trusts the fields of its mutexes (kind, robust
 * list links), and any byte here can be written by any client.
 */
#define KVP_LOCK_WAITERS 0x80000000u
#define KVP_LOCK_TOKEN_AGENT 0xffffu
#define KVP_LOCK_TOKEN(w) ((w)&0xffffu)
#define KVP_LOCK_SEQ_MASK 0x7fff0000u

struct kvp_dram_hdr {
	kvp_aint_t dh_lock; /* see above */
	uint32_t dh_pad32;
	kvp_aword_t dh_lock_ns; /* CLOCK_MONOTONIC when taken (for humans) */
	char dh_pad0[48];
	uint64_t dh_used_pages;         /* under dh_lock */
	uint64_t dh_free_pages;         /* under dh_lock */
	uint64_t dh_peak_used_pages;    /* under dh_lock */
	uint64_t dh_alloc_fail;         /* under dh_lock */
	uint32_t dh_bin[KVP_DRAM_BINS]; /* first free run (+1) per log2 class */
	kvp_aword_t dh_used_mirror; /* dh_used_pages, readable without lock */
	/* 1: someone found the map damaged; the agent verifies and repairs it
	 */
	kvp_aword_t dh_damaged;
	/* units at the end of the arena not yet populated (agent/populate.c):
	 * one USED run owned by KVP_DRAM_OWNER_UNPOP, counted neither used
	 * nor free; it shrinks as the agent's populate threads advance.
	 * Written by the agent under dh_lock; read relaxed (a statistic and
	 * the capacity eviction aims at) */
	kvp_aword_t dh_unpop_pages;
	/* the backing's page size: 4096 (tmpfs) or 2 MiB (hugetlbfs) */
	kvp_aword_t dh_page_bytes;
};

/*
 * The layout signature (h_layout_sig): a hash of the offset and size of
 * every field of every shared type, in declaration order, and of each
 * type's size.  A build whose shared types differ from the agent's in
 * any of them (a field added, removed, resized, or moved, even between
 * two fields of the same size) computes another signature, and the two
 * refuse each other's segments (-EPROTO, kvp_shm_check_header).
 *
 * Each list names every field of its struct in declaration order:
 * tests/shm/test_layout.c checks that the fields tile the struct (no gap
 * a forgotten field could hide in but alignment padding, ending at its
 * size) and that the signature is the one recorded for this ABI; adding
 * a field means adding it here, and changing the signature means bumping
 * KVP_ABI_MAJOR.
 */
/* clang-format off */
#define KVP_FIELDS_GEOM(X)                                                   \
	X(kvp_geom, g_seg_size) X(kvp_geom, g_index_slots)                   \
	X(kvp_geom, g_index_limit) X(kvp_geom, g_dram_unit)                  \
	X(kvp_geom, g_dram_pages) X(kvp_geom, g_max_value)                   \
	X(kvp_geom, g_staging_slots) X(kvp_geom, g_staging_slot_bytes)       \
	X(kvp_geom, g_max_clients) X(kvp_geom, g_holds_per_client)           \
	X(kvp_geom, g_ring_entries) X(kvp_geom, g_max_leases)                \
	X(kvp_geom, g_rbox_kib) X(kvp_geom, g_pad) X(kvp_geom, g_sum)
#define KVP_FIELDS_HEADER(X)                                                 \
	X(kvp_shm_header, h_magic) X(kvp_shm_header, h_abi_major)            \
	X(kvp_shm_header, h_abi_minor) X(kvp_shm_header, h_features)         \
	X(kvp_shm_header, h_layout_sig) X(kvp_shm_header, h_create_ns)       \
	X(kvp_shm_header, h_pool) X(kvp_shm_header, h_geom)                  \
	X(kvp_shm_header, h_incarnation) X(kvp_shm_header, h_agent_pid)      \
	X(kvp_shm_header, h_agent_start_ns) X(kvp_shm_header, h_evict_stuck) \
	X(kvp_shm_header, h_evict_wake) X(kvp_shm_header, h_space_seq)       \
	X(kvp_shm_header, h_evict_req) X(kvp_shm_header, h_evict_need)       \
	X(kvp_shm_header, h_hint_seq) X(kvp_shm_header, h_delete_seq)        \
	X(kvp_shm_header, h_ix_used) X(kvp_shm_header, h_ix_req)             \
	X(kvp_shm_header, h_max_pinned) X(kvp_shm_header, h_dram_high_pct)   \
	X(kvp_shm_header, h_dram_low_pct) X(kvp_shm_header, h_hint)          \
	X(kvp_shm_header, h_ssd_enabled) X(kvp_shm_header, h_durability)     \
	X(kvp_shm_header, h_agent_alloc_claim) X(kvp_shm_header, h_pad3)     \
	X(kvp_shm_header, h_pad4) X(kvp_shm_header, h_staging_seq)        \
	X(kvp_shm_header, h_staging_used) X(kvp_shm_header, h_staging_peak)  \
	X(kvp_shm_header, h_actr) X(kvp_shm_header, h_hist_retired) X(kvp_shm_header, h_io_hist) X(kvp_shm_header, h_io_reads) X(kvp_shm_header, h_io_writes) X(kvp_shm_header, h_io_write_bytes)          \
	X(kvp_shm_header, h_ssd_used_bytes) X(kvp_shm_header, h_ssd_live_bytes) \
	X(kvp_shm_header, h_ssd_total_bytes) X(kvp_shm_header, h_metrics_port) \
	X(kvp_shm_header, h_drive_state) X(kvp_shm_header, h_drive_used)     \
	X(kvp_shm_header, h_drive_total) X(kvp_shm_header, h_drive_dir_dev)  \
	X(kvp_shm_header, h_drive_dir_ino) X(kvp_shm_header, h_gpu)
#define KVP_FIELDS_CLIENT_SLOT(X)                                            \
	X(kvp_client_slot, cs_state) X(kvp_client_slot, cs_pid)              \
	X(kvp_client_slot, cs_start_time) X(kvp_client_slot, cs_open_ns)     \
	X(kvp_client_slot, cs_hold_hwm) X(kvp_client_slot, cs_ns_id)         \
	X(kvp_client_slot, cs_io_futex) X(kvp_client_slot, cs_alloc_claim)   \
	X(kvp_client_slot, cs_call_seq) X(kvp_client_slot, cs_ns)            \
	X(kvp_client_slot, cs_ix_resv) X(kvp_client_slot, cs_ix_slot)        \
	X(kvp_client_slot, cs_ctr) X(kvp_client_slot, cs_hist)
#define KVP_FIELDS_REQ(X)                                                    \
	X(kvp_req, rq_state) X(kvp_req, rq_slot) X(kvp_req, rq_gen)          \
	X(kvp_req, rq_off) X(kvp_req, rq_len) X(kvp_req, rq_call)            \
	X(kvp_req, rq_result) X(kvp_req, rq_where)
#define KVP_FIELDS_SPAN(X)                                                   \
	X(kvp_span, sp_state) X(kvp_span, sp_holders) X(kvp_span, sp_slot)   \
	X(kvp_span, sp_off) X(kvp_span, sp_len)
#define KVP_FIELDS_LEASE(X)                                                  \
	X(kvp_lease_slot, ls_state) X(kvp_lease_slot, ls_slot)               \
	X(kvp_lease_slot, ls_expiry) X(kvp_lease_slot, ls_owner)
#define KVP_FIELDS_NS_STAT(X)                                                \
	X(kvp_ns_stat, ns_id) X(kvp_ns_stat, ns_named)                       \
	X(kvp_ns_stat, ns_name) X(kvp_ns_stat, ns_ctr)
#define KVP_FIELDS_ENTRY(X)                                                  \
	X(kvp_entry, e_loc) X(kvp_entry, e_len) X(kvp_entry, e_ns)           \
	X(kvp_entry, e_hash) X(kvp_entry, e_klen) X(kvp_entry, e_use)        \
	X(kvp_entry, e_ssd) X(kvp_entry, e_run) X(kvp_entry, e_key)
#define KVP_FIELDS_PAGE(X)                                                   \
	X(kvp_page, pg_state) X(kvp_page, pg_npages) X(kvp_page, pg_owner)   \
	X(kvp_page, pg_owner_gen) X(kvp_page, pg_next) X(kvp_page, pg_prev)  \
	X(kvp_page, pg_head) X(kvp_page, pg_pad)
#define KVP_FIELDS_DRAM_HDR(X)                                               \
	X(kvp_dram_hdr, dh_lock) X(kvp_dram_hdr, dh_pad32)                   \
	X(kvp_dram_hdr, dh_lock_ns) X(kvp_dram_hdr, dh_pad0)                 \
	X(kvp_dram_hdr, dh_used_pages) X(kvp_dram_hdr, dh_free_pages)        \
	X(kvp_dram_hdr, dh_peak_used_pages) X(kvp_dram_hdr, dh_alloc_fail)   \
	X(kvp_dram_hdr, dh_bin) X(kvp_dram_hdr, dh_used_mirror)              \
	X(kvp_dram_hdr, dh_damaged) X(kvp_dram_hdr, dh_unpop_pages)         \
	X(kvp_dram_hdr, dh_page_bytes)
#define KVP_FIELDS_GPU_SLOT(X)                                               \
	X(kvp_gpu_slot, gs_state) X(kvp_gpu_slot, gs_device)                 \
	X(kvp_gpu_slot, gs_bytes) X(kvp_gpu_slot, gs_unit)                   \
	X(kvp_gpu_slot, gs_used) X(kvp_gpu_slot, gs_pid)                     \
	X(kvp_gpu_slot, gs_copies) X(kvp_gpu_slot, gs_nonce)
#define KVP_FIELDS_CLUSTER(X)                                                \
	X(kvp_cluster, cl_state) X(kvp_cluster, cl_wake)                     \
	X(kvp_cluster, cl_beat) X(kvp_cluster, cl_pub_lag_ns)                 \
	X(kvp_cluster, cl_pub_max_ns) X(kvp_cluster, cl_dir_rtt_ns)          \
	X(kvp_cluster, cl_ctr) X(kvp_cluster, cl_lat) X(kvp_cluster, cl_node)
#define KVP_FIELDS_RBOX(X)                                                   \
	X(kvp_rbox, rb_state) X(kvp_rbox, rb_kind) X(kvp_rbox, rb_n)         \
	X(kvp_rbox, rb_bytes) X(kvp_rbox, rb_pad)
#define KVP_FIELDS_RBOX_ANS(X)                                               \
	X(kvp_rbox_ans, ra_status) X(kvp_rbox_ans, ra_ready)                   \
	X(kvp_rbox_ans, ra_len)
/* every shared type, with its field list */
#define KVP_SHARED_TYPES(T)                                                  \
	T(kvp_geom, KVP_FIELDS_GEOM) T(kvp_shm_header, KVP_FIELDS_HEADER)    \
	T(kvp_client_slot, KVP_FIELDS_CLIENT_SLOT) T(kvp_req, KVP_FIELDS_REQ) \
	T(kvp_span, KVP_FIELDS_SPAN) T(kvp_lease_slot, KVP_FIELDS_LEASE)     \
	T(kvp_entry, KVP_FIELDS_ENTRY) T(kvp_page, KVP_FIELDS_PAGE)          \
	T(kvp_dram_hdr, KVP_FIELDS_DRAM_HDR)                                 \
	T(kvp_gpu_slot, KVP_FIELDS_GPU_SLOT)                                 \
	T(kvp_cluster, KVP_FIELDS_CLUSTER) T(kvp_rbox, KVP_FIELDS_RBOX)      \
	T(kvp_rbox_ans, KVP_FIELDS_RBOX_ANS)                                 \
	T(kvp_ns_stat, KVP_FIELDS_NS_STAT)
/* clang-format on */

/* One row of the field table: a field, or (field == NULL) the end of a
 * type, whose size is then 'size'. */
struct kvp_layout_field {
	const char *type;
	const char *field;
	uint32_t off;
	uint32_t size;
};
#define KVP__LF_FIELD(S, f)                        \
	{ #S, #f, (uint32_t)offsetof(struct S, f), \
	  (uint32_t)sizeof(((struct S *)0)->f) },
#define KVP__LF_TYPE(S, LIST) \
	LIST(KVP__LF_FIELD){ #S, NULL, 0, (uint32_t)sizeof(struct S) },

/* The table of every shared field (KVP_SHARED_TYPES); *n its rows. */
KVP_INLINE const struct kvp_layout_field *
kvp_layout_fields(size_t *n)
{
	static const struct kvp_layout_field rows[] = { KVP_SHARED_TYPES(
		KVP__LF_TYPE) };

	*n = sizeof(rows) / sizeof(rows[0]);
	return rows;
}

/* This build's layout signature: kvp_hash over (offset, size) of every
 * row of the field table, in order (names do not count: renaming a field
 * moves nothing). */
KVP_INLINE uint64_t
kvp_layout_sig(void)
{
	const struct kvp_layout_field *f;
	uint64_t h = KVP_SHM_MAGIC;
	size_t i, n;

	f = kvp_layout_fields(&n);
	for (i = 0; i < n; i++) {
		uint32_t w[2] = { f[i].field ? f[i].off : 0xffffffffu,
				  f[i].size };

		h = kvp_hash(h, w, sizeof(w));
	}
	return h;
}

/*
 * The layout table: the regions of a segment in address order, each
 * computed from the geometry alone (kvp_layout_compute).  Creation,
 * binding, the checker, the tests and docs/design.md all use this one
 * table; nothing else computes an offset.
 */
enum kvp_region {
	KVP_R_HEADER = 0, /* struct kvp_shm_header, KVP_HEADER_BYTES */
	KVP_R_CLIENTS,    /* struct kvp_client_slot[max_clients] */
	KVP_R_HOLDS,      /* kvp_aword_t[max_clients][holds_per_client] */
	KVP_R_META,       /* kvp_aword_t[index_slots]: index state words */
	KVP_R_ENTRIES,    /* struct kvp_entry[index_slots] */
	KVP_R_HBMMAP,     /* kvp_aword_t[index_slots]: HBM copies */
	KVP_R_DRAM,       /* struct kvp_dram_hdr */
	KVP_R_PAGEMAP,    /* struct kvp_page[dram_pages] */
	KVP_R_LEASES,     /* struct kvp_lease_slot[max_leases] */
	KVP_R_NS_STATS,   /* struct kvp_ns_stat[KVP_NS_STAT_ROWS] */
	KVP_R_ARENA,      /* dram_pages * dram_unit bytes, 2 MiB aligned */
	KVP_R_RINGS,      /* struct kvp_req[max_clients][ring_entries] (SSD) */
	KVP_R_SPANS,      /* struct kvp_span[staging_slots] (SSD) */
	KVP_R_STAGING, /* staging_slots * staging_slot_bytes, 2 MiB aligned */
	KVP_R_CLUSTER, /* struct kvp_cluster (a page), then per client its
			* remote mailbox: g_rbox_kib KiB each (remote tier) */
	KVP_R__N,
};

struct kvp_layout {
	/* from the segment base; 0 for an empty region */
	uint64_t off[KVP_R__N];
	uint64_t len[KVP_R__N]; /* bytes */
	uint64_t end;           /* the segment's size */
};

#define KVP_HUGE_ALIGN (2ull << 20)
/* owner fields are 16 bits; 0xffff is the agent */
#define KVP_MAX_CLIENTS 65534u
#define KVP_MAX_HOLDS_PER_CLIENT (1u << 20)
/* page map owner tags are 32 bits (slot + 1; KVP_DRAM_OWNER_UNPOP above) */
#define KVP_MAX_INDEX_SLOTS (1ull << 31)
#define KVP_MAX_STAGING_SLOTS 65535u /* span words name a head in 16 bits */
#define KVP_MAX_LEASE_SLOTS 65536u

KVP_INLINE const char *
kvp_region_name(unsigned r)
{
	static const char *const names[KVP_R__N] = {
		"header",        "clients",
		"holds",         "index meta",
		"index entries", "hbm map",
		"dram header",   "page map",
		"leases",        "namespace counters",
		"arena",         "request rings",
		"spans",         "staging",
		"cluster",
	};

	return r < KVP_R__N ? names[r] : "?";
}

KVP_INLINE uint64_t
kvp_geom_sum(const struct kvp_geom *g)
{
	return kvp_hash(0x67656f6d6b767031ull, g,
			offsetof(struct kvp_geom, g_sum));
}

/* Bytes of region r for geometry g (0: absent); false on overflow. */
KVP_INLINE bool
kvp__region_len(const struct kvp_geom *g, unsigned r, uint64_t *len)
{
	uint64_t a = 0, b = 1;

	switch (r) {
	case KVP_R_HEADER:
		a = KVP_HEADER_BYTES;
		break;
	case KVP_R_CLIENTS:
		a = g->g_max_clients;
		b = sizeof(struct kvp_client_slot);
		break;
	case KVP_R_HOLDS:
		a = (uint64_t)g->g_max_clients * g->g_holds_per_client;
		b = sizeof(kvp_aword_t);
		break;
	case KVP_R_META:
		a = g->g_index_slots;
		b = sizeof(kvp_aword_t);
		break;
	case KVP_R_ENTRIES:
		a = g->g_index_slots;
		b = sizeof(struct kvp_entry);
		break;
	case KVP_R_HBMMAP:
		a = g->g_index_slots;
		b = sizeof(kvp_aword_t);
		break;
	case KVP_R_DRAM:
		a = sizeof(struct kvp_dram_hdr);
		break;
	case KVP_R_PAGEMAP:
		a = g->g_dram_pages;
		b = sizeof(struct kvp_page);
		break;
	case KVP_R_LEASES:
		a = g->g_max_leases;
		b = sizeof(struct kvp_lease_slot);
		break;
	case KVP_R_NS_STATS:
		a = KVP_NS_STAT_ROWS;
		b = sizeof(struct kvp_ns_stat);
		break;
	case KVP_R_ARENA:
		a = g->g_dram_pages;
		b = g->g_dram_unit;
		break;
	case KVP_R_RINGS:
		a = (uint64_t)g->g_max_clients * g->g_ring_entries;
		b = sizeof(struct kvp_req);
		break;
	case KVP_R_SPANS:
		a = g->g_staging_slots;
		b = sizeof(struct kvp_span);
		break;
	case KVP_R_STAGING:
		a = g->g_staging_slots;
		b = g->g_staging_slot_bytes;
		break;
	case KVP_R_CLUSTER:
		a = g->g_rbox_kib ? (uint64_t)g->g_max_clients + 1 : 0;
		b = (uint64_t)g->g_rbox_kib << 10; /* a page first: >= 16 KiB */
		break;
	default:
		return false;
	}
	return !__builtin_mul_overflow(a, b, len);
}

/*
 * Check geometry g against the limits of every field and compute the
 * layout it implies into *L.  0, or -EINVAL with the reason in msg.
 * The checksum and the file size are checked by kvp_geom_check.
 */
KVP_INLINE int
kvp_layout_compute(const struct kvp_geom *g, struct kvp_layout *L, char *msg,
		   size_t cap)
{
	const char *bad = NULL;
	uint64_t off = 0;
	bool ssd = g->g_ring_entries != 0;
	unsigned r;

	if (g->g_max_clients < 1 || g->g_max_clients > KVP_MAX_CLIENTS)
		bad = "max_clients";
	else if (g->g_holds_per_client < 16 ||
		 g->g_holds_per_client > KVP_MAX_HOLDS_PER_CLIENT)
		bad = "holds_per_client";
	else if (g->g_index_slots < 16 ||
		 g->g_index_slots > KVP_MAX_INDEX_SLOTS ||
		 (g->g_index_slots & (g->g_index_slots - 1)))
		bad = "index_slots";
	else if (g->g_index_limit < 1 || g->g_index_limit > g->g_index_slots)
		bad = "index_limit";
	else if (g->g_dram_unit < 4096 || g->g_dram_unit > (4u << 20) ||
		 (g->g_dram_unit & (g->g_dram_unit - 1)))
		bad = "dram_unit";
	else if (g->g_dram_pages < 1 || g->g_dram_pages > UINT32_MAX - 1)
		bad = "dram_pages";
	else if (g->g_max_value < 1 ||
		 g->g_max_value > g->g_dram_pages * g->g_dram_unit)
		bad = "max_value";
	else if (g->g_max_leases < 1 || g->g_max_leases > KVP_MAX_LEASE_SLOTS)
		bad = "max_leases";
	else if (g->g_ring_entries > KVP_RING_ENTRIES)
		bad = "ring_entries";
	else if (g->g_rbox_kib &&
		 (g->g_rbox_kib < 16 || g->g_rbox_kib > KVP_RBOX_KIB_MAX))
		bad = "rbox_kib";
	else if (ssd && (g->g_staging_slots < 1 ||
			 g->g_staging_slots > KVP_MAX_STAGING_SLOTS ||
			 g->g_staging_slot_bytes < KVP_PAGE ||
			 g->g_staging_slot_bytes > (1ull << 30) ||
			 g->g_staging_slot_bytes % KVP_PAGE ||
			 g->g_max_clients > KVP_MAX_CLIENTS_STAGING))
		bad = "staging";
	else if (!ssd && (g->g_staging_slots || g->g_staging_slot_bytes))
		bad = "staging without an SSD tier";
	if (bad) {
		snprintf(msg, cap, "segment geometry: %s out of range", bad);
		return -EINVAL;
	}
	for (r = 0; r < KVP_R__N; r++) {
		uint64_t len, align = KVP_PAGE;

		if (!kvp__region_len(g, r, &len))
			goto overflow;
		if (r == KVP_R_ARENA || r == KVP_R_STAGING)
			align = KVP_HUGE_ALIGN;
		off = (off + align - 1) & ~(align - 1);
		L->off[r] = len ? off : 0;
		L->len[r] = len;
		if (__builtin_add_overflow(off, len, &off) ||
		    off > (1ull << 50))
			goto overflow;
	}
	/* a whole number of 2 MiB pages: the same layout fits a hugetlbfs
	 * file (kvpoold --hugepages); on tmpfs the tail is never touched */
	L->end = (off + KVP_HUGE_ALIGN - 1) & ~(uint64_t)(KVP_HUGE_ALIGN - 1);
	return 0;
overflow:
	snprintf(msg, cap, "segment geometry: the layout overflows");
	return -EINVAL;
}

/* Seal a geometry (its checksum). */
KVP_INLINE void
kvp_geom_seal(struct kvp_geom *g)
{
	g->g_sum = kvp_geom_sum(g);
}

/*
 * Is g a sound geometry for a segment file of file_size bytes?  Its
 * checksum, every field's limits, and its layout's end equal to its
 * g_seg_size and to the file's size.  0 and the layout in *L, or -EPROTO
 * with the reason in msg.
 */
KVP_INLINE int
kvp_geom_check(const struct kvp_geom *g, uint64_t file_size,
	       struct kvp_layout *L, char *msg, size_t cap)
{
	if (g->g_sum != kvp_geom_sum(g)) {
		snprintf(msg, cap, "segment geometry: bad checksum");
		return -EPROTO;
	}
	if (kvp_layout_compute(g, L, msg, cap))
		return -EPROTO;
	if (L->end != g->g_seg_size || g->g_seg_size != file_size) {
		snprintf(
			msg, cap,
			"segment geometry: layout of %llu bytes, header says %llu, "
			"file has %llu",
			(unsigned long long)L->end,
			(unsigned long long)g->g_seg_size,
			(unsigned long long)file_size);
		return -EPROTO;
	}
	return 0;
}

/* A mapped segment as one process sees it (private memory).  The
 * geometry and layout are this process's own validated copies: every
 * bound below comes from them, never from the header. */
struct kvp_seg {
	unsigned char *base;
	uint64_t size;
	int fd; /* its own open file description: carries this process's lock */
	struct kvp_geom g;   /* validated at bind, private */
	struct kvp_layout L; /* computed from g */
	struct kvp_shm_header *hdr;
	struct kvp_client_slot *clients;
	kvp_aword_t *holds;
	kvp_aword_t *meta;
	struct kvp_entry *entries;
	kvp_aword_t *hbm; /* the HBM map: index_slots words */
	struct kvp_dram_hdr *dram;
	struct kvp_page *pages;
	unsigned char *arena;
	struct kvp_lease_slot *leases;
	struct kvp_ns_stat *ns_stats; /* KVP_NS_STAT_ROWS rows */
	struct kvp_req *rings;        /* NULL without an SSD tier */
	struct kvp_span *spans;
	unsigned char *staging;
	struct kvp_cluster *cluster; /* NULL without a remote tier */
	uint64_t slot_mask;          /* index_slots - 1 */
	uint64_t bucket_mask;        /* index_slots / 8 - 1 */
	/* who this process is to the allocator lock (0: no one; tools) */
	unsigned int lock_token;
	unsigned int lock_seq;
	unsigned int lock_held; /* the word we installed while we hold it */
	kvp_aint_t *lock_claim;
	/* the segment file: /dev/shm/kvpool.<pool>, or kvpool.<pool> on a
	 * hugetlbfs mount (kvp_shm_open_path) */
	char path[320];
};

/* ---- small helpers shared by client, agent and tools ---- */

/* Bounds-checked offset to pointer: NULL when [off, off+len) is outside. */
KVP_INLINE void *
kvp_shm_ptr(const struct kvp_seg *s, kvp_off_t off, uint64_t len)
{
	if (off == 0 || off > s->size || len > s->size - off)
		return NULL;
	return s->base + off;
}

/* Shared (not private) futex: the word lives in a MAP_SHARED segment. */
KVP_INLINE int
kvp_futex_wait(volatile kvp_aint_t *w, unsigned int val, uint64_t timeout_ns)
{
	struct timespec ts = { (time_t)(timeout_ns / 1000000000ull),
			       (long)(timeout_ns % 1000000000ull) };

	return (int)syscall(SYS_futex, w, FUTEX_WAIT, val, &ts, NULL, 0);
}

KVP_INLINE void
kvp_futex_wake(volatile kvp_aint_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

KVP_INLINE void
kvp_futex_wake_one(volatile kvp_aint_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Process start time in clock ticks since boot (field 22 of /proc/pid/stat);
 * 0 when the process does not exist or /proc cannot be read. */
KVP_INLINE uint64_t
kvp_proc_start_time(long pid)
{
	char path[64], buf[1024];
	const char *p;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* comm may contain spaces and parens */
	if (!p)
		return 0;
	for (field = 2; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	return strtoull(p, NULL, 10);
}

/* Is someone holding the OFD lock on byte 'byte' of the segment file?
 * 1 yes, 0 no, negative errno on failure.  Uses this process's own open
 * file description, so it sees every other holder. */
KVP_INLINE int
kvp_shm_lock_held(int fd, off_t byte)
{
	struct flock fl;

	memset(&fl, 0, sizeof(fl));
	fl.l_type = F_WRLCK;
	fl.l_whence = SEEK_SET;
	fl.l_start = byte;
	fl.l_len = 1;
	if (fcntl(fd, F_OFD_GETLK, &fl) < 0)
		return -errno;
	return fl.l_type != F_UNLCK;
}

KVP_INLINE int
kvp_shm_lock_take(int fd, off_t byte)
{
	struct flock fl;

	memset(&fl, 0, sizeof(fl));
	fl.l_type = F_WRLCK;
	fl.l_whence = SEEK_SET;
	fl.l_start = byte;
	fl.l_len = 1;
	if (fcntl(fd, F_OFD_SETLK, &fl) < 0)
		return -errno;
	return 0;
}

/* Is the agent alive?  A syscall: slow paths only. */
KVP_INLINE bool
kvp_shm_agent_alive(const struct kvp_seg *s)
{
	return kvp_shm_lock_held(s->fd, KVP_LOCK_AGENT) == 1;
}

/*
 * Is client slot i alive?  Kernel-checked: its OFD lock is held.  A forked
 * child inherits the descriptor (and so the lock) of its parent, so the
 * recorded pid must also still be the same process (same start time):
 * PID reuse cannot fool either check.
 */
KVP_INLINE bool
kvp_shm_client_alive(const struct kvp_seg *s, uint32_t i)
{
	const struct kvp_client_slot *cs = &s->clients[i];
	uint64_t pid, st, now;

	if (kvp_shm_lock_held(s->fd, KVP_LOCK_CLIENT0 + (off_t)i) != 1)
		return false;
	/* relaxed: written once before the slot went LIVE (release) */
	pid = kvp_load_relaxed(&cs->cs_pid);
	st = kvp_load_relaxed(&cs->cs_start_time);
	if (pid == 0 || st == 0)
		return true; /* still claiming: the lock is the authority */
	now = kvp_proc_start_time((long)pid);
	if (now == 0 && kill((pid_t)pid, 0) == 0)
		return true; /* /proc unreadable: trust the lock */
	return now == st;
}

/*
 * Take the segment's geometry from the first header copy that is sound
 * (kvp_geom_check) into s->g, and map every region from the layout it
 * implies.  s->base, s->size and s->hdr are set.  0, or -EPROTO with the
 * reason in msg (both copies damaged: the pool must be recreated).
 */
KVP_INLINE int
kvp_shm_bind(struct kvp_seg *s, char *msg, size_t cap)
{
	char why[2][80];
	unsigned k;

	for (k = 0; k < 2; k++) {
		/* a plain copy: a torn read of a copy being repaired fails
		 * its checksum and the other copy is used */
		memcpy(&s->g, (const struct kvp_geom *)&s->hdr->h_geom[k],
		       sizeof(s->g));
		if (kvp_geom_check(&s->g, s->size, &s->L, why[k],
				   sizeof(why[k])) == 0)
			break;
	}
	if (k == 2) {
		memset(&s->g, 0, sizeof(s->g));
		snprintf(
			msg, cap,
			"both geometry copies of the segment header are damaged "
			"(%s): stop the agent and the workers, remove the segment, restart",
			why[0]);
		return -EPROTO;
	}
	s->clients =
		(struct kvp_client_slot *)(s->base + s->L.off[KVP_R_CLIENTS]);
	s->holds = (kvp_aword_t *)(s->base + s->L.off[KVP_R_HOLDS]);
	s->meta = (kvp_aword_t *)(s->base + s->L.off[KVP_R_META]);
	s->entries = (struct kvp_entry *)(s->base + s->L.off[KVP_R_ENTRIES]);
	s->hbm = (kvp_aword_t *)(s->base + s->L.off[KVP_R_HBMMAP]);
	s->dram = (struct kvp_dram_hdr *)(s->base + s->L.off[KVP_R_DRAM]);
	s->pages = (struct kvp_page *)(s->base + s->L.off[KVP_R_PAGEMAP]);
	s->leases = (struct kvp_lease_slot *)(s->base + s->L.off[KVP_R_LEASES]);
	s->ns_stats =
		(struct kvp_ns_stat *)(s->base + s->L.off[KVP_R_NS_STATS]);
	s->arena = s->base + s->L.off[KVP_R_ARENA];
	s->rings = NULL;
	s->spans = NULL;
	s->staging = NULL;
	if (s->g.g_ring_entries) {
		s->rings = (struct kvp_req *)(s->base + s->L.off[KVP_R_RINGS]);
		s->spans = (struct kvp_span *)(s->base + s->L.off[KVP_R_SPANS]);
		s->staging = s->base + s->L.off[KVP_R_STAGING];
	}
	s->cluster = NULL;
	if (s->g.g_rbox_kib)
		s->cluster = (struct kvp_cluster *)(s->base +
						    s->L.off[KVP_R_CLUSTER]);
	s->slot_mask = s->g.g_index_slots - 1;
	s->bucket_mask = s->g.g_index_slots / 8 - 1;
	return 0;
}

/* Names: "/kvpool.<pool>"; pool names are [A-Za-z0-9_.-]{1,63}. */
KVP_INLINE int
kvp_shm_name(const char *pool, char *out, size_t cap)
{
	size_t i, n;

	if (!pool)
		return -EINVAL;
	n = strlen(pool);
	if (n == 0 || n >= KVP_POOL_NAME_MAX)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		char ch = pool[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
		      ch == '.'))
			return -EINVAL;
	}
	if ((size_t)snprintf(out, cap, "/kvpool.%s", pool) >= cap)
		return -EINVAL;
	return 0;
}

/*
 * Call fn(dir, arg) for each hugetlbfs mount of 2 MiB pages, in mount
 * order (/proc/self/mountinfo), until it returns non-zero; that value is
 * returned (0: none did).  A mount without a pagesize option has the
 * system's default huge page size, 2 MiB on x86-64 and most arm64.
 */
KVP_INLINE int
kvp_hugetlbfs_each(int (*fn)(const char *dir, void *arg), void *arg)
{
	char line[4096], dir[512];
	FILE *f = fopen("/proc/self/mountinfo", "re");
	int rc = 0;

	if (!f)
		return 0;
	while (!rc && fgets(line, sizeof(line), f)) {
		char *sep = strstr(line, " - "), *mp, *o;
		size_t k = 0;
		int field;

		if (!sep || strncmp(sep + 3, "hugetlbfs ", 10))
			continue;
		/* the super options: a pagesize other than 2M is not ours */
		o = strstr(sep, "pagesize=");
		if (o && strncmp(o + 9, "2M", 2) && strncmp(o + 9, "2048k", 5))
			continue;
		/* field 5 is the mount point, with \ooo escapes */
		for (mp = line, field = 0; field < 4 && mp; field++) {
			mp = strchr(mp, ' ');
			if (mp)
				mp++;
		}
		if (!mp)
			continue;
		while (*mp && *mp != ' ' && k + 1 < sizeof(dir)) {
			if (mp[0] == '\\' && mp[1] >= '0' && mp[1] <= '3' &&
			    mp[2] >= '0' && mp[2] <= '7' && mp[3] >= '0' &&
			    mp[3] <= '7') {
				dir[k++] = (char)((mp[1] - '0') * 64 +
						  (mp[2] - '0') * 8 +
						  (mp[3] - '0'));
				mp += 4;
			} else {
				dir[k++] = *mp++;
			}
		}
		dir[k] = 0;
		rc = fn(dir, arg);
	}
	fclose(f);
	return rc;
}

struct kvp__shm_find {
	const char *name; /* "/kvpool.<pool>" */
	int flags;
	int fd, err;
	char *path;
	size_t cap;
};

KVP_INLINE int
kvp__shm_try(const char *dir, void *arg)
{
	struct kvp__shm_find *f = (struct kvp__shm_find *)arg;
	int fd;

	if ((size_t)snprintf(f->path, f->cap, "%s%s", dir, f->name) >= f->cap)
		return 0;
	fd = open(f->path, f->flags | O_NOFOLLOW | O_CLOEXEC, 0);
	if (fd >= 0) {
		f->fd = fd;
		return 1;
	}
	/* a hugetlbfs mount this process cannot search (another user's
	 * pool, mode 0700) does not hold our segment as far as we can
	 * know: look on; in /dev/shm (sticky, searchable by all) a refusal
	 * means the file is there and not ours */
	if (errno == EACCES && strcmp(dir, "/dev/shm") && access(dir, X_OK))
		return 0;
	if (errno != ENOENT) {
		f->err = errno;
		return 1;
	}
	return 0;
}

/*
 * Open the segment file of shm name "/kvpool.<pool>" (kvp_shm_name): in
 * /dev/shm (tmpfs, 4 KiB pages), else on a hugetlbfs mount (2 MiB pages,
 * kvpoold --hugepages), the first in mount order that has it.  The path
 * tried last (or found) is in path.  A descriptor, or -errno (-ENOENT:
 * no such segment anywhere).  O_NOFOLLOW: a link squatting the name is
 * not followed (shm_open does the same).
 */
KVP_INLINE int
kvp_shm_open_path(const char *name, int flags, char *path, size_t cap)
{
	struct kvp__shm_find f = { name, flags, -1, 0, path, cap };

	if (kvp__shm_try("/dev/shm", &f) ||
	    kvp_hugetlbfs_each(kvp__shm_try, &f))
		return f.fd >= 0 ? f.fd : -f.err;
	snprintf(path, cap, "/dev/shm%s", name);
	return -ENOENT;
}

/* A message into a caller's buffer of any size (cut short if it must be). */
KVP_INLINE void __attribute__((format(printf, 3, 4)))
kvp_shm_msg(char *msg, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, cap, fmt, ap);
	va_end(ap);
}

/* Is gid this process's effective group or one of its supplementary groups? */
KVP_INLINE bool
kvp_shm_in_group(gid_t gid)
{
	gid_t *v;
	int n, k;
	bool in = false;

	if (getegid() == gid)
		return true;
	n = getgroups(0, NULL);
	if (n <= 0)
		return false;
	v = (gid_t *)malloc(sizeof(*v) * (size_t)n);
	if (!v)
		return false;
	n = getgroups(n, v);
	for (k = 0; k < n && !in; k++)
		in = v[k] == gid;
	free(v);
	return in;
}

/*
 * May this process use the segment file it opened (st: its fstat)?  Every
 * process that maps a segment writes it, so whoever else can write the
 * file reads and forges what the pool's users store.  Trusted: a regular
 * file owned by our effective uid that others cannot write (only we and
 * root could have set its mode), or a --group segment: mode 0660 exactly,
 * its group one of ours (the agent's user owns it).  Refused: anything
 * writable by everyone, and a segment of another user that is not such a
 * group segment (someone took the pool's name first).  The agent adds its
 * own, stricter rule (agent/segment.c).  0, or -EACCES with what to do in msg.
 */
KVP_INLINE int
kvp_shm_trusted(const struct stat *st, const char *path, char *msg, size_t cap)
{
	unsigned mode = (unsigned)(st->st_mode & 07777);

	if (!S_ISREG(st->st_mode)) {
		kvp_shm_msg(msg, cap,
			    "%s is not a regular file: refused; remove it and "
			    "restart kvpoold",
			    path);
		return -EACCES;
	}
	if (mode & S_IWOTH) {
		kvp_shm_msg(msg, cap,
			    "%s is writable by everyone (mode %04o): refused; "
			    "remove it (rm %s) and restart kvpoold",
			    path, mode, path);
		return -EACCES;
	}
	if (st->st_uid == geteuid())
		return 0;
	if (mode == 0660 && kvp_shm_in_group(st->st_gid))
		return 0;
	kvp_shm_msg(
		msg, cap,
		"%s is owned by uid %u, not by you (uid %u), and is not "
		"a --group segment (mode 0660) of your groups (mode %04o, gid %u): "
		"refused; remove it (rm %s) unless that user's agent serves this pool",
		path, (unsigned)st->st_uid, (unsigned)geteuid(), mode,
		(unsigned)st->st_gid, path);
	return -EACCES;
}

/*
 * Validate the identity of a header read from a segment: magic, ABI and
 * layout signature (the geometry is checked by kvp_shm_bind).  Returns 0,
 * or -EPROTO and a message that says what to do in msg.
 */
KVP_INLINE int
kvp_shm_check_header(const struct kvp_shm_header *h, char *msg, size_t cap)
{
	if (h->h_magic != KVP_SHM_MAGIC) {
		snprintf(msg, cap,
			 "not a kvpool segment (bad magic); remove it "
			 "from /dev/shm or pick another --pool");
		return -EPROTO;
	}
	if (h->h_abi_major != KVP_ABI_MAJOR ||
	    h->h_layout_sig != kvp_layout_sig()) {
		snprintf(
			msg, cap,
			"segment ABI %u.%u (layout %016llx) does not "
			"match this build's %u.%u (layout %016llx): run a kvpool "
			"client built for the agent's version, or stop the agent, "
			"remove the segment and restart it",
			h->h_abi_major, h->h_abi_minor,
			(unsigned long long)h->h_layout_sig, KVP_ABI_MAJOR,
			KVP_ABI_MINOR, (unsigned long long)kvp_layout_sig());
		return -EPROTO;
	}
	return 0;
}

#endif /* KVP_SHM_H */
