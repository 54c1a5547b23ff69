/* SPDX-License-Identifier: MIT */
/*
 * test_ssd.c - the SSD store on its own: CRC-32C, round trips, ranged
 * reads that read only their extents, restart with tombstones, damaged
 * headers, truncated files, a full file system, reinsertion at reclaim,
 * the pread path, and what
 * the store adopts from its directory (names, owners, modes, links).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "agent/agent_int.h"
#include "tests/agent/harness.h"
#include "tiers/kvp_ssd.h"

static int
setup(void **state)
{
	kvp_log_set_level(KVP_LOG_ERROR);
	return kvpt_ssd_dir_setup(state);
}

static struct kvp_ssd *
open_store(bool wipe, uint64_t seg, uint64_t cap)
{
	struct kvp_ssd_cfg cfg;
	struct kvp_ssd *s;

	memset(&cfg, 0, sizeof(cfg));
	cfg.dir = kvpt_ssd_dir;
	cfg.segment_bytes = seg;
	cfg.capacity_bytes = cap;
	cfg.wipe = wipe;
	assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
	return s;
}

static void
fill(unsigned char *b, uint64_t n, unsigned seed)
{
	uint64_t i;

	for (i = 0; i < n; i++)
		b[i] = (unsigned char)(seed * 31 + i * 7 + (i >> 9));
}

static int
wait_one(struct kvp_ssd *s, struct kvp_ssd_cqe *cq)
{
	int n;

	while ((n = kvp_ssd_poll_agent(s, cq, 1, -1)) == 0)
		;
	assert_int_equal(n, 1);
	return cq->status;
}

static uint64_t
put(struct kvp_ssd *s, const char *key, const unsigned char *v, uint64_t len)
{
	struct kvp_ssd_cqe cq;
	struct iovec iov = { (void *)(uintptr_t)v, len };

	assert_int_equal(kvp_ssd_write_agent(s, 1, 42, key,
					     (uint32_t)strlen(key), &iov, 1, 0),
			 0);
	assert_int_equal(wait_one(s, &cq), 0);
	return cq.loc;
}

/* A read of [off, off + len) of the value of vlen bytes at loc into dst
 * (its extent: kvp_ssd_extent), described in *rd and *iov. */
static void
read_of(struct kvp_ssd_read *rd, struct iovec *iov, uint64_t loc, uint64_t vlen,
	uint64_t off, uint64_t len, unsigned char *dst)
{
	iov->iov_base = dst;
	iov->iov_len = kvp_ssd_extent(off, len, NULL);
	memset(rd, 0, sizeof(*rd));
	rd->loc = loc;
	rd->vlen = vlen;
	rd->off = off;
	rd->len = len;
	rd->ndst = 1;
	rd->dst = iov;
}

static int
get(struct kvp_ssd *s, uint64_t loc, uint64_t vlen, uint64_t off, uint64_t len,
    unsigned char *dst, uint32_t *dst_off)
{
	struct kvp_ssd_cqe cq;
	struct iovec iov;
	struct kvp_ssd_read rd;

	read_of(&rd, &iov, loc, vlen, off, len, dst);
	assert_int_equal(kvp_ssd_read_agent(s, 2, &rd), 0);
	wait_one(s, &cq);
	*dst_off = cq.dst_off;
	return cq.status;
}

static void
test_crc32c(void **state)
{
	unsigned char big[10000];

	(void)state;
	assert_int_equal(kvp_crc32c_sw(0, "123456789", 9), 0xE3069283);
	assert_int_equal(kvp_crc32c_hw(0, "123456789", 9), 0xE3069283);
	fill(big, sizeof(big), 3);
	assert_int_equal(kvp_crc32c_hw(0, big, sizeof(big)),
			 kvp_crc32c_sw(0, big, sizeof(big)));
	assert_int_equal(kvp_crc32c(kvp_crc32c(0, big, 1234), big + 1234,
				    sizeof(big) - 1234),
			 kvp_crc32c(0, big, sizeof(big)));
}

/* Values of many sizes go to disk and come back byte for byte; ranged
 * reads read the header block and their 4 KiB-rounded extent only. */
static void
test_round_trip(void **state)
{
	static const uint64_t sizes[] = { 1,      100,     4095,
					  4096,   4097,    65536,
					  100000, 1 << 20, (8 << 20) - 12345 };
	struct kvp_ssd *s = open_store(true, 32 << 20, 0);
	unsigned char *v = malloc(8 << 20), *d;
	struct kvp_ssd_stats st0, st1;
	uint32_t doff;
	unsigned k;

	(void)state;
	assert_int_equal(posix_memalign((void **)&d, 4096, (8 << 20) + 8192),
			 0);
	assert_true(kvp_ssd_recover_agent(s, NULL, NULL) == 0 || 1);
	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		char key[32];
		uint64_t loc;

		snprintf(key, sizeof(key), "rt-%u", k);
		fill(v, sizes[k], k);
		loc = put(s, key, v, sizes[k]);
		memset(d, 0, sizes[k]);
		assert_int_equal(get(s, loc, sizes[k], 0, sizes[k], d, &doff),
				 0);
		assert_int_equal(doff, 0);
		assert_memory_equal(d, v, sizes[k]);
		if (sizes[k] > 20000) {
			kvp_ssd_stats_agent(s, &st0);
			assert_int_equal(get(s, loc, sizes[k], 10000, 5000, d,
					     &doff),
					 0);
			kvp_ssd_stats_agent(s, &st1);
			assert_memory_equal(d + doff, v + 10000, 5000);
			assert_int_equal(
				st1.dev_read_bytes - st0.dev_read_bytes,
				4096 + kvp_ssd_extent(10000, 5000, NULL));
		}
	}
	kvp_ssd_close_agent(s);
	free(v);
	free(d);
}

struct seen {
	unsigned n;
	char keys[64][32];
	uint64_t locs[64], vlen[64];
};

static int
collect(void *arg, const struct kvp_ssd_rec *r)
{
	struct seen *sn = arg;

	if (sn->n < 64) {
		memcpy(sn->keys[sn->n], r->key, r->klen);
		sn->keys[sn->n][r->klen] = 0;
		sn->locs[sn->n] = r->loc;
		sn->vlen[sn->n] = r->vlen;
		sn->n++;
	}
	return 0;
}

static bool
seen_has(const struct seen *sn, const char *key)
{
	unsigned k;

	for (k = 0; k < sn->n; k++)
		if (!strcmp(sn->keys[k], key))
			return true;
	return false;
}

static uint64_t
seen_loc(const struct seen *sn, const char *key)
{
	unsigned k;

	for (k = 0; k < sn->n; k++)
		if (!strcmp(sn->keys[k], key))
			return sn->locs[k];
	return 0;
}

/*
 * A tombstone deletes the record it names, not whatever is newest when it
 * is written: key "a" is written, deleted (its tombstone not yet written),
 * written again; the tombstone of the first value lands after the second
 * value (as when the agent reclaims the deleted slot late).  Recovery
 * keeps the second value, in the same segment and across segments, and a
 * tombstone of the second value then deletes the key.
 */
static void
test_late_tombstone(void **state)
{
	struct kvp_ssd *s = open_store(true, 1 << 20, 0);
	unsigned char v[40000];
	struct kvp_ssd_cqe cq;
	struct seen sn;
	uint64_t a0, a1, b0, b1;
	int k;

	(void)state;
	assert_int_equal(kvp_ssd_recover_agent(s, NULL, NULL), 0);
	fill(v, sizeof(v), 1);
	a0 = put(s, "a", v, sizeof(v));
	b0 = put(s, "b", v, sizeof(v));
	/* push "b"'s second value into a later segment */
	for (k = 0; k < 30; k++) {
		char key[16];
		snprintf(key, sizeof(key), "pad%d", k);
		put(s, key, v, sizeof(v));
	}
	fill(v, sizeof(v), 2);
	a1 = put(s, "a", v, sizeof(v));
	b1 = put(s, "b", v, sizeof(v));
	assert_true(KVP_SSD_LOC_SEG(b1) > KVP_SSD_LOC_SEG(b0));
	assert_int_equal(kvp_ssd_tombstone_agent(s, 3, 42, "a", 1, a0), 0);
	assert_int_equal(wait_one(s, &cq), 0);
	assert_int_equal(kvp_ssd_tombstone_agent(s, 3, 42, "b", 1, b0), 0);
	assert_int_equal(wait_one(s, &cq), 0);
	kvp_ssd_close_agent(s);
	s = open_store(false, 1 << 20, 0);
	memset(&sn, 0, sizeof(sn));
	assert_int_equal(kvp_ssd_recover_agent(s, collect, &sn), 32);
	assert_int_equal(seen_loc(&sn, "a"), a1);
	assert_int_equal(seen_loc(&sn, "b"), b1);
	/* now delete the live value of "a": the key is gone */
	assert_int_equal(kvp_ssd_tombstone_agent(s, 3, 42, "a", 1, a1), 0);
	assert_int_equal(wait_one(s, &cq), 0);
	kvp_ssd_close_agent(s);
	s = open_store(false, 1 << 20, 0);
	memset(&sn, 0, sizeof(sn));
	assert_int_equal(kvp_ssd_recover_agent(s, collect, &sn), 31);
	assert_false(seen_has(&sn, "a"));
	assert_int_equal(seen_loc(&sn, "b"), b1);
	kvp_ssd_close_agent(s);
}

/* Restart: live records come back, tombstoned ones do not; a damaged
 * header ends its file's scan (never served); a truncated file is
 * repaired and its earlier records kept. */
