/* SPDX-License-Identifier: MIT */
/*
 * test_trace.c - the reference caches of stress/trace_replay
 * (stress/trace.c) against answers known by hand and against slow,
 * obviously correct references: a naive LRU (a timestamp per block, a
 * linear scan for the oldest) and the true optimum found by dynamic
 * programming over every cache content (small traces).  Also the JSONL
 * reader (odd but valid lines, bad lines, a round trip of a generated
 * trace) and the generator's shape (chained ids, the system prompt,
 * sessions that extend their previous turn).  So a simulator that is
 * wrong, or slow, fails here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stress/trace.h"

/* A trace of one-block requests. */
static void
singles(struct trace *t, const uint64_t *ids, size_t n)
{
	size_t i;

	trace_init(t);
	for (i = 0; i < n; i++)
		assert_int_equal(trace_add(t, i, &ids[i], 1), 0);
}

static uint64_t
rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* A trace of random requests of 1..maxlen ids drawn from 0..nids-1:
 * not chained, repeats inside a request allowed. */
static void
random_trace(struct trace *t, uint64_t seed, size_t nreq, unsigned nids,
	     unsigned maxlen)
{
	uint64_t ids[64];
	size_t i;
	unsigned k, n;

	trace_init(t);
	for (i = 0; i < nreq; i++) {
		n = 1 + (unsigned)(rnd(&seed) % maxlen);
		for (k = 0; k < n; k++)
			ids[k] = rnd(&seed) % nids;
		assert_int_equal(trace_add(t, i, ids, n), 0);
	}
}

/* The LRU of the textbook: a last-use time per block, the oldest found
 * by a scan.  Prefix and block hits as trace.h counts them. */
static void
naive_lru(struct trace *t, uint64_t cap, struct sim_result *r)
{
	uint64_t *stamp, now = 0, used = 0;
	size_t i;
	uint32_t k, x, d;

	assert_int_equal(trace_densify(t), 0);
	memset(r, 0, sizeof(*r));
	r->requests = t->t_nreqs;
	r->blocks = t->t_nids;
	stamp = calloc(t->t_distinct, sizeof(*stamp)); /* 0: absent */
	assert_non_null(stamp);
	for (i = 0; i < t->t_nreqs; i++) {
		bool lead = true;

		for (k = 0; k < t->t_reqs[i].tr_n; k++) {
			x = t->t_dense[t->t_reqs[i].tr_off + k];
			now++;
			if (stamp[x]) {
				r->block_hits++;
				r->prefix_hits += lead;
				stamp[x] = now;
				continue;
			}
			lead = false;
			if (!cap)
				continue;
			if (used == cap) {
				uint32_t old = 0;

				for (d = 0; d < t->t_distinct; d++)
					if (stamp[d] && (!stamp[old] ||
							 stamp[d] < stamp[old]))
						old = d;
				stamp[old] = 0;
				used--;
				r->evictions++;
			}
			stamp[x] = now;
			used++;
		}
	}
	free(stamp);
}

/*
 * The most block hits any cache of cap blocks can get on t (at most 16
 * distinct blocks): best[pos][set] over every cache content, from the
 * end backwards.  A miss may keep the block (dropping any one cached
 * block when full) or not keep it.
 */
static uint64_t
optimal_hits(struct trace *t, unsigned cap)
{
	size_t n, pos, sets;
	uint32_t set, y;
	uint16_t *best;
	uint64_t r;

	assert_int_equal(trace_densify(t), 0);
	assert_true(t->t_distinct <= 16);
	n = t->t_nids;
	sets = (size_t)1 << t->t_distinct;
	best = calloc((n + 1) * sets, sizeof(*best));
	assert_non_null(best);
	for (pos = n; pos-- > 0;) {
		uint32_t x = t->t_dense[pos];
		uint16_t *now = best + pos * sets, *later = now + sets;

		for (set = 0; set < sets; set++) {
			uint16_t b;

			if (set & (1u << x)) {
				now[set] = (uint16_t)(1 + later[set]);
				continue;
			}
			b = later[set]; /* not kept */
			if ((unsigned)__builtin_popcount(set) < cap) {
				if (later[set | 1u << x] > b)
					b = later[set | 1u << x];
			} else {
				for (y = 0; y < t->t_distinct; y++) {
					uint32_t s2;

					if (!(set & (1u << y)))
						continue;
					s2 = (set & ~(1u << y)) | 1u << x;
					if (later[s2] > b)
						b = later[s2];
				}
			}
			now[set] = b;
		}
	}
	r = best[0];
	free(best);
	return r;
}

