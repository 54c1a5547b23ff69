/* SPDX-License-Identifier: MIT */
/*
 * trace.h - request traces of an inference engine's prefix cache, and the
 * reference caches they are replayed through (stress/trace_replay.c;
 * tests/stress/test_trace.c checks the simulators on hand-made traces).
 *
 * A trace is a sequence of requests; a request is a list of block ids,
 * chained on the prefix as engines hash their KV pages (the id of block k
 * names blocks 0..k: the same prefix gives the same ids, and an id is
 * always preceded by the same parent).  Traces come from
 *  - trace_gen(): multi-turn sessions whose prompt extends the session's
 *    previous turn, a shared system prompt, Zipf-popular sessions,
 *    single-use documents, Poisson arrivals;
 *  - trace_load_jsonl(): one JSON object a line with "timestamp" (ms) and
 *    "hash_ids" (the format of Mooncake's FAST'25 traces; other fields
 *    are ignored), which trace_write_jsonl() also writes.
 *
 * The simulators replay a trace through a cache of cap blocks and count,
 * per request, the prefix hits (the leading run of blocks present: what
 * an engine can reuse) and the block hits (every block present):
 *  - sim_lru(): exact LRU; the blocks of a request are accessed in order,
 *    a missing one inserted, the least recently used evicted;
 *  - sim_belady(): the offline optimum (MIN): on a miss with the cache
 *    full, of the cached blocks and the new one, the one whose next use
 *    is farthest (or never) is dropped (the new one is then not kept);
 *    O(log n) a reference, a heap of next-use positions;
 *  - sim_infinite(): no capacity limit, the ceiling of any cache.
 * A hit is counted at access time.  MIN maximises block hits over every
 * policy.  On a chained trace (every request starts at the root and
 * t_chain_breaks is 0) a parent's next use always comes before its
 * child's, so MIN drops children first and keeps prefixes whole: its
 * prefix hits equal its block hits, and so bound the prefix hits of any
 * cache of the same size.
 *
 * Not thread-safe; all functions return 0 or -errno (-ENOMEM, -EINVAL).
 */
#ifndef KVP_STRESS_TRACE_H
#define KVP_STRESS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct trace_req {
	uint64_t tr_ts_ms; /* arrival time, ms */
	uint64_t tr_off;   /* first block in trace.t_ids */
	uint32_t tr_n;     /* blocks */
};

struct trace {
	struct trace_req *t_reqs;
	size_t t_nreqs, t_reqs_cap;
	uint64_t *t_ids; /* every request's block ids, one after another */
	size_t t_nids, t_ids_cap;
	/* trace_densify(): t_dense[i] in [0, t_distinct) for t_ids[i] */
	uint32_t *t_dense;
	size_t t_distinct;
	/* references of an id after another parent than the one it was
	 * first seen after (a request's first block has none): 0 for a
	 * chained trace */
	size_t t_chain_breaks;
};

struct trace_gen_cfg {
	uint64_t seed;
	uint32_t requests;
	uint32_t sessions;      /* session slots, Zipf-popular */
	double zipf;            /* exponent of the session popularity */
	uint32_t turns;         /* turns of a conversation, then a new one */
	uint32_t system_blocks; /* shared system prompt (every request) */
	uint32_t first_blocks;  /* new blocks of a conversation's first turn */
	uint32_t growth;        /* new blocks of each later turn */
	double doc_share;       /* share of single-use document requests */
	uint32_t doc_blocks;    /* their blocks after the system prompt */
	double rate;            /* arrivals per second (Poisson) */
};

/* The defaults of trace_replay's generator. */
void trace_gen_defaults(struct trace_gen_cfg *g);

void trace_init(struct trace *t);
void trace_free(struct trace *t);
/* Append a request of n blocks (ids copied). */
int trace_add(struct trace *t, uint64_t ts_ms, const uint64_t *ids, uint32_t n);
/* Build t (empty) from the generator's configuration. */
int trace_gen(struct trace *t, const struct trace_gen_cfg *g);

/*
 * Parse one line of a JSONL trace: *ts_ms and the "hash_ids" array into
 * *ids (grown with realloc, *cap elements), *n of them.  Whitespace, any
 * key order and any other field (nested or not) are accepted; a line
 * without "hash_ids", with a non-integer or negative id, or that is not
 * one JSON object is -EINVAL (*why says what).  A missing "timestamp" is
 * *ts_ms = UINT64_MAX.
 */
int trace_parse_line(const char *line, size_t len, uint64_t *ts_ms,
		     uint64_t **ids, size_t *cap, uint32_t *n,
		     const char **why);
/* Read a JSONL trace: blank lines are skipped, bad lines counted in *bad
 * (the first few printed to err with their line numbers), requests with
 * no blocks skipped.  A missing timestamp repeats the previous one. */
int trace_load_jsonl(struct trace *t, FILE *in, const char *name, FILE *err,
		     size_t *bad);
int trace_write_jsonl(const struct trace *t, FILE *out);

/* Map the ids to 0..t_distinct-1 (first seen first) and count
 * t_chain_breaks.  The simulators call it when needed. */
int trace_densify(struct trace *t);

struct sim_result {
	uint64_t requests;
	uint64_t blocks;      /* references */
	uint64_t prefix_hits; /* sum of the leading runs of hits */
	uint64_t block_hits;  /* every hit */
	uint64_t evictions;
};

int sim_lru(struct trace *t, uint64_t cap, struct sim_result *r);
int sim_belady(struct trace *t, uint64_t cap, struct sim_result *r);
int sim_infinite(struct trace *t, struct sim_result *r);

static inline double
sim_prefix_ratio(const struct sim_result *r)
{
	return r->blocks ? (double)r->prefix_hits / (double)r->blocks : 0;
}

static inline double
sim_block_ratio(const struct sim_result *r)
{
	return r->blocks ? (double)r->block_hits / (double)r->blocks : 0;
}

#endif /* KVP_STRESS_TRACE_H */