static void
test_restart_and_damage(void **state)
{
	struct kvp_ssd *s = open_store(true, 4 << 20, 0);
	unsigned char v[20000];
	struct kvp_ssd_cqe cq;
	struct seen sn;
	uint64_t loc[10];
	char key[32], path[400];
	int k, fd;

	(void)state;
	assert_int_equal(kvp_ssd_recover_agent(s, NULL, NULL), 0);
	for (k = 0; k < 10; k++) {
		snprintf(key, sizeof(key), "k%d", k);
		fill(v, sizeof(v), (unsigned)k);
		loc[k] = put(s, key, v, sizeof(v));
	}
	assert_int_equal(kvp_ssd_tombstone_agent(s, 3, 42, "k2", 2, 0),
			 -EINVAL);
	assert_int_equal(kvp_ssd_tombstone_agent(s, 3, 42, "k2", 2, loc[2]), 0);
	assert_int_equal(wait_one(s, &cq), 0);
	kvp_ssd_close_agent(s); /* seals: recovery reads the summary */
	s = open_store(false, 4 << 20, 0);
	memset(&sn, 0, sizeof(sn));
	assert_int_equal(kvp_ssd_recover_agent(s, collect, &sn), 9);
	assert_false(seen_has(&sn, "k2"));
	assert_true(seen_has(&sn, "k9"));
	/* damage record 5's header in an unsealed segment: write more
	 * records without closing, then flip a byte */
	for (k = 10; k < 20; k++) {
		snprintf(key, sizeof(key), "k%d", k);
		fill(v, sizeof(v), (unsigned)k);
		loc[k % 10] = put(s, key, v, sizeof(v));
	}
	snprintf(path, sizeof(path), "%s/seg-%08x.kvs", kvpt_ssd_dir,
		 KVP_SSD_LOC_SEG(loc[5]));
	/* no close: the segment stays unsealed, as after a crash */
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	{
		unsigned char b = 0;
		off_t at = (off_t)KVP_SSD_LOC_HDR(loc[5]) * 4096 + 20;
		assert_int_equal(pread(fd, &b, 1, at), 1);
		b ^= 1;
		assert_int_equal(pwrite(fd, &b, 1, at), 1);
	}
	close(fd);
	/* simulate the crash: drop the store without sealing */
	{
		struct kvp_ssd *dead = s;
		(void)dead; /* its files stay as they are on disk */
	}
	kvp_ssd_close_agent(s); /* close seals: undo by flipping the trailer */
	fd = open(path, O_RDWR);
	{
		unsigned char z[4096] = { 0 };
		struct stat st;
		assert_int_equal(fstat(fd, &st), 0);
		assert_int_equal(pwrite(fd, z, 4096, st.st_size - 4096), 4096);
	}
	close(fd);
	s = open_store(false, 4 << 20, 0);
	memset(&sn, 0, sizeof(sn));
	kvp_ssd_recover_agent(s, collect, &sn);
	assert_true(seen_has(&sn, "k14"));  /* before the damage */
	assert_false(seen_has(&sn, "k15")); /* the damaged record */
	assert_false(seen_has(&sn, "k19")); /* after it, same file */
	assert_true(seen_has(&sn, "k9"));   /* other segment */
	kvp_ssd_close_agent(s);

	/* truncate the last segment in the middle of a record */
	s = open_store(true, 4 << 20, 0);
	kvp_ssd_recover_agent(s, NULL, NULL);
	for (k = 0; k < 5; k++) {
		snprintf(key, sizeof(key), "t%d", k);
		fill(v, sizeof(v), (unsigned)k);
		loc[k] = put(s, key, v, sizeof(v));
	}
	kvp_ssd_close_agent(s);
	snprintf(path, sizeof(path), "%s/seg-%08x.kvs", kvpt_ssd_dir,
		 KVP_SSD_LOC_SEG(loc[4]));
	assert_int_equal(truncate(path,
				  (off_t)KVP_SSD_LOC_HDR(loc[4]) * 4096 + 8192),
			 0);
	s = open_store(false, 4 << 20, 0);
	memset(&sn, 0, sizeof(sn));
	assert_int_equal(kvp_ssd_recover_agent(s, collect, &sn), 4);
	assert_true(seen_has(&sn, "t3"));
	assert_false(seen_has(&sn, "t4"));
	{
		unsigned char *d;
		uint32_t doff;
		assert_int_equal(posix_memalign((void **)&d, 4096, 32768), 0);
		for (k = 0; k < (int)sn.n; k++)
			if (!strcmp(sn.keys[k], "t3")) {
				assert_int_equal(get(s, sn.locs[k], sn.vlen[k],
						     0, sn.vlen[k], d, &doff),
						 0);
				fill(v, sizeof(v), 3);
				assert_memory_equal(d, v, sizeof(v));
			}
		free(d);
	}
	kvp_ssd_close_agent(s);
}

/* Write a format 2 record (its own header block, then the value) at
 * block blk of fd: a value (v, vlen) or a tombstone (target). */
static uint64_t
v2_record(int fd, uint32_t seg, uint64_t blk, uint8_t type, const char *key,
	  uint64_t seq, const unsigned char *v, uint64_t vlen, uint64_t target)
{
	unsigned char *b;
	struct kvp_ssd_rec_hdr *h;
	uint64_t vb = (vlen + 4095) & ~4095ull, c, nch = (vlen + 65535) >> 16;
	size_t klen = strlen(key), koff = (sizeof(*h) + klen + 3) & ~3ul;
	uint32_t *crc;

	assert_int_equal(posix_memalign((void **)&b, 4096, 4096 + vb), 0);
	memset(b, 0, 4096 + vb);
	h = (struct kvp_ssd_rec_hdr *)b;
	h->rh_magic = KVP_SSD_MAGIC_REC;
	h->rh_version = 2;
	h->rh_type = type;
	h->rh_klen = (uint8_t)klen;
	h->rh_seg_id = seg;
	h->rh_block = (uint32_t)blk;
	h->rh_ns = 42;
	h->rh_seq = seq;
	h->rh_vlen = type == KVP_SSD_REC_VALUE ? vlen : target;
	h->rh_nchunks = type == KVP_SSD_REC_VALUE ? (uint32_t)nch : 0;
	h->rh_chunk_shift = 16;
	memcpy(h + 1, key, klen);
	crc = (uint32_t *)(b + koff);
	for (c = 0; type == KVP_SSD_REC_VALUE && c < nch; c++) {
		uint64_t e = (c + 1) << 16 < vlen ? (c + 1) << 16 : vlen;
		crc[c] = kvp_crc32c(0, v + (c << 16), e - (c << 16));
	}
	h->rh_len = (uint32_t)(koff + 4 * h->rh_nchunks);
	h->rh_crc = kvp_crc32c(0, h, h->rh_len);
	if (type == KVP_SSD_REC_VALUE)
		memcpy(b + 4096, v, vlen);
	else
		vb = 0;
	assert_int_equal(pwrite(fd, b, 4096 + vb, (off_t)(blk * 4096)),
			 (ssize_t)(4096 + vb));
	free(b);
	return blk + 1 + vb / 4096;
}

/*
 * Format 2 files (a 4 KiB header block per record, written by an older
 * agent, its segment unsealed as after a crash) are still read: recovery
 * scans them record by record, seals them (a summary of format 2
 * locations), keeps the live records (a format 2 tombstone kills the one
 * it names), serves their bytes; a flipped value byte is -EBADMSG; new
 * records go to a format 3 segment; after a restart the sealed format 2
 * segment is read through its summary, same locations, same bytes.
 */
static void
test_format2_files(void **state)
{
	static const uint64_t sizes[] = { 4097, 20000, 100, 300000 };
	struct kvp_ssd_file_hdr *fh;
	struct kvp_ssd *s;
	struct seen sn;
	unsigned char *v = malloc(300000), *d;
	uint64_t blk = 1, loc[4], newloc = 0;
	char path[400], key[16];
	uint32_t doff;
	unsigned k, pass;
	int fd;

	(void)state;
	assert_int_equal(posix_memalign((void **)&d, 4096, 303104), 0);
	s = open_store(true, 1 << 20, 0); /* wipe */
	kvp_ssd_close_agent(s);
	snprintf(path, sizeof(path), "%s/seg-00000001.kvs", kvpt_ssd_dir);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 1 << 20), 0);
	assert_int_equal(posix_memalign((void **)&fh, 4096, 4096), 0);
	memset(fh, 0, 4096);
	fh->fh_magic = KVP_SSD_MAGIC_FILE;
	fh->fh_version = 2;
	fh->fh_hdr_size = sizeof(*fh);
	fh->fh_seg_id = 1;
	fh->fh_create_seq = 1;
	fh->fh_seg_size = 1 << 20;
	fh->fh_crc = kvp_crc32c(0, fh, sizeof(*fh));
	assert_int_equal(pwrite(fd, fh, 4096, 0), 4096);
	free(fh);
	for (k = 0; k < 4; k++) {
		snprintf(key, sizeof(key), "old%u", k);
		fill(v, sizes[k], 50 + k);
		loc[k] = KVP_SSD_LOC(1, blk);
		blk = v2_record(fd, 1, blk, KVP_SSD_REC_VALUE, key, 1 + k, v,
				sizes[k], 0);
	}
	/* "old1" deleted, format 2: the tombstone names its record */
	v2_record(fd, 1, blk, KVP_SSD_REC_TOMBSTONE, "old1", 10, NULL, 0,
		  loc[1]);
	/* a flipped byte in "old3"'s value */
	{
		unsigned char b;
		off_t at =
			(off_t)(KVP_SSD_LOC_BLOCK(loc[3]) + 1) * 4096 + 70000;

		assert_int_equal(pread(fd, &b, 1, at), 1);
		b ^= 4;
		assert_int_equal(pwrite(fd, &b, 1, at), 1);
	}
	close(fd);
	for (pass = 0; pass < 2; pass++) {
		s = open_store(false, 1 << 20, 0);
		memset(&sn, 0, sizeof(sn));
		assert_int_equal(kvp_ssd_recover_agent(s, collect, &sn),
				 pass ? 4 : 3);
		assert_false(seen_has(&sn, "old1"));
		for (k = 0; k < 4; k++) {
			uint64_t got;

			snprintf(key, sizeof(key), "old%u", k);
			got = seen_loc(&sn, key);
			if (k == 1) {
				assert_int_equal(got, 0);
				continue;
			}
			assert_int_equal(got, loc[k]);
			fill(v, sizes[k], 50 + k);
			memset(d, 0, sizes[k]);
			assert_int_equal(get(s, got, sizes[k], 0, sizes[k], d,
					     &doff),
					 k == 3 ? -EBADMSG : 0);
			if (k != 3)
				assert_memory_equal(d + doff, v, sizes[k]);
		}
		/* a ranged read of "old3" that misses the damage */
		fill(v, sizes[3], 53);
		assert_int_equal(get(s, loc[3], sizes[3], 0, 65536, d, &doff),
				 0);
		assert_memory_equal(d, v, 65536);
		if (pass == 0) {
			fill(v, 5000, 77);
			newloc = put(s, "new", v, 5000);
			/* a new segment, format 3 */
			assert_int_equal(KVP_SSD_LOC_SEG(newloc), 2);
			assert_int_equal(KVP_SSD_LOC_DELTA(newloc), 1);
		} else {
			assert_int_equal(seen_loc(&sn, "new"), newloc);
			fill(v, 5000, 77);
			assert_int_equal(
				get(s, newloc, 5000, 0, 5000, d, &doff), 0);
			assert_memory_equal(d, v, 5000);
		}
		kvp_ssd_close_agent(s);
	}
	free(v);
	free(d);
}

