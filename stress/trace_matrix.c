/* SPDX-License-Identifier: MIT */
/*
 * trace_matrix - which eviction policy to put into the agent, decided by
 * measurement: every generator of stress/trace.h (and a real trace with
 * --trace) at 5, 10 and 25% of its distinct blocks, through exact LRU,
 * the offline optimum (Belady's MIN) and every candidate policy the pool
 * can carry out (trace.h: sim_policy), in one run.  Each cell prints the
 * candidate's hit ratio over LRU's and the share of the LRU -> Belady gap
 * it closes.  The headline ratio is the prefix hit ratio on a chained
 * trace, the block hit ratio on one that is not (RAG: a document's
 * blocks are reused after any prefix, and MIN bounds block hits only).
 *
 * The traces are split: the policies' parameters were tuned on the
 * "tune" traces (sessions, chat; seed 1); the others ("held-out": other
 * seeds, other generators, a one-pass scan mixed in) were not looked at
 * while tuning, and the goals are judged on them: >= 1.0x LRU on every
 * trace and size, >= 1/3 of the gap closed at 5 and 10%.
 *
 *   trace_matrix [--quick] [--requests N] [--trace FILE] [--limit N]
 *                [--traces NAME,...] [--policy NAME[:key=value,...]]...
 *                [--sizes P,P,...] [--md FILE]
 *
 * --quick: 3,000 requests a generated trace (the default test run's
 * smoke run); default 10,000.  --policy: only these candidates (repeat;
 * NAME:key=value,... a variant of NAME with parameters changed, e.g.
 * slru-ghost:protect=0.9,ghost=2).  --md: the summary as markdown.
 * A benchmark: it asserts nothing about the figures; exit 0, 1 on a
 * usage or set-up error.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stress/trace.h"

#define MAX_POLICIES 32
#define MAX_SIZES 8

struct mtrace {
	const char *name;
	enum trace_gen_kind kind;
	uint64_t seed;
	double scan;
	bool tune;
};

/* The study's traces: tuned on the first two, judged on the rest. */
static const struct mtrace traces[] = {
	{ "sessions", TRACE_GEN_SESSIONS, 1, 0, true },
	{ "chat", TRACE_GEN_CHAT, 1, 0, true },
	{ "sessions+scan", TRACE_GEN_SESSIONS, 2, 0.1, false },
	{ "chat+scan", TRACE_GEN_CHAT, 2, 0.1, false },
	{ "agent", TRACE_GEN_AGENT, 3, 0, false },
	{ "agent+scan", TRACE_GEN_AGENT, 4, 0.1, false },
	{ "rag", TRACE_GEN_RAG, 5, 0, false },
	{ "rag+scan", TRACE_GEN_RAG, 6, 0.1, false },
};
#define NTRACES (sizeof(traces) / sizeof(traces[0]))

struct cell {
	double lru, bel, v[MAX_POLICIES];
	bool held_out;
	double pct;
};

struct summary {
	double min_ratio[MAX_POLICIES], min_gap[MAX_POLICIES];
	double sum_gap[MAX_POLICIES], sum_ratio[MAX_POLICIES];
	unsigned n_gap;
	unsigned cells;
};

static struct sim_policy pols[MAX_POLICIES];
static char pol_names[MAX_POLICIES][96];
static unsigned npol;
static double sizes[MAX_SIZES] = { 5, 10, 25 };
static unsigned nsizes = 3;

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
add_policy(const char *spec)
{
	const struct sim_policy *base;
	char buf[96], *colon, *kv, *save;

	if (npol == MAX_POLICIES || strlen(spec) >= sizeof(buf))
		return -EINVAL;
	snprintf(buf, sizeof(buf), "%s", spec);
	colon = strchr(buf, ':');
	if (colon)
		*colon = 0;
	base = sim_policy_find(buf);
	if (!base)
		return -EINVAL;
	pols[npol] = *base;
	if (colon)
		for (kv = strtok_r(colon + 1, ",", &save); kv;
		     kv = strtok_r(NULL, ",", &save))
			if (sim_policy_set(&pols[npol], kv))
				return -EINVAL;
	snprintf(pol_names[npol], sizeof(pol_names[npol]), "%s", spec);
	pols[npol].name = pol_names[npol];
	npol++;
	return 0;
}

static double
gap(double v, double lru, double bel)
{
	return bel - lru > 1e-9 ? (v - lru) / (bel - lru) : 0;
}

