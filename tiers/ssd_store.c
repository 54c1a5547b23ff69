/* SPDX-License-Identifier: MIT */
/*
 * ssd_store.c - the agent's SSD store (API and on-disk format in
 * tiers/kvp_ssd.h; operator notes in docs/ssd.md).
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
 *     and the extent starts at the value) and checks the header's CRC, the
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
 *     the owner's say (evict_cb), and never while records written to it
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
 *     same poll.
 *  6. Everything read from disk is validated before use.
 */
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
	struct iovec reg[2];
	unsigned nreg;
	struct kvp_sreq *done_head, *done_tail;
	unsigned outstanding, queued;
	struct kvp_ssd_stats st;
	bool in_evict;
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
	struct kvp_job *jobs_head, *jobs_tail;
	bool stopping;
	int efd1; /* kvp_ssd_set_eventfd_agent's fd + 1; 0: none */
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

struct kvp_job {
	struct kvp_sreq *r;
	unsigned idx, n;
	bool wr;
	const struct iovec *iov; /* lives in the request */
	uint64_t off, total;
	struct kvp_job *next;
};

static uint64_t
kvp_rup(uint64_t v)
{
	return (v + B - 1) & ~(uint64_t)(B - 1);
}

static void *
kvp_aligned(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, B, n ? n : B))
		return NULL;
	memset(p, 0, n ? n : B);
	return p;
}

static void kvp_batch_close(struct kvp_ssd *s);
static void kvp_batch_finish(struct kvp_ssd *s, struct kvp_sreq *b);

uint64_t
kvp_ssd_max_value_agent(const struct kvp_ssd *s)
{
	uint64_t blocks = s->cfg.segment_bytes / B;

	/* file header, record header, one summary block, the trailer */
	return blocks > 4 ? (blocks - 4) * B : 0;
}

static unsigned
kvp_chunk_shift(uint64_t vlen, uint32_t *nchunks)
{
	unsigned sh = KVP_SSD_CHUNK_SHIFT_MIN;

	while (((vlen + (1ull << sh) - 1) >> sh) > KVP_SSD_MAX_CHUNKS)
		sh++;
	*nchunks = (uint32_t)((vlen + (1ull << sh) - 1) >> sh);
	return sh;
}

static size_t
kvp_sum_ent_size(unsigned klen)
{
	return (sizeof(struct kvp_ssd_sum_ent) + klen + 7) & ~(size_t)7;
}

/* ---- format 3: batch header blocks ---- */

/* Bytes of a batch entry with a key of klen bytes and nchunks CRCs. */
static size_t
kvp_bent_size(unsigned klen, uint32_t nchunks)
{
	return (sizeof(struct kvp_ssd_bent) + ((klen + 3u) & ~3u) +
		4u * (size_t)nchunks + 7) &
	       ~(size_t)7;
}

/* The chunk CRCs of the value src[0..nsrc) (vlen bytes, chunks of 1 << sh
 * bytes) into crc[]. */
static void
kvp_chunk_crcs(uint32_t *crc, uint32_t nchunks, unsigned sh, uint64_t vlen,
	       const struct iovec *src, unsigned nsrc)
{
	uint64_t cs = 1ull << sh, done = 0;
	unsigned c, i = 0;
	size_t in = 0;

	for (c = 0; c < nchunks; c++) {
		uint64_t end = (c + 1) * cs < vlen ? (c + 1) * cs : vlen;
		uint32_t v = 0;

		while (done < end && i < nsrc) {
			size_t take = src[i].iov_len - in;
			if (take > end - done)
				take = (size_t)(end - done);
			v = kvp_crc32c(v, (const char *)src[i].iov_base + in,
				       take);
			in += take;
			done += take;
			if (in == src[i].iov_len) {
				i++;
				in = 0;
			}
		}
		crc[c] = v;
	}
}

/* Write an entry at 'at' (zeroed, kvp_bent_size bytes): a value (src,
 * vlen bytes, delta blocks after its header) or a tombstone (target). */
static void
kvp_bent_fill(unsigned char *at, uint8_t type, unsigned delta, uint64_t ns,
	      uint64_t seq, const void *key, unsigned klen, uint64_t vlen,
	      uint64_t target, const struct iovec *src, unsigned nsrc)
{
	struct kvp_ssd_bent *e = (struct kvp_ssd_bent *)at;
	uint32_t nchunks = 0;
	unsigned sh = type == KVP_SSD_REC_VALUE ?
			      kvp_chunk_shift(vlen, &nchunks) :
			      KVP_SSD_CHUNK_SHIFT_MIN;

	e->be_type = type;
	e->be_klen = (uint8_t)klen;
	e->be_delta = type == KVP_SSD_REC_VALUE ? (uint8_t)delta : 0;
	e->be_chunk_shift = (uint8_t)sh;
	e->be_nchunks = nchunks;
	e->be_ns = ns;
	e->be_seq = seq;
	e->be_vlen = type == KVP_SSD_REC_VALUE ? vlen : target;
	memcpy(e + 1, key, klen);
	kvp_chunk_crcs((uint32_t *)(at + sizeof(*e) + ((klen + 3u) & ~3u)),
		       nchunks, sh, vlen, src, nsrc);
}

/* Seal a batch header block: its fields and its CRC. */
static void
kvp_bhdr_finish(void *hdr, uint32_t seg, uint64_t blk, uint64_t nblocks,
		unsigned nrec, uint32_t used)
{
	struct kvp_ssd_batch_hdr *h = hdr;

	h->bh_magic = KVP_SSD_MAGIC_BATCH;
	h->bh_version = KVP_SSD_FORMAT;
	h->bh_nrec = (uint16_t)nrec;
	h->bh_len = used;
	h->bh_seg_id = seg;
	h->bh_block = (uint32_t)blk;
	h->bh_nblocks = (uint32_t)nblocks;
	h->bh_pad = 0;
	h->bh_crc = 0;
	h->bh_crc = kvp_crc32c(0, h, used);
}

/*
 * Is the block at hdr a batch header written at block blk of segment
 * (id, nblocks blocks in all)?  Magic, version, bounds and CRC (the
 * block's bytes are left as they were).
 */
static bool
kvp_bhdr_valid(const void *hdr, uint32_t id, uint64_t blk, uint64_t seg_blocks)
{
	struct kvp_ssd_batch_hdr h;
	uint32_t crc;

	memcpy(&h, hdr, sizeof(h));
	if (h.bh_magic != KVP_SSD_MAGIC_BATCH || h.bh_version < 3 ||
	    h.bh_version > KVP_SSD_FORMAT || h.bh_len < sizeof(h) ||
	    h.bh_len > B || h.bh_seg_id != id || h.bh_block != blk ||
	    h.bh_nblocks == 0 || blk + h.bh_nblocks > seg_blocks)
		return false;
	crc = h.bh_crc;
	h.bh_crc = 0;
	return kvp_crc32c(kvp_crc32c(0, &h, sizeof(h)),
			  (const char *)hdr + sizeof(h),
			  h.bh_len - sizeof(h)) == crc;
}

/*
 * The next entry of a valid batch header at byte *pos (start at
 * sizeof(struct kvp_ssd_batch_hdr)): a copy in *e, its key and CRCs.
 * False at the end, or at an entry that does not hold together (bounds,
 * type, chunk geometry): the CRC matched, so only a bug writes one.
 */
static bool
kvp_bent_next(const void *hdr, uint32_t *pos, struct kvp_ssd_bent *e,
	      const unsigned char **key, const uint32_t **crc)
{
	const struct kvp_ssd_batch_hdr *h = hdr;
	const unsigned char *b = hdr;
	uint64_t cs;
	size_t n;

	if (*pos + sizeof(*e) > h->bh_len)
		return false;
	memcpy(e, b + *pos, sizeof(*e));
	if (e->be_klen == 0 || (e->be_type != KVP_SSD_REC_VALUE &&
				e->be_type != KVP_SSD_REC_TOMBSTONE))
		return false;
	if (e->be_type == KVP_SSD_REC_VALUE) {
		if (e->be_delta == 0 || e->be_vlen == 0 ||
		    e->be_chunk_shift < KVP_SSD_CHUNK_SHIFT_MIN ||
		    e->be_chunk_shift > 40 ||
		    e->be_delta + kvp_rup(e->be_vlen) / B > h->bh_nblocks)
			return false;
		cs = 1ull << e->be_chunk_shift;
		if ((e->be_vlen + cs - 1) / cs != e->be_nchunks)
			return false;
	} else if (e->be_nchunks) {
		return false;
	}
	n = kvp_bent_size(e->be_klen, e->be_nchunks);
	if (*pos + n > h->bh_len)
		return false;
	*key = b + *pos + sizeof(*e);
	*crc = (const uint32_t *)(b + *pos + sizeof(*e) +
				  ((e->be_klen + 3u) & ~3u));
	*pos += (uint32_t)n;
	return true;
}

/* The value entry at distance delta of a valid batch header, or false. */
static bool
kvp_bent_find(const void *hdr, unsigned delta, struct kvp_ssd_bent *e,
	      const unsigned char **key, const uint32_t **crc)
{
	uint32_t pos = sizeof(struct kvp_ssd_batch_hdr);
	unsigned k, n = ((const struct kvp_ssd_batch_hdr *)hdr)->bh_nrec;

	for (k = 0; k < n && kvp_bent_next(hdr, &pos, e, key, crc); k++)
		if (e->be_type == KVP_SSD_REC_VALUE && e->be_delta == delta)
			return true;
	return false;
}

/* ---- segments ---- */

/* A segment file's name in the directory: exactly seg-%08x.kvs. */
static void
kvp_seg_name(uint32_t id, char *out, size_t cap)
{
	snprintf(out, cap, "seg-%08x.kvs", id);
}

/*
 * The id of a segment file's name, or 0 if the name is not exactly
 * "seg-" 8 lowercase hex digits ".kvs" with an id in
 * 1..KVP_SSD_SEG_ID_MAX.  (sscanf would take "seg-1.kvs", "seg- +1.kvx"
 * or "seg-ffffffff.kvs", whose id + 1 wraps to 0.)
 */
static uint32_t
kvp_seg_name_id(const char *name)
{
	uint32_t id = 0;
	unsigned k;

	if (strncmp(name, "seg-", 4) || strlen(name) != 16 ||
	    strcmp(name + 12, ".kvs"))
		return 0;
	for (k = 4; k < 12; k++) {
		char ch = name[k];
		unsigned d;

		if (ch >= '0' && ch <= '9')
			d = (unsigned)(ch - '0');
		else if (ch >= 'a' && ch <= 'f')
			d = (unsigned)(ch - 'a') + 10;
		else
			return 0;
		id = id << 4 | d;
	}
	return id <= KVP_SSD_SEG_ID_MAX ? id : 0;
}

/* Open a file of the store's directory (never through a symlink). */
static int
kvp_open_file(struct kvp_ssd *s, const char *name, int flags)
{
	int fd = -1;

	flags |= O_NOFOLLOW | O_CLOEXEC;
	if (s->direct) {
		fd = openat(s->dirfd, name, flags | O_DIRECT, 0600);
		if (fd < 0 && errno == EINVAL) {
			kvp_log(KVP_LOG_WARN, "ssd",
				"O_DIRECT refused in %s: buffered I/O", s->dir);
			s->direct = false;
		}
	}
	if (fd < 0 && !s->direct)
		fd = openat(s->dirfd, name, flags, 0600);
	return fd < 0 ? -errno : fd;
}

/*
 * Is what we opened (or found) in the directory ours alone?  A regular
 * file owned by our effective uid, writable by no one else: anything else
 * was put there by someone else (or made writable to them), and serving
 * it would hand out values we never wrote.  0, or -EACCES with why in msg.
 */
static int
kvp_file_ours(const struct stat *st, char *msg, size_t cap)
{
	if (!S_ISREG(st->st_mode)) {
		snprintf(msg, cap, "not a regular file");
		return -EACCES;
	}
	if (st->st_uid != geteuid()) {
		snprintf(msg, cap, "owned by uid %u, not this agent's uid %u",
			 (unsigned)st->st_uid, (unsigned)geteuid());
		return -EACCES;
	}
	if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(msg, cap, "writable by group or others (mode %04o)",
			 (unsigned)(st->st_mode & 07777));
		return -EACCES;
	}
	return 0;
}

static struct kvp_sseg *
kvp_seg_find(const struct kvp_ssd *s, uint32_t id)
{
	unsigned k;

	for (k = 0; k < s->nsegs; k++)
		if (s->segs[k]->id == id)
			return s->segs[k];
	return NULL;
}