/*
 * Crash points of the batched write (shm/kvp_crash.h): a process writes a
 * batch of 12 records (4 KiB and 16 KiB values and a tombstone, one
 * submit) and dies at A_SSD_BATCH_BUILT (header block sealed, nothing
 * queued) or A_SSD_BATCH_WRITTEN (on disk, no completion handed back).
 * After a restart the unsealed segment's scan finds none of the batch or
 * all of it, each record with its bytes, the tombstoned one gone, the
 * records written before the crash intact.
 */
static uint64_t pre0_loc;

static int
keep_all(void *arg, const struct kvp_ssd_rec *r)
{
	(void)arg;
	(void)r;
	return 0;
}

/* The child: no cmocka here, it reports through its exit status. */
static void
crash_batch_child(int point)
{
	static unsigned char v[16384] __attribute__((aligned(4096)));
	struct kvp_ssd_cqe cq[16];
	struct kvp_ssd_cfg cfg;
	struct kvp_ssd *s;
	unsigned k;

	memset(&cfg, 0, sizeof(cfg));
	cfg.dir = kvpt_ssd_dir;
	cfg.segment_bytes = 4 << 20;
	if (kvp_ssd_open_agent(&cfg, &s) ||
	    kvp_ssd_recover_agent(s, keep_all, NULL) < 0)
		_exit(2);
	kvp_crash_arm(point, 0);
	for (k = 0; k < 11; k++) {
		char key[16];
		struct iovec iov = { v, k % 2 ? 16384 : 4096 };

		snprintf(key, sizeof(key), "b%u", k);
		fill(v, iov.iov_len, 200 + k);
		if (kvp_ssd_write_agent(s, 1, 42, key, (uint32_t)strlen(key),
					&iov, 1, 0))
			_exit(3);
	}
	/* the tombstone of "pre0", written before the crash */
	if (kvp_ssd_tombstone_agent(s, 2, 42, "pre0", 4, pre0_loc))
		_exit(4);
	kvp_ssd_poll_agent(s, cq, 16, -1); /* submits: dies in there */
	_exit(5);
}

static void
test_crash_batch(void **state)
{
	static const int points[] = { KVP_CP_A_SSD_BATCH_BUILT,
				      KVP_CP_A_SSD_BATCH_WRITTEN };
	unsigned char *v = malloc(16384), *d;
	unsigned p, k;

	(void)state;
	assert_int_equal(posix_memalign((void **)&d, 4096, 16384), 0);
	for (p = 0; p < 2; p++) {
		struct kvp_ssd *s = open_store(true, 4 << 20, 0);
		struct seen sn;
		uint32_t doff;
		pid_t pid;
		int st;

		kvp_ssd_recover_agent(s, NULL, NULL);
		for (k = 0; k < 3; k++) {
			char key[16];
			uint64_t loc;

			snprintf(key, sizeof(key), "pre%u", k);
			fill(v, 4096, 100 + k);
			loc = put(s, key, v, 4096);
			if (k == 0)
				pre0_loc = loc;
		}
		kvp_ssd_close_agent(s);
		/* unseal it, as after a crash: the trailer goes */
		{
			char path[400];
			unsigned char z[4096] = { 0 };
			int fd;

			snprintf(path, sizeof(path), "%s/seg-%08x.kvs",
				 kvpt_ssd_dir, KVP_SSD_LOC_SEG(pre0_loc));
			fd = open(path, O_RDWR);
			assert_true(fd >= 0);
			assert_int_equal(pwrite(fd, z, 4096, (4 << 20) - 4096),
					 4096);
			close(fd);
		}
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0)
			crash_batch_child(points[p]);
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), KVP_CRASH_EXIT);
		s = open_store(false, 4 << 20, 0);
		memset(&sn, 0, sizeof(sn));
		assert_true(kvp_ssd_recover_agent(s, collect, &sn) >= 0);
		for (k = 0; k < 11; k++) {
			char key[16];
			uint64_t len = k % 2 ? 16384 : 4096;

			snprintf(key, sizeof(key), "b%u", k);
			if (p == 0) {
				assert_false(seen_has(&sn, key));
				continue;
			}
			assert_true(seen_has(&sn, key));
			fill(v, len, 200 + k);
			assert_int_equal(get(s, seen_loc(&sn, key), len, 0, len,
					     d, &doff),
					 0);
			assert_memory_equal(d, v, len);
		}
		/* the tombstone was in the batch: with it or not at all */
		assert_int_equal(seen_has(&sn, "pre0"), p == 0);
		for (k = 1; k < 3; k++) {
			char key[16];

			snprintf(key, sizeof(key), "pre%u", k);
			assert_true(seen_has(&sn, key));
			fill(v, 4096, 100 + k);
			assert_int_equal(get(s, seen_loc(&sn, key), 4096, 0,
					     4096, d, &doff),
					 0);
			assert_memory_equal(d, v, 4096);
		}
		kvp_ssd_close_agent(s);
	}
	free(v);
	free(d);
}

/* A segment with no record (a crash right after it was made): the first
 * restart seals it empty, the next reads its empty summary (that took a
 * buffer of 0 bytes and failed the rebuild with -ENOMEM). */
static void
test_empty_segment(void **state)
{
	struct kvp_ssd_file_hdr *fh;
	struct kvp_ssd *s;
	struct seen sn;
	unsigned char v[5000];
	char path[400];
	unsigned pass;
	int fd;

	(void)state;
	s = open_store(true, 1 << 20, 0);
	kvp_ssd_recover_agent(s, NULL, NULL);
	fill(v, sizeof(v), 5);
	put(s, "kept", v, sizeof(v));
	kvp_ssd_close_agent(s);
	snprintf(path, sizeof(path), "%s/seg-00000002.kvs", kvpt_ssd_dir);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 1 << 20), 0);
	assert_int_equal(posix_memalign((void **)&fh, 4096, 4096), 0);
	memset(fh, 0, 4096);
	fh->fh_magic = KVP_SSD_MAGIC_FILE;
	fh->fh_version = KVP_SSD_FORMAT;
	fh->fh_hdr_size = sizeof(*fh);
	fh->fh_seg_id = 2;
	fh->fh_create_seq = 100;
	fh->fh_seg_size = 1 << 20;
	fh->fh_crc = kvp_crc32c(0, fh, sizeof(*fh));
	assert_int_equal(pwrite(fd, fh, 4096, 0), 4096);
	free(fh);
	close(fd);
	for (pass = 0; pass < 2; pass++) {
		s = open_store(false, 1 << 20, 0);
		memset(&sn, 0, sizeof(sn));
		assert_int_equal(kvp_ssd_recover_agent(s, collect, &sn), 1);
		assert_true(seen_has(&sn, "kept"));
		kvp_ssd_close_agent(s);
	}
}

/* A flipped value byte: that read is -EBADMSG; a ranged read that does
 * not cover the damaged chunk still succeeds. */
static void
test_corrupt_value(void **state)
{
	struct kvp_ssd *s = open_store(true, 8 << 20, 0);
	unsigned char *v = malloc(300000), *d;
	char path[400];
	uint64_t loc;
	uint32_t doff;
	unsigned char b;
	int fd;

	(void)state;
	assert_int_equal(posix_memalign((void **)&d, 4096, 303104), 0);
	kvp_ssd_recover_agent(s, NULL, NULL);
	fill(v, 300000, 9);
	loc = put(s, "v", v, 300000);
	snprintf(path, sizeof(path), "%s/seg-%08x.kvs", kvpt_ssd_dir,
		 KVP_SSD_LOC_SEG(loc));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1,
			       (off_t)KVP_SSD_LOC_VALUE(loc) * 4096 + 200000),
			 1);
	b ^= 0x80;
	assert_int_equal(pwrite(fd, &b, 1,
				(off_t)KVP_SSD_LOC_VALUE(loc) * 4096 + 200000),
			 1);
	close(fd);
	assert_int_equal(get(s, loc, 300000, 0, 300000, d, &doff), -EBADMSG);
	assert_int_equal(get(s, loc, 300000, 0, 65536, d, &doff), 0);
	assert_memory_equal(d, v, 65536);
	kvp_ssd_close_agent(s);
	free(v);
	free(d);
}

