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
 *  - trace_gen(): one of four seeded generators (g->kind; the same
 *    configuration and seed give the same trace):
 *    TRACE_GEN_SESSIONS (the default): multi-turn sessions whose prompt
 *      extends the session's previous turn, a shared system prompt,
 *      Zipf-popular session slots, single-use documents, Poisson
 *      arrivals;
 *    TRACE_GEN_CHAT: conversations with think times: new conversations
 *      arrive (Poisson, rate / turns a second) on one of g->prompts
 *      Zipf-popular system prompts; a conversation runs a geometric
 *      number of turns (mean g->turns), each the previous turn's prompt
 *      and 1 .. 2*growth-1 new blocks (the answer and the next question),
 *      the next one a think time later (log-normal, median g->think_ms,
 *      sigma 1: seconds to minutes);
 *    TRACE_GEN_AGENT: agent sessions with tool calls: one of g->prompts
 *      agent types (a long shared prefix: system prompt and tool
 *      definitions), steps a tool call apart (exponential, mean
 *      g->tool_ms; one step in ten waits a human think time instead),
 *      each step the session's context and 1 .. 2*growth-1 new blocks
 *      (the tool's result); a step spawns 1-3 sub-agents with probability
 *      g->sub_share: each branches off the session's context (its prompt
 *      starts with it), runs ~4 steps of its own and ends; the parent
 *      waits for them;
 *    TRACE_GEN_RAG: retrieval: the system prompt, a per-request prefix
 *      of first_blocks unique blocks (instructions, the question), then
 *      g->doc_k distinct documents of g->docs drawn by Zipf popularity,
 *      each doc_blocks/2 .. 3*doc_blocks/2 blocks whose ids are the
 *      document's own (the same after any prefix: position-independent
 *      reuse, so the trace is not chained and the block hit ratio is the
 *      one that counts); a g->follow_share of requests instead extend one
 *      of the last 64 requests by growth blocks (a follow-up question:
 *      chained reuse);
 *    and for any kind, a g->scan_share of the requests are a one-pass
 *      scan: the first system prompt and g->scan_blocks blocks never seen
 *      again (a batch job over a corpus);
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

enum trace_gen_kind {
	TRACE_GEN_SESSIONS = 0,
	TRACE_GEN_CHAT,
	TRACE_GEN_AGENT,
	TRACE_GEN_RAG,
	TRACE_GEN_KINDS
};

struct trace_gen_cfg {
	enum trace_gen_kind kind;
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
	/* the other kinds (trace_gen_preset sets them; SESSIONS ignores
	 * them but the scan) */
	uint32_t prompts;     /* CHAT, AGENT: distinct shared prefixes */
	double think_ms;      /* CHAT, AGENT: median think time, ms */
	double tool_ms;       /* AGENT: mean tool call, ms */
	double sub_share;     /* AGENT: steps that spawn sub-agents */
	uint32_t docs;        /* RAG: documents */
	uint32_t doc_k;       /* RAG: documents a request */
	double follow_share;  /* RAG: follow-ups of a recent request */
	double scan_share;    /* any: one-pass scan requests */
	uint32_t scan_blocks; /* their blocks after the system prompt */
};

/* The defaults of trace_replay's generator (TRACE_GEN_SESSIONS, no scan). */
void trace_gen_defaults(struct trace_gen_cfg *g);
/* The defaults of a kind: trace_gen_defaults, then the kind's own. */
void trace_gen_preset(struct trace_gen_cfg *g, enum trace_gen_kind kind);
/* "sessions", "chat", "agent", "rag" (NULL: no such kind). */
const char *trace_gen_kind_name(enum trace_gen_kind kind);
int trace_gen_kind_parse(const char *name, enum trace_gen_kind *kind);

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
	/* sim_policy only: */
	uint64_t passes;      /* eviction passes */
	uint64_t dead_blocks; /* summed over passes: cached blocks whose
			       * first-seen parent was not cached */
	uint64_t dead_seen;   /* summed over passes: cached blocks */
	uint64_t admitted;    /* puts admitted to protected (ghost, sketch) */
	uint64_t ghost_hits;  /* puts of keys found in the ghost set */
};

int sim_lru(struct trace *t, uint64_t cap, struct sim_result *r);
int sim_belady(struct trace *t, uint64_t cap, struct sim_result *r);
int sim_infinite(struct trace *t, struct sim_result *r);