static int
kvp_seg_insert(struct kvp_ssd *s, struct kvp_sseg *g)
{
	unsigned k;

	if (s->nsegs == s->capsegs) {
		unsigned cap = s->capsegs ? s->capsegs * 2 : 16;
		struct kvp_sseg **n = realloc(s->segs, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->segs = n;
		s->capsegs = cap;
	}
	for (k = s->nsegs; k > 0 && s->segs[k - 1]->id > g->id; k--)
		s->segs[k] = s->segs[k - 1];
	s->segs[k] = g;
	s->nsegs++;
	return 0;
}

static void
kvp_seg_free(struct kvp_sseg *g)
{
	if (g->fd >= 0)
		close(g->fd);
	free(g->sum);
	free(g);
}

/* Write the active segment's summary and trailer: it is sealed. */
static int
kvp_seg_seal(struct kvp_ssd *s, struct kvp_sseg *g)
{
	struct kvp_ssd_trailer *tr;
	uint64_t sum_off = g->wpos * B, sum_bytes = kvp_rup(g->sum_len);
	unsigned char *buf;
	int rc = 0;

	if (g->sealed)
		return 0;
	if (sum_off + sum_bytes > g->size - B)
		return -ENOSPC; /* cannot happen: space is reserved */
	buf = kvp_aligned(sum_bytes + B);
	if (!buf)
		return -ENOMEM;
	if (g->sum_len) /* a segment sealed empty (recovered with no records) */
		memcpy(buf, g->sum, g->sum_len);
	if (sum_bytes &&
	    pwrite(g->fd, buf, sum_bytes, (off_t)sum_off) != (ssize_t)sum_bytes)
		rc = -EIO;
	tr = (struct kvp_ssd_trailer *)(buf + sum_bytes);
	tr->st_magic = KVP_SSD_MAGIC_TRAIL;
	tr->st_version = KVP_SSD_FORMAT;
	tr->st_seg_id = g->id;
	tr->st_seg_size = g->size;
	tr->st_create_seq = g->create_seq;
	tr->st_sum_off = sum_off;
	tr->st_sum_len = g->sum_len;
	tr->st_max_seq = g->max_seq;
	tr->st_sum_crc = kvp_crc32c(0, g->sum, g->sum_len);
	tr->st_nrecs = (uint32_t)g->nrecs;
	tr->st_crc = 0;
	tr->st_crc = kvp_crc32c(0, tr, sizeof(*tr));
	if (!rc && pwrite(g->fd, buf + sum_bytes, B, (off_t)(g->size - B)) !=
			   (ssize_t)B)
		rc = -EIO;
	if (!rc && s->cfg.durability == KVP_SSD_STRICT && fdatasync(g->fd))
		rc = -EIO;
	free(buf);
	if (rc) {
		s->st.io_errors++;
		return rc;
	}
	g->sealed = true;
	free(g->sum);
	g->sum = NULL;
	g->sum_len = g->sum_cap = 0;
	s->st.segs_sealed++;
	if (s->active == g)
		s->active = NULL;
	return 0;
}

static int kvp_make_room(struct kvp_ssd *s);
static int kvp_sum_append(struct kvp_sseg *g, uint8_t type, uint32_t blk,
			  uint64_t ns, uint64_t seq, uint64_t vlen,
			  const void *key, unsigned klen);

/* Start a new active segment (sealing the old one, making room). */
static int
kvp_seg_start(struct kvp_ssd *s)
{
	struct kvp_ssd_file_hdr *fh;
	struct kvp_sseg *g;
	char name[32];
	int rc;

	if (s->next_id > KVP_SSD_SEG_ID_MAX) {
		/* never wrap: id 0 is no segment, and a lower id would sort
		 * as the oldest (reclaimed first, shadowed at recovery) */
		if (!s->ids_exhausted_logged)
			kvp_log(KVP_LOG_ERROR, "ssd",
				"no segment id left in %s (the highest, "
				"%08x, is taken): move the directory away or empty it",
				s->dir, KVP_SSD_SEG_ID_MAX);
		s->ids_exhausted_logged = true;
		return -ENOSPC;
	}
	kvp_batch_close(s); /* its records are in the segment sealed next */
	if (s->active) {
		rc = kvp_seg_seal(s, s->active);
		if (rc)
			return rc;
	}
	rc = kvp_make_room(s);
	if (rc)
		return rc;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->id = s->next_id++;
	g->size = s->cfg.segment_bytes;
	g->valid_end = g->size;
	g->create_seq = s->next_seq;
	g->version = KVP_SSD_FORMAT;
	g->wpos = 1;
	kvp_seg_name(g->id, name, sizeof(name));
	g->fd = kvp_open_file(s, name, O_RDWR | O_CREAT | O_EXCL);
	if (g->fd < 0) {
		rc = g->fd;
		free(g);
		return rc;
	}
	rc = posix_fallocate(g->fd, 0, (off_t)g->size);
	if (rc) {
		close(g->fd);
		unlinkat(s->dirfd, name, 0);
		free(g);
		if (rc == ENOSPC)
			s->st.enospc++;
		return -rc;
	}
	fh = kvp_aligned(B);
	if (!fh) {
		rc = -ENOMEM;
		goto err;
	}
	fh->fh_magic = KVP_SSD_MAGIC_FILE;
	fh->fh_version = KVP_SSD_FORMAT;
	fh->fh_hdr_size = sizeof(*fh);
	fh->fh_seg_id = g->id;
	fh->fh_create_seq = g->create_seq;
	fh->fh_seg_size = g->size;
	fh->fh_ctime_ns = kvp_now_ns(CLOCK_REALTIME);
	fh->fh_crc = 0;
	fh->fh_crc = kvp_crc32c(0, fh, sizeof(*fh));
	if (pwrite(g->fd, fh, B, 0) != (ssize_t)B) {
		free(fh);
		rc = -EIO;
		goto err;
	}
	free(fh);
	rc = kvp_seg_insert(s, g);
	if (rc)
		goto err;
	s->active = g;
	s->st.segs_created++;
	return 0;
err:
	close(g->fd);
	unlinkat(s->dirfd, name, 0);
	free(g);
	return rc;
}

/* Forget the kept records from index 'from' on (their owner is told
 * nothing: a veto undid them). */
static void
kvp_reins_discard(struct kvp_ssd *s, unsigned from)
{
	while (s->nreins > from) {
		struct kvp_reins *x = &s->reins[--s->nreins];

		s->reins_bytes -= x->len;
		free(x->buf);
	}
}

/* Their segment stayed after all: the kept records from index 'from' on
 * live where they were (the owner is told so) and are forgotten. */
static void
kvp_reins_in_place(struct kvp_ssd *s, unsigned from)
{
	unsigned k;

	for (k = from; k < s->nreins; k++)
		if (s->cfg.reinsert_cb)
			s->cfg.reinsert_cb(s->cfg.evict_arg, s->reins[k].tag,
					   s->reins[k].old_loc,
					   s->reins[k].old_loc);
	kvp_reins_discard(s, from);
}

/*
 * Write the records the reclaims kept into g, the segment just started
 * (NULL: it could not be), first, leaving room in it for the record of
 * 'need' blocks and a key of klen bytes that asked for it; then
 * (fdatasync'd in strict mode, the old copies being gone) tell the owner
 * where each lives, or 0: it did not fit, or its write failed, and it is
 * gone with its old segment (nothing of it is in the summary, and what a
 * failed write left is overwritten by the next record).  Synchronous: a
 * reclaim blocks already.
 */
static void
kvp_reins_flush(struct kvp_ssd *s, struct kvp_sseg *g, uint64_t need,
		unsigned klen)
{
	unsigned char *hdr = kvp_aligned(B);
	bool wrote = false;
	unsigned k;

	if (!hdr)
		g = NULL;
	for (k = 0; k < s->nreins; k++) {
		/* each a batch of its own: header block, value */
		struct kvp_reins *x = &s->reins[k];
		uint64_t nb = 1 + kvp_rup(x->vlen) / B, blk, sum;
		struct iovec v = { x->val, (size_t)x->vlen }, io[2];
		uint32_t nchunks;
		size_t esz;

		x->new_loc = 0;
		if (!g)
			continue;
		sum = kvp_rup(g->sum_len + kvp_sum_ent_size(x->klen) +
			      kvp_sum_ent_size(klen)) /
		      B;
		if (g->wpos + nb + need + sum + 1 > g->size / B)
			continue; /* the write that asked comes first */
		blk = g->wpos;
		kvp_chunk_shift(x->vlen, &nchunks);
		esz = kvp_bent_size(x->klen, nchunks);
		memset(hdr, 0, B);
		kvp_bent_fill(hdr + sizeof(struct kvp_ssd_batch_hdr),
			      KVP_SSD_REC_VALUE, 1, x->ns, s->next_seq, x->key,
			      x->klen, x->vlen, 0, &v, 1);
		kvp_bhdr_finish(
			hdr, g->id, blk, nb, 1,
			(uint32_t)(sizeof(struct kvp_ssd_batch_hdr) + esz));
		/* the summary entry first: a record on disk that the summary
		 * lacks could come back from a torn tail's header scan */
		if (kvp_sum_append(g, KVP_SSD_REC_VALUE, KVP_SSD_LOW3(blk, 1),
				   x->ns, s->next_seq, x->vlen, x->key,
				   x->klen))
			continue;
		io[0].iov_base = hdr;
		io[0].iov_len = B;
		io[1].iov_base = x->val;
		io[1].iov_len = kvp_rup(x->vlen);
		if (pwritev(g->fd, io, 2, (off_t)(blk * B)) !=
		    (ssize_t)(nb * B)) {
			g->sum_len -= kvp_sum_ent_size(x->klen);
			s->st.io_errors++;
			g = NULL; /* the rest would not fare better */
			continue;
		}
		g->wpos += nb;
		g->dirty = true;
		g->nrecs++;
		g->live_bytes += x->len;
		g->max_seq = s->next_seq;
		s->next_seq++;
		s->st.reinserted++;
		s->st.reinserted_bytes += x->vlen;
		s->st.dev_write_bytes += nb * B;
		x->new_loc = KVP_SSD_LOC(g->id, KVP_SSD_LOW3(blk, 1));
		wrote = true;
	}
	free(hdr);
	if (wrote && s->cfg.durability == KVP_SSD_STRICT && s->active &&
	    fdatasync(s->active->fd)) {
		s->st.io_errors++;
		kvp_log(KVP_LOG_ERROR, "ssd",
			"segment %08x: fdatasync of reinserted records: %s",
			s->active->id, strerror(errno));
	}
	for (k = 0; k < s->nreins && s->cfg.reinsert_cb; k++)
		s->cfg.reinsert_cb(s->cfg.evict_arg, s->reins[k].tag,
				   s->reins[k].old_loc, s->reins[k].new_loc);
	kvp_reins_discard(s, 0);
}

/* Start a new active segment for a record of 'need' blocks and a key of
 * klen bytes: seal the old one, make room (the owner may keep records of
 * what it gives back: they go first into the new one). */
static int
kvp_seg_new(struct kvp_ssd *s, uint64_t need, unsigned klen)
{
	int rc = kvp_seg_start(s);

	if (s->nreins)
		kvp_reins_flush(s, rc ? NULL : s->active, need, klen);
	return rc;
}

/* Are records written to segment g queued, in flight, or complete but not
 * yet handed back to the owner? */
static bool
kvp_seg_writing(const struct kvp_sseg *g)
{
	return g->wr_inflight != 0;
}

/*
 * --ssd-size: give back whole segments until one more fits.  Strictly
 * oldest first: a tombstone then always outlives the older records it
 * shadows, so nothing deleted can come back.  If the owner vetoes the
 * oldest (a key in it is held, pinned or being read), the room is
 * deferred: -EAGAIN now, asked again on the next write.
 */
static int
kvp_make_room(struct kvp_ssd *s)
{
	if (!s->cfg.capacity_bytes)
		return 0;
	while ((uint64_t)(s->nsegs + 1) * s->cfg.segment_bytes >
	       s->cfg.capacity_bytes) {
		struct kvp_sseg *g = s->nsegs ? s->segs[0] : NULL;
		unsigned mark = s->nreins;
		int veto;

		if (!g || !g->sealed || g == s->active) {
			s->st.enospc++;
			return -ENOSPC;
		}
		if (kvp_seg_writing(g)) {
			/* its last batches are still being written, or their
			 * completions wait for the owner's poll (a round that
			 * filled several segments): their records would be
			 * reported in a segment that is gone, and a write
			 * queued on its descriptor could land in the next file
			 * to get that number; room once they are handed back */
			kvp_ssd_submit_agent(s);
			return -EAGAIN;
		}
		s->in_evict = true;
		veto = s->cfg.evict_cb ?
			       s->cfg.evict_cb(s->cfg.evict_arg, s, g->id) :
			       0;
		s->in_evict = false;
		if (veto) {
			/* the owner undid what it kept of this one */
			kvp_reins_discard(s, mark);
			s->st.segs_vetoed++;
			s->st.enospc++;
			return -EAGAIN;
		}
		if (kvp_ssd_segment_drop_agent(s, g->id)) {
			/* still there: what it kept stays where it was */
			kvp_reins_in_place(s, mark);
			return -EIO;
		}
	}
	return 0;
}

/* ---- requests ---- */

static struct kvp_sreq *
kvp_req_new(struct kvp_ssd *s, uint64_t tag, uint32_t op, bool need_hdr)
{
	struct kvp_sreq *r;

	if (s->cfg.max_requests && s->outstanding >= s->cfg.max_requests)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->tag = tag;
	r->op = op;
	r->hdr = need_hdr ? kvp_aligned(B) : NULL;
	if (need_hdr && !r->hdr) {
		free(r);
		return NULL;
	}
	s->outstanding++;
	return r;
}

static void
kvp_req_free(struct kvp_sreq *r)
{
	free(r->hdr);
	free(r->bounce);
	free(r->biov);
	free(r);
}

static void
kvp_req_done(struct kvp_ssd *s, struct kvp_sreq *r)
{
	r->next = NULL;
	if (s->done_tail)
		s->done_tail->next = r;
	else
		s->done_head = r;
	s->done_tail = r;
}

/* A completion is ready without the ring's own signal (the pread path,
 * an error before any I/O): tell kvp_ssd_set_eventfd_agent's eventfd. */
static void
kvp_efd_signal(struct kvp_ssd *s)
{
	uint64_t one = 1;

	if (s->efd1 && write(s->efd1 - 1, &one, sizeof(one)) < 0)
		(void)0; /* a full counter is signalled anyway */
}

/* Run one transfer now (the pread/pwrite path). */
static ssize_t
kvp_sync_rw(int fd, bool wr, const struct iovec *iov, unsigned n, uint64_t off)
{
	ssize_t got = wr ? pwritev(fd, iov, (int)n, (off_t)off) :
			   preadv(fd, iov, (int)n, (off_t)off);

	return got < 0 ? -errno : got;
}

static int kvp_finish_read(struct kvp_ssd *s, struct kvp_sreq *r);

/* Thread path (mu held): one sub-operation of r is over. */
static void
kvp_sub_done_locked(struct kvp_ssd *s, struct kvp_sreq *r)
{
	if (--r->nsub)
		return;
	if (r->op == KVP_SSD_OP_BATCH) {
		kvp_batch_finish(s, r); /* frees r */
	} else {
		if (r->op == KVP_SSD_OP_READ && !r->status)
			r->status = kvp_finish_read(s, r);
		kvp_req_done(s, r);
	}
	pthread_cond_broadcast(&s->cv_done);
	kvp_efd_signal(s);
}

static void *
kvp_worker(void *arg)
{
	struct kvp_ssd *s = arg;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		struct kvp_job *j;
		ssize_t got;

		while (!s->jobs_head && !s->stopping)
			pthread_cond_wait(&s->cv_work, &s->mu);
		if (!s->jobs_head)
			break;
		j = s->jobs_head;
		s->jobs_head = j->next;
		if (!s->jobs_head)
			s->jobs_tail = NULL;
		pthread_mutex_unlock(&s->mu);
		got = kvp_sync_rw(j->r->seg->fd, j->wr, j->iov, j->n, j->off);
		pthread_mutex_lock(&s->mu);
		if (got != (ssize_t)j->total && !j->r->status) {
			j->r->status = got == -ENOSPC ? -ENOSPC : -EIO;
			s->st.io_errors++;
		}
		kvp_sub_done_locked(s, j->r);
		free(j);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Thread path: hold a request open while its sub-operations are queued
 * (a guard count), then let go. */
static void
kvp_guard(struct kvp_ssd *s, struct kvp_sreq *r, bool take)
{
	if (s->uring)
		return;
	pthread_mutex_lock(&s->mu);
	if (take)
		r->nsub++;
	else
		kvp_sub_done_locked(s, r);
	pthread_mutex_unlock(&s->mu);
}

/* Queue (or, without io_uring, perform) sub-operation idx of r. */
static int
kvp_queue_rw(struct kvp_ssd *s, struct kvp_sreq *r, unsigned idx, bool wr,
	     const struct iovec *iov, unsigned n, uint64_t off)
{
	uint64_t total = 0;
	unsigned k;

	for (k = 0; k < n; k++)
		total += iov[k].iov_len;
	r->want[idx] = total;
	if (!s->uring) {
		struct kvp_job *j = calloc(1, sizeof(*j));

		if (!j)
			return -ENOMEM;
		j->r = r;
		j->idx = idx;
		j->wr = wr;
		j->iov = iov;
		j->n = n;
		j->off = off;
		j->total = total;
		pthread_mutex_lock(&s->mu);
		r->nsub++;
		if (s->jobs_tail)
			s->jobs_tail->next = j;
		else
			s->jobs_head = j;
		s->jobs_tail = j;
		pthread_cond_signal(&s->cv_work);
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	r->nsub++;
	{
		struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
		int bi = -1;

		if (!sqe) {
			io_uring_submit(&s->ring);
			sqe = io_uring_get_sqe(&s->ring);
			if (!sqe) {
				r->nsub--;
				return -EBUSY;
			}
		}
		if (s->registered && n == 1)
			for (k = 0; k < s->nreg; k++)
				if ((char *)iov[0].iov_base >=
					    (char *)s->reg[k].iov_base &&
				    (char *)iov[0].iov_base + iov[0].iov_len <=
					    (char *)s->reg[k].iov_base +
						    s->reg[k].iov_len)
					bi = (int)k;
		if (bi >= 0 && wr)
			io_uring_prep_write_fixed(sqe, r->seg->fd,
						  iov[0].iov_base,
						  (unsigned)iov[0].iov_len, off,
						  bi);
		else if (bi >= 0)
			io_uring_prep_read_fixed(sqe, r->seg->fd,
						 iov[0].iov_base,
						 (unsigned)iov[0].iov_len, off,
						 bi);
		else if (wr)
			io_uring_prep_writev(sqe, r->seg->fd, iov, n, off);
		else
			io_uring_prep_readv(sqe, r->seg->fd, iov, n, off);
		if (bi >= 0)
			s->st.fixed_ops++;
		io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)r | idx);
		s->queued++;
	}
	return 0;
}

static int
kvp_sum_append(struct kvp_sseg *g, uint8_t type, uint32_t blk, uint64_t ns,
	       uint64_t seq, uint64_t vlen, const void *key, unsigned klen)
{
	size_t n = kvp_sum_ent_size(klen);
	struct kvp_ssd_sum_ent *e;

	if (g->sum_len + n > g->sum_cap) {
		size_t cap = g->sum_cap ? g->sum_cap * 2 : 4096;
		unsigned char *p;
		while (cap < g->sum_len + n)
			cap *= 2;
		p = realloc(g->sum, cap);
		if (!p)
			return -ENOMEM;
		g->sum = p;
		g->sum_cap = cap;
	}
	e = (struct kvp_ssd_sum_ent *)(g->sum + g->sum_len);
	memset(e, 0, n);
	e->se_type = type;
	e->se_klen = (uint8_t)klen;
	e->se_block = blk;
	e->se_ns = ns;
	e->se_seq = seq;
	e->se_vlen = vlen;
	memcpy(e + 1, key, klen);
	g->sum_len += n;
	return 0;
}

/* Open a batch at block blk of the active segment g (its header block is
 * counted, not yet written).  NULL: out of memory. */
static struct kvp_sreq *
kvp_batch_open(struct kvp_ssd *s, struct kvp_sseg *g, uint64_t blk)
{
	struct kvp_sreq *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->op = KVP_SSD_OP_BATCH;
	b->hdr = kvp_aligned(B);
	b->biov = calloc(KVP_SSD_BATCH_IOV, sizeof(*b->biov));
	if (!b->hdr || !b->biov) {
		free(b->hdr);
		free(b->biov);
		free(b);
		return NULL;
	}
	b->seg = g;
	b->bblk = blk;
	b->bnblocks = 1;
	b->bused = sizeof(struct kvp_ssd_batch_hdr);
	b->biov[0].iov_base = b->hdr;
	b->biov[0].iov_len = B;
	b->nbiov = 1;
	b->bbytes = B;
	s->batch = b;
	return b;
}

/* A batch's write is over (status in b->status): each record in it
 * completes with that status; the batch goes.  mu held on the thread
 * path. */
static void
kvp_batch_finish(struct kvp_ssd *s, struct kvp_sreq *b)
{
	struct kvp_sreq *m = b->mhead, *next;

	kvp_crashpoint(A_SSD_BATCH_WRITTEN);
	if (!b->status) {
		s->st.batches++;
		s->st.dev_write_bytes += b->bbytes;
	}
	for (; m; m = next) {
		next = m->mnext;
		if (!m->status)
			m->status = b->status;
		kvp_req_done(s, m);
	}
	kvp_req_free(b);
}

/* Close the open batch: finish its header block and queue its write (one
 * WRITEV of the header block and every value).  Its records complete when
 * it does (an error that keeps it from being queued completes them now
 * with -EIO). */
static void
kvp_batch_close(struct kvp_ssd *s)
{
	struct kvp_sreq *b = s->batch;
	int rc;

	if (!b)
		return;
	s->batch = NULL;
	kvp_bhdr_finish(b->hdr, b->seg->id, b->bblk, b->bnblocks, b->bnrec,
			b->bused);
	kvp_crashpoint(A_SSD_BATCH_BUILT);
	kvp_guard(s, b, true);
	rc = kvp_queue_rw(s, b, 0, true, b->biov, b->nbiov, b->bblk * B);
	if (rc) {
		b->status = -EIO;
		s->st.io_errors++;
		if (s->uring) {
			kvp_batch_finish(s, b);
			return;
		}
	}
	kvp_guard(s, b, false);
}

/*
 * Room in the open batch (opened here if there is none) for one record:
 * an entry of esz header bytes, vblocks value blocks, niov iovecs, a
 * summary entry for a key of klen bytes.  A batch that cannot take it is
 * closed first; a segment that cannot take it is sealed and a new one
 * started.  *delta: where the value starts, in blocks after the header.
 */
static int
kvp_batch_room(struct kvp_ssd *s, size_t esz, uint64_t vblocks, unsigned niov,
	       unsigned klen, unsigned *delta)
{
	int rc, tries;

	for (tries = 0; tries < 2; tries++) {
		struct kvp_sreq *b = s->batch;
		struct kvp_sseg *g = s->active;

		if (b && (b->seg != g || b->bused + esz > B ||
			  b->bnrec >= UINT16_MAX ||
			  (vblocks && b->bnblocks > KVP_SSD_DELTA_MAX) ||
			  b->nbiov + niov > KVP_SSD_BATCH_IOV)) {
			kvp_batch_close(s);
			b = NULL;
		}
		if (g) {
			uint64_t need = (b ? 0 : 1) + vblocks, sum;

			sum = kvp_rup(g->sum_len + kvp_sum_ent_size(klen)) / B;
			if (g->wpos + need + sum + 1 <= g->size / B) {
				if (!b) {
					b = kvp_batch_open(s, g, g->wpos);
					if (!b)
						return -ENOMEM;
					g->wpos++;
				}
				*delta = vblocks ? (unsigned)b->bnblocks : 0;
				g->wpos += vblocks;
				b->bnblocks += vblocks;
				return 0;
			}
		}
		kvp_batch_close(s); /* before its segment is sealed */
		rc = kvp_seg_new(s, 1 + vblocks, klen);
		if (rc)
			return rc;
	}
	return -E2BIG;
}

/* Queue a value record (src) or a tombstone (target: the location of
 * the value record it deletes, written where a value's length goes) into
 * the open batch. */
static int
kvp_queue_record(struct kvp_ssd *s, uint64_t tag, uint8_t type, uint64_t ns,
		 const void *key, uint32_t klen, const struct iovec *src,
		 unsigned nsrc, unsigned flags, uint64_t target)
{
	bool zero_copy = s->direct ? (flags & KVP_SSD_SRC_PADDED) : true;
	uint64_t vlen = 0, vblocks;
	uint32_t nchunks = 0;
	unsigned k, niov = 0, delta = 0;
	struct kvp_sreq *r, *b;
	struct kvp_sseg *g;
	size_t esz;
	int rc;

	if (!key || klen == 0 || klen > KVP_SSD_KEY_MAX ||
	    nsrc > KVP_SSD_MAX_IOV - 2)
		return -EINVAL;
	for (k = 0; k < nsrc; k++) {
		vlen += src[k].iov_len;
		if (((uintptr_t)src[k].iov_base % B) ||
		    (k + 1 < nsrc && src[k].iov_len % B))
			zero_copy = false;
	}
	if (type == KVP_SSD_REC_VALUE &&
	    (vlen == 0 || vlen > kvp_ssd_max_value_agent(s)))
		return vlen ? -E2BIG : -EINVAL;
	if (type != KVP_SSD_REC_VALUE)
		vlen = 0;
	else
		kvp_chunk_shift(vlen, &nchunks);
	esz = kvp_bent_size(klen, nchunks);
	vblocks = kvp_rup(vlen) / B;
	if (vlen)
		/* buffered I/O: a zero pad to the next block */
		niov = zero_copy ? nsrc + (!s->direct && vlen % B) : 1;
	r = kvp_req_new(s, tag,
			type == KVP_SSD_REC_VALUE ? KVP_SSD_OP_WRITE :
						    KVP_SSD_OP_TOMBSTONE,
			false);
	if (!r)
		return -EBUSY;
	if (vlen && !zero_copy) {
		/* before the room is taken: nothing can fail after it */
		unsigned char *c = kvp_aligned(kvp_rup(vlen));
		uint64_t at = 0;

		if (!c) {
			s->outstanding--;
			kvp_req_free(r);
			return -ENOMEM;
		}
		for (k = 0; k < nsrc; k++) {
			memcpy(c + at, src[k].iov_base, src[k].iov_len);
			at += src[k].iov_len;
		}
		r->bounce = c;
	}
	rc = kvp_batch_room(s, esz, vblocks, niov, klen, &delta);
	if (rc) {
		s->outstanding--;
		kvp_req_free(r);
		return rc;
	}
	b = s->batch;
	g = b->seg;
	g->dirty = true;
	r->seg = g;
	r->seq = s->next_seq++;
	r->vlen = vlen;
	r->loc = KVP_SSD_LOC(g->id, KVP_SSD_LOW3(b->bblk, delta));
	if (r->bounce)
		s->st.copied_bytes += vlen;
	kvp_bent_fill((unsigned char *)b->hdr + b->bused, type, delta, ns,
		      r->seq, key, klen, vlen, target, src, nsrc);
	b->bused += (uint32_t)esz;
	b->bnrec++;
	if (vlen && zero_copy) {
		for (k = 0; k < nsrc; k++) {
			struct iovec *v = &b->biov[b->nbiov++];

			v->iov_base = src[k].iov_base;
			v->iov_len = k + 1 < nsrc || !s->direct ?
					     src[k].iov_len :
					     kvp_rup(src[k].iov_len);
		}
		if (!s->direct && vlen % B) {
			b->biov[b->nbiov].iov_base = s->zero;
			b->biov[b->nbiov++].iov_len = kvp_rup(vlen) - vlen;
		}
	} else if (vlen) {
		b->biov[b->nbiov].iov_base = r->bounce;
		b->biov[b->nbiov++].iov_len = kvp_rup(vlen);
	}
	b->bbytes += vblocks * B;
	kvp_sum_append(g, type, KVP_SSD_LOC_BLOCK(r->loc), ns, r->seq,
		       type == KVP_SSD_REC_VALUE ? vlen : target, key, klen);
	g->nrecs++;
	g->wr_inflight++; /* until its completion is polled */
	g->live_bytes += kvp_ssd_record_bytes(vlen);
	if (r->seq > g->max_seq)
		g->max_seq = r->seq;
	if (b->mtail)
		b->mtail->mnext = r;
	else
		b->mhead = r;
	b->mtail = r;
	return 0;
}

int
kvp_ssd_write_agent(struct kvp_ssd *s, uint64_t tag, uint64_t ns,
		    const void *key, uint32_t klen, const struct iovec *src,
		    unsigned nsrc, unsigned flags)
{
	return kvp_queue_record(s, tag, KVP_SSD_REC_VALUE, ns, key, klen, src,
				nsrc, flags, 0);
}

int
kvp_ssd_tombstone_agent(struct kvp_ssd *s, uint64_t tag, uint64_t ns,
			const void *key, uint32_t klen, uint64_t target)
{
	if (!target)
		return -EINVAL;
	return kvp_queue_record(s, tag, KVP_SSD_REC_TOMBSTONE, ns, key, klen,
				NULL, 0, 0, target);
}

int
kvp_ssd_read_agent(struct kvp_ssd *s, uint64_t tag,
		   const struct kvp_ssd_read *rd)
{
	struct kvp_sseg *g;
	struct kvp_sreq *r;
	uint64_t len, extent, astart, have = 0, hblk, vblk;
	uint32_t dst_off;
	unsigned k;
	int rc;

	if (!rd || !rd->vlen || rd->off > rd->vlen || rd->ndst == 0 ||
	    rd->ndst > KVP_SSD_MAX_IOV || !rd->dst)
		return -EINVAL;
	g = kvp_seg_find(s, KVP_SSD_LOC_SEG(rd->loc));
	if (!g)
		return -ENOENT;
	len = rd->len ? rd->len : rd->vlen - rd->off;
	if (len > rd->vlen - rd->off)
		return -EINVAL;
	extent = kvp_ssd_extent(rd->off, len, &dst_off);
	astart = rd->off - dst_off;
	if (g->version >= 3) {
		/* the batch header, and the value delta blocks after it */
		hblk = KVP_SSD_LOC_HDR(rd->loc);
		vblk = KVP_SSD_LOC_VALUE(rd->loc);
		if (KVP_SSD_LOC_DELTA(rd->loc) == 0)
			return -EINVAL;
	} else {
		/* the record's own header block, the value after it */
		hblk = KVP_SSD_LOC_BLOCK(rd->loc);
		vblk = hblk + 1;
	}
	if (hblk == 0 || vblk + (astart + extent) / B > g->size / B)
		return -EINVAL;
	r = kvp_req_new(s, tag, KVP_SSD_OP_READ, true);
	if (!r)
		return -EBUSY;
	r->seg = g;
	r->fmt = g->version;
	r->rd = *rd;
	r->rd.len = len;
	r->dst_off = dst_off;
	if (rd->key && rd->klen <= KVP_SSD_KEY_MAX) {
		memcpy(r->key, rd->key, rd->klen);
		r->rd.key = r->key;
	}
	/* the destination, trimmed to the extent */
	for (k = 0; k < rd->ndst && have < extent; k++) {
		if ((uintptr_t)rd->dst[k].iov_base % B) {
			kvp_req_free(r);
			s->outstanding--;
			return -EINVAL;
		}
		r->dst[k] = rd->dst[k];
		if (r->dst[k].iov_len > extent - have)
			r->dst[k].iov_len = (size_t)(extent - have);
		have += r->dst[k].iov_len;
	}
	r->ndst = k;
	if (have < extent) {
		kvp_req_free(r);
		s->outstanding--;
		return -EINVAL;
	}
	r->rd.dst = r->dst;
	r->rd.ndst = r->ndst;
	r->wiov[0].iov_base = r->hdr;
	r->wiov[0].iov_len = B;
	kvp_guard(s, r, true);
	if (astart == 0 && vblk == hblk + 1 && r->ndst + 1 < KVP_SSD_MAX_IOV) {
		/* the extent starts at the value, which follows the header:
		 * header and bytes are one contiguous transfer, one device
		 * operation */
		memcpy(&r->wiov[1], r->dst, r->ndst * sizeof(r->dst[0]));
		rc = kvp_queue_rw(s, r, 0, false, r->wiov, r->ndst + 1,
				  hblk * B);
	} else {
		rc = kvp_queue_rw(s, r, 0, false, r->wiov, 1, hblk * B);
		if (!rc && extent)
			rc = kvp_queue_rw(s, r, 1, false, r->dst, r->ndst,
					  vblk * B + astart);
	}
	if (rc) {
		/* what was queued completes and reports the error */
		r->status = -EIO;
		if (s->uring && r->nsub == 0) {
			kvp_req_done(s, r); /* nothing was queued */
			kvp_efd_signal(s);
		}
	}
	s->st.dev_read_bytes += B + extent;
	kvp_guard(s, r, false);
	return 0;
}

/* Verify the chunks of a read's extent that it fully covers against
 * crc[] (the value is vlen bytes in chunks of 1 << sh). */
static bool
kvp_read_chunks_ok(struct kvp_ssd *s, struct kvp_sreq *r, const uint32_t *crc,
		   unsigned sh, uint64_t vlen)
{
	uint64_t off = r->rd.off, len = r->rd.len, cs = 1ull << sh, c;
	uint64_t nch = (vlen + cs - 1) / cs;

	for (c = off / cs; c < nch && c * cs < off + len; c++) {
		uint64_t a = c * cs, e = a + cs < vlen ? a + cs : vlen;
		uint64_t pos = r->dst_off + (a - off), left = e - a;
		uint32_t v = 0;
		unsigned k = 0;

		if (a < off || e > off + len)
			continue; /* partly covered: not verifiable */
		/* walk the destination iovecs from byte pos */
		while (k < r->ndst && pos >= r->dst[k].iov_len)
			pos -= r->dst[k++].iov_len;
		while (left && k < r->ndst) {
			size_t take = r->dst[k].iov_len - pos;
			if (take > left)
				take = (size_t)left;
			v = kvp_crc32c(v, (char *)r->dst[k].iov_base + pos,
				       take);
			left -= take;
			pos = 0;
			k++;
		}
		if (left || v != crc[c])
			return false;
		s->st.chunks_verified++;
	}
	return true;
}

/* Verify a read: its header (the batch's, format 3: CRC, where it was
 * written, the entry at the value's distance), the record's identity and
 * the chunks its extent fully covers. */
static int
kvp_finish_read(struct kvp_ssd *s, struct kvp_sreq *r)
{
	const struct kvp_ssd_rec_hdr *h = r->hdr;
	uint64_t cs, nch;
	uint32_t saved;
	size_t koff;

	if (r->fmt >= 3) {
		const unsigned char *key;
		const uint32_t *crc;
		struct kvp_ssd_bent e;

		if (!kvp_bhdr_valid(r->hdr, KVP_SSD_LOC_SEG(r->rd.loc),
				    KVP_SSD_LOC_HDR(r->rd.loc), UINT32_MAX) ||
		    !kvp_bent_find(r->hdr, KVP_SSD_LOC_DELTA(r->rd.loc), &e,
				   &key, &crc) ||
		    e.be_vlen != r->rd.vlen)
			goto bad;
		if (r->rd.key &&
		    (e.be_ns != r->rd.ns || e.be_klen != r->rd.klen ||
		     memcmp(key, r->rd.key, r->rd.klen)))
			goto bad;
		if (!kvp_read_chunks_ok(s, r, crc, e.be_chunk_shift, e.be_vlen))
			goto bad;
		return 0;
	}
	if (h->rh_magic != KVP_SSD_MAGIC_REC ||
	    h->rh_version < KVP_SSD_FORMAT_MIN || h->rh_version > 2 ||
	    h->rh_len < sizeof(*h) || h->rh_len > B ||
	    h->rh_type != KVP_SSD_REC_VALUE ||
	    h->rh_seg_id != KVP_SSD_LOC_SEG(r->rd.loc) ||
	    h->rh_block != KVP_SSD_LOC_BLOCK(r->rd.loc) ||
	    h->rh_vlen != r->rd.vlen ||
	    h->rh_chunk_shift < KVP_SSD_CHUNK_SHIFT_MIN ||
	    h->rh_chunk_shift > 40)
		goto bad;
	saved = h->rh_crc;
	((struct kvp_ssd_rec_hdr *)r->hdr)->rh_crc = 0;
	if (kvp_crc32c(0, h, h->rh_len) != saved)
		goto bad;
	if (r->rd.key && (h->rh_ns != r->rd.ns || h->rh_klen != r->rd.klen ||
			  memcmp(h + 1, r->rd.key, r->rd.klen)))
		goto bad;
	cs = 1ull << h->rh_chunk_shift;
	nch = (h->rh_vlen + cs - 1) / cs;
	koff = (sizeof(*h) + h->rh_klen + 3) & ~(size_t)3;
	if (nch != h->rh_nchunks || koff + 4 * nch > h->rh_len)
		goto bad;
	if (!kvp_read_chunks_ok(s, r, (const uint32_t *)((char *)r->hdr + koff),
				h->rh_chunk_shift, h->rh_vlen))
		goto bad;
	return 0;
bad:
	s->st.crc_errors++;
	return -EBADMSG;
}

int
kvp_ssd_submit_agent(struct kvp_ssd *s)
{
	int rc;

	kvp_batch_close(s);
	if (!s->uring || !s->queued)
		return 0;
	rc = io_uring_submit(&s->ring);
	if (rc < 0)
		return rc;
	s->queued = 0;
	return 0;
}

static void
kvp_reap_cqe(struct kvp_ssd *s, struct io_uring_cqe *cqe)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	struct kvp_sreq *r = (struct kvp_sreq *)(uintptr_t)(ud & ~1ull);
	unsigned idx = (unsigned)(ud & 1);

	if (!r)
		return;
	if (cqe->res < 0) {
		if (!r->status)
			r->status = cqe->res == -ENOSPC ? -ENOSPC : -EIO;
		s->st.io_errors++;
	} else if ((uint64_t)cqe->res != r->want[idx] && !r->status) {
		r->status = -EIO; /* short transfer */
		s->st.io_errors++;
	}
	if (--r->nsub)
		return;
	if (r->op == KVP_SSD_OP_BATCH) {
		kvp_batch_finish(s, r);
		return;
	}
	if (r->op == KVP_SSD_OP_READ && !r->status)
		r->status = kvp_finish_read(s, r);
	kvp_req_done(s, r);
}