/*
 * The header cache (issue 29, one read per value): a value read back
 * after its batch was written takes one device operation (its extent),
 * its header block coming from memory, and is checked as before: a
 * flipped value byte is still -EBADMSG, and a ranged read clear of it
 * still right.  A store reopened with an empty cache reads the header of
 * the first value of a batch from the device and then has it for the
 * others; without a cache (0 bytes) every read reads its header.  Both
 * I/O paths (the pread workers finish batches on their own threads).
 */
/* A store's configuration with the header cache on (1 MiB): a read is
 * one operation into its destination. */
static void
hc_cfg(struct kvp_ssd_cfg *cfg, uint64_t seg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->dir = kvpt_ssd_dir;
	cfg->segment_bytes = seg;
	cfg->wipe = true;
	cfg->header_cache_bytes = 1 << 20;
}

static void
hc_case(bool pread_path)
{
	struct kvp_ssd_cfg cfg;
	struct kvp_ssd *s;
	struct kvp_ssd_stats st0, st1;
	struct kvp_ssd_cqe cq[8];
	struct iovec iov[4];
	struct seen sn;
	unsigned char *v[4], *d, b;
	uint64_t loc[4], seen = 0;
	char path[400];
	uint32_t doff;
	unsigned k;
	int fd, pass;

	assert_int_equal(posix_memalign((void **)&d, 4096, 65536), 0);
	hc_cfg(&cfg, 8 << 20);
	if (pread_path)
		setenv("KVP_SSD_FORCE_PREAD", "1", 1);
	assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
	unsetenv("KVP_SSD_FORCE_PREAD");
	kvp_ssd_recover_agent(s, NULL, NULL);
	/* four values queued together: one batch, one header block */
	for (k = 0; k < 4; k++) {
		char key[16];

		v[k] = malloc(65536);
		fill(v[k], 65536, 40 + k);
		iov[k].iov_base = v[k];
		iov[k].iov_len = 65536;
		snprintf(key, sizeof(key), "hc-%u", k);
		assert_int_equal(kvp_ssd_write_agent(s, 10 + k, 42, key,
						     (uint32_t)strlen(key),
						     &iov[k], 1, 0),
				 0);
	}
	while (seen < 4) {
		int n = kvp_ssd_poll_agent(s, cq, 8, -1);

		for (k = 0; k < (unsigned)n; k++) {
			assert_int_equal(cq[k].status, 0);
			loc[cq[k].tag - 10] = cq[k].loc;
		}
		seen += (uint64_t)n;
	}
	for (k = 1; k < 4; k++)
		assert_int_equal(KVP_SSD_LOC_HDR(loc[k]),
				 KVP_SSD_LOC_HDR(loc[0]));
	/* written just now: every header is in memory, one op a read */
	kvp_ssd_stats_agent(s, &st0);
	for (k = 0; k < 4; k++) {
		assert_int_equal(get(s, loc[k], 65536, 0, 65536, d, &doff), 0);
		assert_memory_equal(d, v[k], 65536);
	}
	kvp_ssd_stats_agent(s, &st1);
	assert_int_equal(st1.hdr_cached_reads - st0.hdr_cached_reads, 4);
	assert_int_equal(st1.hdr_device_reads - st0.hdr_device_reads, 0);
	assert_int_equal(st1.dev_read_bytes - st0.dev_read_bytes, 4 * 65536);
	/* a flipped byte in value 2 on disk: caught against the cached
	 * header; a ranged read of its first chunk clear of it is right */
	snprintf(path, sizeof(path), "%s/seg-%08x.kvs", kvpt_ssd_dir,
		 KVP_SSD_LOC_SEG(loc[2]));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1,
			       (off_t)KVP_SSD_LOC_VALUE(loc[2]) * 4096 + 60000),
			 1);
	b ^= 0x40;
	assert_int_equal(
		pwrite(fd, &b, 1,
		       (off_t)KVP_SSD_LOC_VALUE(loc[2]) * 4096 + 60000),
		1);
	close(fd);
	assert_int_equal(get(s, loc[2], 65536, 0, 65536, d, &doff), -EBADMSG);
	kvp_ssd_close_agent(s);
	/* reopened: the first read of the batch reads the header, the next
	 * ones find it; with no cache, every read reads it */
	for (pass = 0; pass < 2; pass++) {
		cfg.wipe = false;
		cfg.header_cache_bytes = pass == 0 ? 1 << 20 : 0;
		if (pread_path)
			setenv("KVP_SSD_FORCE_PREAD", "1", 1);
		assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
		unsetenv("KVP_SSD_FORCE_PREAD");
		memset(&sn, 0, sizeof(sn));
		assert_int_equal(kvp_ssd_recover_agent(s, collect, &sn), 4);
		for (k = 0; k < 4; k++) {
			char key[16];

			snprintf(key, sizeof(key), "hc-%u", k);
			assert_int_equal(seen_loc(&sn, key), loc[k]);
		}
		kvp_ssd_stats_agent(s, &st0);
		for (k = 0; k < 4; k++) {
			if (k == 2)
				continue;
			assert_int_equal(
				get(s, loc[k], 65536, 0, 65536, d, &doff), 0);
			assert_memory_equal(d, v[k], 65536);
		}
		assert_int_equal(get(s, loc[2], 65536, 0, 65536, d, &doff),
				 -EBADMSG);
		kvp_ssd_stats_agent(s, &st1);
		assert_int_equal(st1.hdr_device_reads - st0.hdr_device_reads,
				 pass == 0 ? 1 : 4);
		assert_int_equal(st1.hdr_cached_reads - st0.hdr_cached_reads,
				 pass == 0 ? 3 : 0);
		kvp_ssd_close_agent(s);
	}
	for (k = 0; k < 4; k++)
		free(v[k]);
	free(d);
}

/*
 * Registered buffers in pieces (the agent registers its staging arena in
 * pieces of at most 1 GiB, the kernel's limit per buffer): two pieces
 * registered, a read into each is READ_FIXED and reads back right, a
 * read into memory outside them is a plain read; a piece over 1 GiB or
 * more than KVP_SSD_REG_MAX pieces are refused before the kernel is
 * asked (a buffer over 1 GiB failed the whole call before, every piece
 * with it).
 */
static void
test_register_pieces(void **state)
{
	enum {
		V = 64 << 10,
		B = V + 8192
	};
	struct kvp_ssd *s;
	struct kvp_ssd_stats st0, st1;
	struct kvp_ssd_cfg cfg;
	struct iovec reg[KVP_SSD_REG_MAX + 1];
	unsigned char *v = malloc(V), *buf, *other;
	uint64_t loc;
	uint32_t off;
	unsigned k;

	(void)state;
	assert_non_null(v);
	assert_int_equal(posix_memalign((void **)&buf, 4096, 2 * B), 0);
	assert_int_equal(posix_memalign((void **)&other, 4096, B), 0);
	fill(v, V, 5);
	/* with the header cache: a read is then one operation into its
	 * destination (a read of header and value is a READV) */
	hc_cfg(&cfg, 16ull << 20);
	assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
	loc = put(s, "reg", v, V);
	/* refused before the kernel: too large a piece, too many pieces */
	reg[0].iov_base = buf;
	reg[0].iov_len = KVP_SSD_REG_BYTES_MAX + 4096;
	assert_int_equal(kvp_ssd_register_buffers_agent(s, reg, 1), -EINVAL);
	for (k = 0; k <= KVP_SSD_REG_MAX; k++) {
		reg[k].iov_base = buf;
		reg[k].iov_len = 4096;
	}
	assert_int_equal(kvp_ssd_register_buffers_agent(s, reg,
							KVP_SSD_REG_MAX + 1),
			 -EINVAL);
	kvp_ssd_stats_agent(s, &st0);
	assert_false(st0.registered);
	/* two pieces */
	reg[0].iov_base = buf;
	reg[0].iov_len = B;
	reg[1].iov_base = buf + B;
	reg[1].iov_len = B;
	assert_int_equal(kvp_ssd_register_buffers_agent(s, reg, 2), 0);
	for (k = 0; k < 2; k++) {
		kvp_ssd_stats_agent(s, &st0);
		memset(buf + k * B, 0, B);
		assert_int_equal(get(s, loc, V, 0, V, buf + k * B, &off), 0);
		assert_memory_equal(buf + k * B + off, v, V);
		kvp_ssd_stats_agent(s, &st1);
		assert_true(st1.registered);
		assert_int_equal(st1.fixed_ops, st0.fixed_ops + 1);
	}
	/* outside them: a plain read */
	kvp_ssd_stats_agent(s, &st0);
	assert_int_equal(get(s, loc, V, 0, V, other, &off), 0);
	assert_memory_equal(other + off, v, V);
	kvp_ssd_stats_agent(s, &st1);
	assert_int_equal(st1.fixed_ops, st0.fixed_ops);
	kvp_ssd_close_agent(s);
	free(v);
	free(buf);
	free(other);
}

static void
test_header_cache(void **state)
{
	(void)state;
	hc_case(false);
	hc_case(true);
}

/*
 * Recovery hands records to the owner on several threads
 * (cfg.recover_threads): 70,000 keys, 7,000 of them written twice and
 * 700 deleted, come back exactly once each, with their latest location;
 * records the owner declines (every 97th key) get the store's tombstone
 * and do not come back at the next start; the segments' live bytes are
 * the kept records'.  The callback counts on every thread at once.
 */
enum {
	RT_N = 70000
};
struct rt_seen {
	uint64_t loc[RT_N];
	unsigned calls[RT_N];
	unsigned threads_seen, run;
	bool decline;
};
static __thread unsigned rt_run;

