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

int
trace_gen(struct trace *t, const struct trace_gen_cfg *g)
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
