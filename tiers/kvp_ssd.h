/* SPDX-License-Identifier: MIT */
/*
 * kvp_ssd.h - the agent's SSD store: log-structured segment files.
 *
 * Only kvpoold uses this (every function is _agent); it lives on the
 * agent's private heap and talks to the disk through io_uring (liburing),
 * or, where io_uring is refused, through a small pread/pwrite thread pool
 * with the same API.  Workers never see it: they post requests to the agent,
 * the agent's I/O thread turns them into calls below.
 *
 * On disk (docs/ssd.md has the picture): a directory of segment files
 * seg-XXXXXXXX.kvs (fixed size, --ssd-segment, preallocated), appended by
 * one writer in 4 KiB blocks:
 *
 *   block 0            file header (magic, format, segment id, create seq)
 *   batches            [4 KiB batch header][value][value]... (format 3)
 *   summary            (sealed segments) one entry per record
 *   last block         (sealed segments) trailer: where the summary is, CRCs
 *
 * A record is a value or a tombstone with a 64-bit global sequence number.
 * Format 3 writes records in batches: one 4 KiB header block holds the
 * compact headers of up to a block's worth of records (key, length,
 * sequence, chunk CRCs), the values follow it, each 4 KiB aligned (O_DIRECT
 * straight from and to DRAM units and staging spans); a tombstone is a
 * header entry with no value.  A batch is one device write.
 * A location ("loc") is (segment id << 32 | low), 0 never valid; low is,
 * in a format 3 segment, (block of the batch header << 8 | the value's
 * distance in blocks from it, 1..255) and, in a format 1 or 2 segment
 * (read, never written), the block of the record's own header block.
 * Bits 60..63 of a loc are reserved (a drive index): segment ids stay
 * below 2^28.  A tombstone names the value record it
 * deletes (its target location): at recovery the latest value record of a
 * key (highest sequence) is its value, unless a tombstone targets exactly
 * that record.  So a tombstone written late (the agent writes it when it
 * reclaims the deleted slot, maybe after the key was put again and the
 * new value written) never shadows a newer value: what a tombstone kills
 * is fixed when the delete happens, not when the tombstone is written.
 * (Format 1 tombstones name no target and kill every record of their key
 * up to their own sequence; they are still read.)
 *
 * Threading: a struct kvp_ssd is used by one thread at a time (the agent's
 * I/O thread).  No call blocks on the device except open, recover, close,
 * segment_foreach, segment_drop and a write that has to start a new
 * segment (file creation, and, when --ssd-size is reached, giving a
 * segment back).  Completions are delivered by kvp_ssd_poll_agent() only.
 *
 * Status codes: 0 or -errno, as everywhere in kvpool.  In completions:
 *   0         done
 *   -ENOSPC   the file system is full, or --ssd-size is reached and every
 *             segment that could be given back was vetoed
 *   -EIO      the device failed, a read or write came back short, an
 *             fdatasync failed (strict durability)
 *   -EBADMSG  a read found a bad header, a checksum mismatch, or a record
 *             that is not the one asked for
 *   -ENOENT   a read of a segment that was dropped
 */
#ifndef KVP_SSD_H
#define KVP_SSD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define KVP_SSD_BLOCK 4096u
#define KVP_SSD_SEGMENT_DEFAULT (256ull << 20)
#define KVP_SSD_SEGMENT_MIN (256ull << 10)
#define KVP_SSD_SEGMENT_MAX (64ull << 30)
#define KVP_SSD_KEY_MAX 255u

/* Segment ids: 1..KVP_SSD_SEG_ID_MAX, in creation order (the file
 * seg-%08x.kvs); 0 is "no segment".  The store refuses to create a segment
 * past the highest id rather than wrap.  Below 2^28: the agent keeps a
 * drive's id in a location's top 4 bits (agent/drives.c). */
#define KVP_SSD_SEG_ID_MAX 0x0ffffffeu