static int
rt_cb(void *arg, const struct kvp_ssd_rec *r)
{
	struct rt_seen *x = arg;
	char key[16];
	int i;

	assert_true(r->klen < sizeof(key));
	memcpy(key, r->key, r->klen);
	key[r->klen] = 0;
	i = atoi(key + 3);
	assert_true(i >= 0 && i < RT_N);
	__atomic_fetch_add(&x->calls[i], 1, __ATOMIC_RELAXED);
	__atomic_store_n(&x->loc[i], r->loc, __ATOMIC_RELAXED);
	/* each thread counts itself once per recovery (x->run) */
	if (rt_run != x->run) {
		rt_run = x->run;
		__atomic_fetch_add(&x->threads_seen, 1, __ATOMIC_RELAXED);
	}
	return x->decline && i % 97 == 5 ? KVP_SSD_DECLINE : 0;
}

static void
test_recover_threads(void **state)
{
	struct kvp_ssd_cfg cfg;
	struct kvp_ssd *s;
	struct kvp_ssd_usage u;
	struct rt_seen *x = calloc(1, sizeof(*x));
	uint64_t *last = calloc(RT_N, sizeof(*last)), kept = 0, live1 = 0,
		 ndeclined = 0;
	unsigned char v[64];
	int i, pass;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.dir = kvpt_ssd_dir;
	cfg.segment_bytes = 64 << 20;
	cfg.wipe = true;
	assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
	kvp_ssd_recover_agent(s, NULL, NULL);
	/* every key once, every 10th again (a newer value), every 100th
	 * deleted after */
	for (i = 0; i < RT_N + RT_N / 10 + RT_N / 100; i++) {
		struct kvp_ssd_cqe cq[64];
		int key = i < RT_N ? i :
			  i < RT_N + RT_N / 10 ?
				     (i - RT_N) * 10 :
				     (i - RT_N - RT_N / 10) * 100 + 1;
		char k[16];
		struct iovec iov = { v, sizeof(v) };
		int n, j;

		snprintf(k, sizeof(k), "rt-%d", key);
		memset(v, key & 0xff, sizeof(v));
		if (i >= RT_N + RT_N / 10) {
			assert_true(last[key] != 0);
			assert_int_equal(
				kvp_ssd_tombstone_agent(s, 0, 42, k,
							(uint32_t)strlen(k),
							last[key]),
				0);
			last[key] = 0;
		} else {
			assert_int_equal(
				kvp_ssd_write_agent(s, (uint64_t)key + 1, 42, k,
						    (uint32_t)strlen(k), &iov,
						    1, 0),
				0);
		}
		if (i % 256 != 255 && i + 1 < RT_N + RT_N / 10 + RT_N / 100)
			continue;
		while (kvp_ssd_outstanding_agent(s)) {
			n = kvp_ssd_poll_agent(s, cq, 64, -1);
			for (j = 0; j < n; j++) {
				assert_int_equal(cq[j].status, 0);
				if (cq[j].tag)
					last[cq[j].tag - 1] = cq[j].loc;
			}
		}
	}
	kvp_ssd_close_agent(s);
	for (i = 0; i < RT_N; i++)
		ndeclined += last[i] && i % 97 == 5;
	/* 4 threads, declining every 97th key; then one thread and 4
	 * threads again, declining none: the declined keys are gone, the
	 * rest come back the same, and the live bytes agree */
	for (pass = 0; pass < 3; pass++) {
		cfg.wipe = false;
		cfg.recover_threads = pass == 1 ? 1 : 4;
		assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
		memset(x, 0, sizeof(*x));
		x->decline = pass == 0;
		x->run = (unsigned)pass + 1;
		kept = (uint64_t)kvp_ssd_recover_agent(s, rt_cb, x);
		/* more than one thread called, or exactly one */
		if (pass == 1)
			assert_int_equal(x->threads_seen, 1);
		else
			assert_true(x->threads_seen >= 2);
		for (i = 0; i < RT_N; i++) {
			bool gone = last[i] == 0 || (pass > 0 && i % 97 == 5);

			assert_int_equal(x->calls[i], gone ? 0 : 1);
			if (!gone)
				assert_int_equal(x->loc[i], last[i]);
		}
		/* every key but the deleted and the declined ones */
		assert_int_equal(kept, RT_N - RT_N / 100 - ndeclined);
		kvp_ssd_usage_agent(s, &u);
		if (pass == 1)
			live1 = u.live_bytes;
		if (pass == 2)
			assert_int_equal(u.live_bytes, live1);
		kvp_ssd_close_agent(s);
	}
	free(x);
	free(last);
}

/* A small --ssd-size: whole oldest segments are given back; a veto
 * defers it (-EAGAIN for now: room comes when the owner lets the oldest
 * go), never drops a vetoed segment. */
static int veto_all;
static int
veto_cb(void *arg, struct kvp_ssd *s, uint32_t seg)
{
	(void)arg;
	(void)s;
	(void)seg;
	return veto_all;
}

static void
test_capacity(void **state)
{
	struct kvp_ssd_cfg cfg;
	struct kvp_ssd *s;
	struct kvp_ssd_usage u;
	unsigned char v[100000];
	struct iovec iov = { v, sizeof(v) };
	struct kvp_ssd_cqe cq;
	int k, rc = 0;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.dir = kvpt_ssd_dir;
	cfg.segment_bytes = 1 << 20;
	cfg.capacity_bytes = 3 << 20;
	cfg.wipe = true;
	cfg.giveback_cb = veto_cb;
	assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
	kvp_ssd_recover_agent(s, NULL, NULL);
	fill(v, sizeof(v), 1);
	veto_all = 0;
	for (k = 0; k < 100; k++) {
		assert_int_equal(
			kvp_ssd_write_agent(s, 1, 1, "c", 1, &iov, 1, 0), 0);
		assert_int_equal(wait_one(s, &cq), 0);
	}
	kvp_ssd_usage_agent(s, &u);
	assert_true(u.used_bytes <= cfg.capacity_bytes);
	assert_true(u.oldest_id > 1);
	veto_all = 1;
	for (k = 0; k < 100 && rc == 0; k++) {
		rc = kvp_ssd_write_agent(s, 1, 1, "c", 1, &iov, 1, 0);
		if (rc == 0)
			rc = wait_one(s, &cq);
	}
	assert_int_equal(rc, -EAGAIN);
	kvp_ssd_usage_agent(s, &u);
	assert_true(u.used_bytes <= cfg.capacity_bytes);
	kvp_ssd_close_agent(s);
}

/*
 * Reinsertion: a reclaim keeps the records the owner asks for.  Keys
 * "h0".."h4" are hot; the owner keeps every hot record of a segment it
 * gives back (and tries to keep the first cold one, past the share).
 * Each kept record is written at the head of the log (a later segment,
 * a new location that reads back whole, reported once), the rest of its
 * segment is gone, the share bounds what is kept, a veto keeps nothing,
 * and after a restart the kept copies are the keys' values; a tombstone
 * naming a copy then deletes the key (the copy is its latest record).
 */
#define RE_VLEN 40000u
struct reins_seen {
	struct kvp_ssd *s;
	int veto;
	unsigned asked, kept, refused, reported;
	uint64_t old_loc[64], new_loc[64]; /* by tag */
	char key[64][8];
};
static struct reins_seen re;

static int
reins_keep_one(void *arg, const struct kvp_ssd_rec *r)
{
	unsigned t = re.asked;
	int rc;

	(void)arg;
	if (r->type != KVP_SSD_REC_VALUE || t >= 64 || r->klen >= 8)
		return 0;
	if (((const char *)r->key)[0] != 'h' && re.refused)
		return 0; /* one cold one: past the share */
	re.asked++;
	memcpy(re.key[t], r->key, r->klen);
	re.key[t][r->klen] = 0;
	rc = kvp_ssd_reinsert_agent(re.s, r, t);
	if (rc == 0) {
		re.kept++;
		re.old_loc[t] = r->loc;
	} else {
		assert_int_equal(rc, -ENOSPC);
		re.refused++;
	}
	return 0;
}

static int
reins_giveback_cb(void *arg, struct kvp_ssd *s, uint32_t seg)
{
	(void)arg;
	assert_int_equal(
		kvp_ssd_segment_foreach_agent(s, seg, reins_keep_one, NULL), 0);
	return re.veto;
}

static void
reins_cb(void *arg, uint64_t tag, uint64_t old_loc, uint64_t new_loc)
{
	(void)arg;
	assert_true(tag < 64);
	assert_int_equal(old_loc, re.old_loc[tag]);
	assert_int_equal(re.new_loc[tag], 0); /* once */
	assert_true(new_loc != 0);
	assert_true(KVP_SSD_LOC_SEG(new_loc) > KVP_SSD_LOC_SEG(old_loc));
	re.new_loc[tag] = new_loc;
	re.reported++;
}

