/* SPDX-License-Identifier: MIT */
/*
 * bench_core.c - the core figures of kvpool on this machine, in one run.
 *
 * A benchmark, not a test: it asserts nothing about the numbers.  It
 * starts its own agents (tests/agent/harness.c) on private pools, prints
 * a table and, with --json FILE, writes every figure as JSON.
 *
 *  1. get: DRAM-hit kvp_get of 64 KiB and 1 MiB values against a plain
 *     memcpy of the same bytes from the same place: the baseline copies
 *     from each value's own address in the arena (found once, before the
 *     timed loops, through kvp__lookup_hold + e_loc + kvp_dram_run), into
 *     the same destination buffer.  "cold" cycles a working set larger
 *     than the L3 cache; "hot" reads one value over and over.  The ratio
 *     get/memcpy is taken within each round.  Also: lookup+hold+drop with
 *     no copy, the per-get cost that is not memcpy.
 *  2. index: kvp_exists (pure lookup) of present and of absent 80-byte
 *     keys, and kvp_batch_exists_prefix over batches of 2,000 present
 *     keys, at 50% and 90% of h_index_slots (the load actually reached is
 *     reported: the index may refuse inserts before 90%).  Single thread,
 *     so "per core".  Values are 1 byte in 4 KiB units.
 *  3. put: single-process kvp_put of 64 KiB and 1 MiB values (new keys
 *     each round; deleted and reclaimed between rounds, outside the
 *     timing) against memcpy of the same source into a /dev/shm mapping
 *     of the same size (tmpfs pages like the arena's, pre-faulted).
 *
 * Every figure is the median (with min and max) of --rounds rounds; the
 * first round of each section is a warm-up and is not recorded.  GB/s
 * are 10^9 bytes per second.  Timing: CLOCK_MONOTONIC around whole
 * loops.  The agents run with --dram-high 100 so that no eviction runs
 * during a measurement.  The figures are steady-state ones: each client
 * prefaults its view of the index right after kvp_open (the cost of the
 * faults a fresh client would take is reported on its own), and arena
 * pages are first touched by the fill or the warm-up round.
 *
 * docs/performance.md has the figures of record and their analysis.
 *
 * usage: bench_core [--quick] [--rounds N] [--json FILE]
 */
#include <getopt.h>
#include <stdarg.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>

#include "stress/bench_util.h"

#define KVPB_BATCH 2000u
#define KVPB_MAX_ROUNDS 64u
#define KVPB_MAX_METRICS 128u
#define KVPB_MAX_INFO 64u

#define KVPB_TAG_GET 0x676574ull /* key families: never collide */
#define KVPB_TAG_PUT 0x707574ull
#define KVPB_TAG_IX 0x6978ull
#define KVPB_TAG_ABSENT 0x616273ull

struct kvpb_cfg {
	bool quick;
	const char *json;
	unsigned rounds; /* recorded rounds (a warm-up round precedes) */
	uint64_t get_ws; /* bytes of values per size, cycled by cold gets */
	uint64_t put_ws; /* bytes put per round per size */
	uint64_t ix_ops; /* lookups per index measurement */
	unsigned nix;    /* index sizes measured */
	uint64_t ix_entries[2]; /* --index-entries of each */
};

/* One figure: a sample per round. */
struct kvpb_metric {
	char section[16];
	char name[80];
	char unit[12];
	double v[KVPB_MAX_ROUNDS];
	unsigned n;
	double med, min, max;
};

struct kvpb_info {
	char name[80];
	char value[160];
};

static struct kvpb_metric kvpb_m[KVPB_MAX_METRICS];
static unsigned kvpb_nm;
static struct kvpb_info kvpb_i[KVPB_MAX_INFO];
static unsigned kvpb_ni;
static int kvpb_failed; /* sections that could not run */

/* ---- small helpers: stress/bench_util.h ---- */

static uint64_t
kvpb_now(void)
{
	return kvpb_now_ns();
}

static struct kvpb_metric *
kvpb_metric(const char *section, const char *name, const char *unit)
{
	struct kvpb_metric *m;
	unsigned k;

	for (k = 0; k < kvpb_nm; k++)
		if (!strcmp(kvpb_m[k].section, section) &&
		    !strcmp(kvpb_m[k].name, name))
			return &kvpb_m[k];
	if (kvpb_nm == KVPB_MAX_METRICS)
		return NULL;
	m = &kvpb_m[kvpb_nm++];
	snprintf(m->section, sizeof(m->section), "%s", section);
	snprintf(m->name, sizeof(m->name), "%s", name);
	snprintf(m->unit, sizeof(m->unit), "%s", unit);
	return m;
}

static void
kvpb_add(const char *section, const char *name, const char *unit, double v)
{
	struct kvpb_metric *m = kvpb_metric(section, name, unit);

	if (m && m->n < KVPB_MAX_ROUNDS)
		m->v[m->n++] = v;
}