/* Location packing: segment id (1..KVP_SSD_SEG_ID_MAX) and the low word
 * (see above).  KVP_SSD_LOC_BLOCK is the low word; in a format 3 segment
 * KVP_SSD_LOC_HDR is the batch header's block, KVP_SSD_LOC_DELTA the
 * value's distance from it, KVP_SSD_LOC_VALUE the value's first block. */
#define KVP_SSD_LOC(seg, blk) (((uint64_t)(seg) << 32) | (uint32_t)(blk))
#define KVP_SSD_LOC_SEG(loc) ((uint32_t)((loc) >> 32) & 0x0fffffffu)
#define KVP_SSD_LOC_BLOCK(loc) ((uint32_t)(loc))
#define KVP_SSD_LOW3(hdr, delta) (((uint32_t)(hdr) << 8) | (uint8_t)(delta))
#define KVP_SSD_LOC_HDR(loc) ((uint32_t)(loc) >> 8)
#define KVP_SSD_LOC_DELTA(loc) ((uint32_t)(loc)&0xffu)
#define KVP_SSD_LOC_VALUE(loc) (KVP_SSD_LOC_HDR(loc) + KVP_SSD_LOC_DELTA(loc))
/* a value starts at most this many blocks after its batch header */
#define KVP_SSD_DELTA_MAX 255u

enum kvp_ssd_durability {
	KVP_SSD_RELAXED = 0, /* never fsync per write (default) */
	KVP_SSD_STRICT = 1,  /* a write completes once fdatasync'd (batched) */
};

enum kvp_ssd_rec_type {
	KVP_SSD_REC_VALUE = 1,
	KVP_SSD_REC_TOMBSTONE = 2,
};

enum kvp_ssd_op {
	KVP_SSD_OP_WRITE = 1,
	KVP_SSD_OP_TOMBSTONE = 2,
	KVP_SSD_OP_READ = 3,
};

/* kvp_ssd_write_agent() flags */
/* the memory after the last source iovec up to the next 4 KiB boundary
 * may be read (and written to disk as padding): lets a value whose last
 * run is 4 KiB aligned go to disk without any copy */
#define KVP_SSD_SRC_PADDED 0x1u

struct kvp_ssd;

/*
 * Owner's say before a segment is given back to make room (--ssd-size).
 * Called on the I/O thread, inside a write that needs a new segment, with
 * the id of the oldest segment not yet asked in this round.  The owner may
 * call kvp_ssd_segment_foreach_agent() (and the read-only calls: usage,
 * stats, segment_info) to learn which of its records live there and
 * forget them; it must not submit I/O.  Return 0 to let the segment go,
 * anything else to veto it (it is kept; the next oldest is asked).
 */
typedef int (*kvp_ssd_giveback_fn)(void *arg, struct kvp_ssd *s,
				   uint32_t seg_id);

/*
 * Where a record the owner kept (kvp_ssd_reinsert_agent, tag its own)
 * lives now: new_loc, written at the head of the log; old_loc, its
 * segment stayed after all (the give-back failed); or 0, it could not be
 * written (no room beside the write that asked for the segment, an I/O
 * error): it went with its segment.  Called once per kept record, on the
 * I/O thread, inside the same write call as giveback_cb, before that write
 * returns; it must not call the store.  giveback_arg is its arg.
 */
typedef void (*kvp_ssd_reinsert_fn)(void *arg, uint64_t tag, uint64_t old_loc,
				    uint64_t new_loc);