static void
assert_result(const struct sim_result *r, uint64_t prefix, uint64_t block)
{
	assert_int_equal(r->prefix_hits, prefix);
	assert_int_equal(r->block_hits, block);
}

/* A B C A D B A, one block a request. */
static void
test_known_answers(void **state)
{
	static const uint64_t seq[] = { 'A', 'B', 'C', 'A', 'D', 'B', 'A' };
	struct sim_result r;
	struct trace t;

	(void)state;
	singles(&t, seq, 7);
	/* LRU of 3: A B C miss; A hit (A C B); D evicts B (D A C);
	 * B evicts C (B D A); A hit */
	assert_int_equal(sim_lru(&t, 3, &r), 0);
	assert_result(&r, 2, 2);
	assert_int_equal(r.evictions, 2);
	/* MIN of 3: D is never used again, so it is not kept (C is never
	 * used again either: a tie); B and A hit */
	assert_int_equal(sim_belady(&t, 3, &r), 0);
	assert_result(&r, 3, 3);
	/* LRU and MIN of 1: no block is used twice in a row */
	assert_int_equal(sim_lru(&t, 1, &r), 0);
	assert_result(&r, 0, 0);
	/* MIN of 1 keeps A from the start: A, then A at 3 and 6 */
	assert_int_equal(sim_belady(&t, 1, &r), 0);
	assert_result(&r, 2, 2);
	/* infinite: every re-reference hits (A twice, B once) */
	assert_int_equal(sim_infinite(&t, &r), 0);
	assert_result(&r, 3, 3);
	assert_int_equal(r.blocks, 7);
	assert_int_equal(t.t_distinct, 4);
	trace_free(&t);
}

/* Multi-block requests: prefix hits stop at the first miss. */
static void
test_prefix_accounting(void **state)
{
	static const uint64_t r1[] = { 1, 2, 3 }, r2[] = { 1, 2, 3, 4 },
			      r3[] = { 9, 2, 3 }, r4[] = { 1, 5, 3, 4 };
	struct sim_result r;
	struct trace t;

	(void)state;
	trace_init(&t);
	assert_int_equal(trace_add(&t, 0, r1, 3), 0);
	assert_int_equal(trace_add(&t, 1, r2, 4), 0);
	assert_int_equal(trace_add(&t, 2, r3, 3), 0);
	assert_int_equal(trace_add(&t, 3, r4, 4), 0);
	/* infinite: r2 3 prefix hits; r3 misses 9 first (2 block hits); r4
	 * hits 1, misses 5 (3, 4 block hits) */
	assert_int_equal(sim_infinite(&t, &r), 0);
	assert_result(&r, 3 + 0 + 1, 3 + 2 + 3);
	/* LRU of 4: after r2 {4 3 2 1}; r3: 9 evicts 1, then 2 3 hit ->
	 * {3 2 9 4}; r4: 1 evicts 4, 5 evicts 9, 3 hits, 4 evicts 2 */
	assert_int_equal(sim_lru(&t, 4, &r), 0);
	assert_result(&r, 3, 3 + 2 + 1);
	assert_int_equal(r.evictions, 4);
	/* not chained on the prefix: 2 after 9 in r3, 3 after 5 in r4 */
	assert_int_equal(t.t_chain_breaks, 2);
	trace_free(&t);
}