static void kvpb_info(const char *name, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void
kvpb_info(const char *name, const char *fmt, ...)
{
	struct kvpb_info *in;
	va_list ap;

	if (kvpb_ni == KVPB_MAX_INFO)
		return;
	in = &kvpb_i[kvpb_ni++];
	snprintf(in->name, sizeof(in->name), "%s", name);
	va_start(ap, fmt);
	vsnprintf(in->value, sizeof(in->value), fmt, ap);
	va_end(ap);
	printf("  %-38s %s\n", in->name, in->value);
}

static int
kvpb_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void
kvpb_summarise(struct kvpb_metric *m)
{
	double s[KVPB_MAX_ROUNDS];

	if (!m->n)
		return;
	memcpy(s, m->v, m->n * sizeof(double));
	qsort(s, m->n, sizeof(double), kvpb_cmp_double);
	m->min = s[0];
	m->max = s[m->n - 1];
	m->med = m->n % 2 ? s[m->n / 2] : (s[m->n / 2 - 1] + s[m->n / 2]) / 2;
}

static const struct kvpb_metric *
kvpb_find(const char *section, const char *name)
{
	unsigned k;

	for (k = 0; k < kvpb_nm; k++)
		if (!strcmp(kvpb_m[k].section, section) &&
		    !strcmp(kvpb_m[k].name, name))
			return kvpb_m[k].n ? &kvpb_m[k] : NULL;
	return NULL;
}

/* ---- the machine ---- */

struct kvpb_machine {
	long nproc;
	char cpu[128];
	char kernel[160];
	char l2[32], l3[32];
	uint64_t mem;
};

static void
kvpb_sysfs(const char *path, char *out, size_t cap)
{
	FILE *f = fopen(path, "r");

	snprintf(out, cap, "?");
	if (!f)
		return;
	if (fgets(out, (int)cap, f))
		out[strcspn(out, "\n")] = '\0';
	fclose(f);
}

static void
kvpb_machine(struct kvpb_machine *mc)
{
	struct utsname u;
	struct sysinfo si;
	char line[256];
	FILE *f;

	memset(mc, 0, sizeof(*mc));
	mc->nproc = sysconf(_SC_NPROCESSORS_ONLN);
	snprintf(mc->cpu, sizeof(mc->cpu), "unknown");
	f = fopen("/proc/cpuinfo", "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *p = strchr(line, ':');

		if (strncmp(line, "model name", 10) || !p)
			continue;
		p += 1 + strspn(p + 1, " \t");
		p[strcspn(p, "\n")] = '\0';
		snprintf(mc->cpu, sizeof(mc->cpu), "%s", p);
		break;
	}
	if (f)
		fclose(f);
	if (uname(&u) == 0)
		snprintf(mc->kernel, sizeof(mc->kernel), "%s %s", u.sysname,
			 u.release);
	kvpb_sysfs("/sys/devices/system/cpu/cpu0/cache/index2/size", mc->l2,
		   sizeof(mc->l2));
	kvpb_sysfs("/sys/devices/system/cpu/cpu0/cache/index3/size", mc->l3,
		   sizeof(mc->l3));
	if (sysinfo(&si) == 0)
		mc->mem = (uint64_t)si.totalram * si.mem_unit;
}

/* ---- agents ---- */

struct kvpb_pool {
	struct kvpt_agent a;
	struct kvp_client *c;
};

/*
 * Map this client's view of the index (meta + entries) now.  A client
 * maps the segment lazily, so its first touch of each 4 KiB page of the
 * index is a page fault (about 1-2 us here); a long-lived worker has
 * paid them all.  The figures are steady-state ones, so the faults are
 * taken here, and their cost is reported.
 */
static void
kvpb_prefault(struct kvpb_pool *p, const char *label)
{
	const struct kvp_seg *s = &p->c->seg;
	uintptr_t b = (uintptr_t)s->meta & ~(uintptr_t)(KVP_PAGE - 1);
	uintptr_t e = (uintptr_t)(s->entries + s->g.g_index_slots);
	uint64_t t0 = kvpb_now(), pages = (e - b + KVP_PAGE - 1) / KVP_PAGE;
	char name[80];

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
	if (madvise((void *)b, e - b, MADV_POPULATE_WRITE) < 0) {
		/* older kernels: read one byte of each page instead */
		const volatile unsigned char *q = (const unsigned char *)b;
		uint64_t k;

		for (k = 0; k < pages; k++)
			(void)q[k * KVP_PAGE];
	}
	snprintf(name, sizeof(name), "%s.client_index_prefault", label);
	kvpb_info(name, "%llu pages of index mapped in %.1f ms (%.2f us/page)",
		  (unsigned long long)pages, (double)(kvpb_now() - t0) / 1e6,
		  (double)(kvpb_now() - t0) / 1e3 / (double)pages);
}

/*
 * Start an agent that never evicts (--dram-high 100): nothing moves
 * during a measurement.  Deleted values are still reclaimed by its
 * periodic pass.
 */
static int
kvpb_pool_start(struct kvpb_pool *p, const char *label, uint64_t dram,
		const char *unit, uint64_t entries)
{
	char d[32], e[32];
	int rc;

	snprintf(d, sizeof(d), "%lluK", (unsigned long long)(dram >> 10));
	snprintf(e, sizeof(e), "%llu", (unsigned long long)entries);
	p->c = NULL;
	rc = kvpt_agent_start(&p->a, "--dram", d, "--dram-unit", unit,
			      "--index-entries", e, "--dram-high", "100",
			      "--dram-low", "99", NULL);
	if (rc) {
		char log[2200];

		kvpt_agent_log(p->a.pool, log, sizeof(log));
		fprintf(stderr,
			"bench_core: cannot start kvpoold (%s/kvpoold, "
			"--dram %s): %s; its log is %s\n",
			kvpt_bindir(), d, strerror(-rc), log);
		kvpt_agent_stop(&p->a);
		return rc;
	}
	rc = kvp_open(p->a.pool, "bench", &p->c);
	if (rc) {
		fprintf(stderr, "bench_core: kvp_open: %s\n", kvp_strerror(rc));
		kvpt_agent_stop(&p->a);
		return rc;
	}
	kvpb_prefault(p, label);
	return 0;
}

static void
kvpb_pool_stop(struct kvpb_pool *p)
{
	/* first: the agent keeps a segment with live clients */
	kvp_close(p->c);
	p->c = NULL;
	kvpt_agent_stop(&p->a);
}

/* ---- 1. get ---- */

struct kvpb_vset {
	uint64_t size, n;
	unsigned char *keys;       /* n keys of KVPB_KLEN bytes */
	const unsigned char **src; /* each value's address in the arena */
};

/* Put n values of vs->size bytes and find where each one lives. */
static int
kvpb_vset_fill(struct kvp_client *c, struct kvpb_vset *vs, uint64_t tag)
{
	unsigned char *buf = kvpb_alloc(vs->size);
	uint64_t k;
	int rc = 0;

	vs->keys = malloc(vs->n * KVPB_KLEN);
	vs->src = calloc(vs->n, sizeof(*vs->src));
	if (!buf || !vs->keys || !vs->src) {
		rc = -ENOMEM;
		goto out;
	}
	for (k = 0; k < vs->n && !rc; k++) {
		unsigned char *key = vs->keys + k * KVPB_KLEN;

		kvpb_key(key, tag, k);
		kvpt_fill(buf, vs->size, key, KVPB_KLEN, 1);
		rc = kvp_put(c, key, KVPB_KLEN, buf, vs->size);
		if (rc)
			fprintf(stderr, "bench_core: put %llu of %llu: %s\n",
				(unsigned long long)k,
				(unsigned long long)vs->n, kvp_strerror(rc));
	}
	for (k = 0; k < vs->n && !rc; k++) {
		uint64_t i, len, loc, rb = 0;
		uint32_t next = 0;
		int h = kvp__lookup_hold(c, vs->keys + k * KVPB_KLEN, KVPB_KLEN,
					 &i, &len);

		if (h < 0) {
			rc = h;
			break;
		}
		/* relaxed: stable while held (published by the READY CAS) */
		loc = kvp_load_relaxed(&c->seg.entries[i].e_loc);
		vs->src[k] = kvp_dram_run(&c->seg, (uint32_t)KVP_LOC_VAL(loc),
					  &rb, &next);
		kvp__drop(c, h);
		/*
		 * The baseline reads this address later without a hold: safe
		 * here because this pool never evicts (--dram-high 100) and
		 * nobody deletes these keys.  A fresh arena gives one run per
		 * value; a chained value would need a chained baseline.
		 */
		if (!vs->src[k] || len != vs->size || next || rb < len) {
			fprintf(stderr,
				"bench_core: value %llu is not one run\n",
				(unsigned long long)k);
			rc = -EUCLEAN;
		}
	}
	/* a sanity check of what is measured, not a test */
	if (!rc && (kvp_get(c, vs->keys, KVPB_KLEN, buf, vs->size) !=
			    (ssize_t)vs->size ||
		    !kvpt_check(buf, vs->size, vs->keys, KVPB_KLEN, 1) ||
		    memcmp(buf, vs->src[0], vs->size))) {
		fprintf(stderr, "bench_core: value 0 reads back wrong\n");
		rc = -EBADMSG;
	}
out:
	free(buf);
	return rc;
}

static void
kvpb_vset_free(struct kvpb_vset *vs)
{
	free(vs->keys);
	free(vs->src);
	vs->keys = NULL;
	vs->src = NULL;
}

/* Time iters gets (hot: always value 0; cold: cycle the set). */
static uint64_t
kvpb_time_get(struct kvp_client *c, const struct kvpb_vset *vs, bool hot,
	      uint64_t iters, void *dst, uint64_t *bad)
{
	uint64_t t0 = kvpb_now(), k, j = 0;

	for (k = 0; k < iters; k++) {
		ssize_t r = kvp_get(c, vs->keys + j * KVPB_KLEN, KVPB_KLEN, dst,
				    vs->size);

		*bad += r != (ssize_t)vs->size;
		kvpb_clobber(dst);
		if (!hot && ++j == vs->n)
			j = 0;
	}
	return kvpb_now() - t0;
}

/* The same loop with memcpy from the value's own arena address. */
static uint64_t
kvpb_time_memcpy(const struct kvpb_vset *vs, bool hot, uint64_t iters,
		 void *dst)
{
	uint64_t t0 = kvpb_now(), k, j = 0;

	for (k = 0; k < iters; k++) {
		memcpy(dst, vs->src[j], vs->size);
		kvpb_clobber(dst);
		if (!hot && ++j == vs->n)
			j = 0;
	}
	return kvpb_now() - t0;
}

/* Lookup + hold + drop, no copy: what a get costs beyond memcpy. */
static uint64_t
kvpb_time_hold(struct kvp_client *c, const struct kvpb_vset *vs, uint64_t *bad)
{
	uint64_t t0 = kvpb_now(), k, i, len;

	for (k = 0; k < vs->n; k++) {
		int h = kvp__lookup_hold(c, vs->keys + k * KVPB_KLEN, KVPB_KLEN,
					 &i, &len);

		if (h < 0)
			(*bad)++;
		else
			kvp__drop(c, h);
	}
	return kvpb_now() - t0;
}

static const char *
kvpb_size_name(uint64_t size)
{
	return size >= (1u << 20) ? "1MiB" : "64KiB";
}

static void
kvpb_get_round(struct kvp_client *c, const struct kvpb_vset *vs, void *dst,
	       unsigned r, bool record, uint64_t *bad)
{
	const char *sz = kvpb_size_name(vs->size);
	char name[80];
	int hot;

	for (hot = 0; hot <= 1; hot++) {
		uint64_t iters = vs->n, tg, tm;
		double bytes = (double)iters * (double)vs->size;
		const char *v = hot ? "hot" : "cold";

		if (hot) { /* warm the one value and the destination */
			kvpb_time_get(c, vs, true, 4, dst, bad);
			kvpb_time_memcpy(vs, true, 4, dst);
		}
		/* alternate the order: neither side always follows the other */
		if (r % 2) {
			tm = kvpb_time_memcpy(vs, hot, iters, dst);
			tg = kvpb_time_get(c, vs, hot, iters, dst, bad);
		} else {
			tg = kvpb_time_get(c, vs, hot, iters, dst, bad);
			tm = kvpb_time_memcpy(vs, hot, iters, dst);
		}
		if (!record)
			continue;
		snprintf(name, sizeof(name), "%s %s kvp_get", sz, v);
		kvpb_add("get", name, "GB/s", bytes / (double)tg);
		snprintf(name, sizeof(name), "%s %s memcpy", sz, v);
		kvpb_add("get", name, "GB/s", bytes / (double)tm);
		snprintf(name, sizeof(name), "%s %s ratio get/memcpy", sz, v);
		kvpb_add("get", name, "x", (double)tm / (double)tg);
		snprintf(name, sizeof(name), "%s %s kvp_get latency", sz, v);
		kvpb_add("get", name, "ns/op", (double)tg / (double)iters);
		snprintf(name, sizeof(name), "%s %s memcpy latency", sz, v);
		kvpb_add("get", name, "ns/op", (double)tm / (double)iters);
		snprintf(name, sizeof(name), "%s %s overhead (get-memcpy)", sz,
			 v);
		kvpb_add("get", name, "ns/op",
			 ((double)tg - (double)tm) / (double)iters);
	}
	{
		uint64_t th = kvpb_time_hold(c, vs, bad);

		if (record) {
			snprintf(name, sizeof(name),
				 "%s cold lookup+hold+drop only", sz);
			kvpb_add("get", name, "ns/op",
				 (double)th / (double)vs->n);
		}
	}
}

static void
kvpb_bench_get(const struct kvpb_cfg *cfg, struct kvpb_pool *p)
{
	static const uint64_t sizes[2] = { 64u << 10, 1u << 20 };
	struct kvpb_vset vs[2];
	unsigned char *dst = kvpb_alloc(1u << 20);
	uint64_t bad = 0, t0 = kvpb_now();
	unsigned s, r;

	memset(vs, 0, sizeof(vs));
	printf("# get: %llu MiB of 64 KiB values and %llu MiB of 1 MiB values "
	       "(cold working set; L3 is exceeded), 80-byte keys\n",
	       (unsigned long long)(cfg->get_ws >> 20),
	       (unsigned long long)(cfg->get_ws >> 20));
	for (s = 0; s < 2; s++) {
		vs[s].size = sizes[s];
		vs[s].n = cfg->get_ws / sizes[s];
		if (!dst || kvpb_vset_fill(p->c, &vs[s], KVPB_TAG_GET + s)) {
			fprintf(stderr, "bench_core: get section skipped\n");
			kvpb_failed++;
			goto out;
		}
	}
	printf("  filled in %.2f s\n", (double)(kvpb_now() - t0) / 1e9);
	for (r = 0; r <= cfg->rounds; r++)
		for (s = 0; s < 2; s++)
			kvpb_get_round(p->c, &vs[s], dst, r, r > 0, &bad);
	if (bad) {
		fprintf(stderr,
			"bench_core: %llu gets did not return the value\n",
			(unsigned long long)bad);
		kvpb_info("get.failed_gets", "%llu", (unsigned long long)bad);
	}
out:
	for (s = 0; s < 2; s++)
		kvpb_vset_free(&vs[s]);
	free(dst);
}

/* ---- 3. put ---- */

static void
kvpb_bench_put(const struct kvpb_cfg *cfg, struct kvpb_pool *p)
{
	static const uint64_t sizes[2] = { 64u << 10, 1u << 20 };
	unsigned char *shm = kvpb_shm_region(cfg->put_ws);
	unsigned char *src = kvpb_alloc(1u << 20), *keys = NULL;
	uint64_t bad = 0, slow_reclaim = 0;
	unsigned s, r;

	printf("# put: %llu MiB of new values per round and size; memcpy "
	       "baseline into a /dev/shm mapping of the same size\n",
	       (unsigned long long)(cfg->put_ws >> 20));
	keys = malloc((cfg->put_ws / sizes[0]) * KVPB_KLEN);
	if (!shm || !src || !keys) {
		fprintf(stderr, "bench_core: put section skipped: no memory\n");
		kvpb_failed++;
		goto out;
	}
	kvpt_fill(src, 1u << 20, "put", 3, 1);
	for (r = 0; r <= cfg->rounds; r++) {
		for (s = 0; s < 2; s++) {
			uint64_t size = sizes[s], n = cfg->put_ws / size, k,
				 tp = 0, tm = 0;
			double bytes = (double)n * (double)size;
			struct kvpb_used u = { &p->c->seg,
					       kvpt_units_used(&p->c->seg) };
			const char *sz = kvpb_size_name(size);
			char name[80];
			int pass;

			for (k = 0; k < n; k++)
				kvpb_key(keys + k * KVPB_KLEN, KVPB_TAG_PUT + s,
					 (uint64_t)r * n + k);
			for (pass = 0; pass < 2; pass++) {
				uint64_t t0 = kvpb_now();

				if ((pass == 0) == (r % 2 == 0)) {
					for (k = 0; k < n; k++)
						bad += kvp_put(p->c,
							       keys + k * KVPB_KLEN,
							       KVPB_KLEN, src,
							       size) != 0;
					tp = kvpb_now() - t0;
				} else {
					for (k = 0; k < n; k++) {
						memcpy(shm + k * size, src,
						       size);
						kvpb_clobber(shm);
					}
					tm = kvpb_now() - t0;
				}
			}
			/* give the room back (untimed): delete, then wait for
			 * the agent's periodic pass to reclaim */
			for (k = 0; k < n; k++)
				kvp_delete(p->c, keys + k * KVPB_KLEN,
					   KVPB_KLEN);
			if (kvpt_wait_until(kvpb_used_below, &u, 5000) < 0)
				slow_reclaim++;
			if (r == 0) {
				snprintf(name, sizeof(name),
					 "put.%s.first_touch_gbps", sz);
				kvpb_info(
					name,
					"%.2f GB/s in the warm-up round (first "
					"writes of this client to these arena pages: "
					"%.2f us more per 4 KiB page than memcpy)",
					bytes / (double)tp,
					((double)tp - (double)tm) / 1e3 /
						(bytes / KVP_PAGE));
				continue;
			}
			snprintf(name, sizeof(name), "%s kvp_put", sz);
			kvpb_add("put", name, "GB/s", bytes / (double)tp);
			snprintf(name, sizeof(name), "%s memcpy", sz);
			kvpb_add("put", name, "GB/s", bytes / (double)tm);
			snprintf(name, sizeof(name), "%s ratio put/memcpy", sz);
			kvpb_add("put", name, "x", (double)tm / (double)tp);
			snprintf(name, sizeof(name), "%s overhead (put-memcpy)",
				 sz);
			kvpb_add("put", name, "ns/op",
				 ((double)tp - (double)tm) / (double)n);
		}
	}
	if (bad)
		kvpb_info("put.failed_puts", "%llu", (unsigned long long)bad);
	if (slow_reclaim)
		kvpb_info("put.slow_reclaim",
			  "%llu rounds waited > 5 s for reclaim",
			  (unsigned long long)slow_reclaim);
out:
	free(keys);
	free(src);
	if (shm)
		munmap(shm, cfg->put_ws);
}

/* ---- 2. index ---- */

struct kvpb_ix {
	uint64_t nslots;
	unsigned char *present; /* keys inserted, in insertion order */
	uint64_t npresent, cap;
	unsigned char *absent; /* keys never inserted */
	uint64_t nabsent;
	struct kvp_op *ops; /* one per present key, for the batches */
	uint64_t next;      /* next key number to try */
	uint64_t nospc;     /* inserts the index refused */
	uint64_t evicted;   /* keys evicted to make room in a full pair */
};

/* A put into a full bucket pair makes the agent evict another key of
 * that pair: keep only the keys that are still present. */
static void
kvpb_ix_compact(struct kvp_client *c, struct kvpb_ix *ix)
{
	uint64_t k, n = 0;

	for (k = 0; k < ix->npresent; k++) {
		if (kvp_exists(c, ix->present + k * KVPB_KLEN, KVPB_KLEN) !=
		    1) {
			ix->evicted++;
			continue;
		}
		memmove(ix->present + n * KVPB_KLEN,
			ix->present + k * KVPB_KLEN, KVPB_KLEN);
		ix->ops[n].key = ix->present + n * KVPB_KLEN;
		ix->ops[n].klen = KVPB_KLEN;
		n++;
	}
	ix->npresent = n;
}

/* Insert 1-byte values until 'target' keys are present or the index
 * keeps refusing (a BUSY key is put again).  Returns 0 or the first error
 * other than -ENOSPC and -EBUSY. */
static int
kvpb_ix_fill(struct kvp_client *c, struct kvpb_ix *ix, uint64_t target)
{
	unsigned char key[KVPB_KLEN], one = 1;
	uint64_t fails = 0;

	if (target > ix->cap)
		target = ix->cap;
	while (ix->npresent < target && fails < 10000) {
		int rc;

		kvpb_key(key, KVPB_TAG_IX, ix->next++);
		rc = kvp_put(c, key, KVPB_KLEN, &one, 1);
		if (rc == -ENOSPC) {
			ix->nospc++;
			fails++;
			continue;
		}
		/* backpressure (the agent is still making room at the index
		 * limit): the same key again */
		if (rc == -EBUSY && fails++ < 10000) {
			ix->next--;
			continue;
		}
		if (rc) {
			fprintf(stderr, "bench_core: index fill: %s\n",
				kvp_strerror(rc));
			return rc;
		}
		fails = 0;
		memcpy(ix->present + ix->npresent * KVPB_KLEN, key, KVPB_KLEN);
		ix->ops[ix->npresent].key =
			ix->present + ix->npresent * KVPB_KLEN;
		ix->ops[ix->npresent].klen = KVPB_KLEN;
		ix->npresent++;
	}
	kvpb_ix_compact(c, ix);
	return 0;
}

/* ops lookups of keys[0..n) cycled; returns ns, counts answers != want. */
static uint64_t
kvpb_time_exists(struct kvp_client *c, const unsigned char *keys, uint64_t n,
		 uint64_t ops, int want, uint64_t *bad)
{
	uint64_t t0 = kvpb_now(), k, j = 0;

	for (k = 0; k < ops; k++) {
		*bad += kvp_exists(c, keys + j * KVPB_KLEN, KVPB_KLEN) != want;
		if (++j == n)
			j = 0;
	}
	return kvpb_now() - t0;
}

static void
kvpb_ix_measure(const struct kvpb_cfg *cfg, struct kvp_client *c,
		struct kvpb_ix *ix, const char *label, unsigned r,
		uint64_t *bad)
{
	uint64_t nb = ix->npresent / KVPB_BATCH, done, b = 0, sum = 0,
		 worst = 0, nbt = 0;
	uint64_t t;
	char name[80];

	t = kvpb_time_exists(c, ix->present, ix->npresent, cfg->ix_ops, 1, bad);
	if (r) {
		snprintf(name, sizeof(name), "%s kvp_exists hit", label);
		kvpb_add("index", name, "M/s",
			 (double)cfg->ix_ops * 1e3 / (double)t);
		snprintf(name, sizeof(name), "%s kvp_exists hit latency",
			 label);
		kvpb_add("index", name, "ns/op",
			 (double)t / (double)cfg->ix_ops);
	}
	t = kvpb_time_exists(c, ix->absent, ix->nabsent, cfg->ix_ops, 0, bad);
	if (r) {
		snprintf(name, sizeof(name), "%s kvp_exists miss", label);
		kvpb_add("index", name, "M/s",
			 (double)cfg->ix_ops * 1e3 / (double)t);
	}
	for (done = 0; nb && done < cfg->ix_ops; done += KVPB_BATCH) {
		uint64_t t0 = kvpb_now();
		ssize_t got = kvp_batch_exists_prefix(
			c, ix->ops + b * KVPB_BATCH, KVPB_BATCH);

		t = kvpb_now() - t0;
		*bad += got != (ssize_t)KVPB_BATCH;
		sum += t;
		nbt++;
		if (t > worst)
			worst = t;
		if (++b == nb)
			b = 0;
	}
	if (r && nbt) {
		snprintf(name, sizeof(name),
			 "%s batch_exists_prefix(2000) mean", label);
		kvpb_add("index", name, "us/batch",
			 (double)sum / (double)nbt / 1e3);
		snprintf(name, sizeof(name),
			 "%s batch_exists_prefix(2000) worst", label);
		kvpb_add("index", name, "us/batch", (double)worst / 1e3);
		snprintf(name, sizeof(name), "%s batch_exists_prefix lookups",
			 label);
		kvpb_add("index", name, "M/s",
			 (double)(nbt * KVPB_BATCH) * 1e3 / (double)sum);
	}
}

static void
kvpb_bench_index(const struct kvpb_cfg *cfg, uint64_t entries)
{
	static const unsigned pct[2] = { 50, 90 };
	struct kvpb_ix ix;
	struct kvpb_pool p;
	uint64_t bad = 0, dram, units, t0;
	unsigned l, r;
	char label0[32];

	memset(&ix, 0, sizeof(ix));
	/* the agent's sizing (agent/segment.c): slots = pow2 >= 1.25 x
	 * entries */
	ix.nslots = kvpb_pow2_at_least(entries + entries / 4);
	ix.cap = ix.nslots * 9 / 10;
	units = ix.cap + ix.cap / 16 + 64; /* one 4 KiB unit per 1-byte value */
	dram = units * 4096;
	snprintf(label0, sizeof(label0), "ix%llu",
		 (unsigned long long)ix.nslots);
	printf("# index: %llu slots (%llu MiB of entries + meta), --index-entries "
	       "%llu, --dram %llu MiB in 4 KiB units, 80-byte keys, 1-byte values\n",
	       (unsigned long long)ix.nslots,
	       (unsigned long long)(ix.nslots *
					    (sizeof(struct kvp_entry) + 8) >>
				    20),
	       (unsigned long long)entries, (unsigned long long)(dram >> 20));
	if (kvpb_pool_start(&p, label0, dram, "4K", entries)) {
		kvpb_failed++;
		return;
	}
	if (p.c->seg.g.g_index_slots != ix.nslots) {
		/* the agent sized it differently: follow it */
		ix.nslots = p.c->seg.g.g_index_slots;
		if (ix.cap > ix.nslots * 9 / 10)
			ix.cap = ix.nslots * 9 / 10;
	}
	ix.nabsent = 1u << 16;
	ix.present = malloc(ix.cap * KVPB_KLEN);
	ix.absent = malloc(ix.nabsent * KVPB_KLEN);
	ix.ops = calloc(ix.cap, sizeof(*ix.ops));
	if (!ix.present || !ix.absent || !ix.ops) {
		kvpb_failed++;
		goto out;
	}
	for (r = 0; r < ix.nabsent; r++)
		kvpb_key(ix.absent + (uint64_t)r * KVPB_KLEN, KVPB_TAG_ABSENT,
			 r);
	for (l = 0; l < 2; l++) {
		uint64_t target = ix.nslots * pct[l] / 100, ready;
		char label[48], name[80];

		t0 = kvpb_now();
		if (kvpb_ix_fill(p.c, &ix, target)) {
			kvpb_failed++;
			goto out;
		}
		ready = kvpt_count_state(&p.c->seg, KVP_IX_READY);
		snprintf(label, sizeof(label), "ix%llu@%u%%",
			 (unsigned long long)ix.nslots, pct[l]);
		snprintf(name, sizeof(name), "index.%s.load_reached", label);
		kvpb_info(
			name,
			"%.4f (%llu READY of %llu slots; %llu inserts "
			"refused with -ENOSPC, %llu keys evicted to make room in "
			"full bucket pairs so far; fill %.2f s)",
			(double)ready / (double)ix.nslots,
			(unsigned long long)ready,
			(unsigned long long)ix.nslots,
			(unsigned long long)ix.nospc,
			(unsigned long long)ix.evicted,
			(double)(kvpb_now() - t0) / 1e9);
		if (ix.npresent < KVPB_BATCH)
			continue;
		for (r = 0; r <= cfg->rounds; r++)
			kvpb_ix_measure(cfg, p.c, &ix, label, r, &bad);
	}
	if (bad)
		kvpb_info("index.unexpected_answers",
			  "%llu (a present key reported "
			  "absent or the reverse)",
			  (unsigned long long)bad);
out:
	free(ix.present);
	free(ix.absent);
	free(ix.ops);
	kvpb_pool_stop(&p);
}

/* ---- report ---- */

static void
kvpb_print_table(void)
{
	const char *sec = "";
	unsigned k;

	printf("\n%-6s %-52s %-9s %10s %10s %10s\n", "", "measurement", "unit",
	       "median", "min", "max");
	for (k = 0; k < kvpb_nm; k++) {
		struct kvpb_metric *m = &kvpb_m[k];

		kvpb_summarise(m);
		if (!m->n)
			continue;
		if (strcmp(sec, m->section)) {
			sec = m->section;
			printf("%s\n", sec);
		}
		printf("%-6s %-52s %-9s %10.3f %10.3f %10.3f\n", "", m->name,
		       m->unit, m->med, m->min, m->max);
	}
}

struct kvpb_goal {
	char text[96];
	char section[16];
	char name[80];
	double target;
	bool at_least; /* true: median >= target; false: median < target */
	bool have;
	bool met;
	double med;
};

static unsigned
kvpb_goals(const struct kvpb_cfg *cfg, struct kvpb_goal *g, unsigned cap)
{
	static const char *const sz[2] = { "64KiB", "1MiB" };
	unsigned n = 0, s, k, l;

	for (s = 0; s < 2 && n < cap; s++, n++) {
		snprintf(g[n].text, sizeof(g[n].text),
			 "kvp_get %s >= 0.9x memcpy (cold)", sz[s]);
		snprintf(g[n].section, sizeof(g[n].section), "get");
		snprintf(g[n].name, sizeof(g[n].name),
			 "%s cold ratio get/memcpy", sz[s]);
		g[n].target = 0.9;
		g[n].at_least = true;
	}
	for (k = 0; k < cfg->nix; k++) {
		uint64_t e = cfg->ix_entries[k];
		unsigned long long ns = kvpb_pow2_at_least(e + e / 4);

		for (l = 50; l <= 90 && n + 2 <= cap; l += 40) {
			snprintf(
				g[n].text, sizeof(g[n].text),
				">= 20 M lookups/s/core, %llu slots, %u%% load",
				ns, l);
			snprintf(g[n].section, sizeof(g[n].section), "index");
			snprintf(g[n].name, sizeof(g[n].name),
				 "ix%llu@%u%% kvp_exists hit", ns, l);
			g[n].target = 20;
			g[n].at_least = true;
			n++;
			snprintf(
				g[n].text, sizeof(g[n].text),
				"prefix-exists of 2000 keys < 100 us, %llu slots, %u%% load",
				ns, l);
			snprintf(g[n].section, sizeof(g[n].section), "index");
			snprintf(g[n].name, sizeof(g[n].name),
				 "ix%llu@%u%% batch_exists_prefix(2000) mean",
				 ns, l);
			g[n].target = 100;
			g[n].at_least = false;
			n++;
		}
	}
	for (k = 0; k < n; k++) {
		const struct kvpb_metric *m =
			kvpb_find(g[k].section, g[k].name);

		g[k].have = m != NULL;
		g[k].med = m ? m->med : 0;
		g[k].met = m && (g[k].at_least ? m->med >= g[k].target :
						 m->med < g[k].target);
	}
	return n;
}

static void
kvpb_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", (unsigned)(unsigned char)*s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static int
kvpb_write_json(const char *path, const struct kvpb_cfg *cfg,
		const struct kvpb_machine *mc, const char *cmd,
		const struct kvpb_goal *g, unsigned ng)
{
	FILE *f = fopen(path, "w");
	unsigned k, j;

	if (!f)
		return -errno;
	fprintf(f, "{\n  \"machine\": {\"nproc\": %ld, \"cpu\": ", mc->nproc);
	kvpb_json_str(f, mc->cpu);
	fprintf(f, ", \"kernel\": ");
	kvpb_json_str(f, mc->kernel);
	fprintf(f, ", \"l2\": ");
	kvpb_json_str(f, mc->l2);
	fprintf(f, ", \"l3\": ");
	kvpb_json_str(f, mc->l3);
	fprintf(f, ", \"mem_bytes\": %llu},\n  \"command\": ",
		(unsigned long long)mc->mem);
	kvpb_json_str(f, cmd);
	fprintf(f,
		",\n  \"mode\": \"%s\", \"rounds\": %u, \"get_ws_bytes\": %llu, "
		"\"put_ws_bytes\": %llu, \"index_ops\": %llu,\n  \"metrics\": [\n",
		cfg->quick ? "quick" : "default", cfg->rounds,
		(unsigned long long)cfg->get_ws,
		(unsigned long long)cfg->put_ws,
		(unsigned long long)cfg->ix_ops);
	for (k = 0, j = 0; k < kvpb_nm; k++) {
		const struct kvpb_metric *m = &kvpb_m[k];
		unsigned s;

		if (!m->n)
			continue;
		fprintf(f, "%s    {\"section\": \"%s\", \"name\": ",
			j++ ? ",\n" : "", m->section);
		kvpb_json_str(f, m->name);
		fprintf(f,
			", \"unit\": \"%s\", \"median\": %.6g, \"min\": %.6g, "
			"\"max\": %.6g, \"samples\": [",
			m->unit, m->med, m->min, m->max);
		for (s = 0; s < m->n; s++)
			fprintf(f, "%s%.6g", s ? ", " : "", m->v[s]);
		fprintf(f, "]}");
	}
	fprintf(f, "\n  ],\n  \"info\": {");
	for (k = 0; k < kvpb_ni; k++) {
		fprintf(f, "%s\n    ", k ? "," : "");
		kvpb_json_str(f, kvpb_i[k].name);
		fprintf(f, ": ");
		kvpb_json_str(f, kvpb_i[k].value);
	}
	fprintf(f, "\n  },\n  \"goals\": [");
	for (k = 0; k < ng; k++) {
		fprintf(f, "%s\n    {\"goal\": ", k ? "," : "");
		kvpb_json_str(f, g[k].text);
		fprintf(f, ", \"metric\": ");
		kvpb_json_str(f, g[k].name);
		if (g[k].have)
			fprintf(f, ", \"median\": %.6g, \"met\": %s}", g[k].med,
				g[k].met ? "true" : "false");
		else
			fprintf(f, ", \"median\": null, \"met\": null}");
	}
	fprintf(f, "\n  ]\n}\n");
	return fclose(f) ? -errno : 0;
}

static void
kvpb_usage(FILE *f)
{
	fprintf(f,
		"usage: bench_core [--quick] [--rounds N] [--json FILE]\n"
		"  --quick      fewer rounds, smaller working sets (< 20 s)\n"
		"  --rounds N   recorded rounds per figure (default 9, quick 5; >= 5\n"
		"               for a meaningful median)\n"
		"  --json FILE  also write every figure as JSON\n"
		"Runs its own kvpoold (from this binary's directory) on private pools.\n");
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "json", required_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvpb_cfg cfg;
	struct kvpb_machine mc;
	struct kvpb_goal goals[16];
	struct kvpb_pool pool;
	char cmd[1024];
	size_t off = 0;
	unsigned k, ng, rounds = 0;
	uint64_t t0 = kvpb_now();
	int opt;

	memset(&cfg, 0, sizeof(cfg));
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'q':
			cfg.quick = true;
			break;
		case 'j':
			cfg.json = optarg;
			break;
		case 'r':
			rounds = (unsigned)strtoul(optarg, NULL, 10);
			if (rounds < 1 || rounds > KVPB_MAX_ROUNDS) {
				fprintf(stderr, "bench_core: --rounds 1..%u\n",
					KVPB_MAX_ROUNDS);
				return 2;
			}
			break;
		case 'h':
			kvpb_usage(stdout);
			return 0;
		default:
			kvpb_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		kvpb_usage(stderr);
		return 2;
	}
	if (cfg.quick) {
		cfg.rounds = 5;
		cfg.get_ws = 64ull << 20; /* still 2x this machine's L3 */
		cfg.put_ws = 64ull << 20;
		cfg.ix_ops = 300000;
		cfg.nix = 1;
		cfg.ix_entries[0] = 50000; /* 65,536 slots */
	} else {
		cfg.rounds = 9;
		cfg.get_ws = 256ull << 20;
		cfg.put_ws = 128ull << 20;
		cfg.ix_ops = 1000000;
		cfg.nix = 2;
		cfg.ix_entries[0] = 50000; /* 65,536 slots: ~21 MiB, fits L3 */
		/* 262,144 slots: ~82 MiB, does not */
		cfg.ix_entries[1] = 200000;
	}
	if (rounds)
		cfg.rounds = rounds;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (k = 0; k < (unsigned)argc && off < sizeof(cmd) - 1; k++)
		off += (size_t)snprintf(cmd + off, sizeof(cmd) - off, "%s%s",
					k ? " " : "", argv[k]);

	kvpb_machine(&mc);
	printf("bench_core: kvpool core benchmark (%s mode, %u rounds + 1 warm-up)\n",
	       cfg.quick ? "quick" : "default", cfg.rounds);
	printf("machine: nproc %ld, CPU \"%s\", L2 %s/core, L3 %s, RAM %llu MiB, %s\n",
	       mc.nproc, mc.cpu, mc.l2, mc.l3,
	       (unsigned long long)(mc.mem >> 20), mc.kernel);
	printf("command: %s\n", cmd);

	/* values pool: both get sets, one put round, headroom */
	if (kvpb_pool_start(&pool, "values",
			    2 * cfg.get_ws + cfg.put_ws + (64ull << 20), "16K",
			    65536) == 0) {
		kvpb_bench_get(&cfg, &pool);
		kvpb_bench_put(&cfg, &pool);
		kvpb_pool_stop(&pool);
	} else {
		kvpb_failed++;
	}
	for (k = 0; k < cfg.nix; k++)
		kvpb_bench_index(&cfg, cfg.ix_entries[k]);

	kvpb_print_table();
	ng = kvpb_goals(&cfg, goals, sizeof(goals) / sizeof(goals[0]));
	printf("\ngoals (informational: a benchmark asserts nothing)\n");
	for (k = 0; k < ng; k++) {
		if (goals[k].have)
			printf("  %-66s median %8.3f  %s\n", goals[k].text,
			       goals[k].med, goals[k].met ? "met" : "MISSED");
		else
			printf("  %-66s not measured\n", goals[k].text);
	}
	if (cfg.json) {
		int rc = kvpb_write_json(cfg.json, &cfg, &mc, cmd, goals, ng);

		if (rc)
			fprintf(stderr, "bench_core: cannot write %s: %s\n",
				cfg.json, strerror(-rc));
		else
			printf("json: %s\n", cfg.json);
	}
	printf("elapsed: %.1f s\n", (double)(kvpb_now() - t0) / 1e9);
	if (kvpb_failed)
		printf("bench_core: %d section(s) could not run (see above)\n",
		       kvpb_failed);
	printf("bench_core: done\n");
	return kvpb_failed ? 1 : 0;
}