int
kvp_ssd_poll_agent(struct kvp_ssd *s, struct kvp_ssd_cqe *out, unsigned max,
		   int timeout_ms)
{
	unsigned n = 0;
	bool synced = false;

	kvp_ssd_submit_agent(s);
	if (s->uring) {
		struct io_uring_cqe *cqe;

		if (!s->done_head && timeout_ms != 0 && s->outstanding) {
			struct __kernel_timespec ts = {
				timeout_ms / 1000,
				(long long)(timeout_ms % 1000) * 1000000
			};
			if (io_uring_wait_cqe_timeout(
				    &s->ring, &cqe,
				    timeout_ms > 0 ? &ts : NULL) == 0) {
				kvp_reap_cqe(s, cqe);
				io_uring_cqe_seen(&s->ring, cqe);
			}
		}
		while (io_uring_peek_cqe(&s->ring, &cqe) == 0) {
			kvp_reap_cqe(s, cqe);
			io_uring_cqe_seen(&s->ring, cqe);
		}
	}
	if (!s->uring) {
		pthread_mutex_lock(&s->mu);
		if (!s->done_head && timeout_ms != 0 && s->outstanding) {
			if (timeout_ms < 0) {
				pthread_cond_wait(&s->cv_done, &s->mu);
			} else {
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_nsec +=
					(long)(timeout_ms % 1000) * 1000000L;
				ts.tv_sec += timeout_ms / 1000 +
					     ts.tv_nsec / 1000000000L;
				ts.tv_nsec %= 1000000000L;
				pthread_cond_timedwait(&s->cv_done, &s->mu,
						       &ts);
			}
		}
	}
	while (s->done_head && n < max) {
		struct kvp_sreq *r = s->done_head;

		if (r->op != KVP_SSD_OP_READ && !r->status &&
		    s->cfg.durability == KVP_SSD_STRICT && !synced) {
			/* batch-level durability: one fdatasync per poll
			 * for every segment written in the batch */
			unsigned k;
			for (k = 0; k < s->nsegs; k++)
				if (!s->segs[k]->sealed &&
				    fdatasync(s->segs[k]->fd))
					r->status = -EIO;
			s->st.fsyncs++;
			synced = true;
		}
		s->done_head = r->next;
		if (!s->done_head)
			s->done_tail = NULL;
		out[n].tag = r->tag;
		out[n].loc = r->op == KVP_SSD_OP_READ ? r->rd.loc : r->loc;
		out[n].seq = r->seq;
		out[n].status = r->status;
		out[n].dst_off = r->dst_off;
		out[n].op = r->op;
		out[n].pad = 0;
		if (r->op != KVP_SSD_OP_READ)
			/* handed back: its segment may go now */
			r->seg->wr_inflight--;
		if (!r->status) {
			if (r->op == KVP_SSD_OP_READ) {
				s->st.reads++;
				s->st.read_bytes += r->rd.len;
			} else if (r->op == KVP_SSD_OP_WRITE) {
				s->st.writes++;
				s->st.write_bytes += r->vlen;
			} else {
				s->st.tombstones++;
			}
		} else if (r->status == -ENOSPC) {
			s->st.enospc++;
		}
		s->outstanding--;
		kvp_req_free(r);
		n++;
	}
	if (!s->uring)
		pthread_mutex_unlock(&s->mu);
	return (int)n;
}