/* sim_lru = the textbook LRU, on random traces and capacities. */
static void
test_lru_matches_naive(void **state)
{
	struct sim_result a, b;
	struct trace t;
	uint64_t seed;
	unsigned cap;

	(void)state;
	for (seed = 1; seed <= 20; seed++) {
		random_trace(&t, seed * 7919, 300, 40, 8);
		for (cap = 0; cap <= 45; cap += 3) {
			assert_int_equal(sim_lru(&t, cap, &a), 0);
			naive_lru(&t, cap, &b);
			assert_result(&a, b.prefix_hits, b.block_hits);
			assert_int_equal(a.evictions, b.evictions);
		}
		trace_free(&t);
	}
}

/* sim_belady's block hits = the optimum over every policy (small
 * traces), and >= LRU's. */
static void
test_belady_is_optimal(void **state)
{
	struct sim_result bel, lru;
	struct trace t;
	uint64_t seed;
	unsigned cap;

	(void)state;
	for (seed = 1; seed <= 60; seed++) {
		random_trace(&t, seed * 104729, 12, 4 + seed % 9, 3);
		for (cap = 0; cap <= 6; cap++) {
			assert_int_equal(sim_belady(&t, cap, &bel), 0);
			assert_int_equal(sim_lru(&t, cap, &lru), 0);
			assert_int_equal(bel.block_hits, optimal_hits(&t, cap));
			assert_true(bel.block_hits >= lru.block_hits);
		}
		trace_free(&t);
	}
	/* larger random traces: MIN never below LRU */
	for (seed = 1; seed <= 10; seed++) {
		random_trace(&t, seed * 31337, 2000, 300, 10);
		for (cap = 1; cap <= 300; cap *= 3) {
			assert_int_equal(sim_belady(&t, cap, &bel), 0);
			assert_int_equal(sim_lru(&t, cap, &lru), 0);
			assert_true(bel.block_hits >= lru.block_hits);
		}
		trace_free(&t);
	}
}

static void
small_gen(struct trace_gen_cfg *g, uint64_t seed)
{
	trace_gen_defaults(g);
	g->seed = seed;
	g->requests = 1500;
	g->sessions = 100 + (uint32_t)(seed % 5) * 50;
	g->zipf = 0.5 + (double)(seed % 4) * 0.25;
	g->doc_share = (double)(seed % 3) * 0.15;
}

/* On chained (generated) traces: MIN keeps prefixes whole (prefix hits
 * = block hits), beats LRU's prefix hits, stays under the infinite
 * cache; every simulator is the infinite cache once it holds all. */
static void
test_chained_bounds(void **state)
{
	struct sim_result bel, lru, inf;
	struct trace_gen_cfg g;
	struct trace t;
	uint64_t seed;
	double pct;

	(void)state;
	for (seed = 1; seed <= 6; seed++) {
		small_gen(&g, seed);
		trace_init(&t);
		assert_int_equal(trace_gen(&t, &g), 0);
		assert_int_equal(trace_densify(&t), 0);
		assert_int_equal(t.t_chain_breaks, 0);
		assert_int_equal(sim_infinite(&t, &inf), 0);
		/* infinite: every re-reference hits */
		assert_int_equal(inf.block_hits, t.t_nids - t.t_distinct);
		for (pct = 0.01; pct < 1.2; pct *= 2) {
			uint64_t cap = (uint64_t)(pct * (double)t.t_distinct);

			assert_int_equal(sim_belady(&t, cap, &bel), 0);
			assert_int_equal(sim_lru(&t, cap, &lru), 0);
			assert_int_equal(bel.prefix_hits, bel.block_hits);
			assert_true(bel.prefix_hits >= lru.prefix_hits);
			assert_true(bel.block_hits >= lru.block_hits);
			assert_true(inf.prefix_hits >= bel.prefix_hits);
		}
		assert_int_equal(sim_belady(&t, t.t_distinct, &bel), 0);
		assert_int_equal(sim_lru(&t, t.t_distinct, &lru), 0);
		assert_result(&bel, inf.prefix_hits, inf.block_hits);
		assert_result(&lru, inf.prefix_hits, inf.block_hits);
		assert_int_equal(lru.evictions, 0);
		trace_free(&t);
	}
}

