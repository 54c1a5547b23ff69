/* SPDX-License-Identifier: MIT */
/*
 * tiers/ssd_int.h - the SSD store's internals, shared by its files (API
 * and on-disk format in tiers/kvp_ssd.h; operator notes in docs/ssd.md).
 * Agent only: nothing outside tiers/ssd_*.c includes it.
 *
 * The store's files, each owning one thing (they call each other only
 * through the prototypes below):
 *   ssd_format.c   the on-disk codec: batch header blocks and their
 *                  entries, chunk CRCs, summary entries, record header
 *                  checks (pure functions of bytes: no file, no request)
 *   ssd_segs.c     segment files: names, opening, seal, start, making
 *                  room, reinsertion, and the owner's segment calls
 *                  (oldest, foreach, reinsert, drop, info, usage)
 *   ssd_log.c      the log's writer: the summary, the open batch, value
 *                  records and tombstones queued into it
 *   ssd_io.c       requests and I/O: io_uring or the pread thread pair,
 *                  reads and their verification, submit and poll
 *   ssd_recover.c  recovery: the scan of every segment into the owner's
 *                  index, torn-tail repair
 *   ssd_hcache.c   the header cache: batch header blocks of live segments
 *                  in memory, so a read is one device operation
 *   ssd_store.c    open and close, the directory, statistics
 *
 * Design:
 *  1. Segment files of a fixed size (fallocate'd), appended by one writer:
 *     block 0 is the file header, records follow; when a record does not
 *     fit, the segment is sealed (summary of its records written after the
 *     last record, trailer in the last block) and a new one is started.
 *  2. Records are written in batches (format 3): one 4 KiB header block
 *     holds a compact entry per record (type, ns, key, value length,
 *     sequence, per-chunk CRC-32C; one CRC covers the block), and the
 *     values follow it, each 4 KiB aligned, so O_DIRECT transfers go
 *     straight to and from the DRAM arena or a staging span (no copy when
 *     the source is 4 KiB aligned).  Writes and tombstones queued between
 *     two submits join the open batch until its header block is full, its
 *     next value would start more than KVP_SSD_DELTA_MAX blocks after the
 *     header (the location's low word has 8 bits for that distance) or it
 *     has KVP_SSD_BATCH_IOV iovecs; the batch is then one WRITEV, and
 *     every record in it completes with it.  A read reads the header block
 *     and the value's extent (one READV when the value follows the header
 *     and the extent starts at the value; the extent alone when the
 *     header is in the header cache, ssd_hcache.c) and checks the header's CRC, the
 *     entry's identity (ns, key, length: the record asked for) and the
 *     chunk CRCs the extent covers.  Format 1 and 2 segments (a 4 KiB
 *     header block per record) are still read, recovered, reinserted
 *     from and given back; nothing is written to them.
 *  3. Recovery reads each sealed segment's summary (one sequential read)
 *     and scans unsealed ones batch header by batch header; the first bad
 *     header ends that file's scan (a torn tail: the block is zeroed and
 *     the segment sealed there).  The latest sequence per (ns, key) wins;
 *     a tombstone kills the record it names.  The table that finds the
 *     latest record per key is probed a few records ahead (prefetch), and
 *     the owner is told the hashes ahead too (cfg.recover_prefetch).
 *  4. Space comes back one whole segment at a time, oldest first, after
 *     the owner's say (giveback_cb), and never while records written to it
 *     are queued, in flight or complete but not yet polled (a round can
 *     fill several segments: their records would be reported in a
 *     segment that is gone, after the owner's say was asked without
 *     them, and a write queued on its descriptor could land in the next
 *     file to get the number).  Dropping a segment while older ones
 *     remain first rewrites its tombstones into the active segment
 *     (fdatasync'd), so a deleted key never comes back from an older one.
 *     The owner may keep some of the segment's records (reinsertion, as
 *     CacheLib's Navy does for items read since they were written): each
 *     is read into memory and checked before the segment goes, then
 *     written at the head of the log, first in the new segment, with a
 *     new sequence number (it is the key's latest record; a tombstone
 *     that later names it kills the older ones too), at most
 *     --ssd-reinsert percent of a segment per reclaim, so a log full of
 *     hot records still gives space back.  Its new location goes to the
 *     owner (reinsert_cb), or 0 if it could not be written.
 *  5. I/O through io_uring (liburing): a batch is one WRITEV, a read one
 *     READV of header and value, or a header READ plus the extent's READV
 *     (READ_FIXED when it lands in a registered buffer).  Where io_uring
 *     is refused (or KVP_SSD_FORCE_PREAD=1), two worker threads run the
 *     same operations with pwritev/preadv and complete them through the
 *     same poll: reads ahead of queued writes, a batch's write in parts
 *     as on the io_uring path (a job each).
 *  6. Everything read from disk is validated before use.
 */