unsigned
kvp_ssd_outstanding_agent(const struct kvp_ssd *s)
{
	return s->outstanding;
}

int
kvp_ssd_set_eventfd_agent(struct kvp_ssd *s, int efd)
{
	int rc = 0;

	if (s->uring)
		rc = io_uring_register_eventfd(&s->ring, efd);
	if (!rc) {
		pthread_mutex_lock(&s->mu);
		s->efd1 = efd + 1;
		pthread_mutex_unlock(&s->mu);
	}
	return rc;
}

/* ---- recovery ---- */

struct kvp_rrec {                    /* one key seen during recovery */
	uint64_t loc, seq, ns, vlen; /* its latest value record (loc 0: none) */
	uint64_t hash;               /* kvp_hash(ns, key, klen) */
	uint64_t tseq; /* its latest format-1 tombstone (0: none) */
	uint32_t koff; /* into the key arena */
	uint8_t klen;
};

struct kvp_rtab {
	struct kvp_ssd *s;
	struct kvp_rrec *r;
	size_t n, cap;
	unsigned char *keys;
	size_t klen, kcap;
	/* open addressing: record index + 1, and the hash's high half (a
	 * probe compares it before it touches a record) */
	struct kvp_rslot {
		uint32_t idx, tag;
	} * slot;
	size_t nslot;
	uint64_t *dead; /* open addressing: locations tombstones target */
	size_t ndead, deadcap;
	unsigned char *sumbuf; /* a summary read (reused, segment by segment) */
	size_t sumcap;
};