/* The generator: the system prompt first, each turn of a conversation
 * extends the previous one, conversations restart after --turns. */
static void
test_generator_shape(void **state)
{
	struct trace_gen_cfg g;
	struct trace t, u;
	const struct trace_req *r;
	uint32_t i, k;

	(void)state;
	trace_gen_defaults(&g);
	g.requests = 7;
	g.sessions = 1;
	g.turns = 3;
	g.doc_share = 0;
	g.system_blocks = 2;
	g.first_blocks = 3;
	g.growth = 2;
	trace_init(&t);
	assert_int_equal(trace_gen(&t, &g), 0);
	assert_int_equal(t.t_nreqs, 7);
	r = t.t_reqs;
	/* lengths 5 7 9, then a new conversation: 5 7 9 5 */
	for (i = 0; i < 7; i++)
		assert_int_equal(r[i].tr_n, 5 + 2 * (i % 3));
	for (i = 0; i < 7; i++) {
		assert_int_equal(t.t_ids[r[i].tr_off], 0);
		assert_int_equal(t.t_ids[r[i].tr_off + 1], 1);
		if (i % 3) /* extends the previous turn */
			for (k = 0; k < r[i - 1].tr_n; k++)
				assert_int_equal(t.t_ids[r[i].tr_off + k],
						 t.t_ids[r[i - 1].tr_off + k]);
	}
	/* the new conversation shares only the system prompt */
	assert_int_not_equal(t.t_ids[r[3].tr_off + 2],
			     t.t_ids[r[0].tr_off + 2]);
	for (i = 1; i < 7; i++) /* Poisson arrivals: in order */
		assert_true(r[i].tr_ts_ms >= r[i - 1].tr_ts_ms);
	trace_free(&t);

	/* documents only: nothing but the system prompt is reused */
	trace_gen_defaults(&g);
	g.requests = 200;
	g.doc_share = 1;
	trace_init(&t);
	assert_int_equal(trace_gen(&t, &g), 0);
	assert_int_equal(trace_densify(&t), 0);
	assert_int_equal(t.t_distinct,
			 g.system_blocks + (size_t)g.requests * g.doc_blocks);
	trace_free(&t);

	/* the same seed, the same trace; another seed, another */
	trace_gen_defaults(&g);
	g.requests = 500;
	trace_init(&t);
	trace_init(&u);
	assert_int_equal(trace_gen(&t, &g), 0);
	assert_int_equal(trace_gen(&u, &g), 0);
	assert_int_equal(t.t_nids, u.t_nids);
	assert_memory_equal(t.t_ids, u.t_ids, t.t_nids * sizeof(*t.t_ids));
	trace_free(&u);
	trace_init(&u);
	g.seed = 2;
	assert_int_equal(trace_gen(&u, &g), 0);
	assert_true(t.t_nids != u.t_nids ||
		    memcmp(t.t_ids, u.t_ids, t.t_nids * sizeof(*t.t_ids)));
	trace_free(&t);
	trace_free(&u);
}

static int
parse(const char *line, uint64_t *ts, uint64_t **ids, size_t *cap, uint32_t *n)
{
	const char *why;

	return trace_parse_line(line, strlen(line), ts, ids, cap, n, &why);
}