struct kvp_ssd_cfg {
	/* created (0700) if missing; must be a directory owned by the euid, not
	 * group/other-writable */
	const char *dir;
	/* --ssd-segment; 0 = 256 MiB; multiple of 4 KiB */
	uint64_t segment_bytes;
	uint64_t capacity_bytes; /* --ssd-size; 0 = no limit but the disk's */
	enum kvp_ssd_durability durability;
	uint32_t queue_depth;            /* device ops in flight; 0 = 128 */
	uint32_t max_requests;           /* outstanding requests; 0 = 4096 */
	uint32_t threads;                /* pread fallback workers; 0 = 4 */
	bool wipe;                       /* delete every segment at open */
	kvp_ssd_giveback_fn giveback_cb; /* NULL: give back the oldest, no veto */
	void *giveback_arg;
	/* --ssd-reinsert: percent of a segment a reclaim may keep (0: none) */
	uint32_t reinsert_pct;
	kvp_ssd_reinsert_fn reinsert_cb; /* where kept records went */
	/* optional, recovery: called with a record's hash (kvp_hash(ns, key,
	 * klen)) twice before the recovery callback gets it, so the owner can
	 * prefetch what it will touch: stage 0 KVP_SSD_PREFETCH * 2 records
	 * ahead, stage 1 KVP_SSD_PREFETCH ahead (what stage 0 fetched tells
	 * it where to look); its arg is the recovery callback's */
	void (*recover_prefetch)(void *arg, uint64_t hash, unsigned stage);
	/* --ssd-header-cache: bytes of batch header blocks kept in memory so
	 * that a read is one device operation (0: none, every read reads its
	 * header block too) */
	uint64_t header_cache_bytes;
	/* recovery: threads that hand records to the owner at once (0, 1:
	 * the calling thread alone; at most KVP_SSD_RECOVER_THREADS_MAX);
	 * the owner's callback must then be safe on several threads */
	uint32_t recover_threads;
	/* --ssd-write-depth: write bytes on the device at once (0: 1 MiB).
	 * A read sent to the device waits behind every write byte queued
	 * there before it; writes beyond this wait in the store (not on the
	 * device), sent in parts of a quarter of it as earlier ones
	 * complete; while reads are on the device or were a moment ago (5
	 * ms), one piece at a time, a sixteenth of a part, and none while a
	 * read is on the device unless none went for write_hold_ns (0: 2
	 * ms).  Reads are always sent at once. */
	uint64_t write_depth;
	uint64_t write_hold_ns;
};
#define KVP_SSD_RECOVER_THREADS_MAX 16u
#define KVP_SSD_WRITE_DEPTH_DEFAULT (1ull << 20)

/* A record as found on disk (recovery, segment_foreach).  key is valid
 * for the duration of the callback only. */
struct kvp_ssd_rec {
	uint64_t loc;
	uint64_t seq;
	uint64_t ns;
	uint64_t vlen; /* 0 for tombstones */
	/* tombstones: the location of the value record they delete (0: format
	 * 1, every older record) */
	uint64_t target;
	/* recovery callbacks: kvp_hash(ns, key, klen), 0 elsewhere */
	uint64_t hash;
	const void *key;
	uint32_t klen;
	uint32_t type; /* enum kvp_ssd_rec_type */
};

/* Recovery callback: 0 = keep (the record is live, its bytes count as
 * live), KVP_SSD_DECLINE = the owner cannot take it (the store writes a
 * tombstone so it never comes back; recovery fails if it cannot),
 * KVP_SSD_DECLINE_OWED = the owner cannot take it and writes the
 * tombstone itself, when the store has room (a full store must not stop
 * a restart), < 0 = abort recovery with that code. */
#define KVP_SSD_DECLINE 1
#define KVP_SSD_DECLINE_OWED 2
typedef int (*kvp_ssd_rec_fn)(void *arg, const struct kvp_ssd_rec *r);

/* One read: value bytes [off, off + len) of the record at loc. */
struct kvp_ssd_read {
	uint64_t loc;
	uint64_t vlen; /* the record's value length (as written) */
	uint64_t off;
	uint64_t len; /* 0 = to the end of the value */
	uint64_t ns;  /* expected identity, checked when key != NULL */
	const void *key;
	uint32_t klen;
	unsigned ndst;
	/* 4 KiB aligned bases and lengths; total >= kvp_ssd_extent(off, len,
	 * NULL) */
	const struct iovec *dst;
};