static void
test_reinsert(void **state)
{
	struct kvp_ssd_cfg cfg;
	struct kvp_ssd *s;
	struct kvp_ssd_stats st;
	struct kvp_ssd_cqe cq;
	struct seen sn;
	unsigned char *v = malloc(RE_VLEN), *d = NULL;
	uint64_t hot[5];
	uint32_t doff;
	unsigned k, n;
	char key[16];

	(void)state;
	assert_int_equal(posix_memalign((void **)&d, 4096, RE_VLEN + 8192), 0);
	memset(&cfg, 0, sizeof(cfg));
	memset(&re, 0, sizeof(re));
	cfg.dir = kvpt_ssd_dir;
	cfg.segment_bytes = 1 << 20; /* 22 records of 44 KiB a segment */
	cfg.capacity_bytes = 3 << 20;
	cfg.wipe = true;
	cfg.giveback_cb = reins_giveback_cb;
	cfg.reinsert_cb = reins_cb;
	cfg.reinsert_pct = 22; /* 5 records of 40 KiB and an entry */
	assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
	re.s = s;
	kvp_ssd_recover_agent(s, NULL, NULL);
	for (k = 0; k < 5; k++) {
		snprintf(key, sizeof(key), "h%u", k);
		fill(v, RE_VLEN, 100 + k);
		hot[k] = put(s, key, v, RE_VLEN);
	}
	/* 3 segments of capacity: the 67th record starts a fourth */
	for (k = 0; k < 60; k++) {
		snprintf(key, sizeof(key), "c%u", k);
		fill(v, RE_VLEN, k);
		put(s, key, v, RE_VLEN);
	}
	assert_int_equal(re.kept, 0);
	for (n = 60; re.kept == 0 && n < 100; n++) {
		snprintf(key, sizeof(key), "c%u", n);
		fill(v, RE_VLEN, n);
		put(s, key, v, RE_VLEN);
	}
	/* the five hot records were kept, nothing else (share: 5 of them) */
	assert_int_equal(re.kept, 5);
	assert_int_equal(re.refused, 1);
	assert_int_equal(re.reported, 5);
	kvp_ssd_stats_agent(s, &st);
	assert_int_equal(st.reinserted, 5);
	assert_int_equal(st.reinserted_bytes, 5ull * RE_VLEN);
	for (k = 0; k < 5; k++) {
		unsigned t;

		for (t = 0; t < re.asked; t++)
			if (re.old_loc[t] == hot[k])
				break;
		assert_true(t < re.asked);
		fill(v, RE_VLEN, 100 + k);
		assert_int_equal(get(s, re.new_loc[t], RE_VLEN, 0, RE_VLEN, d,
				     &doff),
				 0);
		assert_memory_equal(d + doff, v, RE_VLEN);
		/* the old copy's segment is gone */
		{
			struct iovec iov = { d, RE_VLEN + 8192 };
			struct kvp_ssd_read rd = { .loc = hot[k],
						   .vlen = RE_VLEN,
						   .ndst = 1,
						   .dst = &iov };

			assert_int_equal(kvp_ssd_read_agent(s, 2, &rd),
					 -ENOENT);
		}
	}
	/* a veto keeps nothing and reports nothing */
	re.veto = 1;
	n = re.reported;
	snprintf(key, sizeof(key), "x");
	for (k = 0; k < 40 && kvp_ssd_write_agent(s, 1, 42, "x", 1,
						  &(struct iovec){ v, RE_VLEN },
						  1, 0) == 0;
	     k++)
		if (wait_one(s, &cq))
			break;
	assert_int_equal(re.reported, n);
	re.veto = 0;
	kvp_ssd_close_agent(s);
	/* after a restart the copies are the hot keys' values */
	cfg.wipe = false;
	assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
	re.s = s;
	memset(&sn, 0, sizeof(sn));
	assert_true(kvp_ssd_recover_agent(s, collect, &sn) > 0);
	for (k = 0; k < re.asked; k++)
		if (re.new_loc[k])
			assert_int_equal(seen_loc(&sn, re.key[k]),
					 re.new_loc[k]);
	/* a tombstone of a copy deletes its key for good */
	for (k = 0; k < re.asked && !re.new_loc[k]; k++)
		;
	assert_true(k < re.asked);
	assert_int_equal(kvp_ssd_tombstone_agent(s, 3, 42, re.key[k],
						 (uint32_t)strlen(re.key[k]),
						 re.new_loc[k]),
			 0);
	assert_int_equal(wait_one(s, &cq), 0);
	kvp_ssd_close_agent(s);
	assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
	memset(&sn, 0, sizeof(sn));
	assert_true(kvp_ssd_recover_agent(s, collect, &sn) > 0);
	assert_false(seen_has(&sn, re.key[k]));
	kvp_ssd_close_agent(s);
	free(v);
	free(d);
}

/* The file system itself fills up: -ENOSPC comes back as a status, and
 * the store still works after space is freed. */
static void
test_fs_enospc(void **state)
{
	char mnt[300];
	struct kvp_ssd_cfg cfg;
	struct kvp_ssd *s;
	unsigned char v[200000];
	struct iovec iov = { v, sizeof(v) };
	struct kvp_ssd_cqe cq;
	int k, rc = 0;

	(void)state;
	snprintf(mnt, sizeof(mnt), "%s/small", kvpt_ssd_dir);
	mkdir(mnt, 0700);
	/* mode 0700: a tmpfs root is 1777 by default, and the store refuses
	 * a directory that others can write */
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=3m,mode=0700")) {
		print_message("  SKIP: cannot mount a small tmpfs here (%s)\n",
			      strerror(errno));
		return;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.dir = mnt;
	cfg.segment_bytes = 1 << 20;
	assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
	kvp_ssd_recover_agent(s, NULL, NULL);
	fill(v, sizeof(v), 2);
	for (k = 0; k < 100 && rc == 0; k++) {
		rc = kvp_ssd_write_agent(s, 1, 1, "f", 1, &iov, 1, 0);
		if (rc == 0)
			rc = wait_one(s, &cq);
	}
	assert_int_equal(rc, -ENOSPC);
	kvp_ssd_close_agent(s);
	assert_int_equal(umount(mnt), 0);
}

/*
 * The write pacer (cfg.write_depth): a batch of 4 MiB of values written
 * with a depth of 64 KiB goes to the device in parts of 16 KiB, never
 * more than 64 KiB of them there at once, the rest waiting in the store;
 * a read sent while they wait goes to the device at once and completes
 * before the batch does (it waits behind at most the depth, not behind
 * the batch: rule 9).  Every value reads back right, the one larger
 * than the depth included; then the same at the default depth.  On the
 * pread/pwrite path (pread) the batch is written in the same parts, a job
 * each (the read queued ahead of those left), and reads back right.
 */
static void
wd_case(uint64_t depth, bool pread)
{
	enum {
		NV = 40
	};
	static unsigned char v[NV][110000], big[1 << 20], f0[110000];
	struct kvp_ssd_cfg cfg;
	struct kvp_ssd_stats st;
	struct kvp_ssd_cqe cq[8];
	struct kvp_ssd_read rd;
	struct iovec riov;
	struct kvp_ssd *s;
	uint64_t loc[NV + 1], first, bytes = 0;
	unsigned char *d;
	unsigned k, got = 0, order = 0, read_at = 0, batch_at = 0;
	uint32_t doff;
	char key[16];

	memset(&cfg, 0, sizeof(cfg));
	cfg.dir = kvpt_ssd_dir;
	cfg.segment_bytes = 64 << 20;
	cfg.wipe = true;
	cfg.write_depth = depth;
	if (pread)
		setenv("KVP_SSD_FORCE_PREAD", "1", 1);
	assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
	unsetenv("KVP_SSD_FORCE_PREAD");
	kvp_ssd_recover_agent(s, NULL, NULL);
	assert_int_equal(posix_memalign((void **)&d, 4096, 1 << 20), 0);
	fill(f0, sizeof(f0), 99);
	first = put(s, "first", f0, sizeof(f0));
	/* one batch: 40 values of 110,000 bytes and one of 1 MiB */
	for (k = 0; k < NV; k++) {
		struct iovec iov = { v[k], sizeof(v[k]) - k };

		fill(v[k], sizeof(v[k]), k + 1);
		snprintf(key, sizeof(key), "wd%u", k);
		assert_int_equal(kvp_ssd_write_agent(s, 10 + k, 42, key,
						     (uint32_t)strlen(key),
						     &iov, 1, 0),
				 0);
		bytes += iov.iov_len;
	}
	fill(big, sizeof(big), 77);
	{
		struct iovec iov = { big, sizeof(big) };

		assert_int_equal(kvp_ssd_write_agent(s, 10 + NV, 42, "big", 3,
						     &iov, 1, 0),
				 0);
	}
	assert_int_equal(kvp_ssd_submit_agent(s), 0);
	/* a read while the batch's parts wait */
	read_of(&rd, &riov, first, sizeof(f0), 0, sizeof(f0), d);
	assert_int_equal(kvp_ssd_read_agent(s, 5, &rd), 0);
	while (got < NV + 2) {
		int n = kvp_ssd_poll_agent(s, cq, 8, -1), i;

		assert_true(n >= 0);
		for (i = 0; i < n; i++, got++) {
			assert_int_equal(cq[i].status, 0);
			order++;
			if (cq[i].tag == 5) {
				read_at = order;
				doff = cq[i].dst_off;
			} else {
				assert_true(cq[i].tag >= 10 &&
					    cq[i].tag <= 10 + NV);
				loc[cq[i].tag - 10] = cq[i].loc;
				if (!batch_at)
					batch_at = order;
			}
		}
	}
	assert_memory_equal(d + doff, f0, sizeof(f0));
	kvp_ssd_stats_agent(s, &st);
	assert_int_equal(st.uring, !pread);
	assert_true(st.write_parts >= (bytes + sizeof(big)) / (depth / 4));
	if (!pread) {
		/* the read did not wait for the batch */
		assert_true(read_at < batch_at);
		assert_true(st.write_dev_peak <= depth);
		assert_true(st.write_parts_held > 0);
		/* the writes sent while the read was recent went in
		 * pieces */
		assert_true(st.write_pieces > 0);
	}
	/* every value as written */
	for (k = 0; k < NV; k++) {
		fill(v[k], sizeof(v[k]), k + 1);
		assert_int_equal(get(s, loc[k], sizeof(v[k]) - k, 0,
				     sizeof(v[k]) - k, d, &doff),
				 0);
		assert_memory_equal(d + doff, v[k], sizeof(v[k]) - k);
	}
	assert_int_equal(get(s, loc[NV], sizeof(big), 0, sizeof(big), d, &doff),
			 0);
	assert_memory_equal(d + doff, big, sizeof(big));
	kvp_ssd_close_agent(s);
	free(d);
}

static void
test_write_depth(void **state)
{
	(void)state;
	wd_case(64 << 10, false);
	wd_case(KVP_SSD_WRITE_DEPTH_DEFAULT, false);
	wd_case(64 << 10, true);
	wd_case(KVP_SSD_WRITE_DEPTH_DEFAULT, true);
}