static void
test_jsonl_lines(void **state)
{
	static const char *const bad[] = {
		"",
		"[1, 2]",
		"{\"timestamp\": 5}",
		"{\"hash_ids\": [1, -2]}",
		"{\"hash_ids\": [1, 2.5]}",
		"{\"hash_ids\": [1, 2e3]}",
		"{\"hash_ids\": [1, 2}",
		"{\"hash_ids\": [1, 2]} x",
		"{\"hash_ids\": [1, 2],}",
		"{\"hash_ids\": [18446744073709551616]}",
		"{\"hash_ids\": [1], \"x\": \"unterminated}",
		"{\"timestamp\": \"soon\", \"hash_ids\": [1]}",
		"{\"hash_ids\" [1]}",
		"{\"hash_ids\": [1], \"x\": tru}",
	};
	uint64_t ts, *ids = NULL;
	size_t cap = 0, i;
	uint32_t n;

	(void)state;
	assert_int_equal(parse("{\"timestamp\": 27482, \"input_length\": 6955,"
			       " \"output_length\": 52, \"hash_ids\": [46, 47,"
			       " 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, "
			       "59]}",
			       &ts, &ids, &cap, &n),
			 0);
	assert_int_equal(ts, 27482);
	assert_int_equal(n, 14);
	assert_int_equal(ids[0], 46);
	assert_int_equal(ids[13], 59);
	/* any order, other fields nested, escapes, white space, CRLF */
	assert_int_equal(
		parse(" {\"meta\": {\"a\": [1, {\"b\": \"x\\\"]}\"}], "
		      "\"c\": null}, \"hash_ids\":[0,18446744073709551615] ,"
		      "\"s\": \"\\u00e9\\\\\", \"timestamp\" : 1.5e3, "
		      "\"ok\": true}\r\n",
		      &ts, &ids, &cap, &n),
		0);
	assert_int_equal(ts, 1500);
	assert_int_equal(n, 2);
	assert_int_equal(ids[0], 0);
	assert_int_equal(ids[1], UINT64_MAX);
	/* no timestamp, empty ids */
	assert_int_equal(parse("{\"hash_ids\": []}", &ts, &ids, &cap, &n), 0);
	assert_int_equal(ts, UINT64_MAX);
	assert_int_equal(n, 0);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(parse(bad[i], &ts, &ids, &cap, &n), -EINVAL);
	free(ids);
}

/* A file: good, blank and bad lines; then a generated trace written and
 * read back. */
static void
test_jsonl_file(void **state)
{
	struct trace_gen_cfg g;
	struct trace t, u;
	size_t bad, i;
	FILE *f;

	(void)state;
	f = tmpfile();
	assert_non_null(f);
	fputs("\xef\xbb\xbf{\"timestamp\": 3, \"hash_ids\": [0, 1, 2]}\n"
	      "\n   \n"
	      "{\"hash_ids\": [0, 1, 2, 3]}\n" /* timestamp: the previous */
	      "not json\n"
	      "{\"timestamp\": 9, \"hash_ids\": []}\n" /* skipped: empty */
	      "{\"timestamp\": 10, \"hash_ids\": [0, 7]}",
	      f); /* no final newline */
	rewind(f);
	trace_init(&t);
	assert_int_equal(trace_load_jsonl(&t, f, "t", NULL, &bad), 0);
	fclose(f);
	assert_int_equal(bad, 1);
	assert_int_equal(t.t_nreqs, 3);
	assert_int_equal(t.t_nids, 9);
	assert_int_equal(t.t_reqs[1].tr_ts_ms, 3);
	assert_int_equal(t.t_reqs[2].tr_ts_ms, 10);
	assert_int_equal(t.t_ids[8], 7);
	trace_free(&t);

	trace_gen_defaults(&g);
	g.requests = 800;
	trace_init(&t);
	trace_init(&u);
	assert_int_equal(trace_gen(&t, &g), 0);
	f = tmpfile();
	assert_non_null(f);
	assert_int_equal(trace_write_jsonl(&t, f), 0);
	rewind(f);
	assert_int_equal(trace_load_jsonl(&u, f, "gen", NULL, &bad), 0);
	fclose(f);
	assert_int_equal(bad, 0);
	assert_int_equal(u.t_nreqs, t.t_nreqs);
	assert_int_equal(u.t_nids, t.t_nids);
	assert_memory_equal(u.t_ids, t.t_ids, t.t_nids * sizeof(*t.t_ids));
	for (i = 0; i < t.t_nreqs; i++) {
		assert_int_equal(u.t_reqs[i].tr_ts_ms, t.t_reqs[i].tr_ts_ms);
		assert_int_equal(u.t_reqs[i].tr_n, t.t_reqs[i].tr_n);
	}
	trace_free(&t);
	trace_free(&u);
}