struct kvp_ssd_cqe {
	uint64_t tag;
	uint64_t loc;     /* write, tombstone: the record's location */
	uint64_t seq;     /* write, tombstone: its sequence number */
	int32_t status;   /* 0 or -errno (see the top of this file) */
	uint32_t dst_off; /* read: the requested bytes start at dst + dst_off */
	uint32_t op;      /* enum kvp_ssd_op */
	uint32_t flags;   /* read: KVP_SSD_CQE_* */
};
/* a read whose batch header came from the header cache: one device
 * operation (a format 3 read without it read the header block too) */
#define KVP_SSD_CQE_HDR_CACHED 1u
/* a format 3 read that read its batch header from the device */
#define KVP_SSD_CQE_HDR_READ 2u

struct kvp_ssd_usage {
	uint64_t capacity_bytes; /* 0 = unlimited */
	uint64_t used_bytes;     /* on-disk bytes: segments * segment size */
	uint64_t live_bytes;     /* record bytes not reported dead */
	uint64_t segment_bytes;
	uint32_t nsegments;
	uint32_t oldest_id; /* 0 = none */
	uint32_t active_id; /* 0 = none */
	uint32_t pad;
};

struct kvp_ssd_seg_info {
	uint64_t live_bytes;
	uint64_t nrecords;
	uint64_t size;
	bool sealed;
	bool active;
};

struct kvp_ssd_stats {
	/* completed OK; value bytes */
	uint64_t writes, tombstones, write_bytes;
	uint64_t dev_write_bytes; /* bytes written to files */
	uint64_t batches;         /* batch writes completed OK */
	/* value bytes staged through an aligned bounce buffer */
	uint64_t copied_bytes;
	uint64_t reads, read_bytes; /* completed OK; requested bytes */
	/* bytes read for reads (record header + extent) */
	uint64_t dev_read_bytes;
	uint64_t recover_read_bytes; /* bytes read by recovery */
	uint64_t chunks_verified, crc_errors, io_errors, enospc;
	uint64_t fsyncs;
	uint64_t fixed_ops; /* ops on registered buffers */
	/* batch writes are sent in parts (cfg.write_depth): parts sent (on
	 * the pread/pwrite path: written), and those that waited in the
	 * store for the device's writes to drain */
	uint64_t write_parts, write_parts_held;
	uint64_t write_dev_peak; /* the most write bytes on the device */
	/* parts cut into pieces while reads were about, and the times the
	 * pacer held a write back because a read was on the device */
	uint64_t write_pieces, write_held_read;
	/* format 3 reads whose batch header came from the header cache, and
	 * those that read it from the device */
	uint64_t hdr_cached_reads, hdr_device_reads;
	uint64_t segs_created, segs_sealed, segs_dropped, segs_vetoed;
	uint64_t carried_tombstones; /* written by out-of-order drops */
	/* records reclaims kept, written again; their value bytes */
	uint64_t reinserted, reinserted_bytes;
	uint64_t recovered, recover_ns; /* last recovery */
	uint32_t inflight_requests, inflight_ops;
	bool uring;      /* false: pread/pwrite thread pool */
	bool direct;     /* false: O_DIRECT refused, buffered I/O */
	bool registered; /* buffers registered with io_uring */
};

/* Bytes of destination needed to read [off, off + len) of a value, and
 * where the first requested byte lands (*dst_off).  len 0 reads nothing. */
static inline uint64_t
kvp_ssd_extent(uint64_t off, uint64_t len, uint32_t *dst_off)
{
	uint64_t a = off & ~(uint64_t)(KVP_SSD_BLOCK - 1);
	uint64_t b = (off + len + KVP_SSD_BLOCK - 1) &
		     ~(uint64_t)(KVP_SSD_BLOCK - 1);

	if (dst_off)
		*dst_off = (uint32_t)(off - a);
	return len ? b - a : 0;
}