/*
 * A write that comes while a read is on the device (and no write is)
 * waits for the read's completion: the read does not sit behind it.  The
 * hold is at most cfg.write_hold_ns since the last write went (here 60 s:
 * the order is the store's, not the device's speed); then the write goes
 * at once, whole (no read was recent at the start), and a write queued
 * while the read was recent went in pieces.
 */
static void
test_write_waits_for_read(void **state)
{
	enum {
		VLEN = 200000
	};
	static unsigned char v[VLEN], w[VLEN];
	struct kvp_ssd_cfg cfg;
	struct kvp_ssd_stats st;
	struct kvp_ssd_cqe cq[4];
	struct kvp_ssd_read rd;
	struct iovec riov, wiov = { w, VLEN };
	struct kvp_ssd *s;
	uint64_t first, parts0;
	unsigned char *d;
	unsigned got = 0, read_at = 0, write_at = 0;
	uint32_t doff;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.dir = kvpt_ssd_dir;
	cfg.segment_bytes = 64 << 20;
	cfg.wipe = true;
	cfg.write_depth = 64 << 10; /* parts of 16 KiB, pieces of 4 KiB */
	cfg.write_hold_ns = 60ull * 1000 * 1000 * 1000;
	assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
	kvp_ssd_recover_agent(s, NULL, NULL);
	kvp_ssd_stats_agent(s, &st);
	if (!st.uring) {
		print_message("  SKIP: no io_uring (the pacer is its)\n");
		kvp_ssd_close_agent(s);
		return;
	}
	assert_int_equal(posix_memalign((void **)&d, 4096, 1 << 20), 0);
	fill(v, VLEN, 3);
	fill(w, VLEN, 4);
	first = put(s, "first", v, VLEN); /* written whole: no read yet */
	kvp_ssd_stats_agent(s, &st);
	assert_int_equal(st.write_pieces, 0);
	/* the read goes to the device; the write after it waits */
	read_of(&rd, &riov, first, VLEN, 0, VLEN, d);
	assert_int_equal(kvp_ssd_read_agent(s, 5, &rd), 0);
	assert_int_equal(kvp_ssd_submit_agent(s), 0);
	kvp_ssd_stats_agent(s, &st);
	parts0 = st.write_parts;
	assert_int_equal(kvp_ssd_write_agent(s, 6, 1, "late", 4, &wiov, 1, 0),
			 0);
	assert_int_equal(kvp_ssd_submit_agent(s), 0);
	kvp_ssd_stats_agent(s, &st);
	assert_int_equal(st.write_parts, parts0); /* none sent */
	assert_true(st.write_held_read > 0);
	while (got < 2) {
		int n = kvp_ssd_poll_agent(s, cq, 4, -1), i;

		assert_true(n >= 0);
		for (i = 0; i < n; i++) {
			assert_int_equal(cq[i].status, 0);
			got++;
			if (cq[i].tag == 5) {
				read_at = got;
				doff = cq[i].dst_off;
			} else {
				assert_int_equal(cq[i].tag, 6);
				write_at = got;
			}
		}
	}
	assert_true(read_at < write_at);
	assert_memory_equal(d + doff, v, VLEN);
	/* the write went after the read, in pieces (the read was recent) */
	kvp_ssd_stats_agent(s, &st);
	assert_true(st.write_pieces > 0);
	assert_true(st.write_dev_peak <= 64 << 10);
	kvp_ssd_close_agent(s);
	free(d);
}

/* The pread/pwrite path (io_uring refused) behaves the same. */
static void
test_pread_path(void **state)
{
	struct kvp_ssd *s;
	unsigned char v[50000], *d;
	struct kvp_ssd_stats st;
	uint64_t loc;
	uint32_t doff;

	(void)state;
	setenv("KVP_SSD_FORCE_PREAD", "1", 1);
	s = open_store(true, 4 << 20, 0);
	unsetenv("KVP_SSD_FORCE_PREAD");
	kvp_ssd_stats_agent(s, &st);
	assert_false(st.uring);
	kvp_ssd_recover_agent(s, NULL, NULL);
	assert_int_equal(posix_memalign((void **)&d, 4096, 53248), 0);
	fill(v, sizeof(v), 5);
	loc = put(s, "p", v, sizeof(v));
	assert_int_equal(get(s, loc, sizeof(v), 0, sizeof(v), d, &doff), 0);
	assert_memory_equal(d, v, sizeof(v));
	kvp_ssd_close_agent(s);
	free(d);
}

/*
 * A segment is given back only once every record written to it has been
 * handed back by a poll: its owner learns a record's location from its
 * completion, and only then can it say the record is in use (a read of
 * it, the location in its index).  On the pread path a worker finishes a
 * batch between two polls; the reclaim that came before the owner polled
 * gave back the segment, and the completion then named a location in a
 * segment that was gone (the owner's next read of it: -EIO, issue 25
 * item 12).  The test waits on the completion eventfd (the worker is
 * done) without polling, then writes until the store wants that
 * segment's room: -EAGAIN until the completion is polled, never a
 * completion in a segment that is gone.  Both I/O paths.
 */
static void
test_reclaim_after_poll(void **state)
{
	enum {
		VLEN = 100000
	};
	static unsigned char v[VLEN];
	struct iovec iov = { v, VLEN };
	struct kvp_ssd_cqe cq[64];
	int path;

	(void)state;
	fill(v, VLEN, 7);
	for (path = 0; path < 2; path++) {
		struct kvp_ssd_cfg cfg;
		struct kvp_ssd *s;
		struct kvp_ssd_seg_info si;
		struct kvp_ssd_stats st;
		uint64_t first = 0, one;
		int efd = eventfd(0, EFD_CLOEXEC), rc = 0, k, n, polled = 0;

		assert_true(efd >= 0);
		memset(&cfg, 0, sizeof(cfg));
		cfg.dir = kvpt_ssd_dir;
		cfg.segment_bytes = 1 << 20;
		cfg.capacity_bytes = 3 << 20;
		cfg.wipe = true;
		if (path)
			setenv("KVP_SSD_FORCE_PREAD", "1", 1);
		assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
		unsetenv("KVP_SSD_FORCE_PREAD");
		kvp_ssd_stats_agent(s, &st);
		assert_true(path ? !st.uring : true);
		kvp_ssd_recover_agent(s, NULL, NULL);
		assert_int_equal(kvp_ssd_set_eventfd_agent(s, efd), 0);
		/* record 0 in the first segment: written, its completion
		 * ready (the eventfd says so) and not polled */
		assert_int_equal(
			kvp_ssd_write_agent(s, 100, 1, "u0", 2, &iov, 1, 0), 0);
		assert_int_equal(kvp_ssd_submit_agent(s), 0);
		assert_int_equal(read(efd, &one, sizeof(one)), sizeof(one));
		/* then as many records as it takes for the store to want
		 * the first segment's room (3 x 1 MiB: the fourth), one
		 * submit each, none polled */
		for (k = 1; k < 40 && rc == 0; k++) {
			char key[16];

			snprintf(key, sizeof(key), "u%d", k);
			rc = kvp_ssd_write_agent(s, 100 + (uint64_t)k, 1, key,
						 (uint32_t)strlen(key), &iov, 1,
						 0);
			if (rc == 0)
				assert_int_equal(kvp_ssd_submit_agent(s), 0);
		}
		/* the store wanted the room before the completion was
		 * polled: deferred, never given */
		if (rc != -EAGAIN)
			fail_msg("%s path: the first segment was given back "
				 "before its record's completion was polled "
				 "(%d writes, last: %s)",
				 path ? "pread" : "io_uring", k, strerror(-rc));
		/* every completion names a segment that is still there */
		while (kvp_ssd_outstanding_agent(s)) {
			n = kvp_ssd_poll_agent(s, cq, 64, -1);
			assert_true(n >= 0);
			for (k = 0; k < n; k++, polled++) {
				assert_int_equal(cq[k].status, 0);
				assert_int_equal(
					kvp_ssd_segment_info_agent(
						s, KVP_SSD_LOC_SEG(cq[k].loc),
						&si),
					0);
				if (cq[k].tag == 100)
					first = cq[k].loc;
			}
		}
		assert_true(polled > 1);
		/* polled: now the room is given (the first segment goes) */
		assert_int_equal(
			kvp_ssd_write_agent(s, 200, 1, "w", 1, &iov, 1, 0), 0);
		assert_int_equal(kvp_ssd_submit_agent(s), 0);
		while (kvp_ssd_outstanding_agent(s))
			assert_true(kvp_ssd_poll_agent(s, cq, 64, -1) >= 0);
		assert_int_equal(kvp_ssd_segment_info_agent(
					 s, KVP_SSD_LOC_SEG(first), &si),
				 -ENOENT);
		kvp_ssd_close_agent(s);
		close(efd);
	}
}

/* --durability strict: a write completes only after an fdatasync. */
static void
test_strict_durability(void **state)
{
	struct kvp_ssd_cfg cfg;
	struct kvp_ssd *s;
	struct kvp_ssd_stats st;
	unsigned char v[9000];

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.dir = kvpt_ssd_dir;
	cfg.segment_bytes = 4 << 20;
	cfg.wipe = true;
	cfg.durability = KVP_SSD_STRICT;
	assert_int_equal(kvp_ssd_open_agent(&cfg, &s), 0);
	kvp_ssd_recover_agent(s, NULL, NULL);
	fill(v, sizeof(v), 7);
	put(s, "d", v, sizeof(v));
	kvp_ssd_stats_agent(s, &st);
	assert_true(st.fsyncs >= 1);
	kvp_ssd_close_agent(s);
	/* relaxed (the default) never syncs per write */
	s = open_store(true, 4 << 20, 0);
	kvp_ssd_recover_agent(s, NULL, NULL);
	put(s, "d", v, sizeof(v));
	kvp_ssd_stats_agent(s, &st);
	assert_int_equal(st.fsyncs, 0);
	kvp_ssd_close_agent(s);
}

