/* SPDX-License-Identifier: MIT */
/*
 * trace_replay - how good a cache the pool is: replay an engine's request
 * trace through a running pool and, in the same run, through exact LRU,
 * the offline optimum (Belady's MIN) and an infinite cache of the same
 * size (stress/trace.h), and print their prefix hit ratios side by side.
 *
 * The trace is generated (multi-turn sessions over a shared system
 * prompt, Zipf-popular sessions, single-use documents, Poisson arrivals;
 * --write-trace FILE saves it as JSONL) or read (--trace FILE: JSONL,
 * {"timestamp": ms, "hash_ids": [...]} a line, Mooncake's format).
 *
 * With --pool, each request is served as an engine serves it, through
 * the public API on a pool a kvpoold already runs (stress/trace_bench
 * starts one per configuration): kvp_batch_exists_prefix over its block
 * keys (the prefix hit), kvp_batch_get of that prefix (every byte checked:
 * a value's content is derived from its block id), then a put of the
 * rest as one chain whose first page sits at depth = the prefix hit
 * (kvp_batch_put_chain).  With --blocks (a trace whose blocks are reused
 * after any prefix, RAG's documents: the ratio is then the block hit
 * ratio, as trace_matrix reports it) every block is read (kvp_batch_get:
 * a hit is any block found) and the missing ones are put as one chain at
 * depth = the leading hits.
 * Requests are replayed one after another as fast as the pool takes them
 * (timestamps give the order only), or with --speed X at their arrival
 * times X times faster (a request that comes due while an earlier one is
 * still served waits for it: one engine worker).  Counted: prefix hit blocks / blocks
 * (the headline), gets that found nothing after the probe said present,
 * wrong bytes, every put status.
 *
 * A benchmark: it asserts nothing about hit ratios.  Exit status 0, 1 on
 * a usage or set-up error, 3 if a byte read back was wrong.
 *
 *   trace_replay [--pool NAME] [--ns NS] [--page-size SIZE]
 *                [--trace FILE | generator options] [--write-trace FILE]
 *                [--capacity N | --capacity-pct P] [--sweep P,P,...]
 *                [--label L] [--json FILE] [--dram-blocks N]
 *                [--ssd-blocks N] [--print-distinct] [--limit N]
 *                [--speed X] [--blocks]
 *   generator:   [--kind NAME] [--scan F] [--seed N] [--requests N]
 *                [--sessions N] [--zipf S]
 *                [--turns N] [--system-blocks N] [--first-blocks N]
 *                [--growth N] [--doc-share F] [--doc-blocks N] [--rate R]
 *   --kind sessions|chat|agent|rag: the generator's preset for that kind
 *   (trace_gen_preset; give it first: it resets the generator options
 *   but --seed and --requests); --scan F: a share F of one-pass scan
 *   requests (trace_matrix's "+scan" rows use 0.1).
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvpool.h"
#include "stress/trace.h"

#define KEY_LEN 64u /* like a hex hash of the prefix */

struct opts {
	const char *pool, *ns, *trace, *write_trace, *json, *label, *sweep;
	uint64_t page, capacity, dram_blocks, ssd_blocks, limit;
	double capacity_pct, speed;
	bool print_distinct, blocks;
	struct trace_gen_cfg gen;
};

struct pool_stats {
	uint64_t hits;        /* kvp_batch_exists_prefix, summed */
	uint64_t served;      /* leading run of gets read back intact */
	uint64_t failed_gets; /* -ENOENT after the probe said present */
	uint64_t get_errors;  /* any other failed get */
	uint64_t wrong_bytes, bytes_verified;
	uint64_t put_ok, put_eexist, put_ebusy, put_enospc, put_other;
	double seconds, get_seconds, put_seconds; /* all, in gets, in puts */
	double max_lag;                           /* --speed: behind, s */
};