/* On-disk bytes a record with a value of vlen bytes is counted for: its
 * 4 KiB-rounded value and a share of its batch header block (an entry is
 * 32 bytes, its key and chunk CRCs: 256 is a typical entry and a batch's
 * rounding, format 3).  Used alike when a record is counted live and when
 * it is reported dead. */
#define KVP_SSD_ENTRY_SHARE 256u
static inline uint64_t
kvp_ssd_record_bytes(uint64_t vlen)
{
	return KVP_SSD_ENTRY_SHARE +
	       ((vlen + KVP_SSD_BLOCK - 1) & ~(uint64_t)(KVP_SSD_BLOCK - 1));
}

/*
 * Open (create) the store in cfg->dir: take its lock file, list the
 * segments, validate their file headers, pick io_uring or the thread pool,
 * O_DIRECT or buffered.  Nothing is reported and nothing can be written
 * until kvp_ssd_recover_agent() has run.  Blocks (file I/O).
 * Returns 0, -EINVAL (bad configuration), -EBUSY (another agent holds the
 * directory), -EPROTO (a segment of another format version: move the
 * directory away or start with wipe), -ENOMEM, or a file system error.
 */
int kvp_ssd_open_agent(const struct kvp_ssd_cfg *cfg, struct kvp_ssd **out);

/*
 * Rebuild: read every sealed segment's summary, scan the unsealed ones
 * batch by batch (format 3; record by record for format 1 and 2),
 * verifying every header checksum, repair torn tails
 * (truncate after the last good record) and seal them, then report each
 * live record (the latest value record per (ns, key), unless a tombstone
 * targets it) to cb, in no particular order.  Call
 * once after open.  Blocks.  Returns the number of records kept (>= 0), or
 * the callback's negative code, or -errno.
 */
int64_t kvp_ssd_recover_agent(struct kvp_ssd *s, kvp_ssd_rec_fn cb, void *arg);

/*
 * Drain every request (completions not yet polled are discarded), seal the
 * active segment, close.  Blocks.
 */
void kvp_ssd_close_agent(struct kvp_ssd *s);

/*
 * Queue a write of a value (the concatenation of src[0..nsrc), 1 byte to
 * kvp_ssd_max_value_agent()) under (ns, key).  The record joins the open
 * batch (format 3): the batch goes to the device as one write at the next
 * submit (or poll), or as soon as it is full.  The source memory must stay
 * valid and unchanged until the completion: whole 4 KiB blocks of 4 KiB
 * aligned sources go to the device without a copy (docs/ssd.md).  The
 * completion carries the location and sequence number, or the error
 * (-ENOSPC, -EIO); every record of a batch completes with it.  Returns 0
 * (queued; call submit), -EINVAL, -E2BIG, -EBUSY (max_requests
 * outstanding: poll first), -ENOMEM, -EAGAIN (no room yet: the owner
 * vetoed giving back the oldest segment, or its last batches are still
 * being written; try again soon).
 */
int kvp_ssd_write_agent(struct kvp_ssd *s, uint64_t tag, uint64_t ns,
			const void *key, uint32_t klen, const struct iovec *src,
			unsigned nsrc, unsigned flags);

/* Queue a tombstone for (ns, key) that deletes the value record at
 * 'target' (its location, nonzero): after a restart that record is not
 * reported, nor any older one of the key; a newer value record of the key
 * is.  An entry of the open batch (no block of its own).  Returns as
 * kvp_ssd_write_agent(). */
int kvp_ssd_tombstone_agent(struct kvp_ssd *s, uint64_t tag, uint64_t ns,
			    const void *key, uint32_t klen, uint64_t target);

/*
 * Queue a read (see struct kvp_ssd_read).  The device reads the record's
 * header block (format 3: its batch's, unless the header cache has it)
 * and the 4 KiB-rounded extent of [off, off + len) only.  The header
 * block's CRC and the record's identity
 * (the entry at the location's delta: ns, key, length) are checked, then:
 * whole-value reads verify every chunk CRC; ranged reads verify the chunks
 * the extent fully covers.  Returns 0 (queued), -EINVAL (bad range or
 * destination), -ENOENT (no such segment), -EBUSY, -ENOMEM.
 */