/* ---- what the store adopts from its directory ---- */

/* A subdirectory of the store directory for one test, made 0700. */
static void
subdir(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/%s", kvpt_ssd_dir, name);
	assert_int_equal(mkdir(out, 0700), 0);
}

static int
open_in(const char *d, struct kvp_ssd **s)
{
	struct kvp_ssd_cfg cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.dir = d;
	cfg.segment_bytes = KVP_SSD_SEGMENT_MIN;
	return kvp_ssd_open_agent(&cfg, s);
}

static int
count_cb(void *arg, const struct kvp_ssd_rec *r)
{
	(void)r;
	(*(unsigned *)arg)++;
	return 0;
}

/* Open the store in d and recover it: the records it serves. */
static unsigned
reopen_count(const char *d, struct kvp_ssd **s)
{
	unsigned n = 0;

	assert_int_equal(open_in(d, s), 0);
	assert_true(kvp_ssd_recover_agent(*s, count_cb, &n) >= 0);
	return n;
}

static void
plant(const char *d, const char *name, size_t len)
{
	unsigned char junk[8192];
	char p[600];
	int fd;

	assert_true(len <= sizeof(junk));
	memset(junk, 0x5a, len);
	snprintf(p, sizeof(p), "%s/%s", d, name);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, junk, len), (ssize_t)len);
	close(fd);
}

static bool
present(const char *d, const char *name)
{
	struct stat st;
	char p[600];

	snprintf(p, sizeof(p), "%s/%s", d, name);
	return lstat(p, &st) == 0;
}

/*
 * Segment file names are parsed strictly (seg- 8 lowercase hex digits
 * .kvs, ids 1..0ffffffe): garbage and extreme names are ignored, left in
 * place, and never move the next id (a seg-ffffffff.kvs made it wrap to
 * 0: what was written next was lost at the next open, and with a
 * seg-00000000.kvs there every write failed with "File exists").  A
 * directory or a FIFO with a segment's name is not opened.
 */
static void
test_segment_names(void **state)
{
	static const char *const junk[] = {
		"seg-ffffffff.kvs",  "seg-00000000.kvs",
		"seg-1.kvs",         "seg-0000000A.kvs",
		"seg-+0000001.kvs",  "seg- 0000001.kvs",
		"seg-0x000001.kvs",  "seg-00000001.kvs.bak",
		"seg-000000001.kvs", "seg-00000001.kvx",
		"seg-fffffffff.kvs", "seg-.kvs",
		"seg-ffffffff.kvs~",
	};
	char d[300], p[600], longname[256];
	unsigned char v[3000];
	struct kvp_ssd *s;
	unsigned k;

	(void)state;
	subdir(d, sizeof(d), "names");
	assert_int_equal(reopen_count(d, &s), 0);
	fill(v, sizeof(v), 9);
	put(s, "a", v, sizeof(v));
	put(s, "b", v, sizeof(v));
	put(s, "c", v, sizeof(v));
	kvp_ssd_close_agent(s);

	for (k = 0; k < sizeof(junk) / sizeof(junk[0]); k++)
		plant(d, junk[k], 4096);
	memset(longname, 'f', sizeof(longname) - 1);
	memcpy(longname, "seg-", 4);
	longname[sizeof(longname) - 1] = '\0';
	plant(d, longname, 4096);
	snprintf(p, sizeof(p), "%s/seg-00000100.kvs", d);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/seg-00000101.kvs", d);
	assert_int_equal(mkfifo(p, 0600), 0);

	/* what was there comes back; new writes land in a new segment */
	assert_int_equal(reopen_count(d, &s), 3);
	put(s, "d", v, sizeof(v));
	put(s, "e", v, sizeof(v));
	put(s, "f", v, sizeof(v));
	kvp_ssd_close_agent(s);
	assert_int_equal(reopen_count(d, &s), 6);
	kvp_ssd_close_agent(s);
	assert_true(present(d, "seg-00000102.kvs")); /* past the FIFO's id */
	for (k = 0; k < sizeof(junk) / sizeof(junk[0]); k++) {
		struct stat st;

		snprintf(p, sizeof(p), "%s/%s", d, junk[k]);
		assert_int_equal(stat(p, &st), 0);
		assert_int_equal(st.st_size, 4096);
	}
}

/*
 * The highest id is taken (a seg-0ffffffe.kvs, here garbage; ids stay
 * below 2^28: the top 4 bits of a location name a drive): the store
 * refuses to create past it (-ENOSPC, an ERROR line that says what to do)
 * and never wraps to seg-0fffffff.kvs, seg-10000000.kvs or
 * seg-00000000.kvs.
 */
static void
test_segment_id_max(void **state)
{
	char d[300];
	unsigned char v[3000];
	struct iovec iov = { v, sizeof(v) };
	struct kvp_ssd *s;

	(void)state;
	subdir(d, sizeof(d), "idmax");
	plant(d, "seg-0ffffffe.kvs", 4096);
	assert_int_equal(reopen_count(d, &s), 0);
	fill(v, sizeof(v), 3);
	assert_int_equal(kvp_ssd_write_agent(s, 1, 1, "x", 1, &iov, 1, 0),
			 -ENOSPC);
	assert_int_equal(kvp_ssd_write_agent(s, 1, 1, "x", 1, &iov, 1, 0),
			 -ENOSPC);
	kvp_ssd_close_agent(s);
	assert_false(present(d, "seg-0fffffff.kvs"));
	assert_false(present(d, "seg-10000000.kvs"));
	assert_false(present(d, "seg-00000000.kvs"));
}

/*
 * Files the store would serve must be ours alone: a segment file owned by
 * another user (nobody), one writable by group or others, or a symlink to
 * a sound segment file elsewhere is skipped, never served (and its id is
 * never reused).  The directory itself: another user's, or one others can
 * write, is refused (-EACCES) before anything is written into it; a
 * regular file is not a directory (-ENOTDIR).
 */
static void
test_planted_files(void **state)
{
	char d[300], other[300], p[600], q[600];
	unsigned char v[3000];
	struct kvp_ssd *s;
	int fd;

	(void)state;
	if (geteuid() != 0) {
		print_message("  SKIP: needs root (chown to another user)\n");
		return;
	}
	subdir(d, sizeof(d), "planted");
	assert_int_equal(reopen_count(d, &s), 0);
	fill(v, sizeof(v), 4);
	put(s, "p", v, sizeof(v));
	put(s, "q", v, sizeof(v));
	kvp_ssd_close_agent(s);
	snprintf(p, sizeof(p), "%s/seg-00000001.kvs", d);

	assert_int_equal(chown(p, 65534, 65534), 0);
	assert_int_equal(reopen_count(d, &s), 0);
	put(s, "r", v, sizeof(v)); /* a new segment, not id 1 again */
	kvp_ssd_close_agent(s);
	assert_true(present(d, "seg-00000002.kvs"));
	assert_int_equal(chown(p, 0, 0), 0);
	assert_int_equal(chmod(p, 0620), 0);
	assert_int_equal(reopen_count(d, &s), 1); /* "r" only */
	kvp_ssd_close_agent(s);
	assert_int_equal(chmod(p, 0602), 0);
	assert_int_equal(reopen_count(d, &s), 1);
	kvp_ssd_close_agent(s);
	assert_int_equal(chmod(p, 0600), 0);
	assert_int_equal(reopen_count(d, &s), 3);
	kvp_ssd_close_agent(s);

	/* a symlink with a segment's name, to a sound segment file */
	subdir(other, sizeof(other), "planted-other");
	snprintf(q, sizeof(q), "%s/seg-00000001.kvs", other);
	assert_int_equal(rename(p, q), 0);
	assert_int_equal(symlink(q, p), 0);
	assert_int_equal(reopen_count(d, &s), 1);
	kvp_ssd_close_agent(s);

	/* the directory */
	assert_int_equal(chown(d, 65534, 65534), 0);
	assert_int_equal(unlink(p), 0);
	snprintf(q, sizeof(q), "%s/LOCK", d);
	assert_int_equal(unlink(q), 0);
	assert_int_equal(open_in(d, &s), -EACCES);
	assert_false(present(d, "LOCK"));
	assert_int_equal(chown(d, 0, 0), 0);
	assert_int_equal(chmod(d, 0770), 0);
	assert_int_equal(open_in(d, &s), -EACCES);
	assert_int_equal(chmod(d, 0703), 0);
	assert_int_equal(open_in(d, &s), -EACCES);
	assert_false(present(d, "LOCK"));
	assert_int_equal(chmod(d, 0755), 0); /* readable by others is fine */
	assert_int_equal(reopen_count(d, &s), 1);
	kvp_ssd_close_agent(s);
	snprintf(q, sizeof(q), "%s/plain-file", kvpt_ssd_dir);
	fd = open(q, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(open_in(q, &s), -ENOTDIR);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_restart_and_damage),
		cmocka_unit_test(test_late_tombstone),
		cmocka_unit_test(test_corrupt_value),
		cmocka_unit_test(test_header_cache),
		cmocka_unit_test(test_recover_threads),
		cmocka_unit_test(test_format2_files),
		cmocka_unit_test(test_crash_batch),
		cmocka_unit_test(test_empty_segment),
		cmocka_unit_test(test_capacity),
		cmocka_unit_test(test_reinsert),
		cmocka_unit_test(test_fs_enospc),
		cmocka_unit_test(test_write_depth),
		cmocka_unit_test(test_write_waits_for_read),
		cmocka_unit_test(test_pread_path),
		cmocka_unit_test(test_reclaim_after_poll),
		cmocka_unit_test(test_strict_durability),
		cmocka_unit_test(test_segment_names),
		cmocka_unit_test(test_segment_id_max),
		cmocka_unit_test(test_planted_files),
		cmocka_unit_test(test_register_pieces),
	};

	return cmocka_run_group_tests(tests, setup, kvpt_ssd_dir_teardown);
}