/* A policy of the study by name, with its band made one block (each
 * miss with the cache full evicts exactly one: hand-checkable). */
static struct sim_policy
policy1(const char *name)
{
	const struct sim_policy *p = sim_policy_find(name);
	struct sim_policy q;

	assert_non_null(p);
	q = *p;
	q.band = 0;
	return q;
}

/* The pass engine in plain recency order, one block a pass, on traces of
 * one-block requests (a tick each) is exact LRU. */
static void
test_policy_engine_is_lru(void **state)
{
	struct sim_policy q = policy1("lru-pass");
	struct sim_result a, b;
	struct trace t;
	uint64_t seed, ids[400];
	unsigned cap, i;

	(void)state;
	for (seed = 1; seed <= 10; seed++) {
		uint64_t s = seed * 6007;

		for (i = 0; i < 400; i++)
			ids[i] = rnd(&s) % 60;
		singles(&t, ids, 400);
		for (cap = 0; cap <= 64; cap += 4) {
			assert_int_equal(sim_lru(&t, cap, &a), 0);
			assert_int_equal(sim_policy(&t, cap, &q, &b), 0);
			assert_result(&b, a.prefix_hits, a.block_hits);
		}
		trace_free(&t);
	}
}

/* Append a request of ids lo..lo+n-1. */
static void
add_run(struct trace *t, uint64_t lo, uint32_t n)
{
	uint64_t ids[64];
	uint32_t k;

	assert_true(n <= 64);
	for (k = 0; k < n; k++)
		ids[k] = lo + k;
	assert_int_equal(trace_add(t, t->t_nreqs, ids, n), 0);
}

/*
 * A one-pass scan twice the cache's size between two uses of a working
 * set that fits (2 chains of 8 blocks, used twice: hit; cache 24), in
 * requests of 8 (a request's own pages are the youngest): LRU
 * and today's probation (x2) lose it, the recommended policy keeps all
 * of it (x8: a scan request sees a working set up to 8 requests old as
 * younger than its own pages of the request before).  Returns the prefix
 * hits of the last pass over the set.
 */
static uint64_t
scan_case(const struct sim_policy *p)
{
	struct sim_result before, after;
	struct trace t;
	unsigned c, k;

	trace_init(&t);
	for (k = 0; k < 2; k++)
		for (c = 0; c < 2; c++)
			add_run(&t, 100 * (c + 1), 8);
	for (k = 0; k < 6; k++) /* the scan: 48 blocks, never again */
		add_run(&t, 1000 + 8 * k, 8);
	if (p)
		assert_int_equal(sim_policy(&t, 24, p, &before), 0);
	else
		assert_int_equal(sim_lru(&t, 24, &before), 0);
	for (c = 0; c < 2; c++)
		add_run(&t, 100 * (c + 1), 8);
	if (p)
		assert_int_equal(sim_policy(&t, 24, p, &after), 0);
	else
		assert_int_equal(sim_lru(&t, 24, &after), 0);
	trace_free(&t);
	return after.prefix_hits - before.prefix_hits;
}

static void
test_scan_keeps_working_set(void **state)
{
	struct sim_policy rec = policy1("ghost-cont"), cur = policy1("cur");

	(void)state;
	assert_int_equal(scan_case(NULL), 0);  /* LRU: all gone */
	assert_true(scan_case(&cur) < 16);     /* x2: not enough */
	assert_int_equal(scan_case(&rec), 16); /* all kept */
}

/*
 * A key evicted and soon put again is kept the next time: A, then four
 * other keys (cache 4: A goes), A again (in the ghost set: exempt from
 * probation), four more, A: a hit with the ghost set, a miss without it
 * and under LRU.
 */
static uint64_t
ghost_case(const struct sim_policy *p)
{
	static const uint64_t seq[] = { 'A', 1, 2, 3, 4, 'A', 5, 6, 7, 8, 'A' };
	struct sim_result r;
	struct trace t;

	singles(&t, seq, sizeof(seq) / sizeof(seq[0]));
	if (p)
		assert_int_equal(sim_policy(&t, 4, p, &r), 0);
	else
		assert_int_equal(sim_lru(&t, 4, &r), 0);
	trace_free(&t);
	return r.block_hits;
}