/* Ask for huge pages under a large private array (recovery's tables):
 * a 4 KiB page fault each is most of a rebuild's time on a VM.  A hint:
 * ignored where transparent huge pages are off. */
static void
kvp_hint_huge(void *p, size_t n)
{
	uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;

	if (n >= (4u << 20) && (uintptr_t)p + n > a)
		madvise((void *)a, (uintptr_t)p + n - a, MADV_HUGEPAGE);
}

/* Size the table for about nrec records and kbytes of keys up front (no
 * rehash, no copy while the records stream in). */
static int
kvp_rtab_presize(struct kvp_rtab *t, size_t nrec, size_t kbytes)
{
	size_t ns = 1 << 16;

	while (ns < 2 * nrec + 2)
		ns *= 2;
	t->slot = calloc(ns, sizeof(*t->slot));
	t->r = malloc((nrec + 1) * sizeof(*t->r));
	t->keys = malloc(kbytes + 1);
	if (!t->slot || !t->r || !t->keys)
		return -ENOMEM;
	kvp_hint_huge(t->slot, ns * sizeof(*t->slot));
	kvp_hint_huge(t->r, (nrec + 1) * sizeof(*t->r));
	kvp_hint_huge(t->keys, kbytes + 1);
	t->nslot = ns;
	t->cap = nrec + 1;
	t->kcap = kbytes + 1;
	return 0;
}

static int
kvp_rtab_grow(struct kvp_rtab *t)
{
	size_t ns = t->nslot ? t->nslot * 2 : 1 << 16, k;
	struct kvp_rslot *n = calloc(ns, sizeof(*n));

	if (!n)
		return -ENOMEM;
	kvp_hint_huge(n, ns * sizeof(*n));
	for (k = 0; k < t->nslot; k++) {
		uint32_t v = t->slot[k].idx;
		if (v) {
			size_t h = t->r[v - 1].hash & (ns - 1);
			while (n[h].idx)
				h = (h + 1) & (ns - 1);
			n[h] = t->slot[k];
		}
	}
	free(t->slot);
	t->slot = n;
	t->nslot = ns;
	return 0;
}

static size_t
kvp_loc_slot(uint64_t loc, size_t cap)
{
	return (size_t)(kvp__fold(loc, 0x9e3779b97f4a7c15ull) & (cap - 1));
}

/* Remember that a tombstone targets the value record at loc. */
static int
kvp_rtab_kill(struct kvp_rtab *t, uint64_t loc)
{
	size_t h;

	if ((t->ndead + 1) * 2 > t->deadcap) {
		size_t cap = t->deadcap ? t->deadcap * 2 : 1 << 12, k;
		uint64_t *n = calloc(cap, sizeof(*n));

		if (!n)
			return -ENOMEM;
		for (k = 0; k < t->deadcap; k++) {
			if (!t->dead[k])
				continue;
			h = kvp_loc_slot(t->dead[k], cap);
			while (n[h])
				h = (h + 1) & (cap - 1);
			n[h] = t->dead[k];
		}
		free(t->dead);
		t->dead = n;
		t->deadcap = cap;
	}
	for (h = kvp_loc_slot(loc, t->deadcap); t->dead[h];
	     h = (h + 1) & (t->deadcap - 1))
		if (t->dead[h] == loc)
			return 0;
	t->dead[h] = loc;
	t->ndead++;
	return 0;
}

static bool
kvp_rtab_killed(const struct kvp_rtab *t, uint64_t loc)
{
	size_t h;

	if (!t->deadcap)
		return false;
	for (h = kvp_loc_slot(loc, t->deadcap); t->dead[h];
	     h = (h + 1) & (t->deadcap - 1))
		if (t->dead[h] == loc)
			return true;
	return false;
}

/* The table line a record of this hash will probe first (a hint). */
static void
kvp_rtab_prefetch(struct kvp_rtab *t, uint64_t hash)
{
	if (t->nslot)
		__builtin_prefetch(&t->slot[hash & (t->nslot - 1)]);
}

/* Keep the latest value record of (ns, key), and what deletes it: the
 * targets of format-2 tombstones, the latest format-1 tombstone. */
static int
kvp_rtab_add(struct kvp_rtab *t, const struct kvp_ssd_rec *r)
{
	const unsigned char *key = r->key;
	struct kvp_rrec *x = NULL;
	uint64_t hash;
	size_t h;

	if (r->type == KVP_SSD_REC_TOMBSTONE) {
		struct kvp_sseg *g =
			kvp_seg_find(t->s, KVP_SSD_LOC_SEG(r->loc));

		if (g) /* it keeps an older record dead */
			g->live_bytes += kvp_ssd_record_bytes(0);
		if (r->target)
			return kvp_rtab_kill(t, r->target);
	}
	if ((t->n + 1) * 2 > t->nslot && kvp_rtab_grow(t))
		return -ENOMEM;
	hash = r->hash ? r->hash : kvp_hash(r->ns, key, r->klen);
	h = hash & (t->nslot - 1);
	for (; t->slot[h].idx; h = (h + 1) & (t->nslot - 1)) {
		struct kvp_rrec *y;

		if (t->slot[h].tag != (uint32_t)(hash >> 32))
			continue;
		y = &t->r[t->slot[h].idx - 1];
		if (y->ns == r->ns && y->klen == r->klen &&
		    !memcmp(t->keys + y->koff, key, r->klen)) {
			x = y;
			break;
		}
	}
	if (!x) {
		if (t->n == t->cap) {
			size_t cap = t->cap ? t->cap * 2 : 4096;
			struct kvp_rrec *n = realloc(t->r, cap * sizeof(*n));
			if (!n)
				return -ENOMEM;
			t->r = n;
			t->cap = cap;
		}
		if (t->klen + r->klen > t->kcap) {
			size_t cap = t->kcap ? t->kcap * 2 : 1 << 20;
			unsigned char *n;
			while (cap < t->klen + r->klen)
				cap *= 2;
			n = realloc(t->keys, cap);
			if (!n)
				return -ENOMEM;
			t->keys = n;
			t->kcap = cap;
		}
		memcpy(t->keys + t->klen, key, r->klen);
		x = &t->r[t->n];
		memset(x, 0, sizeof(*x));
		x->ns = r->ns;
		x->hash = hash;
		x->koff = (uint32_t)t->klen;
		x->klen = (uint8_t)r->klen;
		t->klen += r->klen;
		t->slot[h].idx = (uint32_t)++t->n;
		t->slot[h].tag = (uint32_t)(hash >> 32);
	}
	if (r->type == KVP_SSD_REC_TOMBSTONE) {
		if (r->seq > x->tseq)
			/* format 1: kills up to its sequence */
			x->tseq = r->seq;
	} else if (!x->loc || r->seq > x->seq) {
		x->loc = r->loc;
		x->seq = r->seq;
		x->vlen = r->vlen;
	}
	return 0;
}

/* A record as a summary entry describes it (key at key). */
static void
kvp_rec_from_sum(const struct kvp_sseg *g, const struct kvp_ssd_sum_ent *e,
		 const void *key, struct kvp_ssd_rec *rec)
{
	rec->loc = KVP_SSD_LOC(g->id, e->se_block);
	rec->seq = e->se_seq;
	rec->ns = e->se_ns;
	rec->vlen = e->se_type == KVP_SSD_REC_VALUE ? e->se_vlen : 0;
	rec->target = e->se_type == KVP_SSD_REC_TOMBSTONE ? e->se_vlen : 0;
	rec->hash = 0;
	rec->key = key;
	rec->klen = e->se_klen;
	rec->type = e->se_type;
}