#ifndef KVP_SSD_INT_H
#define KVP_SSD_INT_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shm/kvp_crash.h"
#include "shm/kvp_env.h"
#include "shm/kvp_hash.h"
#include "tiers/kvp_ssd.h"

#define B KVP_SSD_BLOCK
#define KVP_SSD_MAX_IOV 66
#define KVP_SSD_WORKERS 2
/* iovecs of one batch write (UIO_MAXIOV) */
#define KVP_SSD_BATCH_IOV 1024u
/* an internal request: a batch's write, whose records are its members */
#define KVP_SSD_OP_BATCH 100u
/* records ahead of the one handled whose table slots are prefetched */
#define KVP_SSD_PREFETCH 8u

struct kvp_sseg {
	uint32_t id;
	int fd;
	uint64_t size, create_seq, max_seq;
	uint64_t wpos; /* next record block (active) */
	uint64_t live_bytes, nrecs;
	uint16_t version; /* the file's format (1..KVP_SSD_FORMAT) */
	/* records (values, tombstones) written to it whose completions
	 * have not been handed back by a poll yet: the segment is not given
	 * back until they have been, since its owner learns where a record
	 * is only then, and so only then can it say the record is in use
	 * (the pread path finishes a batch between two polls).  Tier thread
	 * only: counted in kvp_queue_record, down in kvp_ssd_poll_agent. */
	unsigned wr_inflight;
	bool sealed;
	bool dirty; /* written since open: synced at close */
	/* bytes found on disk at open (a truncated file's records past it are
	 * torn) */
	uint64_t valid_end;
	unsigned char *sum; /* active: summary entries so far */
	size_t sum_len, sum_cap;
};

struct kvp_sreq {
	uint64_t tag, loc, seq;
	uint64_t vlen; /* write: the value's length */
	uint32_t op, dst_off;
	uint32_t fmt; /* read: the segment's format */
	int status;
	/* read: its header came from the header cache (one device op) */
	bool hc_hit;
	/* a record whose batch header is to be cached when the poll hands
	 * it back (hdr holds the block, given by its batch) */
	bool hc_fill;
	uint32_t hc_blk; /* read or hc_fill: the header's block */
	unsigned nsub;
	/* a batch (op KVP_SSD_OP_BATCH): its header block is hdr, its
	 * records are members (linked through mnext), its iovecs biov */
	struct kvp_sreq *mhead, *mtail, *mnext;
	struct iovec *biov;
	unsigned nbiov, bnrec;
	uint32_t bused;          /* header bytes used */
	uint64_t bblk, bnblocks; /* header block, blocks so far */
	uint64_t bbytes;         /* bytes of the write */
	uint64_t want[2];        /* bytes each sub-op must transfer */
	struct kvp_sseg *seg;
	void *hdr;    /* header block (aligned) */
	void *bounce; /* write: aligned copy of the value */
	struct kvp_ssd_read rd;
	struct iovec dst[KVP_SSD_MAX_IOV];
	unsigned ndst;
	struct iovec wiov[KVP_SSD_MAX_IOV]; /* write / header iovecs: they must
					     * outlive submission (the kernel
					     * reads them then) */
	unsigned char key[256];
	struct kvp_sreq *next;
};