static void
test_ghost_readmits(void **state)
{
	struct sim_policy rec = policy1("ghost-cont"), noghost = rec;

	(void)state;
	noghost.ghost = 0;
	assert_int_equal(ghost_case(NULL), 0);
	assert_int_equal(ghost_case(&noghost), 0);
	assert_int_equal(ghost_case(&rec), 1);
	rec = policy1("ghost");
	assert_int_equal(ghost_case(&rec), 1);
}

/*
 * A deep tail goes before its head: a chain of 8 blocks put in one
 * request (one tick), then a request of 4 other blocks in a cache of 10:
 * two blocks must go, and the chain's re-use then finds its first 6
 * (LRU, which drops the chain's oldest-accessed head, finds none).
 */
static uint64_t
depth_case(const struct sim_policy *p)
{
	struct sim_result r;
	struct trace t;

	trace_init(&t);
	add_run(&t, 1, 8);
	add_run(&t, 100, 4);
	add_run(&t, 1, 8);
	if (p)
		assert_int_equal(sim_policy(&t, 10, p, &r), 0);
	else
		assert_int_equal(sim_lru(&t, 10, &r), 0);
	trace_free(&t);
	return r.prefix_hits;
}

static void
test_deep_tail_first(void **state)
{
	struct sim_policy rec = policy1("ghost-cont"), cur = policy1("cur");

	(void)state;
	assert_int_equal(depth_case(NULL), 0);
	assert_int_equal(depth_case(&cur), 6);
	assert_int_equal(depth_case(&rec), 6);
}

/* Every candidate of the study runs, never beats MIN's block hits, and
 * equals the infinite cache when it holds every block. */
static void
test_policies_bounded(void **state)
{
	struct sim_result r, bel, inf;
	const struct sim_policy *p;
	struct trace_gen_cfg g;
	struct trace t;
	unsigned kind;

	(void)state;
	for (kind = 0; kind < TRACE_GEN_KINDS; kind++) {
		trace_gen_preset(&g, (enum trace_gen_kind)kind);
		g.requests = 600;
		g.scan_share = 0.1;
		trace_init(&t);
		assert_int_equal(trace_gen(&t, &g), 0);
		assert_int_equal(sim_infinite(&t, &inf), 0);
		for (p = sim_policies; p->name; p++) {
			uint64_t cap = t.t_distinct / 10;

			assert_int_equal(sim_belady(&t, cap, &bel), 0);
			assert_int_equal(sim_policy(&t, cap, p, &r), 0);
			assert_true(r.block_hits <= bel.block_hits);
			assert_true(r.prefix_hits <= r.block_hits);
			assert_true(r.evictions > 0);
			assert_int_equal(sim_policy(&t, t.t_distinct, p, &r),
					 0);
			assert_result(&r, inf.prefix_hits, inf.block_hits);
		}
		trace_free(&t);
	}
}

/* The new generators: chat and agent traces are chained and extend their
 * conversations; an agent's sub-agents branch off a session (a request
 * is a prefix of another that is not its conversation's next); RAG
 * reuses a document's blocks after other prefixes (not chained); a scan
 * share of 1 is nothing but single-use blocks; the same seed, the same
 * trace. */
