/* SPDX-License-Identifier: MIT */
/*
 * bench_util.h - helpers shared by the benchmarks in stress/ (header
 * only, every function static inline, so a benchmark takes what it uses
 * and the build needs no extra object).
 *
 *  - clocks, a compiler barrier, 80-byte keys like an engine's hash-chain
 *    keys (the same generator as bench_core), pre-faulted buffers;
 *  - fio as the device's limit (O_DIRECT, io_uring, same directory);
 *  - the SSD tier's measurements: put values and wait until all are
 *    demoted, then read them back cold through kvp_batch_get.
 *
 * Include after tests/agent/harness.h (which brings kvpool.h).
 */
#ifndef KVP_BENCH_UTIL_H
#define KVP_BENCH_UTIL_H

#include <sys/mman.h>

#include "tests/agent/harness.h"

#define KVPB_KLEN 80u

static inline uint64_t
kvpb_now_ns(void)
{
	return kvp_now_ns(CLOCK_MONOTONIC);
}

static inline double
kvpb_now_s(void)
{
	return (double)kvpb_now_ns() / 1e9;
}

/* Compiler barrier: what was copied into p counts as used. */
static inline void
kvpb_clobber(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static inline uint64_t
kvpb_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* An 80-byte key: (family tag, number) then 64 pseudo-random bytes, like
 * the hash-chain keys of an inference engine.  Distinct tags never
 * collide (the tag is the first 8 bytes). */
static inline void
kvpb_key(unsigned char *k, uint64_t tag, uint64_t i)
{
	uint64_t x = kvpb_mix(tag ^ kvpb_mix(i));
	unsigned off;

	memcpy(k, &tag, 8);
	memcpy(k + 8, &i, 8);
	for (off = 16; off < KVPB_KLEN; off += 8) {
		x = kvpb_mix(x);
		memcpy(k + off, &x, 8);
	}
}

/* The smallest power of two >= v, at least 16 (how kvpoold sizes its
 * index: for e entries, v = e + e / 4). */
static inline uint64_t
kvpb_pow2_at_least(uint64_t v)
{
	uint64_t p = 16;

	while (p < v)
		p <<= 1;
	return p;
}

/* A kvpt_wait_until condition: DRAM units in use at most target. */
struct kvpb_used {
	const struct kvp_seg *s;
	uint64_t target;
};

static inline bool
kvpb_used_below(void *arg)
{
	struct kvpb_used *u = arg;

	return kvpt_units_used(u->s) <= u->target;
}

/* Page-aligned private memory, every page touched: no page fault is ever
 * timed.  NULL on failure. */
static inline void *
kvpb_alloc(uint64_t n)
{
	void *p = aligned_alloc(4096, (n + 4095) & ~4095ull);

	if (p)
		memset(p, 0, n);
	return p;
}

/* A /dev/shm (tmpfs) mapping, MAP_SHARED like the pool's segment, already
 * unlinked and pre-faulted: the same kind of memory as the DRAM arena.
 * Inherited by processes forked later.  NULL on failure. */
static inline unsigned char *
kvpb_shm_region(uint64_t size)
{
	static unsigned seq;
	char name[64];
	void *p;
	int fd;

	snprintf(name, sizeof(name), "/kvpool-bench.%d.%u", (int)getpid(),
		 seq++);
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return NULL;
	shm_unlink(name);
	if (ftruncate(fd, (off_t)size) < 0) {
		close(fd);
		return NULL;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
		 fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return NULL;
	memset(p, 1, size); /* allocate the tmpfs pages now */
	return p;
}

static inline void
kvpb_rm_rf(const char *d)
{
	char cmd[1200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
	if (system(cmd))
		fprintf(stderr, "bench: cannot remove %s\n", d);
}

/* "64K", "1M", "4M", "2G" or bytes; 0 if malformed. */
static inline uint64_t
kvpb_parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 10);

	switch (*end) {
	case 'k':
	case 'K':
		v <<= 10;
		end++;
		break;
	case 'm':
	case 'M':
		v <<= 20;
		end++;
		break;
	case 'g':
	case 'G':
		v <<= 30;
		end++;
		break;
	default:
		break;
	}
	return *end || end == s ? 0 : v;
}

/*
 * fio: bandwidth in bytes/s of one sequential job on directory dir
 * (O_DIRECT, io_uring, block size bs, mib MiB, iodepth qd), or 0 when
 * fio is missing or fails.  A read job lays its file out first, untimed.
 */
static inline double
kvpb_fio_bw(const char *dir, const char *rw, const char *bs, unsigned mib,
	    unsigned qd)
{
	char cmd[1024], buf[1 << 16];
	size_t n;
	FILE *f;
	const char *p;

	snprintf(
		cmd, sizeof(cmd),
		"fio --name=kvpb --directory=%s --direct=1 --ioengine=io_uring --rw=%s "
		"--bs=%s --size=%uM --iodepth=%u --output-format=json 2>/dev/null",
		dir, rw, bs, mib, qd);
	f = popen(cmd, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	pclose(f);
	p = strstr(buf, strcmp(rw, "write") ? "\"read\" : {" : "\"write\" : {");
	p = p ? strstr(p, "\"bw_bytes\"") : NULL;
	return p ? strtod(strchr(p, ':') + 1, NULL) : 0;
}

/* ---- the SSD tier ---- */

/* The SSD benchmarks' keys: 64 hex digits and the number (~75 bytes). */
static inline uint32_t
kvpb_ssd_key(char *k, int i)
{
	return (uint32_t)snprintf(k, 100, "%064x_bench_%d",
				  (unsigned)i * 2654435761u, i);
}

/* Is no READY value left in DRAM? (for kvpt_wait_until) */
static inline bool
kvpb_ssd_demoted(void *p)
{
	struct kvp_seg *s = p;
	uint64_t i, dram = 0;

	for (i = 0; i < s->g.g_index_slots; i++)
		if (KVP_IX_STATE(kvp_load_acquire(&s->meta[i])) ==
			    KVP_IX_READY &&
		    KVP_LOC_TIER(kvp_load_relaxed(&s->entries[i].e_loc)) ==
			    KVP_TIER_DRAM)
			dram++;
	return dram == 0;
}

/* Put values 0..n-1 of sz bytes into a pool that demotes everything
 * (--dram-high 0) and wait until every one is on SSD.  Returns bytes/s
 * from the first put to the last demotion. */
static inline double
kvpb_ssd_fill_and_demote(struct kvp_client *c, struct kvp_seg *s, int n,
			 uint64_t sz)
{
	unsigned char *v = malloc(sz);
	double t0 = kvpb_now_s();
	char k[100];
	int i, rc;

	if (!v)
		return 0;
	memset(v, 0x5a, sz);
	for (i = 0; i < n; i++) {
		uint32_t kl = kvpb_ssd_key(k, i);
		v[0] = (unsigned char)i;
		while ((rc = kvp_put(c, k, kl, v, sz)) == -EBUSY)
			;
		if (rc)
			fprintf(stderr, "bench: put: %s\n", kvp_strerror(rc));
	}
	kvpt_wait_until(kvpb_ssd_demoted, s, 600000);
	free(v);
	return (double)n * (double)sz / (kvpb_now_s() - t0);
}

/* Read values 0..n-1 back with kvp_batch_get, batch keys per call.
 * Returns bytes/s; *bad counts values not read whole; *progress (when
 * not NULL, shared with another process) gains each call's bytes. */
static inline double
kvpb_ssd_cold_gets_p(struct kvp_client *c, int n, uint64_t sz, int batch,
		     uint64_t *bad, uint64_t *progress)
{
	struct kvp_op *ops = calloc((size_t)batch, sizeof(*ops));
	char(*keys)[100] = calloc((size_t)batch, 100);
	unsigned char *out = malloc((size_t)batch * sz);
	double t0, bw = 0;
	int i, k;

	if (!ops || !keys || !out)
		goto out;
	/* the destination touched first, untimed: an engine reads into
	 * buffers it allocated once (and fio into its own), so a first-touch
	 * page fault per 4 KiB is not the pool's time.  Not with zeros: the
	 * compiler makes malloc + memset(0) a calloc, which touches nothing
	 * (every get's copy-out then took the faults: 180-250 us per 64 KiB
	 * on this VM, 30x the copy) */
	memset(out, 0x5a, (size_t)batch * sz);
	t0 = kvpb_now_s();
	for (i = 0; i < n; i += batch) {
		int m = n - i < batch ? n - i : batch;
		ssize_t got;

		for (k = 0; k < m; k++) {
			ops[k].klen = kvpb_ssd_key(keys[k], i + k);
			ops[k].key = keys[k];
			ops[k].buf = out + (size_t)k * sz;
			ops[k].off = 0;
			ops[k].len = sz;
		}
		got = kvp_batch_get(c, ops, (size_t)m);
		if (got != m) {
			fprintf(stderr, "bench: batch get: %zd of %d ok\n", got,
				m);
			if (bad)
				*bad += (uint64_t)(m - (got > 0 ? got : 0));
		}
		if (progress && got > 0)
			__atomic_fetch_add(progress, (uint64_t)got * sz,
					   __ATOMIC_RELAXED);
	}
	bw = (double)n * (double)sz / (kvpb_now_s() - t0);
out:
	free(ops);
	free(keys);
	free(out);
	return bw;
}

static inline double
kvpb_ssd_cold_gets(struct kvp_client *c, int n, uint64_t sz, int batch,
		   uint64_t *bad)
{
	return kvpb_ssd_cold_gets_p(c, n, sz, batch, bad, NULL);
}

#endif