/*
 * Policies the pool can carry out (sim_policy), each limited to what the
 * pool has: per entry its use word (shm/kvp_shm.h: the tick of its last
 * use, a HIT-since-put bit, its depth in its chain, and a few spare bits
 * a hit sets in the same relaxed store: a saturating count of hits, at
 * most one a tick), and the agent's private memory (a flag per index
 * slot, a ghost set of recently evicted keys, a frequency sketch it
 * updates only from what its scans see).  No list and no counter on the
 * hit path.  Time is one tick a request (a batch reads the clock once:
 * every block of a request has its tick).  Eviction is in passes, as the
 * agent's: when a put finds the cache full, a pass judges every cached
 * block and evicts the band (p->band of cap, at least one block; the
 * agent's watermarks are 98/96%: band 0.02) judged worst.
 *
 *  SIM_RECENCY  the order of agent/evict.c and its variants: a block's
 *               age (ticks since its last use) times p->probation if it
 *               was never hit since its put, times 1 + p->depth_w *
 *               log2(1 + depth); oldest first, the deepest page first
 *               among equals.  p->protect > 0 splits the cache in two
 *               segments (SLRU): a hit moves a block to protected, and
 *               so does a put admitted by the ghost set (p->ghost: the
 *               key was evicted within the last ghost * cap evictions,
 *               ARC's/S3-FIFO's test of an eviction made too early) or
 *               by the sketch (p->admit: the key's estimated frequency,
 *               count-min of 4 rows fed by the agent's observations,
 *               halved every 10 * cap, is >= admit: TinyLFU's gate);
 *               protected holds at most protect * cap (its oldest are
 *               demoted to probation by the pass) and probation is
 *               evicted first.  p->dead_first (an oracle: the pool does
 *               not store a parent link) evicts first a block whose
 *               parent is not cached.
 *  SIM_S3FIFO   S3-FIFO (Yang et al., SOSP'23): a small FIFO of
 *               p->small * cap for new keys, a main FIFO, a ghost set of
 *               p->ghost * cap keys; a key leaving small moves to main if
 *               hit since its put, else to the ghost; main reinserts a
 *               hit key with its count less one (count: p->fmax at most,
 *               spare bits of the use word); a key in the ghost is put in
 *               main.  FIFO order is the agent's (a sequence number at
 *               first sight, the deepest page of a request first).
 */
enum sim_kind {
	SIM_RECENCY = 0,
	SIM_S3FIFO
};

struct sim_policy {
	const char *name;
	enum sim_kind kind;
	double band;      /* a pass frees band * cap (>= 1 block) */
	double probation; /* RECENCY: a never-hit block's age counts x this */
	double depth_w;   /* RECENCY: age x (1 + depth_w log2(1 + depth)) */
	double protect;   /* RECENCY: protected's share (0: one segment) */
	double ghost;     /* ghost set entries / cap (0: none) */
	unsigned admit;   /* RECENCY: sketch estimate admitting a put */
	double small;     /* S3FIFO: the small FIFO's share */
	unsigned fmax;    /* S3FIFO: the saturating hit count's maximum */
	bool dead_first;  /* RECENCY: orphans first (oracle) */
	/* RECENCY: age / (1 + freq_w * f), f the key's frequency: the
	 * sketch's estimate (p->admit set: it survives an eviction), else
	 * the hits since its put, saturating at p->fmax (use-word bits) */
	double freq_w;
	/* RECENCY: a put that extends a hit prefix of at least cont of the
	 * request's blocks (depth0 / (depth0 + pages) in
	 * kvp_batch_put_chain: the putter knows both) is exempt from
	 * probation, as if hit: a conversation's new turn, not a one-off
	 * (0: off) */
	double cont;
	/* RECENCY: ... or counts its age x contp while never hit (0: x1;
	 * the agent's --evict-cont-probation) */
	double contp;
	/* RECENCY, with a ghost set: a key put again after its eviction
	 * lowers the probation by adapt when it was evicted on probation,
	 * raises it by adapt (at most p->probation) when it was not (0:
	 * fixed) */
	double adapt;
	/* RECENCY, with a ghost set: ARC's adaptation of the weights
	 * (probation, contp), applied as 1 + scale * (weight - 1), scale in
	 * [0, 1] from 1: a key put again while in the ghost set moves it by
	 * arc / cap, down when it was evicted at a weight above 1, up when
	 * at 1, the step times the ratio of the other kind's evictions to
	 * its own when that is above 1 (0: off) */
	double arc;
	/* ... counting only keys back within arcw * cap evictions (0: the
	 * whole ghost set) */
	double arcw;
	/* RECENCY, with a ghost set: the weights' scale (as arc) moved by
	 * lrucmp / cap against exact LRU, as the pool can estimate it:
	 * toward plain recency on a key put again that left under a weight
	 * and is younger than LRU's horizon (capacity over the eviction
	 * rate: LRU would have hit), back on a hit on a value older than
	 * that (LRU would have missed) (0: off) */
	double lrucmp;
};

/* The candidates of the study (stress/trace_matrix), by name: "cur"
 * (agent/evict.c before issue 30), "lru-pass", "depth", "slru",
 * "slru-ghost", "tinylfu", "s3fifo", "orphan", "ghost", "ghost-cont",
 * "ghost-arc" (agent/evict.c now); NULL-named at the end
 * (docs/performance.md, "Beyond LRU: the policy study"). */
extern const struct sim_policy sim_policies[];
const struct sim_policy *sim_policy_find(const char *name);
/* Set one parameter from "key=value" (band, probation, depth_w, protect,
 * ghost, admit, small, fmax, dead_first, freq_w, cont, contp, adapt, arc,
 * arcw, lrucmp): 0 or
 * -EINVAL. */
int sim_policy_set(struct sim_policy *p, const char *kv);

int sim_policy(struct trace *t, uint64_t cap, const struct sim_policy *p,
	       struct sim_result *r);

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