int kvp_ssd_read_agent(struct kvp_ssd *s, uint64_t tag,
		       const struct kvp_ssd_read *rd);

/* Hand queued operations to the kernel (or the pool).  0 or -errno. */
int kvp_ssd_submit_agent(struct kvp_ssd *s);

/*
 * Reap up to max completions into cqes.  timeout_ms: 0 = do not wait,
 * < 0 = wait until at least one completion (returns 0 at once if nothing
 * is outstanding), > 0 = wait at most that long.  Also submits whatever
 * is queued.  Returns the number of completions (>= 0) or -errno.
 */
int kvp_ssd_poll_agent(struct kvp_ssd *s, struct kvp_ssd_cqe *cqes,
		       unsigned max, int timeout_ms);

/* Requests not yet handed back by poll. */
unsigned kvp_ssd_outstanding_agent(const struct kvp_ssd *s);

/* Signal eventfd efd whenever a completion becomes ready (for a caller
 * that sleeps on more than this store: agent/drives.c).  0 or -errno. */
int kvp_ssd_set_eventfd_agent(struct kvp_ssd *s, int efd);

/* The record at loc (value of vlen bytes) is superseded, deleted or
 * evicted: its bytes no longer count as live in its segment.
 * 0, -ENOENT (segment gone), -EINVAL. */
int kvp_ssd_record_dead_agent(struct kvp_ssd *s, uint64_t loc, uint64_t vlen);

/* The oldest sealed segment with id > after (0 = the very oldest):
 * 0 and *id, or -ENOENT. */
int kvp_ssd_oldest_segment_agent(const struct kvp_ssd *s, uint32_t after,
				 uint32_t *id);

/* Every record of segment id (values and tombstones, live or not, from
 * its summary, or its headers when the summary is unreadable).  Stops at
 * the first nonzero return of cb and returns it.  Blocks (reads the
 * summary).  0, cb's code, -ENOENT, -EIO, -ENOMEM. */
int kvp_ssd_segment_foreach_agent(struct kvp_ssd *s, uint32_t id,
				  kvp_ssd_rec_fn cb, void *arg);

/*
 * Give segment id back to the file system now.  If older segments remain
 * (a veto kept them), tombstones are first written (and fdatasync'd) for
 * its records whose keys also appear in those older segments, so that no
 * older record comes back after a restart (docs/ssd.md, "Giving space
 * back").  Reads already in flight finish; later reads of it get -ENOENT.
 * 0, -ENOENT, -EBUSY (the active or a sealing segment, or one whose
 * batches are still being written), -EIO, -ENOSPC.
 */
int kvp_ssd_segment_drop_agent(struct kvp_ssd *s, uint32_t id);

/*
 * Inside giveback_cb only: keep record r (a value of the segment being given
 * back, as segment_foreach reported it) instead of losing it with its
 * segment.  Its header and value are read now (blocking) and checked
 * (header CRC, identity, every chunk CRC); once the segment is gone they
 * are written first into the next segment, with a new sequence number,
 * and reinsert_cb says where (with tag).  At most cfg.reinsert_pct
 * percent of a segment's bytes is kept per write that makes room.
 * 0 (kept: reinsert_cb will be called, unless giveback_cb vetoes the
 * segment), -ENOSPC (the share is used up), -EBADMSG (it does not read
 * back whole), -EIO, -ENOENT (no such sealed segment), -EINVAL, -ENOMEM.
 */
int kvp_ssd_reinsert_agent(struct kvp_ssd *s, const struct kvp_ssd_rec *r,
			   uint64_t tag);

int kvp_ssd_segment_info_agent(const struct kvp_ssd *s, uint32_t id,
			       struct kvp_ssd_seg_info *info);