/* Validate a record header read from block blk of segment g. */
static bool
kvp_hdr_valid(const struct kvp_sseg *g, const struct kvp_ssd_rec_hdr *h,
	      uint64_t blk)
{
	struct kvp_ssd_rec_hdr tmp;
	uint32_t crc;

	if (h->rh_magic != KVP_SSD_MAGIC_REC ||
	    h->rh_version < KVP_SSD_FORMAT_MIN || h->rh_version > 2 ||
	    h->rh_len < sizeof(*h) || h->rh_len > B || h->rh_seg_id != g->id ||
	    h->rh_block != blk || h->rh_klen == 0 ||
	    (h->rh_type != KVP_SSD_REC_VALUE &&
	     h->rh_type != KVP_SSD_REC_TOMBSTONE) ||
	    (h->rh_type == KVP_SSD_REC_VALUE &&
	     (h->rh_vlen == 0 || h->rh_vlen > g->size ||
	      blk + 1 + kvp_rup(h->rh_vlen) / B > g->size / B)))
		return false;
	memcpy(&tmp, h, sizeof(tmp));
	crc = tmp.rh_crc;
	((struct kvp_ssd_rec_hdr *)(uintptr_t)h)->rh_crc = 0;
	tmp.rh_crc = kvp_crc32c(0, h, h->rh_len);
	((struct kvp_ssd_rec_hdr *)(uintptr_t)h)->rh_crc = crc;
	return tmp.rh_crc == crc;
}

/* Call cb for every record of g (summary when sealed, else headers). */
static int
kvp_seg_records(struct kvp_ssd *s, struct kvp_sseg *g, kvp_ssd_rec_fn cb,
		void *arg, bool repair, struct kvp_rtab *pf)
{
	unsigned char *buf = kvp_aligned(B);
	struct kvp_ssd_trailer tr;
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	/* sealed: the trailer points at the summary */
	if (pread(g->fd, buf, B, (off_t)(g->size - B)) == (ssize_t)B) {
		uint32_t crc;

		memcpy(&tr, buf, sizeof(tr));
		crc = tr.st_crc;
		tr.st_crc = 0;
		if (tr.st_magic == KVP_SSD_MAGIC_TRAIL &&
		    tr.st_seg_id == g->id &&
		    kvp_crc32c(0, &tr, sizeof(tr)) == crc &&
		    tr.st_sum_off % B == 0 &&
		    tr.st_sum_off + tr.st_sum_len <= g->size - B) {
			uint64_t bytes = kvp_rup(tr.st_sum_len), p = 0;
			unsigned char *sum;

			/* recovery reuses one buffer for every summary (each
			 * new one would be page faults first) */
			/* (an empty summary too: a segment sealed with no
			 * record still needs a buffer to read nothing into) */
			if (pf && (pf->sumcap < bytes || !pf->sumbuf)) {
				free(pf->sumbuf);
				pf->sumcap = 0;
				if (posix_memalign((void **)&pf->sumbuf, B,
						   bytes ? bytes : B))
					pf->sumbuf = NULL;
				else
					pf->sumcap = bytes;
				if (pf->sumbuf)
					kvp_hint_huge(pf->sumbuf, bytes);
			}
			sum = pf ? pf->sumbuf : kvp_aligned(bytes);
			if (!sum) {
				free(buf);
				return -ENOMEM;
			}
			if ((bytes &&
			     pread(g->fd, sum, bytes, (off_t)tr.st_sum_off) !=
				     (ssize_t)bytes) ||
			    kvp_crc32c(0, sum, tr.st_sum_len) !=
				    tr.st_sum_crc) {
				kvp_log(KVP_LOG_WARN, "ssd",
					"segment %08x: bad summary; "
					"scanning its records",
					g->id);
				if (!pf)
					free(sum);
				goto scan;
			}
			s->st.recover_read_bytes += bytes + B;
			g->sealed = true;
			g->wpos = tr.st_sum_off / B;
			g->max_seq = tr.st_max_seq;
			while (p + sizeof(struct kvp_ssd_sum_ent) <=
				       tr.st_sum_len &&
			       !rc) {
				/* a group of entries: their hashes first, and
				 * the table lines they will touch prefetched
				 * (recovery), then the callback for each */
				struct kvp_ssd_sum_ent e[16];
				uint64_t at[16], h[16];
				unsigned n = 0, k;

				while (n < 16 &&
				       p + sizeof(struct kvp_ssd_sum_ent) <=
					       tr.st_sum_len) {
					memcpy(&e[n], sum + p, sizeof(e[n]));
					if (e[n].se_klen == 0 ||
					    p + kvp_sum_ent_size(e[n].se_klen) >
						    tr.st_sum_len ||
					    (uint64_t)(g->version >= 3 ?
							       e[n].se_block >>
								       8 :
							       e[n].se_block) *
							    B >=
						    tr.st_sum_off) {
						tr.st_sum_len = p; /* stop */
						break;
					}
					at[n] = p;
					h[n] = 0;
					if (pf) {
						h[n] = kvp_hash(
							e[n].se_ns,
							sum + p + sizeof(e[n]),
							e[n].se_klen);
						kvp_rtab_prefetch(pf, h[n]);
					}
					p += kvp_sum_ent_size(e[n].se_klen);
					n++;
				}
				for (k = 0; k < n && !rc; k++) {
					struct kvp_ssd_rec rec;

					kvp_rec_from_sum(g, &e[k],
							 sum + at[k] +
								 sizeof(e[k]),
							 &rec);
					rec.hash = h[k];
					rc = cb(arg, &rec);
				}
				if (!n)
					break;
			}
			if (!pf)
				free(sum);
			free(buf);
			return rc;
		}
	}
scan : {
	uint64_t blk = 1;

	while (g->version >= 3 && blk + 1 < g->size / B) {
		/* format 3: batch by batch */
		const struct kvp_ssd_batch_hdr *bh = (const void *)buf;
		uint32_t pos = sizeof(*bh);
		struct kvp_ssd_bent e;
		const unsigned char *key;
		const uint32_t *crc;
		unsigned k;
		bool bad = false;

		if (pread(g->fd, buf, B, (off_t)(blk * B)) != (ssize_t)B)
			break;
		s->st.recover_read_bytes += B;
		if (!kvp_bhdr_valid(buf, g->id, blk, g->size / B) ||
		    (blk + bh->bh_nblocks) * B > g->valid_end) {
			bool zero = true;
			for (k = 0; k < B && zero; k++)
				zero = buf[k] == 0;
			if (!zero)
				kvp_log(KVP_LOG_WARN, "ssd",
					"segment %08x: bad batch at "
					"block %llu: the rest of the file is not served",
					g->id, (unsigned long long)blk);
			break;
		}
		/* every entry holds together, or none is taken */
		for (k = 0; k < bh->bh_nrec && !bad; k++)
			bad = !kvp_bent_next(buf, &pos, &e, &key, &crc);
		if (bad) {
			kvp_log(KVP_LOG_WARN, "ssd",
				"segment %08x: bad batch entry at block %llu: "
				"the rest of the file is not served",
				g->id, (unsigned long long)blk);
			break;
		}
		pos = sizeof(*bh);
		for (k = 0; k < bh->bh_nrec && !rc; k++) {
			struct kvp_ssd_rec rec;

			kvp_bent_next(buf, &pos, &e, &key, &crc);
			rec.loc = KVP_SSD_LOC(g->id,
					      KVP_SSD_LOW3(blk, e.be_delta));
			rec.seq = e.be_seq;
			rec.ns = e.be_ns;
			rec.vlen = e.be_type == KVP_SSD_REC_VALUE ? e.be_vlen :
								    0;
			rec.target = e.be_type == KVP_SSD_REC_TOMBSTONE ?
					     e.be_vlen :
					     0;
			rec.hash = 0;
			rec.key = key;
			rec.klen = e.be_klen;
			rec.type = e.be_type;
			if (e.be_seq > g->max_seq)
				g->max_seq = e.be_seq;
			if (repair)
				kvp_sum_append(g, e.be_type,
					       KVP_SSD_LOC_BLOCK(rec.loc),
					       e.be_ns, e.be_seq, e.be_vlen,
					       key, e.be_klen);
			g->nrecs++;
			rc = cb(arg, &rec);
		}
		if (rc)
			break;
		blk += bh->bh_nblocks;
	}
	while (g->version < 3 && blk + 1 < g->size / B) {
		const struct kvp_ssd_rec_hdr *h = (const void *)buf;
		struct kvp_ssd_rec rec;

		if (pread(g->fd, buf, B, (off_t)(blk * B)) != (ssize_t)B)
			break;
		s->st.recover_read_bytes += B;
		if (!kvp_hdr_valid(g, h, blk) ||
		    (blk + 1) * B + kvp_rup(h->rh_type == KVP_SSD_REC_VALUE ?
						    h->rh_vlen :
						    0) >
			    g->valid_end) {
			bool zero = true;
			unsigned k;
			for (k = 0; k < B && zero; k++)
				zero = buf[k] == 0;
			if (!zero)
				kvp_log(KVP_LOG_WARN, "ssd",
					"segment %08x: bad record at "
					"block %llu: the rest of the file is not served",
					g->id, (unsigned long long)blk);
			break;
		}
		rec.loc = KVP_SSD_LOC(g->id, blk);
		rec.hash = 0;
		rec.seq = h->rh_seq;
		rec.ns = h->rh_ns;
		rec.vlen = h->rh_type == KVP_SSD_REC_VALUE ? h->rh_vlen : 0;
		rec.target = h->rh_type == KVP_SSD_REC_TOMBSTONE ? h->rh_vlen :
								   0;
		rec.key = h + 1;
		rec.klen = h->rh_klen;
		rec.type = h->rh_type;
		if (h->rh_seq > g->max_seq)
			g->max_seq = h->rh_seq;
		if (repair)
			kvp_sum_append(g, h->rh_type, (uint32_t)blk, h->rh_ns,
				       h->rh_seq, h->rh_vlen, rec.key,
				       rec.klen);
		g->nrecs++;
		rc = cb(arg, &rec);
		if (rc)
			break;
		blk += 1 + kvp_rup(rec.vlen) / B;
	}
	if (repair && !rc) {
		/* torn tail: clear the first bad block, then seal here (the
		 * summary must fit before the trailer) */
		memset(buf, 0, B);
		if (blk + 1 < g->size / B &&
		    pwrite(g->fd, buf, B, (off_t)(blk * B)) != (ssize_t)B)
			rc = -EIO;
		g->wpos = blk;
		while (g->wpos * B + kvp_rup(g->sum_len) > g->size - B &&
		       g->nrecs) {
			/* no room for the summary: cannot happen with reserved
			 * space; drop the last record's entry */
			rc = -EUCLEAN;
			break;
		}
		if (!rc)
			rc = kvp_seg_seal(s, g);
	}
}
	free(buf);
	return rc;
}

static int
kvp_collect_cb(void *arg, const struct kvp_ssd_rec *r)
{
	return kvp_rtab_add(arg, r);
}