static void
test_generator_kinds(void **state)
{
	struct trace_gen_cfg g;
	struct trace t, u;
	size_t i, reuse;

	(void)state;
	trace_gen_preset(&g, TRACE_GEN_CHAT);
	g.requests = 2000;
	trace_init(&t);
	assert_int_equal(trace_gen(&t, &g), 0);
	assert_int_equal(trace_densify(&t), 0);
	assert_int_equal(t.t_chain_breaks, 0);
	assert_int_equal(t.t_nreqs, 2000);
	for (i = 1; i < t.t_nreqs; i++)
		assert_true(t.t_reqs[i].tr_ts_ms >= t.t_reqs[i - 1].tr_ts_ms);
	/* think times: the trace spans minutes at 20 requests a second */
	assert_true(t.t_reqs[t.t_nreqs - 1].tr_ts_ms > 60000);
	trace_free(&t);

	trace_gen_preset(&g, TRACE_GEN_AGENT);
	g.requests = 2000;
	trace_init(&t);
	trace_init(&u);
	assert_int_equal(trace_gen(&t, &g), 0);
	assert_int_equal(trace_gen(&u, &g), 0);
	assert_int_equal(t.t_nids, u.t_nids);
	assert_memory_equal(t.t_ids, u.t_ids, t.t_nids * sizeof(*t.t_ids));
	assert_int_equal(trace_densify(&t), 0);
	assert_int_equal(t.t_chain_breaks, 0);
	/* the agent types' long prefix: most references hit in an
	 * infinite cache */
	{
		struct sim_result inf;

		assert_int_equal(sim_infinite(&t, &inf), 0);
		assert_true(sim_prefix_ratio(&inf) > 0.8);
	}
	trace_free(&t);
	trace_free(&u);

	trace_gen_preset(&g, TRACE_GEN_RAG);
	g.requests = 1000;
	g.follow_share = 0;
	trace_init(&t);
	assert_int_equal(trace_gen(&t, &g), 0);
	assert_int_equal(trace_densify(&t), 0);
	assert_true(t.t_chain_breaks > 0);
	/* documents are reused: far fewer distinct blocks than references
	 * beyond the unique prefixes */
	reuse = t.t_nids - t.t_distinct;
	assert_true(reuse > t.t_nids / 4);
	trace_free(&t);

	trace_gen_preset(&g, TRACE_GEN_CHAT);
	g.requests = 300;
	g.scan_share = 1;
	trace_init(&t);
	assert_int_equal(trace_gen(&t, &g), 0);
	assert_int_equal(trace_densify(&t), 0);
	assert_int_equal(t.t_distinct,
			 g.system_blocks + (size_t)g.requests * g.scan_blocks);
	trace_free(&t);
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* 300,000 references and more (12,000 generated requests) through LRU and
 * MIN in well under a second each (release build; a sanitizer build
 * gets 10x). */
static void
test_speed(void **state)
{
	struct sim_result r;
	struct trace_gen_cfg g;
	struct trace t;
	double t0, lru, bel, limit = 1.0;

	(void)state;
#ifdef KVP_DEBUG
	limit = 10.0;
#endif
	trace_gen_defaults(&g);
	g.requests = 12000;
	trace_init(&t);
	assert_int_equal(trace_gen(&t, &g), 0);
	assert_int_equal(trace_densify(&t), 0);
	assert_true(t.t_nids >= 300000);
	t0 = now_s();
	assert_int_equal(sim_lru(&t, t.t_distinct / 10, &r), 0);
	lru = now_s() - t0;
	t0 = now_s();
	assert_int_equal(sim_belady(&t, t.t_distinct / 10, &r), 0);
	bel = now_s() - t0;
	print_message("%zu references: LRU %.3f s, Belady %.3f s\n", t.t_nids,
		      lru, bel);
	assert_true(lru < limit);
	assert_true(bel < limit);
	trace_free(&t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_answers),
		cmocka_unit_test(test_prefix_accounting),
		cmocka_unit_test(test_lru_matches_naive),
		cmocka_unit_test(test_belady_is_optimal),
		cmocka_unit_test(test_chained_bounds),
		cmocka_unit_test(test_generator_shape),
		cmocka_unit_test(test_jsonl_lines),
		cmocka_unit_test(test_jsonl_file),
		cmocka_unit_test(test_policy_engine_is_lru),
		cmocka_unit_test(test_scan_keeps_working_set),
		cmocka_unit_test(test_ghost_readmits),
		cmocka_unit_test(test_deep_tail_first),
		cmocka_unit_test(test_policies_bounded),
		cmocka_unit_test(test_generator_kinds),
		cmocka_unit_test(test_speed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