/* A put's outcome into the replay's counts. */
static void
count_put(struct pool_stats *st, int status)
{
	switch (status) {
	case 0:
		st->put_ok++;
		break;
	case -EEXIST:
		st->put_eexist++;
		break;
	case -EBUSY:
		st->put_ebusy++;
		break;
	case -ENOSPC:
		st->put_enospc++;
		break;
	default:
		st->put_other++;
	}
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t
mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* "blk-<id>-" then hex digits of the id's hash, KEY_LEN bytes in all. */
static uint32_t
block_key(char *k, uint64_t id)
{
	static const char hex[] = "0123456789abcdef";
	int n = snprintf(k, KEY_LEN + 1, "blk-%llu-", (unsigned long long)id);
	uint64_t h = mix(id);
	unsigned i;

	for (i = (unsigned)n; i < KEY_LEN; i++) {
		if (!(i % 16))
			h = mix(h);
		k[i] = hex[(h >> (4 * (i % 16))) & 15];
	}
	return KEY_LEN;
}

/* A block's value: the id, its complement, then words derived from it
 * (buf holds page bytes rounded up to 8). */
static void
block_fill(unsigned char *buf, uint64_t page, uint64_t id)
{
	uint64_t w, k, words = (page + 7) / 8;

	for (k = 0; k < words; k++) {
		if (k == 0)
			w = id;
		else if (k == 1)
			w = ~id;
		else
			w = (id + 1) * 0x9e3779b97f4a7c15ull ^
			    k * 0xd6e8feb86659fd93ull;
		memcpy(buf + 8 * k, &w, 8);
	}
}

/* Wrong bytes in got[0..len) against block id's value of page bytes
 * (bytes missing from a short read count as wrong). */
static uint64_t
block_check(const unsigned char *got, uint64_t len, uint64_t page, uint64_t id,
	    unsigned char *scratch)
{
	uint64_t i, bad = len < page ? page - len : len - page;
	uint64_t n = len < page ? len : page;

	block_fill(scratch, page, id);
	if (!memcmp(got, scratch, n))
		return bad;
	for (i = 0; i < n; i++)
		bad += got[i] != scratch[i];
	return bad;
}

/* A request of n blocks served block by block (--blocks): every block
 * read (a hit: found, its bytes checked), the missing ones put as one
 * chain at depth = the leading hits.  ops[k].buf holds a page each. */
static int
replay_blocks(const struct opts *o, struct kvp_client *c, struct kvp_op *ops,
	      uint32_t n, const uint64_t *ids, unsigned char *scratch,
	      struct pool_stats *st)
{
	uint32_t k, lead = 0, m = 0;
	bool leading = true;
	double t1;

	for (k = 0; k < n; k++) {
		ops[k].off = 0;
		ops[k].len = o->page;
	}
	t1 = now_s();
	kvp_batch_get(c, ops, n);
	st->get_seconds += now_s() - t1;
	for (k = 0; k < n; k++) {
		uint64_t bad;

		if (ops[k].status) {
			if (ops[k].status != -ENOENT)
				st->get_errors++;
			leading = false;
			continue;
		}
		st->hits++;
		lead += leading;
		bad = block_check(ops[k].buf, ops[k].len, o->page, ids[k],
				  scratch);
		st->wrong_bytes += bad;
		st->bytes_verified += ops[k].len;
		st->served += !bad;
	}
	/* the misses, packed to the front (hits are done with) */
	for (k = 0; k < n; k++) {
		if (!ops[k].status)
			continue;
		if (m != k) {
			unsigned char *b = (unsigned char *)ops[m].buf;

			ops[m].buf = ops[k].buf;
			ops[k].buf = b;
			ops[m].key = ops[k].key;
			ops[m].klen = ops[k].klen;
		}
		block_fill(ops[m].buf, o->page, ids[k]);
		ops[m].off = 0;
		ops[m].len = o->page;
		m++;
	}
	if (!m)
		return 0;
	t1 = now_s();
	kvp_batch_put_chain(c, ops, m, lead);
	st->put_seconds += now_s() - t1;
	for (k = 0; k < m; k++)
		count_put(st, ops[k].status);
	return 0;
}

static int
replay_pool(const struct opts *o, const struct trace *t, struct pool_stats *st)
{
	uint32_t maxn = 0, k;
	uint64_t rounded = (o->page + 7) & ~7ull;
	unsigned char *bufs = NULL, *scratch = NULL;
	struct kvp_op *ops = NULL;
	struct kvp_client *c;
	char *keys = NULL, ns[300];
	double t0, t1;
	size_t i;
	int rc;

	memset(st, 0, sizeof(*st));
	for (i = 0; i < t->t_nreqs; i++)
		if (t->t_reqs[i].tr_n > maxn)
			maxn = t->t_reqs[i].tr_n;
	if (o->ns)
		snprintf(ns, sizeof(ns), "%s", o->ns);
	else
		snprintf(ns, sizeof(ns), "trace|page%llu",
			 (unsigned long long)o->page);
	rc = kvp_open(o->pool, ns, &c);
	if (rc) {
		fprintf(stderr, "trace_replay: kvp_open(%s): %s\n", o->pool,
			kvp_strerror(rc));
		return rc;
	}
	rc = -ENOMEM;
	ops = calloc(maxn, sizeof(*ops));
	keys = malloc((size_t)maxn * (KEY_LEN + 1));
	bufs = malloc((size_t)maxn * rounded);
	scratch = malloc(rounded);
	if (!ops || !keys || !bufs || !scratch) {
		fprintf(stderr,
			"trace_replay: out of memory (%u blocks of "
			"%llu bytes)\n",
			maxn, (unsigned long long)o->page);
		goto out;
	}
	t0 = now_s();
	for (i = 0; i < t->t_nreqs; i++) {
		const struct trace_req *r = &t->t_reqs[i];
		const uint64_t *ids = t->t_ids + r->tr_off;
		bool lead = true;
		ssize_t h;

		if (o->speed > 0) {
			/* the request's arrival, --speed times faster */
			double due = t0 + (double)(r->tr_ts_ms -
						   t->t_reqs[0].tr_ts_ms) /
						  1e3 / o->speed;
			double late = now_s() - due;

			if (late < 0) {
				struct timespec ts = {
					(time_t)-late,
					(long)((-late - (double)(time_t)-late) *
					       1e9),
				};

				nanosleep(&ts, NULL);
			} else if (late > st->max_lag) {
				st->max_lag = late;
			}
		}

		for (k = 0; k < r->tr_n; k++) {
			char *key = keys + (size_t)k * (KEY_LEN + 1);

			memset(&ops[k], 0, sizeof(ops[k]));
			ops[k].klen = block_key(key, ids[k]);
			ops[k].key = key;
			ops[k].buf = bufs + (size_t)k * rounded;
		}
		if (o->blocks) {
			rc = replay_blocks(o, c, ops, r->tr_n, ids, scratch,
					   st);
			if (rc)
				goto out;
			continue;
		}
		h = kvp_batch_exists_prefix(c, ops, r->tr_n);
		if (h < 0) {
			rc = (int)h;
			fprintf(stderr, "trace_replay: exists_prefix: %s\n",
				kvp_strerror(rc));
			goto out;
		}
		st->hits += (uint64_t)h;
		if (h > 0) {
			for (k = 0; k < (uint32_t)h; k++) {
				ops[k].off = 0;
				ops[k].len = o->page;
			}
			t1 = now_s();
			kvp_batch_get(c, ops, (size_t)h);
			st->get_seconds += now_s() - t1;
			for (k = 0; k < (uint32_t)h; k++) {
				uint64_t bad = 0;

				if (ops[k].status == -ENOENT)
					st->failed_gets++;
				else if (ops[k].status)
					st->get_errors++;
				if (ops[k].status) {
					lead = false;
					continue;
				}
				bad = block_check(ops[k].buf, ops[k].len,
						  o->page, ids[k], scratch);
				st->wrong_bytes += bad;
				st->bytes_verified += ops[k].len;
				if (bad)
					lead = false;
				st->served += lead;
			}
		}
		if ((uint32_t)h == r->tr_n)
			continue;
		for (k = (uint32_t)h; k < r->tr_n; k++) {
			block_fill(ops[k].buf, o->page, ids[k]);
			ops[k].off = 0;
			ops[k].len = o->page;
		}
		t1 = now_s();
		/* the rest of the chain: its first page at depth h */
		kvp_batch_put_chain(c, ops + h, r->tr_n - (size_t)h,
				    (uint32_t)h);
		st->put_seconds += now_s() - t1;
		for (k = (uint32_t)h; k < r->tr_n; k++)
			count_put(st, ops[k].status);
	}
	st->seconds = now_s() - t0;
	rc = 0;
out:
	kvp_close(c);
	free(ops);
	free(keys);
	free(bufs);
	free(scratch);
	return rc;
}

static double
ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

/* The smallest LRU cache whose prefix hits reach hits (LRU is a stack
 * algorithm: its hits grow with its size), or t_distinct + 1 if none. */
static uint64_t
lru_equivalent(struct trace *t, uint64_t hits)
{
	uint64_t lo = 0, hi = t->t_distinct + 1;
	struct sim_result r;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (sim_lru(t, mid, &r) || r.prefix_hits >= hits)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static int
parse_u64(const char *s, uint64_t *v)
{
	char *e;
	unsigned long long x;

	errno = 0;
	x = strtoull(s, &e, 10);
	if (errno || e == s || *s == '-')
		return -1;
	switch (*e) {
	case 'K':
	case 'k':
		x <<= 10, e++;
		break;
	case 'M':
	case 'm':
		x <<= 20, e++;
		break;
	}
	*v = x;
	return *e ? -1 : 0;
}

static int
parse_u32(const char *s, uint32_t *v)
{
	uint64_t x;

	if (parse_u64(s, &x) || x > UINT32_MAX)
		return -1;
	*v = (uint32_t)x;
	return 0;
}

static int
parse_double(const char *s, double *v)
{
	char *e;

	*v = strtod(s, &e);
	return e == s || *e ? -1 : 0;
}

static void
usage(FILE *f)
{
	fprintf(f,
		"usage: trace_replay [--pool NAME] [--ns NS] [--page-size SIZE]\n"
		"         [--trace FILE | generator options] [--write-trace FILE]\n"
		"         [--capacity N | --capacity-pct P] [--sweep P,P,...]\n"
		"         [--label L] [--json FILE] [--dram-blocks N] [--ssd-blocks N]\n"
		"         [--print-distinct] [--limit N] [--speed X] [--blocks]\n"
		"generator: [--kind sessions|chat|agent|rag] [--scan F]\n"
		"         [--seed N] [--requests N] [--sessions N] [--zipf S]\n"
		"         [--turns N] [--system-blocks N] [--first-blocks N]\n"
		"         [--growth N] [--doc-share F] [--doc-blocks N] [--rate R]\n"
		"--capacity: blocks of the simulated caches (default: --dram-blocks\n"
		"plus --ssd-blocks); without --pool only the simulators run.\n");
}

static int
parse_opts(int argc, char **argv, struct opts *o)
{
	enum {
		O_POOL = 256,
		O_NS,
		O_PAGE,
		O_TRACE,
		O_WRITE,
		O_CAP,
		O_CAP_PCT,
		O_SWEEP,
		O_LABEL,
		O_JSON,
		O_DRAM,
		O_SSD,
		O_DISTINCT,
		O_LIMIT,
		O_SPEED,
		O_SEED,
		O_REQS,
		O_SESS,
		O_ZIPF,
		O_TURNS,
		O_SYS,
		O_FIRST,
		O_GROWTH,
		O_DOC_SHARE,
		O_DOC_BLOCKS,
		O_RATE,
		O_KIND,
		O_SCAN,
		O_BLOCKS,
	};
	static const struct option lo[] = {
		{ "pool", required_argument, NULL, O_POOL },
		{ "ns", required_argument, NULL, O_NS },
		{ "page-size", required_argument, NULL, O_PAGE },
		{ "trace", required_argument, NULL, O_TRACE },
		{ "write-trace", required_argument, NULL, O_WRITE },
		{ "capacity", required_argument, NULL, O_CAP },
		{ "capacity-pct", required_argument, NULL, O_CAP_PCT },
		{ "sweep", required_argument, NULL, O_SWEEP },
		{ "label", required_argument, NULL, O_LABEL },
		{ "json", required_argument, NULL, O_JSON },
		{ "dram-blocks", required_argument, NULL, O_DRAM },
		{ "ssd-blocks", required_argument, NULL, O_SSD },
		{ "print-distinct", no_argument, NULL, O_DISTINCT },
		{ "limit", required_argument, NULL, O_LIMIT },
		{ "speed", required_argument, NULL, O_SPEED },
		{ "seed", required_argument, NULL, O_SEED },
		{ "requests", required_argument, NULL, O_REQS },
		{ "sessions", required_argument, NULL, O_SESS },
		{ "zipf", required_argument, NULL, O_ZIPF },
		{ "turns", required_argument, NULL, O_TURNS },
		{ "system-blocks", required_argument, NULL, O_SYS },
		{ "first-blocks", required_argument, NULL, O_FIRST },
		{ "growth", required_argument, NULL, O_GROWTH },
		{ "doc-share", required_argument, NULL, O_DOC_SHARE },
		{ "doc-blocks", required_argument, NULL, O_DOC_BLOCKS },
		{ "rate", required_argument, NULL, O_RATE },
		{ "kind", required_argument, NULL, O_KIND },
		{ "scan", required_argument, NULL, O_SCAN },
		{ "blocks", no_argument, NULL, O_BLOCKS },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct trace_gen_cfg *g = &o->gen;
	int opt, bad;

	memset(o, 0, sizeof(*o));
	o->page = 4096;
	o->capacity_pct = -1;
	trace_gen_defaults(g);
	while ((opt = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		bad = 0;
		switch (opt) {
		case O_POOL:
			o->pool = optarg;
			break;
		case O_NS:
			o->ns = optarg;
			break;
		case O_PAGE:
			bad = parse_u64(optarg, &o->page) || !o->page;
			break;
		case O_TRACE:
			o->trace = optarg;
			break;
		case O_WRITE:
			o->write_trace = optarg;
			break;
		case O_CAP:
			bad = parse_u64(optarg, &o->capacity);
			break;
		case O_CAP_PCT:
			bad = parse_double(optarg, &o->capacity_pct) ||
			      o->capacity_pct < 0;
			break;
		case O_SWEEP:
			o->sweep = optarg;
			break;
		case O_LABEL:
			o->label = optarg;
			break;
		case O_JSON:
			o->json = optarg;
			break;
		case O_DRAM:
			bad = parse_u64(optarg, &o->dram_blocks);
			break;
		case O_SSD:
			bad = parse_u64(optarg, &o->ssd_blocks);
			break;
		case O_DISTINCT:
			o->print_distinct = true;
			break;
		case O_LIMIT:
			bad = parse_u64(optarg, &o->limit) || !o->limit;
			break;
		case O_SPEED:
			bad = parse_double(optarg, &o->speed) || o->speed < 0;
			break;
		case O_SEED:
			bad = parse_u64(optarg, &g->seed);
			break;
		case O_REQS:
			bad = parse_u32(optarg, &g->requests);
			break;
		case O_SESS:
			bad = parse_u32(optarg, &g->sessions) || !g->sessions;
			break;
		case O_ZIPF:
			bad = parse_double(optarg, &g->zipf) || g->zipf < 0;
			break;
		case O_TURNS:
			bad = parse_u32(optarg, &g->turns) || !g->turns;
			break;
		case O_SYS:
			bad = parse_u32(optarg, &g->system_blocks);
			break;
		case O_FIRST:
			bad = parse_u32(optarg, &g->first_blocks);
			break;
		case O_GROWTH:
			bad = parse_u32(optarg, &g->growth);
			break;
		case O_DOC_SHARE:
			bad = parse_double(optarg, &g->doc_share) ||
			      g->doc_share < 0 || g->doc_share > 1;
			break;
		case O_DOC_BLOCKS:
			bad = parse_u32(optarg, &g->doc_blocks);
			break;
		case O_RATE:
			bad = parse_double(optarg, &g->rate) || g->rate < 0;
			break;
		case O_KIND: {
			enum trace_gen_kind kind;
			uint64_t seed = g->seed;
			uint32_t requests = g->requests;

			bad = trace_gen_kind_parse(optarg, &kind) != 0;
			if (!bad) {
				trace_gen_preset(g, kind);
				g->seed = seed;
				g->requests = requests;
			}
			break;
		}
		case O_SCAN:
			bad = parse_double(optarg, &g->scan_share) ||
			      g->scan_share < 0 || g->scan_share > 1;
			break;
		case O_BLOCKS:
			o->blocks = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
		if (bad) {
			fprintf(stderr, "trace_replay: bad value for %s: %s\n",
				argv[optind - 1], optarg);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "trace_replay: unexpected argument %s\n",
			argv[optind]);
		return -1;
	}
	return 0;
}

/* The trace as the JSON lines name it. */
static void
trace_desc(const struct opts *o, char *buf, size_t cap)
{
	const struct trace_gen_cfg *g = &o->gen;

	if (o->trace) {
		snprintf(buf, cap, "file:%s", o->trace);
		if (o->limit)
			snprintf(buf + strlen(buf), cap - strlen(buf),
				 ",first %llu requests",
				 (unsigned long long)o->limit);
		return;
	}
	snprintf(buf, cap,
		 "gen:kind=%s,scan=%g,seed=%llu,requests=%u,sessions=%u,"
		 "zipf=%g,turns=%u,system=%u,first=%u,growth=%u,doc_share=%g,"
		 "doc_blocks=%u,rate=%g",
		 trace_gen_kind_name(g->kind), g->scan_share,
		 (unsigned long long)g->seed, g->requests, g->sessions, g->zipf,
		 g->turns, g->system_blocks, g->first_blocks, g->growth,
		 g->doc_share, g->doc_blocks, g->rate);
}

/* A JSON string's contents: what needs escaping becomes '?'. */
static void
json_safe(char *s)
{
	for (; *s; s++)
		if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
			*s = '?';
}

static int
sweep(const struct opts *o, struct trace *t, FILE *json, const char *desc,
      const char *label)
{
	const char *p = o->sweep;

	printf("%-10s %10s %7s %7s %7s %7s\n", "sweep", "blocks", "%dist",
	       "LRU", "Belady", "inf");
	while (*p) {
		struct sim_result lru, bel, inf;
		char *e;
		double pct = strtod(p, &e);
		uint64_t cap;
		int rc;

		if (e == p || pct < 0 || (*e && *e != ',')) {
			fprintf(stderr, "trace_replay: bad --sweep: %s\n",
				o->sweep);
			return -EINVAL;
		}
		p = *e ? e + 1 : e;
		cap = (uint64_t)(pct / 100 * (double)t->t_distinct + 0.5);
		if ((rc = sim_lru(t, cap, &lru)) ||
		    (rc = sim_belady(t, cap, &bel)) ||
		    (rc = sim_infinite(t, &inf)))
			return rc;
		printf("%-10s %10llu %6.1f%% %7.4f %7.4f %7.4f\n", "",
		       (unsigned long long)cap, pct, sim_prefix_ratio(&lru),
		       sim_prefix_ratio(&bel), sim_prefix_ratio(&inf));
		if (json)
			fprintf(json,
				"{\"kind\":\"sim\",\"label\":\"%s\","
				"\"trace\":\"%s\","
				"\"distinct\":%zu,\"blocks\":%zu,"
				"\"capacity_blocks\":%llu,\"capacity_pct\":%.4f,"
				"\"lru_hit\":%.6f,\"belady_hit\":%.6f,"
				"\"inf_hit\":%.6f,\"lru_block_hit\":%.6f,"
				"\"belady_block_hit\":%.6f}\n",
				label, desc, t->t_distinct, t->t_nids,
				(unsigned long long)cap,
				100.0 * (double)cap / (double)t->t_distinct,
				sim_prefix_ratio(&lru), sim_prefix_ratio(&bel),
				sim_prefix_ratio(&inf), sim_block_ratio(&lru),
				sim_block_ratio(&bel));
	}
	return 0;
}

int
main(int argc, char **argv)
{
	struct sim_result lru, bel, inf;
	struct pool_stats ps;
	struct trace t;
	struct opts o;
	FILE *json = NULL;
	char desc[512], label[128];
	double t0, t_lru, t_bel;
	uint64_t cap, equiv = 0;
	int rc, status = 1;

	if (parse_opts(argc, argv, &o))
		return 1;
	snprintf(label, sizeof(label), "%s",
		 o.label ? o.label :
		 o.pool  ? o.pool :
			   "sim");
	json_safe(label);
	setvbuf(stdout, NULL, _IOLBF, 0);
	trace_init(&t);
	trace_desc(&o, desc, sizeof(desc));
	json_safe(desc);
	if (o.trace) {
		FILE *f = strcmp(o.trace, "-") ? fopen(o.trace, "r") : stdin;
		size_t bad;

		if (!f) {
			fprintf(stderr, "trace_replay: %s: %s\n", o.trace,
				strerror(errno));
			return 1;
		}
		rc = trace_load_jsonl(&t, f, o.trace, stderr, &bad);
		if (f != stdin)
			fclose(f);
		if (rc) {
			fprintf(stderr, "trace_replay: reading %s: %s\n",
				o.trace, strerror(-rc));
			goto out;
		}
		if (bad)
			fprintf(stderr,
				"trace_replay: %s: %zu bad lines "
				"skipped\n",
				o.trace, bad);
	} else {
		rc = trace_gen(&t, &o.gen);
		if (rc) {
			fprintf(stderr, "trace_replay: generator: %s\n",
				strerror(-rc));
			goto out;
		}
	}
	if (o.limit && t.t_nreqs > o.limit) {
		t.t_nreqs = o.limit;
		t.t_nids = t.t_reqs[o.limit - 1].tr_off +
			   t.t_reqs[o.limit - 1].tr_n;
	}
	if (!t.t_nreqs) {
		fprintf(stderr, "trace_replay: the trace has no requests\n");
		goto out;
	}
	if (o.write_trace) {
		FILE *f = fopen(o.write_trace, "w");

		if (!f || trace_write_jsonl(&t, f) || fclose(f)) {
			fprintf(stderr, "trace_replay: writing %s failed\n",
				o.write_trace);
			goto out;
		}
	}
	if ((rc = trace_densify(&t))) {
		fprintf(stderr, "trace_replay: %s\n", strerror(-rc));
		goto out;
	}
	if (o.print_distinct) {
		printf("%zu\n", t.t_distinct);
		status = 0;
		goto out;
	}
	if (!o.trace)
		printf("trace_replay: seed %llu\n",
		       (unsigned long long)o.gen.seed);
	printf("trace: %s\n", desc);
	printf("trace: %zu requests, %zu block references, %zu distinct "
	       "blocks, %zu chain breaks, %.1f s of arrivals\n",
	       t.t_nreqs, t.t_nids, t.t_distinct, t.t_chain_breaks,
	       (double)(t.t_reqs[t.t_nreqs - 1].tr_ts_ms -
			t.t_reqs[0].tr_ts_ms) /
		       1e3);
	if (o.json && !(json = fopen(o.json, "a"))) {
		fprintf(stderr, "trace_replay: %s: %s\n", o.json,
			strerror(errno));
		goto out;
	}
	if (o.sweep && sweep(&o, &t, json, desc, label))
		goto out;
	cap = o.capacity;
	if (o.capacity_pct >= 0)
		cap = (uint64_t)(o.capacity_pct / 100 * (double)t.t_distinct +
				 0.5);
	else if (!cap)
		cap = o.dram_blocks + o.ssd_blocks;
	if (!cap && !o.pool) {
		status = 0; /* a sweep, or the trace's statistics only */
		goto out;
	}
	t0 = now_s();
	if ((rc = sim_lru(&t, cap, &lru)))
		goto sim_failed;
	t_lru = now_s() - t0;
	t0 = now_s();
	if ((rc = sim_belady(&t, cap, &bel)))
		goto sim_failed;
	t_bel = now_s() - t0;
	if ((rc = sim_infinite(&t, &inf)))
		goto sim_failed;
	printf("simulators: LRU %.3f s, Belady %.3f s (%zu references)\n",
	       t_lru, t_bel, t.t_nids);
	memset(&ps, 0, sizeof(ps));
	if (o.pool) {
		if (replay_pool(&o, &t, &ps))
			goto out;
		printf("pool: %zu requests in %.2f s (%.0f blocks/s; "
		       "%.2f s in gets, %.2f s in puts)\n",
		       t.t_nreqs, ps.seconds,
		       ratio((double)t.t_nids, ps.seconds), ps.get_seconds,
		       ps.put_seconds);
		if (o.speed > 0)
			printf("pool: arrivals at %gx their times; at most "
			       "%.3f s behind them\n",
			       o.speed, ps.max_lag);
		if (!o.blocks) {
			equiv = lru_equivalent(&t, ps.hits);
			printf("pool: as many prefix hits as an LRU cache of "
			       "%llu blocks (%.2fx its capacity)\n",
			       (unsigned long long)equiv,
			       ratio((double)equiv, (double)cap));
		}
	}
	{
		double ph = ratio((double)ps.hits, (double)t.t_nids);
		/* --blocks: block hits against block hits */
		double lh = o.blocks ? sim_block_ratio(&lru) :
				       sim_prefix_ratio(&lru);
		double bh = o.blocks ? sim_block_ratio(&bel) :
				       sim_prefix_ratio(&bel);

		char hit_s[3][16] = { "-", "-", "-" };

		if (o.pool) {
			snprintf(hit_s[0], sizeof(hit_s[0]), "%.4f", ph);
			snprintf(hit_s[1], sizeof(hit_s[1]), "%.3f",
				 ratio(ph, lh));
			snprintf(hit_s[2], sizeof(hit_s[2]), "%.3f",
				 ratio(ph, bh));
		}
		printf("%-14s %16s %7s %7s %7s %7s %8s %8s %7s %7s  %s\n",
		       "config", "capacity", "pool", "LRU", "Belady", "inf",
		       "pool/LRU", "pool/Bel", "failget", "wrongB",
		       "puts ok/EEXIST/EBUSY/ENOSPC/other");
		printf("%-14s %9llu %5.1f%% %7s %7.4f %7.4f %7.4f %8s %8s "
		       "%7llu %7llu  %llu/%llu/%llu/%llu/%llu\n",
		       label, (unsigned long long)cap,
		       100.0 * (double)cap / (double)t.t_distinct, hit_s[0], lh,
		       bh,
		       o.blocks ? sim_block_ratio(&inf) :
				  sim_prefix_ratio(&inf),
		       hit_s[1], hit_s[2], (unsigned long long)ps.failed_gets,
		       (unsigned long long)ps.wrong_bytes,
		       (unsigned long long)ps.put_ok,
		       (unsigned long long)ps.put_eexist,
		       (unsigned long long)ps.put_ebusy,
		       (unsigned long long)ps.put_enospc,
		       (unsigned long long)ps.put_other);
		if (json) {
			fprintf(json,
				"{\"kind\":\"%s\",\"label\":\"%s\","
				"\"trace\":\"%s\",\"requests\":%zu,"
				"\"blocks\":%zu,\"distinct\":%zu,"
				"\"chain_breaks\":%zu,\"page_size\":%llu,"
				"\"capacity_blocks\":%llu,"
				"\"capacity_pct\":%.4f,\"dram_blocks\":%llu,"
				"\"ssd_blocks\":%llu,",
				o.pool ? "pool" : "simcap", label, desc,
				t.t_nreqs, t.t_nids, t.t_distinct,
				t.t_chain_breaks, (unsigned long long)o.page,
				(unsigned long long)cap,
				100.0 * (double)cap / (double)t.t_distinct,
				(unsigned long long)o.dram_blocks,
				(unsigned long long)o.ssd_blocks);
			fprintf(json,
				"\"pool_hit\":%.6f,\"served_hit\":%.6f,"
				"\"lru_hit\":%.6f,\"belady_hit\":%.6f,"
				"\"inf_hit\":%.6f,\"lru_block_hit\":%.6f,"
				"\"belady_block_hit\":%.6f,"
				"\"pool_over_lru\":%.6f,"
				"\"pool_over_belady\":%.6f,"
				"\"lru_equiv_blocks\":%llu,"
				"\"lru_equiv_of_capacity\":%.4f,",
				ph, ratio((double)ps.served, (double)t.t_nids),
				lh, bh,
				o.blocks ? sim_block_ratio(&inf) :
					   sim_prefix_ratio(&inf),
				sim_block_ratio(&lru), sim_block_ratio(&bel),
				ratio(ph, lh), ratio(ph, bh),
				(unsigned long long)equiv,
				ratio((double)equiv, (double)cap));
			fprintf(json,
				"\"failed_gets_after_hit\":%llu,"
				"\"get_errors\":%llu,\"wrong_bytes\":%llu,"
				"\"bytes_verified\":%llu,\"put_ok\":%llu,"
				"\"put_eexist\":%llu,\"put_ebusy\":%llu,"
				"\"put_enospc\":%llu,\"put_other\":%llu,"
				"\"speed\":%g,\"max_lag_seconds\":%.3f,"
				"\"seconds\":%.3f,\"get_seconds\":%.3f,"
				"\"put_seconds\":%.3f,\"lru_seconds\":%.4f,"
				"\"belady_seconds\":%.4f}\n",
				(unsigned long long)ps.failed_gets,
				(unsigned long long)ps.get_errors,
				(unsigned long long)ps.wrong_bytes,
				(unsigned long long)ps.bytes_verified,
				(unsigned long long)ps.put_ok,
				(unsigned long long)ps.put_eexist,
				(unsigned long long)ps.put_ebusy,
				(unsigned long long)ps.put_enospc,
				(unsigned long long)ps.put_other, o.speed,
				ps.max_lag, ps.seconds, ps.get_seconds,
				ps.put_seconds, t_lru, t_bel);
		}
	}
	status = ps.wrong_bytes ? 3 : 0;
	goto out;
sim_failed:
	fprintf(stderr, "trace_replay: simulator: %s\n", strerror(-rc));
out:
	if (json && fclose(json))
		status = status ? status : 1;
	trace_free(&t);
	return status;
}