int64_t
kvp_ssd_recover_agent(struct kvp_ssd *s, kvp_ssd_rec_fn cb, void *arg)
{
	struct kvp_rtab t;
	struct kvp_sseg *last_seg = NULL;
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC), t1 = t0, kept = 0,
		 declined = 0;
	size_t k;
	unsigned g;
	int rc = 0;

	memset(&t, 0, sizeof(t));
	t.s = s;
	{
		/* the trailers say how many records and key bytes the sealed
		 * segments hold (a trailer whose CRC fails is not believed);
		 * an unsealed one is guessed (a record per two blocks, 128
		 * key bytes each): growth covers a short guess, and a table
		 * that cannot be had at that size grows from small */
		unsigned char *buf = kvp_aligned(B);
		size_t nrec = 0, kb = 0;

		for (g = 0; g < s->nsegs && buf; g++) {
			struct kvp_sseg *sg = s->segs[g];
			struct kvp_ssd_trailer tr;
			uint32_t crc = 0;

			memset(&tr, 0, sizeof(tr));
			if (pread(sg->fd, buf, B, (off_t)(sg->size - B)) ==
			    (ssize_t)B) {
				memcpy(&tr, buf, sizeof(tr));
				crc = tr.st_crc;
				tr.st_crc = 0;
			}
			if (tr.st_magic == KVP_SSD_MAGIC_TRAIL &&
			    tr.st_seg_id == sg->id &&
			    kvp_crc32c(0, &tr, sizeof(tr)) == crc &&
			    tr.st_sum_len < sg->size &&
			    tr.st_nrecs <= tr.st_sum_len / 32) {
				nrec += tr.st_nrecs;
				kb += tr.st_sum_len;
			} else {
				nrec += sg->size / B / 2;
				kb += sg->size / B / 2 * 128;
			}
		}
		free(buf);
		if (nrec && kvp_rtab_presize(&t, nrec, kb)) {
			free(t.slot);
			free(t.r);
			free(t.keys);
			t.slot = NULL;
			t.r = NULL;
			t.keys = NULL;
			t.nslot = t.cap = t.kcap = 0;
		}
	}
	for (g = 0; g < s->nsegs; g++)
		s->segs[g]->live_bytes = 0;
	for (g = 0; g < s->nsegs && !rc; g++)
		rc = kvp_seg_records(s, s->segs[g], kvp_collect_cb, &t, true,
				     &t);
	if (rc)
		goto out;
	for (g = 0; g < s->nsegs; g++)
		if (s->segs[g]->max_seq >= s->next_seq)
			s->next_seq = s->segs[g]->max_seq + 1;
	t1 = kvp_now_ns(CLOCK_MONOTONIC);
	for (k = 0; k < t.n && rc >= 0; k++) {
		struct kvp_rrec *x = &t.r[k];
		struct kvp_sseg *sg;
		struct kvp_ssd_rec rec;

		/* the owner's lines for a record a few ahead (its index) */
		if (s->cfg.recover_prefetch && k + KVP_SSD_PREFETCH < t.n)
			s->cfg.recover_prefetch(arg,
						t.r[k + KVP_SSD_PREFETCH].hash);
		if (!x->loc)
			continue;
		/* records come in segment order: one lookup per segment */
		if (!last_seg || last_seg->id != KVP_SSD_LOC_SEG(x->loc))
			last_seg = kvp_seg_find(s, KVP_SSD_LOC_SEG(x->loc));
		sg = last_seg;
		/* no value, a format-1 tombstone at or after it, or a
		 * tombstone that names it: the key is not live */
		if (!x->loc || x->tseq >= x->seq || kvp_rtab_killed(&t, x->loc))
			continue;
		rec.loc = x->loc;
		rec.seq = x->seq;
		rec.ns = x->ns;
		rec.vlen = x->vlen;
		rec.target = 0;
		rec.hash = x->hash;
		rec.key = t.keys + x->koff;
		rec.klen = x->klen;
		rec.type = KVP_SSD_REC_VALUE;
		rc = cb(arg, &rec);
		if (rc == KVP_SSD_DECLINE_OWED) {
			declined++;
			rc = 0;
			continue;
		}
		if (rc == KVP_SSD_DECLINE) {
			declined++;
			rc = kvp_ssd_tombstone_agent(s, 0, x->ns, rec.key,
						     x->klen, x->loc);
			continue;
		}
		if (rc == 0) {
			kept++;
			if (sg)
				sg->live_bytes += kvp_ssd_record_bytes(x->vlen);
		}
	}
	/* the tombstones of declined records, on disk before we go on */
	while (rc >= 0 && s->outstanding) {
		struct kvp_ssd_cqe cq[32];
		if (kvp_ssd_poll_agent(s, cq, 32, -1) < 0)
			break;
	}
out:
	s->st.recovered = kept;
	s->st.recover_ns = kvp_now_ns(CLOCK_MONOTONIC) - t0;
	if (rc >= 0)
		kvp_log(KVP_LOG_INFO, "ssd",
			"recovered %llu records (%zu keys seen, %llu "
			"declined) from %u segments in %.3f s (disk and "
			"table %.3f s, the owner's inserts %.3f s)",
			(unsigned long long)kept, t.n,
			(unsigned long long)declined, s->nsegs,
			(double)s->st.recover_ns / 1e9, (double)(t1 - t0) / 1e9,
			(double)(t0 + s->st.recover_ns - t1) / 1e9);
	free(t.r);
	free(t.keys);
	free(t.slot);
	free(t.dead);
	free(t.sumbuf);
	return rc < 0 ? rc : (int64_t)kept;
}

/* ---- open / close ---- */

/*
 * Open (creating it 0700 if missing) the store's directory and check that
 * it is ours alone: a directory owned by our effective uid that no one
 * else can write.  Another user's directory, or one they can write, could
 * hold segment files they made, which we would serve as values.  Every
 * file is then reached through this descriptor (openat), so a rename of
 * the path afterwards changes nothing.  0, or -errno with a log line.
 */
static int
kvp_ssd_dir_open(struct kvp_ssd *s)
{
	struct stat st;
	int rc;

	if (mkdir(s->dir, 0700) && errno != EEXIST) {
		rc = -errno;
		kvp_log(KVP_LOG_ERROR, "ssd", "cannot create %s: %s", s->dir,
			strerror(-rc));
		return rc;
	}
	s->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0) {
		rc = -errno;
		kvp_log(KVP_LOG_ERROR, "ssd", "%s: %s", s->dir,
			rc == -ENOTDIR ?
				"not a directory (give --ssd-dir a directory, or a path to create)" :
				strerror(-rc));
		return rc;
	}
	if (fstat(s->dirfd, &st)) {
		rc = -errno;
		kvp_log(KVP_LOG_ERROR, "ssd", "%s: %s", s->dir, strerror(-rc));
		return rc;
	}
	if (st.st_uid != geteuid()) {
		kvp_log(KVP_LOG_ERROR, "ssd",
			"%s is owned by uid %u, not by this agent's "
			"uid %u: refused (its files could be anyone's); give --ssd-dir a "
			"directory of this user, or a path that does not exist yet",
			s->dir, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EACCES;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		kvp_log(KVP_LOG_ERROR, "ssd",
			"%s is writable by group or others (mode "
			"%04o): refused (anyone could plant segment files); chmod go-w %s",
			s->dir, (unsigned)(st.st_mode & 07777), s->dir);
		return -EACCES;
	}
	return 0;
}