/* One trace through every size and policy; a row a size. */
static int
run_trace(struct trace *t, const char *name, bool tune, struct summary *sm,
	  FILE *md)
{
	struct sim_result lru, bel, inf, r;
	double t0 = now_s();
	bool chained;
	unsigned si, k;
	int rc;

	if ((rc = trace_densify(t)) || (rc = sim_infinite(t, &inf)))
		return rc;
	chained = t->t_chain_breaks == 0;
	printf("\n== %s (%s): %zu requests, %zu references, %zu distinct, "
	       "infinite %.3f; %s hit ratio\n",
	       name, tune ? "tune" : "held-out", t->t_nreqs, t->t_nids,
	       t->t_distinct,
	       chained ? sim_prefix_ratio(&inf) : sim_block_ratio(&inf),
	       chained ? "prefix" : "block (not chained)");
	printf("%5s %7s %6s %6s", "size", "blocks", "LRU", "Belady");
	for (k = 0; k < npol; k++)
		printf(" | %-14.14s", pols[k].name);
	printf("\n");
	for (si = 0; si < nsizes; si++) {
		uint64_t cap =
			(uint64_t)((double)t->t_distinct * sizes[si] / 100 +
				   0.5);
		double l, b;

		if ((rc = sim_lru(t, cap, &lru)) ||
		    (rc = sim_belady(t, cap, &bel)))
			return rc;
		l = chained ? sim_prefix_ratio(&lru) : sim_block_ratio(&lru);
		b = chained ? sim_prefix_ratio(&bel) : sim_block_ratio(&bel);
		printf("%4g%% %7llu %6.3f %6.3f", sizes[si],
		       (unsigned long long)cap, l, b);
		if (md)
			fprintf(md, "| %s%s | %g%% | %.3f | %.3f |", name,
				tune ? " (tune)" : "", sizes[si], l, b);
		for (k = 0; k < npol; k++) {
			double v, ratio, g;

			if ((rc = sim_policy(t, cap, &pols[k], &r)))
				return rc;
			v = chained ? sim_prefix_ratio(&r) :
				      sim_block_ratio(&r);
			ratio = l > 0 ? v / l : 1;
			g = gap(v, l, b);
			printf(" | %5.3fx %5.0f%% ", ratio, 100 * g);
			if (md)
				fprintf(md, " %.3fx, %.0f%% |", ratio, 100 * g);
			if (!sm->cells || ratio < sm->min_ratio[k])
				sm->min_ratio[k] = ratio;
			sm->sum_ratio[k] += ratio;
			if (!tune && sizes[si] <= 10) {
				if (!sm->n_gap || g < sm->min_gap[k])
					sm->min_gap[k] = g;
				sm->sum_gap[k] += g;
			}
		}
		printf("\n");
		if (md)
			fprintf(md, "\n");
		sm->cells++;
		if (!tune && sizes[si] <= 10)
			sm->n_gap++;
	}
	printf("   (%.2f s)\n", now_s() - t0);
	return 0;
}

static void
usage(FILE *f)
{
	fprintf(f, "usage: trace_matrix [--quick] [--requests N] [--trace FILE]"
		   " [--limit N]\n"
		   "       [--traces NAME,...] [--policy NAME[:k=v,...]]..."
		   " [--sizes P,...] [--md FILE]\n"
		   "policies:");
	for (const struct sim_policy *p = sim_policies; p->name; p++)
		fprintf(f, " %s", p->name);
	fprintf(f, "\ntraces:");
	for (size_t i = 0; i < NTRACES; i++)
		fprintf(f, " %s", traces[i].name);
	fprintf(f, "\n");
}

static bool
selected(const char *list, const char *name)
{
	size_t n = strlen(name);
	const char *p = list;

	if (!list)
		return true;
	while ((p = strstr(p, name))) {
		if ((p == list || p[-1] == ',') && (p[n] == ',' || !p[n]))
			return true;
		p += n;
	}
	return false;
}