struct kvp_ssd {
	struct kvp_ssd_cfg cfg;
	char dir[1024]; /* for messages: files are reached through dirfd */
	int dirfd;      /* the directory checked at open (owner, mode) */
	int lockfd;
	struct kvp_sseg **segs; /* sorted by id */
	unsigned nsegs, capsegs;
	struct kvp_sseg *active;
	struct kvp_sreq *batch; /* the open batch (in the active segment) */
	unsigned char *zero;    /* a zero block: padding, buffered I/O */
	uint64_t next_seq;
	uint32_t next_id; /* never above KVP_SSD_SEG_ID_MAX + 1 */
	bool ids_exhausted_logged;
	struct io_uring ring;
	bool uring, direct, registered;
	struct iovec reg[KVP_SSD_REG_MAX];
	unsigned nreg;
	struct kvp_sreq *done_head, *done_tail;
	unsigned outstanding, queued;
	struct kvp_ssd_stats st;
	/* the counts completions make (kvp_ssd_stats_agent adds them to st):
	 * a worker's under mu on the pread/pwrite path, where the tier thread
	 * counts into st without it; the tier thread's on io_uring */
	struct kvp_ssd_dcount {
		uint64_t batches, dev_write_bytes, chunks_verified;
		uint64_t crc_errors, io_errors;
		uint64_t write_parts; /* the workers' (write_parts) */
	} dc;
	struct kvp_hcache *hc; /* NULL: headers are always read from disk */
	bool in_giveback;
	/* records the reclaims of this write keep, written into the segment
	 * it starts (kvp_seg_new) */
	struct kvp_reins *reins;
	unsigned nreins, capreins;
	uint64_t reins_bytes; /* their on-disk bytes: the share's measure */
	/* the pread/pwrite path: worker threads take jobs, finish requests
	 * and put them on the done list (both under mu) */
	pthread_t workers[KVP_SSD_WORKERS];
	unsigned nworkers;
	pthread_mutex_t mu;
	pthread_cond_t cv_work, cv_done;
	/* the jobs, reads first (jobs_rtail: the last read; rule 9: a read
	 * waits behind the writes the workers are doing, not those queued) */
	struct kvp_job *jobs_head, *jobs_tail, *jobs_rtail;
	/* workers writing now, and at most while reads come (KVP_SSD_WORKERS
	 * - 1, one at least: set before the workers start, never changed) */
	unsigned writing, write_slots;
	bool stopping;
	int efd1; /* kvp_ssd_set_eventfd_agent's fd + 1; 0: none */
	/* the write pacer (io_uring path, ssd_io.c): parts of batch writes
	 * not yet on the device, in order; bytes of writes on the device;
	 * read operations on the device; the most write bytes on the device
	 * (cfg.write_depth), and the size of a part */
	struct kvp_wpart *wq_head, *wq_tail;
	unsigned wq_len;
	uint64_t wr_dev_bytes;
	unsigned rd_dev;
	uint64_t rd_last_ns; /* a read's last send or completion (CLOCK_MONOTONIC) */
	uint64_t wr_part;
	/* while reads are about: one piece of at most this much on the
	 * device (a sixteenth of a part, whole blocks, one at least) */
	uint64_t wr_piece;
	uint64_t wr_last_ns; /* a write's last send (CLOCK_MONOTONIC) */
};

/* A record a reclaim keeps (kvp_ssd_reinsert_agent): its header block and
 * value, read and checked before its segment went. */
struct kvp_reins {
	uint64_t tag;      /* the owner's, handed back with the location */
	uint64_t old_loc;  /* where it was */
	uint64_t new_loc;  /* where it went (0: lost) */
	uint64_t ns, vlen; /* its identity, for the summary */
	uint32_t klen;
	unsigned char key[KVP_SSD_KEY_MAX];
	unsigned char *buf; /* what was read (aligned) */
	unsigned char *val; /* the value in it (4 KiB aligned) */
	uint64_t len;       /* its share: kvp_ssd_record_bytes(vlen) */
};

/* A part of a batch's write waiting in the store, or on the device (its
 * address, tagged KVP_UD_PART, is its completion's user data).  The
 * iovecs are slices of the batch's: they live as long as the part. */
struct kvp_wpart {
	struct kvp_sreq *r; /* the batch */
	struct kvp_wpart *next;
	uint64_t off, len;
	unsigned n;
	struct iovec iov[];
};
/* user data: a struct kvp_wpart (bit 0: a sub-op) */
#define KVP_UD_PART 2u
/* reads sent less than this ago keep the write pacer at one piece */
#define KVP_SSD_READ_RECENT_NS 5000000ull
/* with reads on the device, a write waits at most this long since the
 * last one went (kvp_wr_pump; cfg.write_hold_ns 0) */
#define KVP_SSD_WRITE_HOLD_NS 2000000ull
/* reads on the device at most for writes to go in pieces (more: a batch,
 * whose own queue each read waits behind) */
#define KVP_SSD_FEW_READS 2u

struct kvp_job {
	struct kvp_sreq *r;
	unsigned idx, n;
	bool wr;
	/* lives in the request (a read), or in part (a write's part) */
	const struct iovec *iov;
	struct kvp_wpart *part; /* the job's to free */
	uint64_t off, total;
	struct kvp_job *next;
};

/* Round up to whole blocks. */
static inline uint64_t
kvp_rup(uint64_t v)
{
	return (v + B - 1) & ~(uint64_t)(B - 1);
}

