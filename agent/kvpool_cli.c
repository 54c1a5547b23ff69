/* SPDX-License-Identifier: MIT */
/*
 * kvpool - operator and debugging CLI.  Reads the segment directly, so
 * stat and clients work with the agent down.
 *
 *   kvpool [--pool NAME] [--ns NS] put KEY FILE|-
 *   kvpool [--pool NAME] [--ns NS] get KEY FILE|-
 *   kvpool [--pool NAME] [--ns NS] exists KEY...
 *   kvpool [--pool NAME] [--ns NS] del KEY
 *   kvpool [--pool NAME] stat [--json]
 *   kvpool [--pool NAME] clients
 *   kvpool [--pool NAME] top [--count N] [--interval SECONDS]
 */
#include <getopt.h>

#include "agent/agent_int.h"
#include "agent/kvp_check.h"

static int
kvp_cmd_stat(const struct kvp_seg *s, const char *pool, bool json)
{
	struct kvp_metrics m;

	kvp_metrics_collect(s, pool, &m);
	if (json)
		kvp_metrics_json(&m, stdout);
	else
		kvp_metrics_table(&m, stdout);
	return fflush(stdout) ? -EIO : 0;
}

static double
kvp_rate(uint64_t now, uint64_t before, double secs)
{
	return now >= before && secs > 0 ? (double)(now - before) / secs : 0.0;
}

