/* SPDX-License-Identifier: MIT */
/*
 * trace.c - traces (generated or read from JSONL) and the reference
 * caches they are replayed through: exact LRU, the offline optimum
 * (Belady's MIN) and an infinite cache.  See trace.h.
 *
 * Why MIN bounds prefix hits on a chained trace (trace.h states it; the
 * test checks it on generated traces):
 *  1. Every reference to a block c at depth >= 1 sits right after a
 *     reference to its parent p, in the same request.
 *  2. So at any position i, next(p) < next(c) unless p is the block
 *     accessed at i itself, or neither is used again (both "never").
 *  3. MIN drops the block of farthest next use among the cache and the
 *     block accessed: by 2 it never drops a cached parent while its child
 *     that will be used again is cached, except the block accessed now,
 *     which is a miss only if (induction) its children are absent too.
 *  4. So at the start of every request the cached blocks of its chain
 *     are a prefix of it: prefix hits = block hits for MIN, and MIN's
 *     block hits are the most any policy gets, whose prefix hits are at
 *     most its block hits.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stress/trace.h"

/* ---- building ---- */

void
trace_init(struct trace *t)
{
	memset(t, 0, sizeof(*t));
}

void
trace_free(struct trace *t)
{
	free(t->t_reqs);
	free(t->t_ids);
	free(t->t_dense);
	trace_init(t);
}