/* A zeroed, block-aligned buffer of n bytes (one block for 0), or NULL. */
static inline void *
kvp_aligned(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, B, n ? n : B))
		return NULL;
	memset(p, 0, n ? n : B);
	return p;
}

struct kvp_rtab; /* recovery's table (ssd_recover.c) */
struct kvp_hcache;

/* ssd_hcache.c */
struct kvp_hcache *kvp_hc_new(uint64_t bytes);
void kvp_hc_free(struct kvp_hcache *c);
bool kvp_hc_get(struct kvp_hcache *c, uint32_t id, uint32_t blk, void *out);
void kvp_hc_put(struct kvp_hcache *c, uint32_t id, uint32_t blk,
		const void *hdr);
void kvp_hc_drop_seg(struct kvp_hcache *c, uint32_t id);

/* ssd_format.c */
unsigned kvp_chunk_shift(uint64_t vlen, uint32_t *nchunks);
size_t kvp_sum_ent_size(unsigned klen);
size_t kvp_bent_size(unsigned klen, uint32_t nchunks);
void kvp_chunk_crcs(uint32_t *crc, uint32_t nchunks, unsigned sh, uint64_t vlen,
		    const struct iovec *src, unsigned nsrc);
void kvp_bent_fill(unsigned char *at, uint8_t type, unsigned delta, uint64_t ns,
		   uint64_t seq, const void *key, unsigned klen, uint64_t vlen,
		   uint64_t target, const struct iovec *src, unsigned nsrc);
void kvp_bhdr_finish(void *hdr, uint32_t seg, uint64_t blk, uint64_t nblocks,
		     unsigned nrec, uint32_t used);
bool kvp_bhdr_valid(const void *hdr, uint32_t id, uint64_t blk,
		    uint64_t seg_blocks);
bool kvp_bent_next(const void *hdr, uint32_t *pos, struct kvp_ssd_bent *e,
		   const unsigned char **key, const uint32_t **crc);
bool kvp_bent_find(const void *hdr, unsigned delta, struct kvp_ssd_bent *e,
		   const unsigned char **key, const uint32_t **crc);
void kvp_rec_from_sum(const struct kvp_sseg *g, const struct kvp_ssd_sum_ent *e,
		      const void *key, struct kvp_ssd_rec *rec);
bool kvp_hdr_valid(const struct kvp_sseg *g, const struct kvp_ssd_rec_hdr *h,
		   uint64_t blk);
bool kvp_value_crcs_ok(const struct kvp_ssd_rec_hdr *h,
		       const unsigned char *val);

/* ssd_segs.c */
uint32_t kvp_seg_name_id(const char *name);
int kvp_open_file(struct kvp_ssd *s, const char *name, int flags);
int kvp_file_ours(const struct stat *st, char *msg, size_t cap);
struct kvp_sseg *kvp_seg_find(const struct kvp_ssd *s, uint32_t id);
int kvp_seg_insert(struct kvp_ssd *s, struct kvp_sseg *g);
void kvp_seg_free(struct kvp_sseg *g);
int kvp_seg_seal(struct kvp_ssd *s, struct kvp_sseg *g);
void kvp_reins_discard(struct kvp_ssd *s, unsigned from);
int kvp_seg_new(struct kvp_ssd *s, uint64_t need, unsigned klen);

/* ssd_io.c */
struct kvp_sreq *kvp_req_new(struct kvp_ssd *s, uint64_t tag, uint32_t op,
			     bool need_hdr);
void kvp_req_free(struct kvp_sreq *r);
void kvp_req_done(struct kvp_ssd *s, struct kvp_sreq *r);
void *kvp_worker(void *arg);
void kvp_guard(struct kvp_ssd *s, struct kvp_sreq *r, bool take);
int kvp_queue_rw(struct kvp_ssd *s, struct kvp_sreq *r, unsigned idx, bool wr,
		 const struct iovec *iov, unsigned n, uint64_t off);

/* ssd_log.c */
int kvp_sum_append(struct kvp_sseg *g, uint8_t type, uint32_t blk, uint64_t ns,
		   uint64_t seq, uint64_t vlen, const void *key, unsigned klen);
void kvp_batch_finish(struct kvp_ssd *s, struct kvp_sreq *b);
void kvp_batch_close(struct kvp_ssd *s);

/* ssd_recover.c */
int kvp_seg_records(struct kvp_ssd *s, struct kvp_sseg *g, kvp_ssd_rec_fn cb,
		    void *arg, bool repair, struct kvp_rtab *pf);

#endif /* KVP_SSD_INT_H */