int
kvp_ssd_open_agent(const struct kvp_ssd_cfg *cfg, struct kvp_ssd **out)
{
	struct kvp_ssd *s;
	char path[1300];
	struct dirent *de;
	DIR *d;
	int rc;

	if (!cfg || !cfg->dir || !*cfg->dir ||
	    strlen(cfg->dir) >= sizeof(s->dir))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	if (!s->cfg.segment_bytes)
		s->cfg.segment_bytes = KVP_SSD_SEGMENT_DEFAULT;
	if (s->cfg.segment_bytes < KVP_SSD_SEGMENT_MIN ||
	    s->cfg.segment_bytes > KVP_SSD_SEGMENT_MAX ||
	    s->cfg.segment_bytes % B ||
	    (s->cfg.capacity_bytes &&
	     s->cfg.capacity_bytes < 2 * s->cfg.segment_bytes)) {
		free(s);
		return -EINVAL;
	}
	if (!s->cfg.queue_depth)
		s->cfg.queue_depth = 128;
	if (!s->cfg.max_requests)
		s->cfg.max_requests = 4096;
	snprintf(s->dir, sizeof(s->dir), "%s", cfg->dir);
	s->lockfd = -1;
	s->dirfd = -1;
	s->next_seq = 1;
	s->next_id = 1;
	s->direct = true;
	s->zero = kvp_aligned(B);
	if (!s->zero) {
		free(s);
		return -ENOMEM;
	}
	rc = kvp_ssd_dir_open(s);
	if (rc)
		goto err;
	s->lockfd = openat(s->dirfd, "LOCK",
			   O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (s->lockfd < 0 || flock(s->lockfd, LOCK_EX | LOCK_NB)) {
		rc = s->lockfd < 0 ? -errno : -EBUSY;
		if (rc == -EBUSY)
			kvp_log(KVP_LOG_ERROR, "ssd",
				"%s is in use by another kvpoold "
				"(its LOCK is held)",
				s->dir);
		else
			kvp_log(KVP_LOG_ERROR, "ssd", "%s/LOCK: %s", s->dir,
				strerror(-rc));
		goto err;
	}
	{
		int dfd = dup(s->dirfd);

		d = dfd >= 0 ? fdopendir(dfd) : NULL;
		if (!d) {
			rc = -errno;
			if (dfd >= 0)
				close(dfd);
			goto err;
		}
	}
	while ((de = readdir(d))) {
		uint32_t id = kvp_seg_name_id(de->d_name);
		struct kvp_sseg *g;
		struct kvp_ssd_file_hdr *fh;
		struct stat st;
		char why[96];
		uint32_t crc;

		if (!id) {
			if (strcmp(de->d_name, ".") &&
			    strcmp(de->d_name, "..") &&
			    strcmp(de->d_name, "LOCK") &&
			    strcmp(de->d_name, "DRIVE")) /* agent/drives.c */
				kvp_log(KVP_LOG_WARN, "ssd",
					"%s/%s: not a segment file name "
					"(seg-XXXXXXXX.kvs, ids 00000001..%08x): ignored",
					s->dir, de->d_name, KVP_SSD_SEG_ID_MAX);
			continue;
		}
		/* a new segment never reuses the id of a file that is there,
		 * served or not (its O_EXCL create would fail for good) */
		if (id >= s->next_id)
			/* at most KVP_SSD_SEG_ID_MAX + 1 */
			s->next_id = id + 1;
		snprintf(path, sizeof(path), "%s/%s", s->dir, de->d_name);
		if (cfg->wipe) {
			unlinkat(s->dirfd, de->d_name, 0);
			continue;
		}
		/* look before opening: a FIFO or a device is never opened */
		if (fstatat(s->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			kvp_log(KVP_LOG_WARN, "ssd", "%s: %s: skipped", path,
				strerror(errno));
			continue;
		}
		if (kvp_file_ours(&st, why, sizeof(why))) {
			kvp_log(KVP_LOG_WARN, "ssd",
				"%s: %s: skipped, never served (remove "
				"it, or move it away)",
				path, why);
			continue;
		}
		g = calloc(1, sizeof(*g));
		fh = kvp_aligned(B);
		if (!g || !fh) {
			free(g);
			free(fh);
			closedir(d);
			rc = -ENOMEM;
			goto err;
		}
		g->fd = kvp_open_file(s, de->d_name, O_RDWR);
		if (g->fd < 0 || fstat(g->fd, &st)) {
			kvp_log(KVP_LOG_WARN, "ssd", "%s: unreadable: skipped",
				path);
			goto skip;
		}
		if (kvp_file_ours(&st, why, sizeof(why))) { /* what we opened */
			kvp_log(KVP_LOG_WARN, "ssd",
				"%s: %s: skipped, never served", path, why);
			goto skip;
		}
		if (pread(g->fd, fh, B, 0) != (ssize_t)B) {
			kvp_log(KVP_LOG_WARN, "ssd", "%s: unreadable: skipped",
				path);
			goto skip;
		}
		crc = fh->fh_crc;
		fh->fh_crc = 0;
		if (fh->fh_magic == KVP_SSD_MAGIC_FILE && fh->fh_seg_id == id &&
		    kvp_crc32c(0, fh, sizeof(*fh)) == crc &&
		    fh->fh_seg_size > (uint64_t)st.st_size &&
		    fh->fh_seg_size % B == 0 &&
		    fh->fh_seg_size <= KVP_SSD_SEGMENT_MAX) {
			/* truncated (a torn tail of another kind): give the
			 * file its size back; the scan stops at the first bad
			 * record */
			kvp_log(KVP_LOG_WARN, "ssd",
				"%s: truncated to %lld bytes: repairing", path,
				(long long)st.st_size);
			g->valid_end = (uint64_t)st.st_size;
			if (ftruncate(g->fd, (off_t)fh->fh_seg_size) == 0)
				st.st_size = (off_t)fh->fh_seg_size;
		}
		if (fh->fh_magic != KVP_SSD_MAGIC_FILE || fh->fh_seg_id != id ||
		    kvp_crc32c(0, fh, sizeof(*fh)) != crc ||
		    fh->fh_seg_size != (uint64_t)st.st_size ||
		    fh->fh_seg_size % B ||
		    fh->fh_seg_size < KVP_SSD_SEGMENT_MIN) {
			kvp_log(KVP_LOG_WARN, "ssd",
				"%s: bad file header: skipped, never served",
				path);
			goto skip;
		}
		if (fh->fh_version < KVP_SSD_FORMAT_MIN ||
		    fh->fh_version > KVP_SSD_FORMAT) {
			kvp_log(KVP_LOG_ERROR, "ssd",
				"%s: format %u, this build reads %u..%u: "
				"move the directory away",
				path, fh->fh_version, KVP_SSD_FORMAT_MIN,
				KVP_SSD_FORMAT);
			free(fh);
			kvp_seg_free(g);
			closedir(d);
			rc = -EPROTO;
			goto err;
		}
		g->id = id;
		g->version = fh->fh_version;
		g->size = fh->fh_seg_size;
		if (!g->valid_end)
			g->valid_end = g->size;
		g->create_seq = fh->fh_create_seq;
		if (g->create_seq > s->next_seq)
			s->next_seq = g->create_seq;
		free(fh);
		if (kvp_seg_insert(s, g)) {
			kvp_seg_free(g);
			closedir(d);
			rc = -ENOMEM;
			goto err;
		}
		continue;
skip:
		free(fh);
		kvp_seg_free(g);
	}
	closedir(d);
	if (getenv("KVP_SSD_FORCE_PREAD")) {
		kvp_log(KVP_LOG_INFO, "ssd",
			"KVP_SSD_FORCE_PREAD: pread/pwrite thread path");
	} else if ((rc = io_uring_queue_init(s->cfg.queue_depth, &s->ring,
					     0)) == 0) {
		s->uring = true;
	} else {
		kvp_log(KVP_LOG_WARN, "ssd",
			"io_uring refused (%s): pread/pwrite thread "
			"path",
			strerror(-rc));
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv_work, NULL);
	pthread_cond_init(&s->cv_done, NULL);
	if (!s->uring) {
		for (s->nworkers = 0; s->nworkers < KVP_SSD_WORKERS;
		     s->nworkers++)
			if (pthread_create(&s->workers[s->nworkers], NULL,
					   kvp_worker, s))
				break;
		if (!s->nworkers) {
			rc = -EAGAIN;
			goto err;
		}
	}
	s->st.uring = s->uring;
	s->st.direct = s->direct;
	*out = s;
	return 0;
err:
	if (s->lockfd >= 0)
		close(s->lockfd);
	if (s->dirfd >= 0)
		close(s->dirfd);
	while (s->nsegs)
		kvp_seg_free(s->segs[--s->nsegs]);
	free(s->segs);
	free(s->zero);
	free(s);
	return rc;
}

void
kvp_ssd_close_agent(struct kvp_ssd *s)
{
	struct kvp_ssd_cqe cq[32];

	if (!s)
		return;
	while (s->outstanding && kvp_ssd_poll_agent(s, cq, 32, -1) >= 0)
		;
	if (s->active)
		kvp_seg_seal(s, s->active);
	/* a clean stop leaves nothing in a cache (buffered I/O, or the
	 * device's), whatever the durability mode */
	{
		unsigned k;

		for (k = 0; k < s->nsegs; k++)
			if (s->segs[k]->dirty && s->segs[k]->fd >= 0 &&
			    fdatasync(s->segs[k]->fd))
				kvp_log(KVP_LOG_ERROR, "ssd",
					"segment %08x: fdatasync at close: %s",
					s->segs[k]->id, strerror(errno));
	}
	if (s->uring)
		io_uring_queue_exit(&s->ring);
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	pthread_cond_broadcast(&s->cv_work);
	pthread_mutex_unlock(&s->mu);
	while (s->nworkers)
		pthread_join(s->workers[--s->nworkers], NULL);
	while (s->nsegs)
		kvp_seg_free(s->segs[--s->nsegs]);
	free(s->segs);
	kvp_reins_discard(s, 0); /* none outside a write */
	free(s->reins);
	if (s->lockfd >= 0)
		close(s->lockfd);
	if (s->dirfd >= 0)
		close(s->dirfd);
	free(s->zero);
	free(s);
}

/* ---- segments for the owner ---- */

int
kvp_ssd_record_dead_agent(struct kvp_ssd *s, uint64_t loc, uint64_t vlen)
{
	struct kvp_sseg *g = kvp_seg_find(s, KVP_SSD_LOC_SEG(loc));
	uint64_t b = kvp_ssd_record_bytes(vlen);

	if (!g)
		return -ENOENT;
	g->live_bytes = g->live_bytes > b ? g->live_bytes - b : 0;
	return 0;
}

int
kvp_ssd_oldest_segment_agent(const struct kvp_ssd *s, uint32_t after,
			     uint32_t *id)
{
	unsigned k;

	for (k = 0; k < s->nsegs; k++)
		if (s->segs[k]->sealed && s->segs[k]->id > after) {
			*id = s->segs[k]->id;
			return 0;
		}
	return -ENOENT;
}

int
kvp_ssd_segment_foreach_agent(struct kvp_ssd *s, uint32_t id, kvp_ssd_rec_fn cb,
			      void *arg)
{
	struct kvp_sseg *g = kvp_seg_find(s, id);

	if (!g)
		return -ENOENT;
	if (!g->sealed && g->sum) {
		/* the active segment: its summary is in memory */
		size_t p = 0;
		int rc = 0;
		while (p + sizeof(struct kvp_ssd_sum_ent) <= g->sum_len &&
		       !rc) {
			struct kvp_ssd_sum_ent e;
			struct kvp_ssd_rec rec;

			memcpy(&e, g->sum + p, sizeof(e));
			kvp_rec_from_sum(g, &e, g->sum + p + sizeof(e), &rec);
			rc = cb(arg, &rec);
			p += kvp_sum_ent_size(e.se_klen);
		}
		return rc;
	}
	return kvp_seg_records(s, g, cb, arg, false, NULL);
}

/* Do the value bytes at val match every chunk CRC of header h? */
static bool
kvp_value_crcs_ok(const struct kvp_ssd_rec_hdr *h, const unsigned char *val)
{
	size_t koff = (sizeof(*h) + h->rh_klen + 3) & ~(size_t)3;
	const uint32_t *crc = (const uint32_t *)((const char *)h + koff);
	uint64_t cs, nch, c;

	if (h->rh_chunk_shift < KVP_SSD_CHUNK_SHIFT_MIN ||
	    h->rh_chunk_shift > 40)
		return false;
	cs = 1ull << h->rh_chunk_shift;
	nch = (h->rh_vlen + cs - 1) / cs;
	if (nch != h->rh_nchunks || koff + 4 * nch > h->rh_len)
		return false;
	for (c = 0; c < nch; c++) {
		uint64_t a = c * cs,
			 e = a + cs < h->rh_vlen ? a + cs : h->rh_vlen;

		if (kvp_crc32c(0, val + a, (size_t)(e - a)) != crc[c])
			return false;
	}
	return true;
}

int
kvp_ssd_reinsert_agent(struct kvp_ssd *s, const struct kvp_ssd_rec *r,
		       uint64_t tag)
{
	struct kvp_reins *x;
	struct kvp_sseg *g;
	uint64_t len, vbytes, hblk, vblk;
	bool ok;

	if (!s->in_evict || !r || r->type != KVP_SSD_REC_VALUE || !r->vlen ||
	    !r->key || !r->klen || r->klen > KVP_SSD_KEY_MAX)
		return -EINVAL;
	g = kvp_seg_find(s, KVP_SSD_LOC_SEG(r->loc));
	if (!g || !g->sealed)
		return -ENOENT;
	len = kvp_ssd_record_bytes(r->vlen);
	vbytes = kvp_rup(r->vlen);
	if (g->version >= 3) {
		hblk = KVP_SSD_LOC_HDR(r->loc);
		vblk = KVP_SSD_LOC_VALUE(r->loc);
	} else {
		hblk = KVP_SSD_LOC_BLOCK(r->loc);
		vblk = hblk + 1;
	}
	if (hblk == 0 || vblk <= hblk || vblk + vbytes / B > g->size / B)
		return -EINVAL;
	/* the share: a log full of hot records still gives space back */
	if (s->reins_bytes + len >
	    s->cfg.segment_bytes / 100 * s->cfg.reinsert_pct)
		return -ENOSPC;
	if (s->nreins == s->capreins) {
		unsigned cap = s->capreins ? s->capreins * 2 : 64;
		struct kvp_reins *n = realloc(s->reins, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		s->reins = n;
		s->capreins = cap;
	}
	x = &s->reins[s->nreins];
	/* the header block, then the value (format 2: they are adjacent) */
	x->buf = kvp_aligned(B + vbytes);
	if (!x->buf)
		return -ENOMEM;
	x->val = x->buf + B;
	s->st.dev_read_bytes += B + vbytes;
	if (pread(g->fd, x->buf, B, (off_t)(hblk * B)) != (ssize_t)B ||
	    pread(g->fd, x->val, vbytes, (off_t)(vblk * B)) !=
		    (ssize_t)vbytes) {
		s->st.io_errors++;
		free(x->buf);
		return -EIO;
	}
	/* what was written there, whole: the record asked for */
	if (g->version >= 3) {
		const unsigned char *key;
		const uint32_t *crc;
		struct kvp_ssd_bent e;
		struct iovec v = { x->val, (size_t)r->vlen };
		uint32_t got[KVP_SSD_MAX_CHUNKS];

		ok = kvp_bhdr_valid(x->buf, g->id, hblk, g->size / B) &&
		     kvp_bent_find(x->buf, KVP_SSD_LOC_DELTA(r->loc), &e, &key,
				   &crc) &&
		     e.be_vlen == r->vlen && e.be_ns == r->ns &&
		     e.be_klen == r->klen && !memcmp(key, r->key, r->klen);
		if (ok) {
			kvp_chunk_crcs(got, e.be_nchunks, e.be_chunk_shift,
				       e.be_vlen, &v, 1);
			ok = !memcmp(got, crc, 4u * e.be_nchunks);
		}
	} else {
		const struct kvp_ssd_rec_hdr *h = (const void *)x->buf;

		ok = kvp_hdr_valid(g, h, hblk) &&
		     h->rh_type == KVP_SSD_REC_VALUE && h->rh_vlen == r->vlen &&
		     h->rh_ns == r->ns && h->rh_klen == r->klen &&
		     !memcmp(h + 1, r->key, r->klen) &&
		     kvp_value_crcs_ok(h, x->val);
	}
	if (!ok) {
		s->st.crc_errors++;
		free(x->buf);
		return -EBADMSG;
	}
	x->tag = tag;
	x->old_loc = r->loc;
	x->ns = r->ns;
	x->vlen = r->vlen;
	x->klen = r->klen;
	memcpy(x->key, r->key, r->klen);
	x->len = len;
	s->reins_bytes += len;
	s->nreins++;
	return 0;
}

int
kvp_ssd_segment_drop_agent(struct kvp_ssd *s, uint32_t id)
{
	struct kvp_sseg *g = kvp_seg_find(s, id);
	char name[32];
	unsigned k;

	if (!g)
		return -ENOENT;
	if (g == s->active || kvp_seg_writing(g))
		return -EBUSY;
	/* what is queued on its descriptor goes to the kernel first (which
	 * then holds the file): a later file could get the number */
	kvp_ssd_submit_agent(s);
	kvp_seg_name(id, name, sizeof(name));
	if (unlinkat(s->dirfd, name, 0) && errno != ENOENT)
		return -errno;
	for (k = 0; k < s->nsegs; k++)
		if (s->segs[k] == g) {
			memmove(&s->segs[k], &s->segs[k + 1],
				(s->nsegs - k - 1) * sizeof(s->segs[0]));
			s->nsegs--;
			break;
		}
	/* reads in flight hold their own reference to the file */
	kvp_seg_free(g);
	s->st.segs_dropped++;
	return 0;
}

int
kvp_ssd_segment_info_agent(const struct kvp_ssd *s, uint32_t id,
			   struct kvp_ssd_seg_info *info)
{
	const struct kvp_sseg *g = kvp_seg_find(s, id);

	if (!g)
		return -ENOENT;
	info->live_bytes = g->live_bytes;
	info->nrecords = g->nrecs;
	info->size = g->size;
	info->sealed = g->sealed;
	info->active = g == s->active;
	return 0;
}

void
kvp_ssd_usage_agent(const struct kvp_ssd *s, struct kvp_ssd_usage *u)
{
	unsigned k;

	memset(u, 0, sizeof(*u));
	u->capacity_bytes = s->cfg.capacity_bytes;
	u->segment_bytes = s->cfg.segment_bytes;
	u->nsegments = s->nsegs;
	for (k = 0; k < s->nsegs; k++) {
		u->used_bytes += s->segs[k]->size;
		u->live_bytes += s->segs[k]->live_bytes;
	}
	u->oldest_id = s->nsegs ? s->segs[0]->id : 0;
	u->active_id = s->active ? s->active->id : 0;
}

void
kvp_ssd_stats_agent(const struct kvp_ssd *s, struct kvp_ssd_stats *st)
{
	*st = s->st;
	st->inflight_requests = s->outstanding;
	st->registered = s->registered;
}

int
kvp_ssd_register_buffers_agent(struct kvp_ssd *s, const struct iovec *regions,
			       unsigned n)
{
	int rc;

	if (!s->uring)
		return -EOPNOTSUPP;
	if (s->outstanding)
		return -EBUSY;
	if (n > 2)
		n = 2;
	if (s->registered) {
		io_uring_unregister_buffers(&s->ring);
		s->registered = false;
	}
	rc = io_uring_register_buffers(&s->ring, regions, n);
	if (rc) {
		kvp_log(KVP_LOG_INFO, "ssd",
			"buffer registration refused (%s): plain "
			"reads and writes",
			strerror(-rc));
		return rc;
	}
	memcpy(s->reg, regions, n * sizeof(*regions));
	s->nreg = n;
	s->registered = true;
	return 0;
}