int
main(int argc, char **argv)
{
	enum {
		O_QUICK = 256,
		O_REQS,
		O_TRACE,
		O_LIMIT,
		O_TRACES,
		O_POLICY,
		O_SIZES,
		O_MD
	};
	static const struct option lo[] = {
		{ "quick", no_argument, NULL, O_QUICK },
		{ "requests", required_argument, NULL, O_REQS },
		{ "trace", required_argument, NULL, O_TRACE },
		{ "limit", required_argument, NULL, O_LIMIT },
		{ "traces", required_argument, NULL, O_TRACES },
		{ "policy", required_argument, NULL, O_POLICY },
		{ "sizes", required_argument, NULL, O_SIZES },
		{ "md", required_argument, NULL, O_MD },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *file = NULL, *only = NULL, *mdpath = NULL;
	unsigned long requests = 10000, limit = 0;
	struct summary sm;
	double t0 = now_s();
	FILE *md = NULL;
	unsigned k;
	size_t i;
	int opt, rc;

	memset(&sm, 0, sizeof(sm));
	while ((opt = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		char *e, *tok, *save;

		switch (opt) {
		case O_QUICK:
			requests = 3000;
			break;
		case O_REQS:
			requests = strtoul(optarg, &e, 10);
			if (*e || !requests)
				goto bad;
			break;
		case O_TRACE:
			file = optarg;
			break;
		case O_LIMIT:
			limit = strtoul(optarg, &e, 10);
			if (*e)
				goto bad;
			break;
		case O_TRACES:
			only = optarg;
			break;
		case O_POLICY:
			if (add_policy(optarg)) {
				fprintf(stderr,
					"trace_matrix: bad --policy %s\n",
					optarg);
				goto bad;
			}
			break;
		case O_SIZES:
			nsizes = 0;
			for (tok = strtok_r(optarg, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				double v = strtod(tok, &e);

				if (*e || !(v > 0) || v > 100 ||
				    nsizes == MAX_SIZES)
					goto bad;
				sizes[nsizes++] = v;
			}
			if (!nsizes)
				goto bad;
			break;
		case O_MD:
			mdpath = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto bad;
		}
	}
	if (optind != argc)
		goto bad;
	if (!npol)
		for (const struct sim_policy *p = sim_policies; p->name; p++)
			add_policy(p->name);
	if (mdpath && !(md = fopen(mdpath, "w"))) {
		perror(mdpath);
		return 1;
	}
	if (md) {
		fprintf(md, "| trace | size | LRU | Belady |");
		for (k = 0; k < npol; k++)
			fprintf(md, " %s |", pols[k].name);
		fprintf(md, "\n|---|---:|---:|---:|");
		for (k = 0; k < npol; k++)
			fprintf(md, "---:|");
		fprintf(md, "\n");
	}
	printf("trace_matrix: %lu requests a generated trace; cell: ratio to "
	       "exact LRU, share of the LRU->Belady gap closed\n",
	       requests);
	for (i = 0; i < NTRACES; i++) {
		struct trace_gen_cfg g;
		struct trace t;

		if (!selected(only, traces[i].name))
			continue;
		trace_gen_preset(&g, traces[i].kind);
		g.seed = traces[i].seed;
		g.requests = (uint32_t)requests;
		g.scan_share = traces[i].scan;
		trace_init(&t);
		if ((rc = trace_gen(&t, &g)) ||
		    (rc = run_trace(&t, traces[i].name, traces[i].tune, &sm,
				    md))) {
			fprintf(stderr, "trace_matrix: %s: %s\n",
				traces[i].name, strerror(-rc));
			return 1;
		}
		trace_free(&t);
	}
	if (file) {
		struct trace t;
		size_t badl;
		FILE *f = fopen(file, "r");

		if (!f) {
			perror(file);
			return 1;
		}
		trace_init(&t);
		rc = trace_load_jsonl(&t, f, file, stderr, &badl);
		fclose(f);
		if (!rc && limit && t.t_nreqs > limit) {
			struct trace u;

			trace_init(&u);
			for (i = 0; i < limit && !rc; i++)
				rc = trace_add(&u, t.t_reqs[i].tr_ts_ms,
					       t.t_ids + t.t_reqs[i].tr_off,
					       t.t_reqs[i].tr_n);
			trace_free(&t);
			t = u;
		}
		if (rc || (rc = run_trace(&t, file, false, &sm, md))) {
			fprintf(stderr, "trace_matrix: %s: %s\n", file,
				strerror(-rc));
			return 1;
		}
		trace_free(&t);
	}
	printf("\n== summary: %u cells; the gap closed on held-out traces "
	       "at <= 10%% (%u cells)\n",
	       sm.cells, sm.n_gap);
	printf("%-28s %9s %9s %9s %9s\n", "policy", "min x", "mean x",
	       "min gap", "mean gap");
	if (md)
		fprintf(md, "\n| policy | min x LRU | mean x LRU | min gap "
			    "closed (held-out, 5-10%%) | mean gap closed |\n"
			    "|---|---:|---:|---:|---:|\n");
	for (k = 0; k < npol; k++) {
		double mg = sm.n_gap ? sm.sum_gap[k] / sm.n_gap : 0;
		double mr = sm.cells ? sm.sum_ratio[k] / sm.cells : 0;

		printf("%-28s %8.3fx %8.3fx %8.0f%% %8.0f%%\n", pols[k].name,
		       sm.min_ratio[k], mr, 100 * sm.min_gap[k], 100 * mg);
		if (md)
			fprintf(md,
				"| %s | %.3fx | %.3fx | %.0f%% | %.0f%% |\n",
				pols[k].name, sm.min_ratio[k], mr,
				100 * sm.min_gap[k], 100 * mg);
	}
	if (md)
		fclose(md);
	printf("trace_matrix: done in %.1f s\n", now_s() - t0);
	return 0;
bad:
	usage(stderr);
	return 1;
}