void kvp_ssd_usage_agent(const struct kvp_ssd *s, struct kvp_ssd_usage *u);
void kvp_ssd_stats_agent(struct kvp_ssd *s, struct kvp_ssd_stats *st);

/* Largest value this store accepts (depends on the segment size). */
uint64_t kvp_ssd_max_value_agent(const struct kvp_ssd *s);

/*
 * Register memory regions (the staging arena, in pieces) with io_uring
 * so that single-buffer reads and writes inside them use
 * READ_FIXED/WRITE_FIXED (no per-I/O page pinning).  At most
 * KVP_SSD_REG_MAX regions of at most KVP_SSD_REG_BYTES_MAX each (the
 * kernel refuses a larger buffer, and with it the whole call).
 * Registering pins every page at once, faulting in the unpopulated ones.
 * Replaces earlier registrations; only while nothing is in flight.
 * Pinned memory counts against RLIMIT_MEMLOCK unless the agent has
 * CAP_IPC_LOCK.  On failure the store logs one line and keeps using plain
 * reads and writes.  0, -EBUSY (I/O in flight), -EOPNOTSUPP (thread
 * pool), -EINVAL (too many or too large regions), or the kernel's error
 * (-ENOMEM: memlock limit).
 */
#define KVP_SSD_REG_MAX 16u
#define KVP_SSD_REG_BYTES_MAX (1ull << 30)
int kvp_ssd_register_buffers_agent(struct kvp_ssd *s,
				   const struct iovec *regions, unsigned n);

/* CRC-32C (Castagnoli), tiers/crc32c.c.  crc = 0 to start; chaining
 * kvp_crc32c(kvp_crc32c(0, a), b) equals the CRC of a then b.  The
 * dispatcher uses the SSE4.2 instruction when the CPU has it. */
uint32_t kvp_crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t kvp_crc32c_sw(uint32_t crc, const void *buf, size_t len);
/* sw if no SSE4.2 */
uint32_t kvp_crc32c_hw(uint32_t crc, const void *buf, size_t len);
bool kvp_crc32c_hw_available(void);

/*
 * On-disk format (version KVP_SSD_FORMAT, little-endian).  Everything
 * read from disk is validated before use; a mismatch in one record ends
 * the scan of its file, never the agent.
 */
/* written; 2: tombstones name their target; 3: records in batches */
#define KVP_SSD_FORMAT 3
#define KVP_SSD_FORMAT_MIN 1            /* oldest format still read */
#define KVP_SSD_MAGIC_FILE 0x5353564bu  /* "KVSS" */
#define KVP_SSD_MAGIC_REC 0x5252564bu   /* "KVRR" */
#define KVP_SSD_MAGIC_TRAIL 0x5454564bu /* "KVTT" */
#define KVP_SSD_MAGIC_BATCH 0x4252564bu /* "KVRB" */
#define KVP_SSD_CHUNK_SHIFT_MIN 16      /* 64 KiB CRC chunks ... */
#define KVP_SSD_MAX_CHUNKS 944u         /* ... doubled until they fit */

struct kvp_ssd_file_hdr {
	uint32_t fh_magic;
	uint16_t fh_version;
	uint16_t fh_hdr_size; /* sizeof(struct kvp_ssd_file_hdr) */
	uint32_t fh_seg_id;
	uint32_t fh_crc;        /* CRC-32C of the struct with fh_crc = 0 */
	uint64_t fh_create_seq; /* next sequence number when created */
	uint64_t fh_seg_size;   /* the file's size in bytes */
	uint64_t fh_ctime_ns;
};