/* One frame of kvpool top: rates over the last interval, occupancy now. */
static void
kvp_top_frame(const struct kvp_metrics *m, const struct kvp_metrics *p,
	      double secs, bool tty)
{
	const uint64_t *c = m->ctr, *pc = p->ctr, *a = m->actr, *pa = p->actr;
	uint64_t gets = c[KVP_CTR_GET] - pc[KVP_CTR_GET];
	uint64_t hits = c[KVP_CTR_GET_HIT] + c[KVP_CTR_RESOLVE_OK] -
			pc[KVP_CTR_GET_HIT] - pc[KVP_CTR_RESOLVE_OK];
	uint64_t dh = c[KVP_CTR_GET_HIT] - pc[KVP_CTR_GET_HIT];
	time_t t = time(NULL);
	struct tm tm;
	char when[32], pool[5 * KVP_POOL_NAME_MAX];

	localtime_r(&t, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	if (tty)
		printf("\033[H\033[2J");
	printf("kvpool top - pool %s - %s - agent %s - every %.1fs\n",
	       kvp_metrics_pool_tty(m, pool, sizeof(pool)), when,
	       m->agent_alive ? "up" : "DOWN", secs);
	printf("ops/s     put %10.0f  get %10.0f  exists %10.0f  delete %8.0f\n",
	       kvp_rate(c[KVP_CTR_PUT], pc[KVP_CTR_PUT], secs),
	       kvp_rate(gets, 0, secs),
	       kvp_rate(c[KVP_CTR_EXISTS], pc[KVP_CTR_EXISTS], secs),
	       kvp_rate(c[KVP_CTR_DELETE], pc[KVP_CTR_DELETE], secs));
	printf("MB/s      put %10.1f  get %10.1f  ssd read %8.1f  ssd write %6.1f\n",
	       kvp_rate(c[KVP_CTR_PUT_BYTES], pc[KVP_CTR_PUT_BYTES], secs) /
		       1e6,
	       kvp_rate(c[KVP_CTR_GET_BYTES] + c[KVP_CTR_GET_SSD_BYTES],
			pc[KVP_CTR_GET_BYTES] + pc[KVP_CTR_GET_SSD_BYTES],
			secs) /
		       1e6,
	       kvp_rate(a[KVP_ACTR_SSD_READ_BYTES], pa[KVP_ACTR_SSD_READ_BYTES],
			secs) /
		       1e6,
	       kvp_rate(a[KVP_ACTR_SSD_WRITE_BYTES],
			pa[KVP_ACTR_SSD_WRITE_BYTES], secs) /
		       1e6);
	if (gets)
		printf("hit ratio %5.1f%%  (DRAM %5.1f%%, SSD %5.1f%%)\n",
		       100.0 * (double)hits / (double)gets,
		       100.0 * (double)dh / (double)gets,
		       100.0 * (double)(hits - dh) / (double)gets);
	else
		printf("hit ratio     -   (no gets)\n");
	printf("events/s  demote %7.0f  promote %7.0f  evict %7.0f  busy %7.0f  reaped %5.0f\n",
	       kvp_rate(a[KVP_ACTR_DEMOTE], pa[KVP_ACTR_DEMOTE], secs),
	       kvp_rate(a[KVP_ACTR_PROMOTE], pa[KVP_ACTR_PROMOTE], secs),
	       kvp_rate(a[KVP_ACTR_EVICT] + a[KVP_ACTR_EVICT_SSD],
			pa[KVP_ACTR_EVICT] + pa[KVP_ACTR_EVICT_SSD], secs),
	       kvp_rate(a[KVP_ACTR_BUSY_REJECT] + c[KVP_CTR_PUT_BUSY],
			pa[KVP_ACTR_BUSY_REJECT] + pc[KVP_CTR_PUT_BUSY], secs),
	       kvp_rate(a[KVP_ACTR_REAP_CLIENTS], pa[KVP_ACTR_REAP_CLIENTS],
			secs));
	printf("DRAM      %6.1f%% of %.0f MiB, %llu entries\n",
	       m->dram_total ?
		       100.0 * (double)m->dram_used / (double)m->dram_total :
		       0.0,
	       (double)m->dram_total / 1048576.0,
	       (unsigned long long)m->entries[KVP_MTIER_DRAM]);
	if (m->ssd_enabled)
		printf("SSD       %6.1f%% of %.0f MiB, %llu entries; staging %llu/%llu pages "
		       "(peak %llu)\n",
		       m->ssd_total ? 100.0 * (double)m->ssd_used /
					      (double)m->ssd_total :
				      0.0,
		       (double)m->ssd_total / 1048576.0,
		       (unsigned long long)m->entries[KVP_MTIER_SSD],
		       (unsigned long long)m->staging_in_use,
		       (unsigned long long)m->staging_total,
		       (unsigned long long)m->staging_peak);
	printf("clients   %llu alive, %llu dead; %llu holds, %llu leases\n\n",
	       (unsigned long long)m->clients_live,
	       (unsigned long long)m->clients_dead,
	       (unsigned long long)m->holds, (unsigned long long)m->leases);
	fflush(stdout);
}

/* kvpool top [--count N] [--interval SECONDS]: a frame every interval
 * (default 1 s), N frames (default: until interrupted). */
static int
kvp_cmd_top(const struct kvp_seg *s, const char *pool, int argc, char **argv)
{
	struct kvp_metrics *m = malloc(2 * sizeof(*m)), *cur, *prev;
	double interval = 1.0;
	long count = -1, k;
	bool tty = isatty(STDOUT_FILENO);
	uint64_t t_prev;
	int i;

	for (i = 0; i < argc; i++) {
		char *end = NULL;

		if (!strcmp(argv[i], "--count") && i + 1 < argc) {
			count = strtol(argv[++i], &end, 10);
			if (*end || count < 1)
				goto usage;
		} else if (!strcmp(argv[i], "--interval") && i + 1 < argc) {
			interval = strtod(argv[++i], &end);
			if (*end || !(interval >= 0.01 && interval <= 3600))
				goto usage;
		} else {
			goto usage;
		}
	}
	if (!m)
		return -ENOMEM;
	prev = &m[0];
	cur = &m[1];
	kvp_metrics_collect(s, pool, prev);
	t_prev = kvp_now_ns(CLOCK_MONOTONIC);
	for (k = 0; count < 0 || k < count; k++) {
		struct timespec ts = {
			(time_t)interval,
			(long)((interval - (double)(time_t)interval) * 1e9)
		};
		struct kvp_metrics *tmp;
		uint64_t now;

		while (nanosleep(&ts, &ts) && errno == EINTR)
			; /* the refresh period of an interactive view */
		kvp_metrics_collect(s, pool, cur);
		now = kvp_now_ns(CLOCK_MONOTONIC);
		kvp_top_frame(cur, prev, (double)(now - t_prev) / 1e9, tty);
		t_prev = now;
		tmp = prev;
		prev = cur;
		cur = tmp;
	}
	free(m);
	return 0;
usage:
	free(m);
	fprintf(stderr, "usage: kvpool top [--count N] [--interval SECONDS]\n");
	return -EINVAL;
}

/*
 * Read all of f, at most max bytes: 0 and the bytes, or -errno of the
 * read that failed, -ENOMEM (the buffer could not grow), -E2BIG (more
 * than max bytes).  All or nothing: on an error nothing is returned, so a put
 * never stores the part that was read before the failure.
 */
static int
kvp_read_all(FILE *f, uint64_t max, unsigned char **buf, uint64_t *len)
{
	/* max + 1: one byte more than a value may have tells it is too large */
	size_t lim = max < SIZE_MAX - 1 ? (size_t)max + 1 : SIZE_MAX;
	size_t cap = lim < (1u << 20) ? lim : 1u << 20, n = 0;
	unsigned char *b = malloc(cap), *nb;
	int rc;

	*buf = NULL;
	*len = 0;
	if (!b)
		return -ENOMEM;
	for (;;) {
		size_t want = cap - n, r = fread(b + n, 1, want, f);

		n += r;
		if (n > max) {
			rc = -E2BIG;
			goto err;
		}
		if (r < want) {
			if (ferror(f)) {
				rc = errno ? -errno : -EIO;
				goto err;
			}
			break; /* end of the input */
		}
		cap = cap > lim / 2 ? lim : cap * 2;
		nb = realloc(b, cap);
		if (!nb) {
			rc = -ENOMEM;
			goto err;
		}
		b = nb;
	}
	*buf = b;
	*len = n;
	return 0;
err:
	free(b);
	return rc;
}

static void
kvp_cli_usage(void)
{
	fprintf(stderr,
		"usage: kvpool [--pool NAME] [--ns NS] COMMAND\n"
		"  put KEY FILE|-     store FILE (or stdin) under KEY\n"
		"  get KEY FILE|-     write KEY's value to FILE (or stdout)\n"
		"  exists KEY...      print 1/0 per key; exit 0 if all present\n"
		"  del KEY            delete KEY\n"
		"  stat [--json]      tiers, index, clients, operations, latency, counters\n"
		"  stat --metrics-markdown  every metric and JSON key (docs/observability.md)\n"
		"  clients            client slots: pid, start time, alive, holds, leases\n"
		"  top [--count N] [--interval S]  rates, occupancy, hit ratio every S (1) s\n"
		"  check [--wait MS]  verify the pool's invariants (read-only; agent up\n"
		"                     or down); re-checks for MS (default 3000) what a\n"
		"                     busy pool may show for a moment; exit 1 names them\n"
		"  crashpoints        list the crash points (KVP_CRASH_AT=NAME)\n");
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pool", required_argument, NULL, 'p' },
		{ "ns", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *pool = "default", *ns = "default", *cmd;
	struct kvp_client *c = NULL;
	int opt, rc = 0;
	bool said = false; /* the command explained its failure itself */

	while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (opt) {
		case 'p':
			pool = optarg;
			break;
		case 'n':
			ns = optarg;
			break;
		default:
			kvp_cli_usage();
			return opt == 'h' ? 0 : 2;
		}
	}
	if (optind >= argc) {
		kvp_cli_usage();
		return 2;
	}
	cmd = argv[optind++];
	if (!strcmp(cmd, "crashpoints")) {
		unsigned k;

		for (k = 0; k < KVP_CP__N; k++)
			printf("%2u %-20s %-6s %s\n", k, kvp_crash_name(k),
			       kvp_crash_is_agent(k) ? "agent" : "client",
			       kvp_crash_what(k));
		return 0;
	}
	if (!strcmp(cmd, "check")) {
		struct kvp_check_report r;
		struct kvp_seg s;
		unsigned wait_ms = 3000;
		char msg[512];

		if (optind + 1 < argc && !strcmp(argv[optind], "--wait"))
			wait_ms = (unsigned)strtoul(argv[optind + 1], NULL, 10);
		else if (optind < argc) {
			kvp_cli_usage();
			return 2;
		}
		rc = kvp_seg_map(pool, false, &s, msg, sizeof(msg));
		if (rc) {
			fprintf(stderr, "kvpool: %s\n", msg);
			return 2;
		}
		kvp_check_wait(&s, wait_ms, stdout, &r);
		kvp_check_summary(&r, stdout);
		kvp__seg_unmap(&s);
		return r.violations ? 1 : 0;
	}
	/* docs/observability.md's tables, from the table of metrics (no
	 * pool needed) */
	if (!strcmp(cmd, "stat") && optind + 1 == argc &&
	    !strcmp(argv[optind], "--metrics-markdown"))
		return kvp_metrics_markdown(stdout) ? 1 : 0;
	if (!strcmp(cmd, "stat") || !strcmp(cmd, "clients") ||
	    !strcmp(cmd, "top")) {
		struct kvp_seg s;
		char msg[512];

		rc = kvp_seg_map(pool, false, &s, msg, sizeof(msg));
		if (rc) {
			fprintf(stderr, "kvpool: %s\n", msg);
			return 1;
		}
		if (!strcmp(cmd, "stat") &&
		    (optind == argc ||
		     (optind + 1 == argc && !strcmp(argv[optind], "--json"))))
			rc = kvp_cmd_stat(&s, pool, optind < argc);
		else if (!strcmp(cmd, "clients") && optind == argc)
			kvp_metrics_clients(&s, stdout);
		else if (!strcmp(cmd, "top"))
			rc = kvp_cmd_top(&s, pool, argc - optind,
					 argv + optind);
		else
			rc = -EINVAL, kvp_cli_usage();
		kvp__seg_unmap(&s);
		return rc ? 1 : 0;
	}
	rc = kvp_open(pool, ns, &c);
	if (rc) {
		fprintf(stderr, "kvpool: cannot open pool '%s': %s\n", pool,
			kvp_strerror(rc));
		return 1;
	}
	if (!strcmp(cmd, "put") && argc - optind == 2) {
		const char *in = argv[optind + 1];
		FILE *f = strcmp(in, "-") ? fopen(in, "rb") : stdin;
		unsigned char *buf = NULL;
		uint64_t len = 0;

		said = true;
		if (!f) {
			fprintf(stderr,
				"kvpool: cannot open %s: %s; nothing stored\n",
				in, strerror(errno));
			rc = -EIO;
		} else if ((rc = kvp_read_all(f, c->seg.g.g_max_value, &buf,
					      &len))) {
			/* all or nothing: a part of the input is never
			 * stored */
			if (rc == -E2BIG)
				fprintf(stderr,
					"kvpool: %s is larger than the pool's --max-value "
					"(%llu bytes); nothing stored\n",
					in,
					(unsigned long long)
						c->seg.g.g_max_value);
			else
				fprintf(stderr,
					"kvpool: reading %s failed part way (%s); nothing "
					"stored\n",
					!strcmp(in, "-") ? "stdin" : in,
					strerror(-rc));
			rc = rc == -E2BIG ? -E2BIG : -EIO;
		} else if (len == 0) {
			fprintf(stderr,
				"kvpool: %s is empty (zero-length values are refused); "
				"nothing stored\n",
				!strcmp(in, "-") ? "stdin" : in);
			rc = -EINVAL;
		} else {
			said = false;
			rc = kvp_put(c, argv[optind],
				     (uint32_t)strlen(argv[optind]), buf, len);
		}
		if (f && f != stdin)
			fclose(f);
		free(buf);
	} else if (!strcmp(cmd, "get") && argc - optind == 2) {
		uint64_t cap = c->seg.g.g_max_value;
		unsigned char *buf = malloc(cap);
		ssize_t n = buf ? kvp_get(c, argv[optind],
					  (uint32_t)strlen(argv[optind]), buf,
					  cap) :
				  -ENOMEM;
		if (n >= 0) {
			FILE *f = strcmp(argv[optind + 1], "-") ?
					  fopen(argv[optind + 1], "wb") :
					  stdout;
			/* a write error may show only at the flush or the
			 * close */
			if (!f || fwrite(buf, 1, (size_t)n, f) != (size_t)n ||
			    fflush(f))
				n = -EIO;
			if (f && f != stdout && fclose(f))
				n = -EIO;
		}
		rc = n < 0 ? (int)n : 0;
		free(buf);
	} else if (!strcmp(cmd, "exists") && argc - optind >= 1) {
		int k, all = 1;

		for (k = optind; k < argc; k++) {
			int e = kvp_exists(c, argv[k],
					   (uint32_t)strlen(argv[k]));
			printf("%s %d\n", argv[k], e > 0);
			all &= e > 0;
		}
		rc = all ? 0 : -ENOENT;
	} else if (!strcmp(cmd, "del") && argc - optind == 1) {
		rc = kvp_delete(c, argv[optind],
				(uint32_t)strlen(argv[optind]));
	} else {
		kvp_close(c);
		kvp_cli_usage();
		return 2;
	}
	kvp_close(c);
	if (rc && !said && strcmp(cmd, "exists"))
		fprintf(stderr, "kvpool: %s: %s\n", cmd, kvp_strerror(rc));
	return rc ? 1 : 0;
}