static int
grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 64;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need) {
		if (c > SIZE_MAX / 2 / elem)
			return -ENOMEM;
		c *= 2;
	}
	q = realloc(*p, c * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

int
trace_add(struct trace *t, uint64_t ts_ms, const uint64_t *ids, uint32_t n)
{
	struct trace_req *r;
	int rc;

	rc = grow((void **)&t->t_reqs, &t->t_reqs_cap, t->t_nreqs + 1,
		  sizeof(*t->t_reqs));
	if (!rc)
		rc = grow((void **)&t->t_ids, &t->t_ids_cap, t->t_nids + n,
			  sizeof(*t->t_ids));
	if (rc)
		return rc;
	r = &t->t_reqs[t->t_nreqs++];
	r->tr_ts_ms = ts_ms;
	r->tr_off = t->t_nids;
	r->tr_n = n;
	if (n)
		memcpy(t->t_ids + t->t_nids, ids, n * sizeof(*ids));
	t->t_nids += n;
	/* a densified trace is stale now */
	free(t->t_dense);
	t->t_dense = NULL;
	t->t_distinct = 0;
	t->t_chain_breaks = 0;
	return 0;
}

/* ---- the generator ---- */

static uint64_t
rng_next(uint64_t *s)
{
	uint64_t x = (*s += 0x9e3779b97f4a7c15ull);

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* uniform in [0, 1) */
static double
rng_unit(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

void
trace_gen_defaults(struct trace_gen_cfg *g)
{
	memset(g, 0, sizeof(*g));
	g->seed = 1;
	g->requests = 10000;
	g->sessions = 1000;
	g->zipf = 0.9;
	g->turns = 8;
	g->system_blocks = 8;
	g->first_blocks = 8;
	g->growth = 4;
	g->doc_share = 0.2;
	g->doc_blocks = 32;
	g->rate = 20;
	g->scan_blocks = 64;
}

void
trace_gen_preset(struct trace_gen_cfg *g, enum trace_gen_kind kind)
{
	trace_gen_defaults(g);
	g->kind = kind;
	switch (kind) {
	case TRACE_GEN_CHAT:
		g->prompts = 4;
		g->turns = 6;
		g->first_blocks = 6;
		g->growth = 3;
		g->think_ms = 20000;
		g->doc_share = 0;
		break;
	case TRACE_GEN_AGENT:
		g->prompts = 4;
		g->system_blocks = 24;
		g->turns = 12;
		g->first_blocks = 4;
		g->growth = 2;
		g->think_ms = 60000;
		g->tool_ms = 3000;
		g->sub_share = 0.1;
		g->doc_share = 0;
		break;
	case TRACE_GEN_RAG:
		g->system_blocks = 4;
		g->first_blocks = 2;
		g->growth = 2;
		g->zipf = 1.0;
		g->docs = 3000;
		g->doc_k = 4;
		g->doc_blocks = 8;
		g->follow_share = 0.3;
		g->doc_share = 0;
		break;
	default:
		break;
	}
}

static const char *const kind_names[TRACE_GEN_KINDS] = {
	"sessions",
	"chat",
	"agent",
	"rag",
};

const char *
trace_gen_kind_name(enum trace_gen_kind kind)
{
	return (unsigned)kind < TRACE_GEN_KINDS ? kind_names[kind] : NULL;
}

int
trace_gen_kind_parse(const char *name, enum trace_gen_kind *kind)
{
	unsigned k;

	for (k = 0; k < TRACE_GEN_KINDS; k++)
		if (!strcmp(name, kind_names[k])) {
			*kind = (enum trace_gen_kind)k;
			return 0;
		}
	return -EINVAL;
}

/* exponential of mean m */
static double
rng_exp(uint64_t *s, double m)
{
	return -log(1 - rng_unit(s)) * m;
}

/* log-normal of median m, sigma 1 */
static double
rng_lognormal(uint64_t *s, double m)
{
	double u1 = 1 - rng_unit(s), u2 = rng_unit(s);

	return m * exp(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

/* geometric on 1, 2, ... of mean m (>= 1) */
static uint32_t
rng_geom(uint64_t *s, double m)
{
	double k;

	if (m <= 1)
		return 1;
	k = 1 + floor(log(1 - rng_unit(s)) / log(1 - 1 / m));
	return k > 1e6 ? 1000000u : (uint32_t)k;
}

/* 1 .. 2m-1, mean m (m >= 1), else 0 */
static uint32_t
rng_around(uint64_t *s, uint32_t m)
{
	return m ? 1 + (uint32_t)(rng_next(s) % (2 * (uint64_t)m - 1)) : 0;
}

/* The cumulative Zipf(z) weights of n items, normalised (NULL: ENOMEM). */
static double *
zipf_cdf(uint32_t n, double z)
{
	double *cdf = malloc((n ? n : 1) * sizeof(*cdf)), w = 0;
	uint32_t i;

	if (!cdf)
		return NULL;
	for (i = 0; i < n; i++) {
		w += pow((double)i + 1, -z);
		cdf[i] = w;
	}
	for (i = 0; i < n; i++)
		cdf[i] /= w;
	return cdf;
}

/* The first i with cdf[i] > u. */
static uint32_t
zipf_draw(const double *cdf, uint32_t n, double u)
{
	uint32_t lo = 0, hi = n - 1;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (cdf[mid] > u)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

struct gen_session {
	uint64_t *ids;
	uint32_t n, cap;
	uint32_t turn; /* turns done in its conversation */
};

static int
sess_reserve(struct gen_session *s, uint32_t n)
{
	size_t cap = s->cap;
	int rc;

	rc = grow((void **)&s->ids, &cap, n, sizeof(*s->ids));
	s->cap = (uint32_t)cap;
	return rc;
}

/* A one-pass scan request: the first system prompt, then scan_blocks
 * blocks never seen again. */
static int
gen_scan(struct trace *t, const struct trace_gen_cfg *g, uint64_t ts,
	 uint64_t *next_id)
{
	uint32_t n = g->system_blocks + g->scan_blocks, k;
	uint64_t *ids;
	int rc;

	if (!n)
		return 0;
	ids = malloc(n * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	for (k = 0; k < g->system_blocks; k++)
		ids[k] = k;
	for (; k < n; k++)
		ids[k] = (*next_id)++;
	rc = trace_add(t, ts, ids, n);
	free(ids);
	return rc;
}

static int trace_gen_sessions(struct trace *t, const struct trace_gen_cfg *g);
static int trace_gen_events(struct trace *t, const struct trace_gen_cfg *g);
static int trace_gen_rag(struct trace *t, const struct trace_gen_cfg *g);

int
trace_gen(struct trace *t, const struct trace_gen_cfg *g)
{
	if (g->scan_share < 0 || g->scan_share > 1)
		return -EINVAL;
	switch (g->kind) {
	case TRACE_GEN_SESSIONS:
		return trace_gen_sessions(t, g);
	case TRACE_GEN_CHAT:
	case TRACE_GEN_AGENT:
		return trace_gen_events(t, g);
	case TRACE_GEN_RAG:
		return trace_gen_rag(t, g);
	default:
		return -EINVAL;
	}
}

static int
trace_gen_sessions(struct trace *t, const struct trace_gen_cfg *g)
{
	struct gen_session *ss = NULL;
	uint64_t *doc = NULL, rng = g->seed, next_id;
	double *cdf = NULL, w = 0, clock_ms = 0;
	uint32_t i, k, n;
	int rc = -ENOMEM;

	if (!g->sessions || g->zipf < 0 || g->doc_share < 0 ||
	    g->doc_share > 1 || g->rate < 0 || g->turns == 0)
		return -EINVAL;
	if ((uint64_t)g->system_blocks + g->first_blocks +
		    (uint64_t)g->growth * g->turns >
	    UINT32_MAX / 2)
		return -EINVAL;
	cdf = malloc(g->sessions * sizeof(*cdf));
	ss = calloc(g->sessions, sizeof(*ss));
	doc = malloc(((size_t)g->system_blocks + g->doc_blocks + 1) *
		     sizeof(*doc));
	if (!cdf || !ss || !doc)
		goto out;
	/* session i is drawn with probability ~ 1 / (i + 1)^zipf */
	for (i = 0; i < g->sessions; i++) {
		w += pow((double)i + 1, -g->zipf);
		cdf[i] = w;
	}
	for (i = 0; i < g->sessions; i++)
		cdf[i] /= w;
	/* ids 0..system_blocks-1: the system prompt (id 0 the first
	 * block every request shares, as in Mooncake's traces) */
	next_id = g->system_blocks;
	for (k = 0; k < g->system_blocks; k++)
		doc[k] = k;
	for (i = 0; i < g->requests; i++) {
		struct gen_session *s;
		const uint64_t *ids;
		uint64_t ts;

		if (g->rate > 0)
			clock_ms += -log(1 - rng_unit(&rng)) / g->rate * 1e3;
		ts = (uint64_t)clock_ms;
		if (g->scan_share > 0 && rng_unit(&rng) < g->scan_share) {
			if ((rc = gen_scan(t, g, ts, &next_id)))
				goto out;
			continue;
		}
		if (rng_unit(&rng) < g->doc_share) {
			/* a single-use document: its blocks are never
			 * seen again */
			n = g->system_blocks + g->doc_blocks;
			for (k = g->system_blocks; k < n; k++)
				doc[k] = next_id++;
			ids = doc;
		} else {
			double u = rng_unit(&rng);
			uint32_t lo = 0, hi = g->sessions - 1, add;

			while (lo < hi) { /* the first cdf[lo] > u */
				uint32_t mid = lo + (hi - lo) / 2;

				if (cdf[mid] > u)
					hi = mid;
				else
					lo = mid + 1;
			}
			s = &ss[lo];
			if (s->turn == 0 || s->turn >= g->turns) {
				/* a new conversation in this slot */
				s->n = 0;
				s->turn = 0;
				add = g->system_blocks + g->first_blocks;
				if (sess_reserve(s, add))
					goto out;
				for (k = 0; k < g->system_blocks; k++)
					s->ids[s->n++] = k;
				add = g->first_blocks;
			} else {
				add = g->growth;
			}
			/* this turn's prompt: the previous turn's blocks
			 * (its prompt and answer) and the new ones */
			if (sess_reserve(s, s->n + add))
				goto out;
			for (k = 0; k < add; k++)
				s->ids[s->n++] = next_id++;
			s->turn++;
			ids = s->ids;
			n = s->n;
		}
		if (n && (rc = trace_add(t, ts, ids, n)))
			goto out;
	}
	rc = 0;
out:
	if (ss)
		for (i = 0; i < g->sessions; i++)
			free(ss[i].ids);
	free(ss);
	free(cdf);
	free(doc);
	return rc;
}

/*
 * CHAT and AGENT: conversations (sessions, sub-agents) as events in time
 * order, a binary heap of their next request times.
 */
struct gen_conv {
	uint64_t *ids;
	uint32_t n, cap;
	uint32_t left; /* requests to go */
	bool sub;      /* a sub-agent */
};

struct gen_ev {
	double t;
	uint32_t c;
};

struct gen_state {
	const struct trace_gen_cfg *g;
	struct trace *t;
	uint64_t rng, next_id;
	struct gen_conv *cv;
	uint32_t ncv, capcv, *free_cv, nfree;
	size_t capfree;
	struct gen_ev *ev;
	size_t nev, capev;
	double *cdf;
};

static int
ev_push(struct gen_state *s, double t, uint32_t c)
{
	size_t i;

	if (grow((void **)&s->ev, &s->capev, s->nev + 1, sizeof(*s->ev)))
		return -ENOMEM;
	i = s->nev++;
	while (i && s->ev[(i - 1) / 2].t > t) {
		s->ev[i] = s->ev[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	s->ev[i].t = t;
	s->ev[i].c = c;
	return 0;
}

static struct gen_ev
ev_pop(struct gen_state *s)
{
	struct gen_ev top = s->ev[0], last = s->ev[--s->nev];
	size_t i = 0, c;

	while ((c = 2 * i + 1) < s->nev) {
		if (c + 1 < s->nev && s->ev[c + 1].t < s->ev[c].t)
			c++;
		if (s->ev[c].t >= last.t)
			break;
		s->ev[i] = s->ev[c];
		i = c;
	}
	if (s->nev)
		s->ev[i] = last;
	return top;
}

/* A new conversation: its prefix copied from from[0..n), then add new
 * blocks; its index in *c. */
static int
conv_new(struct gen_state *s, const uint64_t *from, uint32_t n, uint32_t add,
	 uint32_t *c)
{
	struct gen_conv *v;
	size_t cap;
	uint32_t k;

	if (s->nfree) {
		*c = s->free_cv[--s->nfree];
	} else {
		cap = s->capcv;
		if (grow((void **)&s->cv, &cap, s->ncv + 1, sizeof(*s->cv)))
			return -ENOMEM;
		s->capcv = (uint32_t)cap;
		*c = s->ncv++;
		memset(&s->cv[*c], 0, sizeof(s->cv[*c]));
	}
	v = &s->cv[*c];
	v->n = 0;
	cap = v->cap;
	if (grow((void **)&v->ids, &cap, (size_t)n + add + 1, sizeof(*v->ids)))
		return -ENOMEM;
	v->cap = (uint32_t)cap;
	memcpy(v->ids, from, n * sizeof(*from));
	v->n = n;
	for (k = 0; k < add; k++)
		v->ids[v->n++] = s->next_id++;
	return 0;
}

static int
conv_extend(struct gen_conv *v, uint32_t add, uint64_t *next_id)
{
	size_t cap = v->cap;
	uint32_t k;

	if (grow((void **)&v->ids, &cap, (size_t)v->n + add, sizeof(*v->ids)))
		return -ENOMEM;
	v->cap = (uint32_t)cap;
	for (k = 0; k < add; k++)
		v->ids[v->n++] = (*next_id)++;
	return 0;
}

/* The time from one request of conversation c to its next. */
static double
conv_delay(struct gen_state *s, const struct gen_conv *v)
{
	const struct trace_gen_cfg *g = s->g;

	if (g->kind == TRACE_GEN_CHAT)
		return rng_lognormal(&s->rng, g->think_ms);
	/* an agent: a tool call, or (one step in ten, not a sub-agent) the
	 * human it works for */
	if (!v->sub && rng_unit(&s->rng) < 0.1)
		return rng_lognormal(&s->rng, g->think_ms);
	return rng_exp(&s->rng, g->tool_ms);
}

/* Request of conversation c at now, then its next event (or its end). */
static int
conv_request(struct gen_state *s, double now, uint32_t c)
{
	const struct trace_gen_cfg *g = s->g;
	struct gen_conv *v = &s->cv[c];
	double wait = 0;
	uint32_t k, nsub, sc;
	int rc;

	if ((rc = trace_add(s->t, (uint64_t)now, v->ids, v->n)))
		return rc;
	if (--v->left == 0) {
		if (grow((void **)&s->free_cv, &s->capfree, s->nfree + 1,
			 sizeof(*s->free_cv)))
			return -ENOMEM;
		s->free_cv[s->nfree++] = c;
		return 0;
	}
	if (g->kind == TRACE_GEN_AGENT && !v->sub && g->sub_share > 0 &&
	    rng_unit(&s->rng) < g->sub_share) {
		/* sub-agents branch off this context; the parent waits */
		nsub = 1 + (uint32_t)(rng_next(&s->rng) % 3);
		for (k = 0; k < nsub; k++) {
			double d = rng_exp(&s->rng, g->tool_ms / 4);
			uint32_t steps = rng_geom(&s->rng, 4);

			if ((rc = conv_new(s, s->cv[c].ids, s->cv[c].n,
					   rng_around(&s->rng, g->first_blocks),
					   &sc)))
				return rc;
			s->cv[sc].left = steps;
			s->cv[sc].sub = true;
			if ((rc = ev_push(s, now + d, sc)))
				return rc;
			d += steps * g->tool_ms;
			if (d > wait)
				wait = d;
		}
	}
	v = &s->cv[c]; /* conv_new may move the array */
	if ((rc = conv_extend(v, rng_around(&s->rng, g->growth), &s->next_id)))
		return rc;
	return ev_push(s, now + wait + conv_delay(s, v), c);
}

static int
trace_gen_events(struct trace *t, const struct trace_gen_cfg *g)
{
	struct gen_state s;
	double next_new = 0, per, lambda;
	uint64_t *sys = NULL;
	uint32_t i, c, p;
	int rc = -ENOMEM;

	if (!g->prompts || g->rate <= 0 || g->turns == 0 || g->think_ms < 0 ||
	    g->tool_ms < 0 || g->sub_share < 0 || g->sub_share > 1 ||
	    g->system_blocks > UINT32_MAX / 2 / g->prompts)
		return -EINVAL;
	memset(&s, 0, sizeof(s));
	s.g = g;
	s.t = t;
	s.rng = g->seed;
	s.next_id = (uint64_t)g->prompts * g->system_blocks;
	s.cdf = zipf_cdf(g->prompts, g->zipf);
	sys = malloc(((size_t)g->system_blocks + 1) * sizeof(*sys));
	if (!s.cdf || !sys)
		goto out;
	/* requests a conversation makes: its turns, and for an agent its
	 * sub-agents' steps (2 of ~4 steps a spawn) */
	per = g->turns;
	if (g->kind == TRACE_GEN_AGENT)
		per *= 1 + g->sub_share * 8;
	lambda = g->rate / per;
	next_new = rng_exp(&s.rng, 1e3 / lambda);
	for (i = 0; i < g->requests; i++) {
		double now;

		if (!s.nev || next_new <= s.ev[0].t) {
			now = next_new;
			next_new += rng_exp(&s.rng, 1e3 / lambda);
			if (g->scan_share > 0 &&
			    rng_unit(&s.rng) < g->scan_share) {
				if ((rc = gen_scan(t, g, (uint64_t)now,
						   &s.next_id)))
					goto out;
				continue;
			}
			/* a new conversation on a Zipf-popular prompt */
			p = zipf_draw(s.cdf, g->prompts, rng_unit(&s.rng));
			for (c = 0; c < g->system_blocks; c++)
				sys[c] = (uint64_t)p * g->system_blocks + c;
			if ((rc = conv_new(&s, sys, g->system_blocks,
					   rng_around(&s.rng, g->first_blocks),
					   &c)))
				goto out;
			s.cv[c].left = rng_geom(&s.rng, g->turns);
			s.cv[c].sub = false;
		} else {
			struct gen_ev e = ev_pop(&s);

			now = e.t;
			c = e.c;
		}
		if ((rc = conv_request(&s, now, c)))
			goto out;
	}
	rc = 0;
out:
	for (i = 0; i < s.ncv; i++)
		free(s.cv[i].ids);
	free(s.cv);
	free(s.free_cv);
	free(s.ev);
	free(s.cdf);
	free(sys);
	return rc;
}

/*
 * RAG: [system][per-request prefix][doc][doc]...: a document's blocks
 * have the document's own ids (assigned at its first use), whatever
 * precedes them; follow-ups extend one of the last RAG_RECENT requests.
 */
#define RAG_RECENT 64u

static int
trace_gen_rag(struct trace *t, const struct trace_gen_cfg *g)
{
	uint64_t rng = g->seed, next_id = g->system_blocks, *docbase = NULL;
	uint32_t *doclen = NULL, *pick = NULL, nrecent = 0, i, k, d, j;
	struct gen_conv recent[RAG_RECENT];
	double *cdf = NULL, clock_ms = 0;
	int rc = -ENOMEM;

	if (!g->docs || !g->doc_k || g->doc_k > g->docs || g->rate < 0 ||
	    g->follow_share < 0 || g->follow_share > 1 ||
	    g->doc_blocks > UINT32_MAX / 4 / g->doc_k)
		return -EINVAL;
	memset(recent, 0, sizeof(recent));
	cdf = zipf_cdf(g->docs, g->zipf);
	docbase = calloc(g->docs, sizeof(*docbase));
	doclen = calloc(g->docs, sizeof(*doclen));
	pick = calloc(g->doc_k, sizeof(*pick));
	if (!cdf || !docbase || !doclen || !pick)
		goto out;
	for (d = 0; d < g->docs; d++)
		doclen[d] = g->doc_blocks / 2 +
			    (uint32_t)(rng_next(&rng) % (g->doc_blocks + 1));
	for (i = 0; i < g->requests; i++) {
		struct gen_conv *v;
		uint64_t ts;

		if (g->rate > 0)
			clock_ms += rng_exp(&rng, 1e3 / g->rate);
		ts = (uint64_t)clock_ms;
		if (g->scan_share > 0 && rng_unit(&rng) < g->scan_share) {
			if ((rc = gen_scan(t, g, ts, &next_id)))
				goto out;
			continue;
		}
		if (nrecent && rng_unit(&rng) < g->follow_share) {
			/* a follow-up: the earlier prompt and more */
			v = &recent[rng_next(&rng) % nrecent];
			if ((rc = conv_extend(v, g->growth, &next_id)))
				goto out;
			if ((rc = trace_add(t, ts, v->ids, v->n)))
				goto out;
			continue;
		}
		/* the slot of the oldest recent request */
		v = &recent[i % RAG_RECENT];
		if (nrecent < RAG_RECENT)
			v = &recent[nrecent++];
		v->n = 0;
		for (k = 0; k < g->doc_k; k++) { /* distinct documents */
			do {
				d = zipf_draw(cdf, g->docs, rng_unit(&rng));
				for (j = 0; j < k && pick[j] != d; j++)
					;
			} while (j < k);
			pick[k] = d;
		}
		{
			size_t cap = v->cap, need = g->system_blocks +
						    (size_t)g->first_blocks + 1;

			for (k = 0; k < g->doc_k; k++)
				need += doclen[pick[k]];
			if (grow((void **)&v->ids, &cap, need, sizeof(*v->ids)))
				goto out;
			v->cap = (uint32_t)cap;
		}
		for (k = 0; k < g->system_blocks; k++)
			v->ids[v->n++] = k;
		for (k = 0; k < (g->first_blocks ? g->first_blocks : 1); k++)
			v->ids[v->n++] = next_id++;
		for (k = 0; k < g->doc_k; k++) {
			d = pick[k];
			if (!docbase[d]) {
				docbase[d] = next_id;
				next_id += doclen[d];
			}
			for (j = 0; j < doclen[d]; j++)
				v->ids[v->n++] = docbase[d] + j;
		}
		if ((rc = trace_add(t, ts, v->ids, v->n)))
			goto out;
	}
	rc = 0;
out:
	for (k = 0; k < RAG_RECENT; k++)
		free(recent[k].ids);
	free(cdf);
	free(docbase);
	free(doclen);
	free(pick);
	return rc;
}

/* ---- JSONL ---- */

struct jp {
	const char *p, *end;
	const char *why;
};

static void
jp_ws(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' ||
				 *j->p == '\r' || *j->p == '\n'))
		j->p++;
}

static bool
jp_eat(struct jp *j, char c)
{
	jp_ws(j);
	if (j->p < j->end && *j->p == c) {
		j->p++;
		return true;
	}
	return false;
}

/* A string; *s and *len span its raw bytes between the quotes. */
static int
jp_string(struct jp *j, const char **s, size_t *len)
{
	jp_ws(j);
	if (j->p >= j->end || *j->p != '"') {
		j->why = "expected a string";
		return -EINVAL;
	}
	*s = ++j->p;
	while (j->p < j->end && *j->p != '"') {
		if ((unsigned char)*j->p < 0x20) {
			j->why = "control character in a string";
			return -EINVAL;
		}
		if (*j->p == '\\' && ++j->p >= j->end)
			break;
		j->p++;
	}
	if (j->p >= j->end) {
		j->why = "unterminated string";
		return -EINVAL;
	}
	*len = (size_t)(j->p - *s);
	j->p++;
	return 0;
}

/* The span of a JSON number (not checked beyond its characters). */
static size_t
jp_number_span(const struct jp *j)
{
	const char *q = j->p;

	while (q < j->end && *q && strchr("0123456789+-.eE", *q))
		q++;
	return (size_t)(q - j->p);
}

static int
jp_skip_value(struct jp *j, unsigned depth)
{
	static const char *const lits[] = { "true", "false", "null" };
	const char *s;
	size_t len;
	unsigned w;

	jp_ws(j);
	if (j->p >= j->end) {
		j->why = "expected a value";
		return -EINVAL;
	}
	if (depth > 64) {
		j->why = "nested too deep";
		return -EINVAL;
	}
	switch (*j->p) {
	case '"':
		return jp_string(j, &s, &len);
	case '{':
	case '[': {
		char close = *j->p == '{' ? '}' : ']';
		bool obj = close == '}';

		j->p++;
		if (jp_eat(j, close))
			return 0;
		do {
			if (obj &&
			    (jp_string(j, &s, &len) || !jp_eat(j, ':'))) {
				j->why = j->why ? j->why : "expected ':'";
				return -EINVAL;
			}
			if (jp_skip_value(j, depth + 1))
				return -EINVAL;
		} while (jp_eat(j, ','));
		if (!jp_eat(j, close)) {
			j->why = obj ? "expected ',' or '}'" :
				       "expected ',' or ']'";
			return -EINVAL;
		}
		return 0;
	}
	default:
		len = jp_number_span(j);
		if (len) {
			j->p += len;
			return 0;
		}
		for (w = 0; w < 3; w++) {
			len = strlen(lits[w]);
			if ((size_t)(j->end - j->p) >= len &&
			    !memcmp(j->p, lits[w], len)) {
				j->p += len;
				return 0;
			}
		}
		j->why = "unexpected character";
		return -EINVAL;
	}
}

static int
jp_timestamp(struct jp *j, uint64_t *ts)
{
	char buf[64], *e;
	size_t len;
	double v;

	jp_ws(j);
	len = jp_number_span(j);
	if (!len || len >= sizeof(buf)) {
		j->why = "timestamp is not a number";
		return -EINVAL;
	}
	memcpy(buf, j->p, len);
	buf[len] = 0;
	v = strtod(buf, &e);
	if (*e || !(v >= 0) || v > 1.8e19) {
		j->why = "timestamp is not a non-negative number";
		return -EINVAL;
	}
	j->p += len;
	*ts = (uint64_t)v;
	return 0;
}

static int
jp_ids(struct jp *j, uint64_t **ids, size_t *cap, uint32_t *n)
{
	*n = 0;
	if (!jp_eat(j, '[')) {
		j->why = "hash_ids is not an array";
		return -EINVAL;
	}
	if (jp_eat(j, ']'))
		return 0;
	do {
		uint64_t v = 0;
		const char *d;

		jp_ws(j);
		d = j->p;
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
			unsigned digit = (unsigned)(*j->p - '0');

			if (v > (UINT64_MAX - digit) / 10) {
				j->why = "hash id out of range";
				return -EINVAL;
			}
			v = v * 10 + digit;
			j->p++;
		}
		if (j->p == d ||
		    (j->p < j->end && *j->p && strchr(".eE", *j->p))) {
			j->why = "hash id is not a non-negative integer";
			return -EINVAL;
		}
		if (*n == UINT32_MAX ||
		    grow((void **)ids, cap, (size_t)*n + 1, sizeof(**ids))) {
			j->why = "out of memory";
			return -ENOMEM;
		}
		(*ids)[(*n)++] = v;
	} while (jp_eat(j, ','));
	if (!jp_eat(j, ']')) {
		j->why = "expected ',' or ']' in hash_ids";
		return -EINVAL;
	}
	return 0;
}

int
trace_parse_line(const char *line, size_t len, uint64_t *ts_ms, uint64_t **ids,
		 size_t *cap, uint32_t *n, const char **why)
{
	struct jp j = { line, line + len, NULL };
	bool have_ids = false;
	int rc = -EINVAL;

	*ts_ms = UINT64_MAX;
	*n = 0;
	if (!jp_eat(&j, '{')) {
		j.why = "not a JSON object";
		goto out;
	}
	if (!jp_eat(&j, '}')) {
		do {
			const char *k;
			size_t klen;

			if (jp_string(&j, &k, &klen))
				goto out;
			if (!jp_eat(&j, ':')) {
				j.why = "expected ':'";
				goto out;
			}
			if (klen == 9 && !memcmp(k, "timestamp", 9))
				rc = jp_timestamp(&j, ts_ms);
			else if (klen == 8 && !memcmp(k, "hash_ids", 8)) {
				rc = jp_ids(&j, ids, cap, n);
				have_ids = true;
			} else
				rc = jp_skip_value(&j, 1);
			if (rc)
				goto out;
			rc = -EINVAL;
		} while (jp_eat(&j, ','));
		if (!jp_eat(&j, '}')) {
			j.why = "expected ',' or '}'";
			goto out;
		}
	}
	jp_ws(&j);
	if (j.p != j.end) {
		j.why = "characters after the object";
		goto out;
	}
	if (!have_ids) {
		j.why = "no \"hash_ids\"";
		goto out;
	}
	rc = 0;
out:
	if (rc)
		*n = 0;
	*why = rc ? (j.why ? j.why : "bad JSON") : NULL;
	return rc;
}

int
trace_load_jsonl(struct trace *t, FILE *in, const char *name, FILE *err,
		 size_t *bad)
{
	uint64_t *ids = NULL, ts, last_ts = 0;
	size_t cap = 0, lcap = 0, lineno = 0;
	char *line = NULL;
	ssize_t len;
	int rc = 0;

	*bad = 0;
	while ((len = getline(&line, &lcap, in)) >= 0) {
		const char *p = line, *why;
		uint32_t n;

		lineno++;
		/* a UTF-8 byte-order mark before the first line */
		if (lineno == 1 && len >= 3 && !memcmp(p, "\xef\xbb\xbf", 3)) {
			p += 3;
			len -= 3;
		}
		if (strspn(p, " \t\r\n") == (size_t)len)
			continue;
		rc = trace_parse_line(p, (size_t)len, &ts, &ids, &cap, &n,
				      &why);
		if (rc == -ENOMEM)
			break;
		if (rc) {
			if (err && *bad < 5)
				fprintf(err, "%s:%zu: skipped: %s\n", name,
					lineno, why);
			++*bad;
			rc = 0;
			continue;
		}
		if (ts == UINT64_MAX)
			ts = last_ts;
		last_ts = ts;
		if (n && (rc = trace_add(t, ts, ids, n)))
			break;
	}
	if (!rc && ferror(in))
		rc = -EIO;
	free(line);
	free(ids);
	return rc;
}

int
trace_write_jsonl(const struct trace *t, FILE *out)
{
	size_t i;
	uint32_t k;

	for (i = 0; i < t->t_nreqs; i++) {
		const struct trace_req *r = &t->t_reqs[i];

		/* input_length: tokens at Mooncake's 512 a block (a field
		 * readers ignore) */
		fprintf(out,
			"{\"timestamp\": %llu, \"input_length\": %llu, "
			"\"hash_ids\": [",
			(unsigned long long)r->tr_ts_ms,
			(unsigned long long)r->tr_n * 512);
		for (k = 0; k < r->tr_n; k++)
			fprintf(out, "%s%llu", k ? ", " : "",
				(unsigned long long)t->t_ids[r->tr_off + k]);
		fputs("]}\n", out);
	}
	return ferror(out) ? -EIO : 0;
}

/* ---- dense ids ---- */

static uint64_t
hash64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

#define NO_PARENT UINT32_MAX /* first block of a request */

int
trace_densify(struct trace *t)
{
	size_t size = 16, i, mask, distinct = 0, breaks = 0;
	uint64_t *keys = NULL;
	uint32_t *vals = NULL, *parent = NULL;
	int rc = -ENOMEM;

	if (t->t_dense || !t->t_nids)
		return 0;
	if (t->t_nids > UINT32_MAX - 1)
		return -E2BIG;
	while (size < 2 * t->t_nids)
		size *= 2;
	mask = size - 1;
	keys = malloc(size * sizeof(*keys));
	vals = malloc(size * sizeof(*vals));
	parent = malloc(t->t_nids * sizeof(*parent));
	t->t_dense = malloc(t->t_nids * sizeof(*t->t_dense));
	if (!keys || !vals || !parent || !t->t_dense)
		goto out;
	/* vals[h] == UINT32_MAX: empty bucket */
	memset(vals, 0xff, size * sizeof(*vals));
	for (i = 0; i < t->t_nreqs; i++) {
		const struct trace_req *r = &t->t_reqs[i];
		uint32_t k, up = NO_PARENT;

		for (k = 0; k < r->tr_n; k++) {
			uint64_t id = t->t_ids[r->tr_off + k];
			size_t h = hash64(id) & mask;
			uint32_t d;

			while (vals[h] != UINT32_MAX && keys[h] != id)
				h = (h + 1) & mask;
			if (vals[h] == UINT32_MAX) {
				keys[h] = id;
				vals[h] = (uint32_t)distinct;
				parent[distinct++] = up;
			}
			d = vals[h];
			if (parent[d] != up)
				breaks++;
			t->t_dense[r->tr_off + k] = d;
			up = d;
		}
	}
	t->t_distinct = distinct;
	t->t_chain_breaks = breaks;
	rc = 0;
out:
	if (rc) {
		free(t->t_dense);
		t->t_dense = NULL;
	}
	free(keys);
	free(vals);
	free(parent);
	return rc;
}

/* ---- the simulators ---- */

static int
sim_start(struct trace *t, struct sim_result *r)
{
	memset(r, 0, sizeof(*r));
	r->requests = t->t_nreqs;
	r->blocks = t->t_nids;
	return trace_densify(t);
}

int
sim_infinite(struct trace *t, struct sim_result *r)
{
	bool *seen;
	size_t i;
	int rc;

	if ((rc = sim_start(t, r)))
		return rc;
	seen = calloc(t->t_distinct + 1, sizeof(*seen));
	if (!seen)
		return -ENOMEM;
	for (i = 0; i < t->t_nreqs; i++) {
		const struct trace_req *q = &t->t_reqs[i];
		bool lead = true;
		uint32_t k;

		for (k = 0; k < q->tr_n; k++) {
			uint32_t x = t->t_dense[q->tr_off + k];

			if (seen[x]) {
				r->block_hits++;
				r->prefix_hits += lead;
			} else {
				lead = false;
				seen[x] = true;
			}
		}
	}
	free(seen);
	return 0;
}

/*
 * Exact LRU: a doubly linked list through prev/next (index D is the list
 * head), most recent first.  O(1) a reference.
 */
int
sim_lru(struct trace *t, uint64_t cap, struct sim_result *r)
{
	uint32_t *prev = NULL, *next = NULL, head;
	uint64_t used = 0;
	bool *in = NULL;
	size_t i;
	int rc;

	if ((rc = sim_start(t, r)))
		return rc;
	head = (uint32_t)t->t_distinct;
	prev = malloc((head + 1) * sizeof(*prev));
	next = malloc((head + 1) * sizeof(*next));
	in = calloc(head + 1, sizeof(*in));
	rc = -ENOMEM;
	if (!prev || !next || !in)
		goto out;
	prev[head] = next[head] = head;
	for (i = 0; i < t->t_nreqs; i++) {
		const struct trace_req *q = &t->t_reqs[i];
		bool lead = true;
		uint32_t k;

		for (k = 0; k < q->tr_n; k++) {
			uint32_t x = t->t_dense[q->tr_off + k];

			if (in[x]) {
				r->block_hits++;
				r->prefix_hits += lead;
				next[prev[x]] = next[x]; /* unlink */
				prev[next[x]] = prev[x];
			} else {
				lead = false;
				if (!cap)
					continue;
				if (used == cap) { /* evict the tail */
					uint32_t v = prev[head];

					next[prev[v]] = head;
					prev[head] = prev[v];
					in[v] = false;
					used--;
					r->evictions++;
				}
				in[x] = true;
				used++;
			}
			prev[x] = head; /* to the front */
			next[x] = next[head];
			prev[next[head]] = x;
			next[head] = x;
		}
	}
	rc = 0;
out:
	free(prev);
	free(next);
	free(in);
	return rc;
}

struct heap_ent {
	uint64_t key; /* next use (position), UINT64_MAX: never */
	uint32_t x;
};

static void
heap_push(struct heap_ent *h, size_t *n, uint64_t key, uint32_t x)
{
	size_t i = (*n)++;

	while (i && h[(i - 1) / 2].key < key) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i].key = key;
	h[i].x = x;
}

static void
heap_pop(struct heap_ent *h, size_t *n)
{
	struct heap_ent last = h[--*n];
	size_t i = 0, c;

	while ((c = 2 * i + 1) < *n) {
		if (c + 1 < *n && h[c + 1].key > h[c].key)
			c++;
		if (h[c].key <= last.key)
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = last;
}

/*
 * MIN: nxt[i] is the position of the next reference to the block
 * referenced at i.  The heap holds (next use, block) for cached blocks,
 * max first; an entry is current iff its block is cached with that key
 * (every access pushes a new one, older ones are skipped when they reach
 * the top: each key is a distinct position, or "never" for a block that
 * is not referenced again and so not re-keyed).
 */
int
sim_belady(struct trace *t, uint64_t cap, struct sim_result *r)
{
	uint64_t *nxt = NULL, *last = NULL, *key = NULL, used = 0;
	struct heap_ent *h = NULL;
	size_t i, hn = 0;
	bool *in = NULL;
	int rc;

	if ((rc = sim_start(t, r)))
		return rc;
	rc = -ENOMEM;
	nxt = malloc((t->t_nids + 1) * sizeof(*nxt));
	last = malloc((t->t_distinct + 1) * sizeof(*last));
	key = malloc((t->t_distinct + 1) * sizeof(*key));
	in = calloc(t->t_distinct + 1, sizeof(*in));
	h = malloc((t->t_nids + 1) * sizeof(*h));
	if (!nxt || !last || !key || !in || !h)
		goto out;
	memset(last, 0xff, (t->t_distinct + 1) * sizeof(*last));
	for (i = t->t_nids; i-- > 0;) {
		nxt[i] = last[t->t_dense[i]];
		last[t->t_dense[i]] = i;
	}
	for (i = 0; i < t->t_nreqs; i++) {
		const struct trace_req *q = &t->t_reqs[i];
		bool lead = true;
		uint32_t k;

		for (k = 0; k < q->tr_n; k++) {
			size_t pos = q->tr_off + k;
			uint32_t x = t->t_dense[pos];
			uint64_t n = nxt[pos];

			if (in[x]) {
				r->block_hits++;
				r->prefix_hits += lead;
				key[x] = n;
				heap_push(h, &hn, n, x);
				continue;
			}
			lead = false;
			if (!cap)
				continue;
			if (used == cap) {
				/* the current entry of the farthest block */
				while (!in[h[0].x] || key[h[0].x] != h[0].key)
					heap_pop(h, &hn);
				r->evictions++;
				if (n >= h[0].key)
					continue; /* x itself goes first */
				in[h[0].x] = false;
				heap_pop(h, &hn);
				used--;
			}
			in[x] = true;
			key[x] = n;
			heap_push(h, &hn, n, x);
			used++;
		}
	}
	rc = 0;
out:
	free(nxt);
	free(last);
	free(key);
	free(in);
	free(h);
	return rc;
}

/* ---- policies the pool can carry out (trace.h: sim_policy) ---- */

/*
 * The candidates of the study.  Sources: agent/evict.c ("cur"); SLRU
 * (Karedla, Love, Wherry, IEEE Computer 1994); ARC's ghost lists
 * (Megiddo, Modha, FAST'03); TinyLFU (Einziger, Friedman, Manes, ACM ToS
 * 2017); S3-FIFO (Yang, Zhang, Qiu, Yue, Rashmi, SOSP'23).
 */
const struct sim_policy sim_policies[] = {
	/* agent/evict.c: oldest first, a never-hit block's age twice */
	{ .name = "cur", .band = 0.02, .probation = 2 },
	/* the same passes in plain recency order */
	{ .name = "lru-pass", .band = 0.02, .probation = 1 },
	/* deep pages age faster */
	{ .name = "depth", .band = 0.02, .probation = 2, .depth_w = 0.5 },
	/* probation / protected, promotion on a hit */
	{ .name = "slru", .band = 0.02, .probation = 1, .protect = 0.8 },
	/* and a key evicted lately is admitted to protected */
	{ .name = "slru-ghost",
	  .band = 0.02,
	  .probation = 1,
	  .protect = 0.8,
	  .ghost = 1 },
	/* and a key seen twice lately (the sketch) too */
	{ .name = "tinylfu",
	  .band = 0.02,
	  .probation = 1,
	  .protect = 0.8,
	  .admit = 2 },
	{ .name = "s3fifo",
	  .kind = SIM_S3FIFO,
	  .band = 0.02,
	  .small = 0.1,
	  .ghost = 0.9,
	  .fmax = 3 },
	/* an oracle: orphans (parent not cached) first */
	{ .name = "orphan", .band = 0.02, .probation = 2, .dead_first = true },
	/* "cur" and a ghost set of 2 * cap evicted keys: a key put again
	 * while in it is exempt from probation */
	{ .name = "ghost", .band = 0.02, .probation = 2, .ghost = 2 },
	/* and a stiffer probation (x8) for puts that are not a
	 * continuation (the put's CONT bit: its hit prefix is >= half its
	 * request) */
	{ .name = "ghost-cont",
	  .band = 0.02,
	  .probation = 8,
	  .ghost = 2,
	  .cont = 0.5 },
	/* the agent's (issue 30, part C): ghost-cont with x2 for a
	 * continuation never hit (as built), and ARC's rule moving both
	 * weights by returns within a tenth of cap evictions (--evict-adapt
	 * 8) */
	{ .name = "ghost-arc",
	  .band = 0.02,
	  .probation = 8,
	  .ghost = 2,
	  .cont = 0.5,
	  .contp = 2,
	  .arc = 8,
	  .arcw = 0.1 },
	{ .name = NULL },
};

const struct sim_policy *
sim_policy_find(const char *name)
{
	const struct sim_policy *p;

	for (p = sim_policies; p->name; p++)
		if (!strcmp(p->name, name))
			return p;
	return NULL;
}

int
sim_policy_set(struct sim_policy *p, const char *kv)
{
	static const char *const keys[] = {
		"band",  "probation", "depth_w",    "protect", "ghost", "admit",
		"small", "fmax",      "dead_first", "freq_w",  "cont",  "contp",
		"adapt", "arc",       "arcw",       "lrucmp"
	};
	const char *eq = strchr(kv, '=');
	char *e;
	double v;
	size_t k, len;

	if (!eq)
		return -EINVAL;
	len = (size_t)(eq - kv);
	v = strtod(eq + 1, &e);
	if (e == eq + 1 || *e || !(v >= 0) || v > 1e6)
		return -EINVAL;
	for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
		if (strlen(keys[k]) == len && !memcmp(kv, keys[k], len))
			break;
	switch (k) {
	case 0:
		p->band = v;
		break;
	case 1:
		p->probation = v;
		break;
	case 2:
		p->depth_w = v;
		break;
	case 3:
		p->protect = v;
		break;
	case 4:
		p->ghost = v;
		break;
	case 5:
		p->admit = (unsigned)v;
		break;
	case 6:
		p->small = v;
		break;
	case 7:
		p->fmax = (unsigned)v;
		break;
	case 8:
		p->dead_first = v != 0;
		break;
	case 9:
		p->freq_w = v;
		break;
	case 10:
		p->cont = v;
		break;
	case 11:
		p->contp = v;
		break;
	case 12:
		p->adapt = v;
		break;
	case 13:
		p->arc = v;
		break;
	case 14:
		p->arcw = v;
		break;
	case 15:
		p->lrucmp = v;
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

/* The agent's count-min sketch: 4 rows of 8-bit counters (at most 15,
 * as 4-bit ones would), halved every 10 * cap additions. */
struct sketch {
	uint8_t *c;
	uint64_t mask, adds, period;
};

static uint64_t
sketch_at(const struct sketch *k, uint32_t x, unsigned row)
{
	return ((uint64_t)row << 62 | hash64((uint64_t)x * 4 + row)) & k->mask;
}

static unsigned
sketch_est(const struct sketch *k, uint32_t x)
{
	unsigned row, m = 255;

	for (row = 0; row < 4; row++) {
		unsigned v = k->c[row * (k->mask + 1) + sketch_at(k, x, row)];

		m = v < m ? v : m;
	}
	return m;
}

static void
sketch_add(struct sketch *k, uint32_t x, unsigned n)
{
	unsigned row;
	uint64_t i;

	if (!n)
		return;
	for (row = 0; row < 4; row++) {
		uint8_t *c = &k->c[row * (k->mask + 1) + sketch_at(k, x, row)];

		*c = (uint8_t)(*c + n > 15 ? 15 : *c + n);
	}
	k->adds += n;
	if (k->adds >= k->period) {
		for (i = 0; i < 4 * (k->mask + 1); i++)
			k->c[i] /= 2;
		k->adds = 0;
	}
}

/* One candidate of a pass: evicted before another if its class is
 * higher, then its score, then its depth; then the lower id. */
struct pcand {
	double score;
	uint32_t depth, x;
	unsigned cls;
};

static bool
pcand_before(const struct pcand *a, const struct pcand *b)
{
	if (a->cls != b->cls)
		return a->cls > b->cls;
	if (a->score != b->score)
		return a->score > b->score;
	if (a->depth != b->depth)
		return a->depth > b->depth;
	return a->x < b->x;
}

/* Put the k first (pcand_before) of c[0..n) in c[0..k), any order. */
static void
pcand_select(struct pcand *c, size_t n, size_t k, uint64_t *rng)
{
	size_t lo = 0, hi = n;

	while (hi - lo > 1 && k > lo && k < hi) {
		struct pcand pv = c[lo + rng_next(rng) % (hi - lo)], tmp;
		size_t i = lo, j = lo, m = hi;

		/* three-way: [lo,i) before pv, [i,j) equal, [m,hi) after */
		while (j < m) {
			if (pcand_before(&c[j], &pv)) {
				tmp = c[i];
				c[i++] = c[j];
				c[j++] = tmp;
			} else if (pcand_before(&pv, &c[j])) {
				tmp = c[--m];
				c[m] = c[j];
				c[j] = tmp;
			} else {
				j++;
			}
		}
		if (k <= i)
			hi = i;
		else if (k >= m)
			lo = m;
		else
			return;
	}
}

struct psim {
	const struct sim_policy *p;
	struct sim_result *r;
	uint64_t cap, used, now, band, rng;
	uint64_t gcount, gsize, *gseq; /* ghost: x evicted as the gseq-th */
	uint8_t *gprob;                /* ... while on probation */
	double pcur;            /* the probation now (p->adapt: adapted) */
	double scale;           /* p->arc: the share of the weights applied */
	double horizon;         /* p->lrucmp: LRU's, as the pool sees it */
	uint32_t *gtick;        /* p->lrucmp: x's last use when it left */
	uint32_t *ghist, *hbuf; /* ... the ghost set's keys (a ring) */
	size_t nghist, ghpos;
	double ev_w, ev_1;   /* p->arc: evictions at weight > 1, at 1 */
	uint32_t *set, *pos; /* the cached blocks */
	uint32_t *tick, *depth, *parent;
	uint8_t *hit, *prot, *freq, *pend;
	bool *in;
	struct sketch sk;
	struct pcand *cand;
};

static double
psim_score(const struct psim *s, uint32_t x)
{
	double a = (double)(s->now - s->tick[x]);

	if (!s->hit[x] && !s->prot[x])
		a *= 1 + s->scale * (s->pcur - 1);
	else if (s->hit[x] == 2 && !s->prot[x] && s->p->contp > 0)
		/* a continuation, never hit since */
		a *= 1 + s->scale * (s->p->contp - 1);
	if (s->p->depth_w > 0)
		a *= 1 + s->p->depth_w * log2(1.0 + s->depth[x]);
	if (s->p->freq_w > 0) {
		unsigned f = s->sk.c ? sketch_est(&s->sk, x) : s->freq[x];

		a /= 1 + s->p->freq_w * f;
	}
	return a;
}

static void
psim_evict(struct psim *s, uint32_t x)
{
	uint32_t last = s->set[--s->used];

	s->set[s->pos[x]] = last;
	s->pos[last] = s->pos[x];
	s->in[x] = false;
	s->r->evictions++;
	if (s->sk.c && s->pend[x]) /* the agent reads what it evicts */
		sketch_add(&s->sk, x, s->pend[x]);
	s->pend[x] = 0;
	if (s->gsize) {
		s->gseq[x] = ++s->gcount;
		s->gprob[x] = !s->hit[x] && !s->prot[x];
		if (s->gtick) {
			s->gtick[x] = s->tick[x];
			s->ghist[s->ghpos] = x;
			s->ghpos = (s->ghpos + 1) % s->gsize;
			if (s->nghist < s->gsize)
				s->nghist++;
			s->gprob[x] = !s->prot[x] &&
				      (!s->hit[x] ||
				       (s->hit[x] == 2 && s->p->contp > 1));
		}
		if (s->p->arc > 0) {
			/* weighted: never hit, on probation or a CONT page
			 * (x contp > 1) */
			bool w = !s->prot[x] &&
				 (!s->hit[x] ||
				  (s->hit[x] == 2 && s->p->contp > 1));
			double keep = 1 - 1 / (double)s->gsize;

			s->gprob[x] = w;
			s->ev_w = s->ev_w * keep + w;
			s->ev_1 = s->ev_1 * keep + !w;
		}
	}
}

static int
u32_desc(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* p->lrucmp: the horizon (psim_horizon) from the cached keys' last uses
 * and the ghost set's */
static void
psim_set_horizon(struct psim *s)
{
	size_t n = 0, i;

	for (i = 0; i < s->used; i++)
		s->hbuf[n++] = s->tick[s->set[i]];
	for (i = 0; i < s->nghist; i++) {
		uint32_t x = s->ghist[i];

		if (!s->in[x] && s->gseq[x] &&
		    s->gcount - s->gseq[x] < s->gsize)
			s->hbuf[n++] = s->gtick[x];
	}
	if (n < s->cap) {
		s->horizon = 0;
		return;
	}
	qsort(s->hbuf, n, sizeof(*s->hbuf), u32_desc);
	s->horizon = (double)(s->now - s->hbuf[s->cap - 1]);
}

/* A pass: demote protected's oldest past its share, then evict the band
 * judged worst. */
static void
psim_pass(struct psim *s)
{
	const struct sim_policy *p = s->p;
	size_t n = 0, i, nprot = 0, want;
	uint64_t limit = (uint64_t)(p->protect * (double)s->cap);

	s->r->passes++;
	for (i = 0; i < s->used; i++) {
		uint32_t x = s->set[i], up = s->parent[x];

		if (s->sk.c && s->pend[x]) { /* what the scan sees */
			sketch_add(&s->sk, x, s->pend[x]);
			s->pend[x] = 0;
		}
		nprot += s->prot[x];
		if (up != NO_PARENT && !s->in[up])
			s->r->dead_blocks++;
	}
	s->r->dead_seen += s->used;
	if (p->protect > 0 && nprot > limit) {
		for (i = 0; i < s->used; i++) {
			uint32_t x = s->set[i];

			if (!s->prot[x])
				continue;
			s->cand[n].score = psim_score(s, x);
			s->cand[n].depth = s->depth[x];
			s->cand[n].x = x;
			s->cand[n++].cls = 0;
		}
		want = nprot - limit;
		pcand_select(s->cand, n, want, &s->rng);
		for (i = 0; i < want; i++)
			s->prot[s->cand[i].x] = 0;
	}
	n = 0;
	for (i = 0; i < s->used; i++) {
		uint32_t x = s->set[i], up = s->parent[x];

		s->cand[n].score = psim_score(s, x);
		s->cand[n].depth = s->depth[x];
		s->cand[n].x = x;
		s->cand[n].cls = p->protect > 0 && !s->prot[x];
		if (p->dead_first && up != NO_PARENT && !s->in[up])
			s->cand[n].cls = 2;
		n++;
	}
	want = s->band < n ? s->band : n;
	pcand_select(s->cand, n, want, &s->rng);
	for (i = 0; i < want; i++)
		psim_evict(s, s->cand[i].x);
	if (p->lrucmp > 0)
		psim_set_horizon(s);
}

static void
psim_free(struct psim *s)
{
	free(s->gseq);
	free(s->gprob);
	free(s->gtick);
	free(s->ghist);
	free(s->hbuf);
	free(s->set);
	free(s->pos);
	free(s->tick);
	free(s->depth);
	free(s->parent);
	free(s->hit);
	free(s->prot);
	free(s->freq);
	free(s->pend);
	free(s->in);
	free(s->sk.c);
	free(s->cand);
}

/* The state of every block, and each one's first-seen parent. */
static int
psim_init(struct psim *s, struct trace *t, uint64_t cap,
	  const struct sim_policy *p, struct sim_result *r)
{
	size_t d = t->t_distinct + 1, i;

	memset(s, 0, sizeof(*s));
	s->p = p;
	s->r = r;
	s->cap = cap;
	s->rng = 1;
	s->band = (uint64_t)(p->band * (double)cap + 0.5);
	if (!s->band)
		s->band = 1;
	s->gsize = (uint64_t)(p->ghost * (double)cap + 0.5);
	s->gseq = calloc(d, sizeof(*s->gseq));
	s->gprob = calloc(d, sizeof(*s->gprob));
	s->pcur = p->probation;
	s->scale = 1;
	if (p->lrucmp > 0 &&
	    (!(s->gtick = calloc(d, sizeof(*s->gtick))) ||
	     !(s->ghist = calloc(s->gsize + 1, sizeof(*s->ghist))) ||
	     !(s->hbuf = calloc(cap + s->gsize + 1, sizeof(*s->hbuf)))))
		return -ENOMEM;
	s->set = malloc(d * sizeof(*s->set));
	s->pos = malloc(d * sizeof(*s->pos));
	s->tick = calloc(d, sizeof(*s->tick));
	s->depth = calloc(d, sizeof(*s->depth));
	s->parent = malloc(d * sizeof(*s->parent));
	s->hit = calloc(d, 1);
	s->prot = calloc(d, 1);
	s->freq = calloc(d, 1);
	s->pend = calloc(d, 1);
	s->in = calloc(d, sizeof(*s->in));
	s->cand = malloc(d * sizeof(*s->cand));
	if (!s->gseq || !s->gprob || !s->set || !s->pos || !s->tick ||
	    !s->depth || !s->parent || !s->hit || !s->prot || !s->freq ||
	    !s->pend || !s->in || !s->cand)
		return -ENOMEM;
	if (p->admit) {
		uint64_t w = 64;

		while (w < cap)
			w *= 2;
		s->sk.mask = w - 1;
		s->sk.period = 10 * (cap ? cap : 1);
		s->sk.c = calloc(4 * w, 1);
		if (!s->sk.c)
			return -ENOMEM;
	}
	memset(s->parent, 0xff, d * sizeof(*s->parent));
	/* orphans only on a chained trace (else a first-seen parent says
	 * nothing) */
	for (i = 0; !t->t_chain_breaks && i < t->t_nreqs; i++) {
		const struct trace_req *q = &t->t_reqs[i];
		uint32_t k, up = NO_PARENT;

		for (k = 0; k < q->tr_n; k++) {
			uint32_t x = t->t_dense[q->tr_off + k];

			if (s->parent[x] == NO_PARENT && x != up && k)
				s->parent[x] = up;
			up = x;
		}
	}
	return 0;
}

/* p->lrucmp: exact LRU's horizon, as the pool can know it (each pass):
 * the age of the cap-th most recently used key among those cached and
 * those in the ghost set (the keys evicted lately, with their last use) */
static double
psim_horizon(const struct psim *s)
{
	return s->horizon > 0 ? s->horizon : 1e18;
}

/* p->lrucmp: one event against LRU: a loss (dir > 0: the weights go
 * toward plain recency) or a gain */
static void
psim_lrucmp(struct psim *s, int dir)
{
	double st = s->p->lrucmp / (double)s->cap;

	s->scale -= dir * st;
	s->scale = s->scale < 0 ? 0 : s->scale > 1 ? 1 : s->scale;
}

static int
sim_recency(struct trace *t, uint64_t cap, const struct sim_policy *p,
	    struct sim_result *r)
{
	struct psim s;
	size_t i;
	int rc;

	if ((rc = psim_init(&s, t, cap, p, r)))
		goto out;
	for (i = 0; i < t->t_nreqs; i++) {
		const struct trace_req *q = &t->t_reqs[i];
		bool lead = true, cont = false;
		uint32_t k;

		s.now = i;
		for (k = 0; k < q->tr_n; k++) {
			uint32_t x = t->t_dense[q->tr_off + k];

			if (s.in[x]) {
				r->block_hits++;
				r->prefix_hits += lead;
				/* a hit LRU would not have had: the value is
				 * older than LRU's horizon */
				if (p->lrucmp > 0 &&
				    (double)(s.now - s.tick[x]) >
					    psim_horizon(&s))
					psim_lrucmp(&s, -1);
				if (s.tick[x] != s.now) { /* one store a tick */
					s.hit[x] = 1;
					if (p->protect > 0)
						s.prot[x] = 1;
					if (s.pend[x] < 3)
						s.pend[x]++;
					if (s.freq[x] < p->fmax)
						s.freq[x]++;
				}
				s.tick[x] = (uint32_t)s.now;
				continue;
			}
			if (lead && p->cont > 0)
				cont = k && (double)k >= p->cont * q->tr_n;
			lead = false;
			if (!cap)
				continue;
			if (s.used == cap)
				psim_pass(&s);
			s.in[x] = true;
			s.tick[x] = (uint32_t)s.now;
			s.depth[x] = k;
			s.hit[x] = cont ? 2 : 0; /* the put's CONT bit */
			s.prot[x] = 0;
			s.freq[x] = 0;
			s.pend[x] = 1; /* the put, seen by the next scan */
			if (s.gsize && s.gseq[x] &&
			    s.gcount - s.gseq[x] < s.gsize) {
				uint64_t gs = s.gseq[x];

				r->ghost_hits++;
				/* a miss LRU would not have had: it left under
				 * a weight and comes back younger than LRU's
				 * horizon */
				if (p->lrucmp > 0 && s.gprob[x] &&
				    (double)(s.now - s.gtick[x]) <
					    psim_horizon(&s))
					psim_lrucmp(&s, 1);
				s.gseq[x] = 0;
				/* a probation victim back: too strict; a
				 * protected one: too lenient */
				/* ARC's rule (Megiddo, Modha, FAST'03): a
				 * victim of the weights back moves the scale
				 * down, one evicted at weight 1 up, each
				 * step larger when its kind of eviction is
				 * the rarer: the scale settles where both
				 * kinds come back at the same rate */
				if (p->arc > 0 &&
				    (!p->arcw ||
				     (double)(s.gcount - gs) <
					     p->arcw * (double)s.cap)) {
					double st = p->arc / (double)s.cap, f;

					if (s.gprob[x]) {
						f = s.ev_w > 0 ?
							    s.ev_1 / s.ev_w :
							    1;
						s.scale -= st * (f > 1 ? f : 1);
					} else {
						f = s.ev_1 > 0 ?
							    s.ev_w / s.ev_1 :
							    1;
						s.scale += st * (f > 1 ? f : 1);
					}
					s.scale = s.scale < 0 ? 0 :
						  s.scale > 1 ? 1 :
								s.scale;
				}
				if (p->adapt > 0 && s.gprob[x])
					s.pcur = s.pcur - p->adapt < 1 ?
							 1 :
							 s.pcur - p->adapt;
				else if (p->adapt > 0)
					s.pcur = s.pcur + p->adapt >
								 p->probation ?
							 p->probation :
							 s.pcur + p->adapt;
				s.prot[x] = 1; /* one segment: no probation */
				r->admitted++;
			}
			if (s.sk.c && p->admit && !s.prot[x] &&
			    sketch_est(&s.sk, x) >= p->admit) {
				s.prot[x] = 1;
				r->admitted++;
			}
			s.pos[x] = (uint32_t)s.used;
			s.set[s.used++] = x;
		}
	}
	rc = 0;
out:
	psim_free(&s);
	return rc;
}

/* A FIFO of block ids (a ring of cap + 1). */
struct fifo {
	uint32_t *q;
	uint64_t head, n, size;
};

static void
fifo_push(struct fifo *f, uint32_t x)
{
	f->q[(f->head + f->n++) % f->size] = x;
}

static uint32_t
fifo_pop(struct fifo *f)
{
	uint32_t x = f->q[f->head];

	f->head = (f->head + 1) % f->size;
	f->n--;
	return x;
}

/*
 * S3-FIFO.  The blocks a request puts join their FIFO at the request's
 * end, deepest first (the agent numbers what it first sees in a scan by
 * tick, then depth, deepest first); until then they are not candidates.
 */
static int
sim_s3fifo(struct trace *t, uint64_t cap, const struct sim_policy *p,
	   struct sim_result *r)
{
	struct fifo small = { 0 }, main = { 0 };
	uint64_t cap_small, gsize, gcount = 0, *gseq = NULL, used = 0, band;
	uint32_t *newb = NULL, nnew;
	uint8_t *freq = NULL, *inmain = NULL;
	bool *in = NULL;
	size_t i, d = t->t_distinct + 1;
	int rc = -ENOMEM;

	cap_small = (uint64_t)(p->small * (double)cap + 0.5);
	gsize = (uint64_t)(p->ghost * (double)cap + 0.5);
	band = (uint64_t)(p->band * (double)cap + 0.5);
	if (!band)
		band = 1;
	small.size = main.size = cap + 1;
	small.q = malloc(small.size * sizeof(*small.q));
	main.q = malloc(main.size * sizeof(*main.q));
	gseq = calloc(d, sizeof(*gseq));
	freq = calloc(d, 1);
	inmain = calloc(d, 1);
	in = calloc(d, sizeof(*in));
	newb = malloc((t->t_nids + 1) * sizeof(*newb));
	if (!small.q || !main.q || !gseq || !freq || !inmain || !in || !newb)
		goto out;
	for (i = 0; i < t->t_nreqs; i++) {
		const struct trace_req *q = &t->t_reqs[i];
		bool lead = true;
		uint32_t k;

		nnew = 0;
		for (k = 0; k < q->tr_n; k++) {
			uint32_t x = t->t_dense[q->tr_off + k];
			uint64_t e;

			if (in[x]) {
				r->block_hits++;
				r->prefix_hits += lead;
				if (freq[x] < p->fmax)
					freq[x]++;
				continue;
			}
			lead = false;
			if (!cap)
				continue;
			/* a pass: band evictions, the S3-FIFO way */
			for (e = 0;
			     used + e == cap && e < band && small.n + main.n;
			     e++) {
				for (;;) {
					uint32_t y;

					if (small.n &&
					    (small.n >= cap_small || !main.n)) {
						y = fifo_pop(&small);
						if (freq[y]) {
							freq[y] = 0;
							inmain[y] = 1;
							fifo_push(&main, y);
							continue;
						}
						if (gsize)
							gseq[y] = ++gcount;
					} else {
						y = fifo_pop(&main);
						if (freq[y]) {
							freq[y]--;
							fifo_push(&main, y);
							continue;
						}
					}
					in[y] = false;
					used--;
					r->evictions++;
					break;
				}
			}
			if (used == cap) { /* only this request's blocks */
				r->evictions++;
				continue;
			}
			in[x] = true;
			freq[x] = 0;
			inmain[x] = 0;
			if (gsize && gseq[x] && gcount - gseq[x] < gsize) {
				r->ghost_hits++;
				r->admitted++;
				gseq[x] = 0;
				inmain[x] = 1;
			}
			used++;
			newb[nnew++] = x;
		}
		while (nnew--) {
			uint32_t x = newb[nnew];

			fifo_push(inmain[x] ? &main : &small, x);
		}
	}
	rc = 0;
out:
	free(small.q);
	free(main.q);
	free(gseq);
	free(freq);
	free(inmain);
	free(in);
	free(newb);
	return rc;
}

int
sim_policy(struct trace *t, uint64_t cap, const struct sim_policy *p,
	   struct sim_result *r)
{
	int rc;

	if (p->band < 0 || p->band > 1 || p->protect < 0 || p->protect > 1 ||
	    p->probation < 0 || p->small < 0 || p->small > 1)
		return -EINVAL;
	if ((rc = sim_start(t, r)))
		return rc;
	if (p->kind == SIM_S3FIFO)
		return sim_s3fifo(t, cap, p, r);
	return sim_recency(t, cap, p, r);
}