struct kvp_ssd_rec_hdr {
	uint32_t rh_magic;
	uint16_t rh_version;
	uint8_t rh_type;    /* enum kvp_ssd_rec_type */
	uint8_t rh_klen;    /* 1..255 */
	uint32_t rh_crc;    /* CRC-32C of [0, rh_len) with rh_crc = 0 */
	uint32_t rh_len;    /* header bytes covered by rh_crc */
	uint32_t rh_seg_id; /* where it was written: a record found */
	uint32_t rh_block;  /* anywhere else is not trusted */
	uint64_t rh_ns;
	uint64_t rh_seq;
	uint64_t rh_vlen; /* tombstones (format 2): target location */
	uint32_t rh_nchunks;
	uint8_t rh_chunk_shift;
	uint8_t rh_pad[3];
	/* then: key[klen], zeros to a multiple of 4, uint32_t crc[nchunks] */
};

/* Format 3: a batch header block: this, then bh_nrec entries (struct
 * kvp_ssd_bent, each followed by key[klen], zeros to a multiple of 4,
 * uint32_t crc[nchunks], zeros to a multiple of 8), zeros to 4 KiB. */
struct kvp_ssd_batch_hdr {
	uint32_t bh_magic;
	uint16_t bh_version;
	uint16_t bh_nrec;
	uint32_t bh_crc;     /* CRC-32C of [0, bh_len) with bh_crc = 0 */
	uint32_t bh_len;     /* header bytes covered by bh_crc */
	uint32_t bh_seg_id;  /* where it was written: a batch found */
	uint32_t bh_block;   /* anywhere else is not trusted */
	uint32_t bh_nblocks; /* blocks of the batch, header included */
	uint32_t bh_pad;
};

struct kvp_ssd_bent {
	uint8_t be_type;
	uint8_t be_klen;  /* 1..255 */
	uint8_t be_delta; /* value: its first block - the header's (1..255);
			   * tombstone: 0 */
	uint8_t be_chunk_shift;
	uint32_t be_nchunks;
	uint64_t be_ns;
	uint64_t be_seq;
	uint64_t be_vlen; /* tombstones: target location */
};

struct kvp_ssd_sum_ent {
	uint8_t se_type;
	uint8_t se_klen;
	uint16_t se_flags; /* 0 on disk */
	uint32_t se_block; /* the location's low word */
	uint64_t se_ns;
	uint64_t se_seq;
	uint64_t se_vlen; /* tombstones (format 2): target location */
			  /* then: key[klen], zeros to a multiple of 8 */
};

struct kvp_ssd_trailer {
	uint32_t st_magic;
	uint16_t st_version;
	uint16_t st_pad;
	uint32_t st_seg_id;
	uint32_t st_crc; /* CRC-32C of the struct with st_crc = 0 */
	uint64_t st_seg_size;
	uint64_t st_create_seq;
	uint64_t st_sum_off; /* bytes; == end of the last record */
	uint64_t st_sum_len; /* bytes of summary entries */
	uint64_t st_max_seq;
	uint32_t st_sum_crc;
	uint32_t st_nrecs;
};

_Static_assert(sizeof(struct kvp_ssd_file_hdr) == 40, "ssd file header layout");
_Static_assert(sizeof(struct kvp_ssd_rec_hdr) == 56,
	       "ssd record header layout");
_Static_assert(sizeof(struct kvp_ssd_sum_ent) == 32,
	       "ssd summary entry layout");
_Static_assert(sizeof(struct kvp_ssd_trailer) == 64, "ssd trailer layout");
_Static_assert(sizeof(struct kvp_ssd_batch_hdr) == 32, "ssd batch header");
_Static_assert(sizeof(struct kvp_ssd_bent) == 32, "ssd batch entry layout");
_Static_assert(sizeof(struct kvp_ssd_batch_hdr) + sizeof(struct kvp_ssd_bent) +
			       256 + 4 * KVP_SSD_MAX_CHUNKS <=
		       KVP_SSD_BLOCK,
	       "a record of the largest key and value fits a batch header");
_Static_assert(sizeof(struct kvp_ssd_rec_hdr) + 256 + 4 * KVP_SSD_MAX_CHUNKS <=
		       KVP_SSD_BLOCK,
	       "chunk CRCs fit the header block");

#endif /* KVP_SSD_H */
