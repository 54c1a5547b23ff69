/* SPDX-License-Identifier: MIT */
/*
 * test_metrics.c - the agent's /metrics endpoint end to end: scraped over
 * HTTP (a tiny GET client below), checked with `promtool check metrics`
 * (skipped, saying so, where the prometheus package is not installed),
 * and its counters moved by known workloads: puts, gets and misses,
 * latency histogram counts per call, an SSD batch larger than half the
 * staging arena (BUSY rejects, every key ok, the exact staging peak), a
 * corrupt SSD record (failed, not a miss), the reaper (dead client,
 * holds, pins, an expired lease), and `kvpool stat --json` with the agent
 * down.
 */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"
#include "tiers/kvp_ssd.h"

/* ---- a tiny HTTP/1.0 GET client ---- */

struct http_reply {
	int status;
	char *head; /* status line and headers */
	char *body;
};

static void
http_free(struct http_reply *r)
{
	free(r->head);
	r->head = r->body = NULL;
}

/* GET path from 127.0.0.1:port; 0 or -errno. */
static int
http_get(unsigned port, const char *path, struct http_reply *r)
{
	struct sockaddr_in sa;
	char req[256], *buf = NULL, *sep;
	size_t len = 0, cap = 0;
	int fd, n;

	memset(r, 0, sizeof(*r));
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		n = -errno;
		close(fd);
		return n;
	}
	n = snprintf(req, sizeof(req),
		     "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
	if (write(fd, req, (size_t)n) != n) {
		close(fd);
		return -EIO;
	}
	for (;;) {
		ssize_t got;

		if (cap - len < 4096) {
			char *nb = realloc(buf, cap = cap ? cap * 2 : 65536);
			if (!nb) {
				free(buf);
				close(fd);
				return -ENOMEM;
			}
			buf = nb;
		}
		got = read(fd, buf + len, cap - len - 1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		len += (size_t)got;
	}
	close(fd);
	if (!buf)
		return -EIO;
	buf[len] = '\0';
	sep = strstr(buf, "\r\n\r\n");
	if (!sep || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
		free(buf);
		return -EPROTO;
	}
	*sep = '\0';
	r->head = buf;
	r->body = sep + 4;
	return 0;
}

/* The value of one series ("name{labels}" exactly as exposed); NAN when
 * the series is absent. */
static double
prom_value(const char *body, const char *series)
{
	size_t n = strlen(series);
	const char *p = body;

	while (p && *p) {
		if (!strncmp(p, series, n) && p[n] == ' ')
			return strtod(p + n + 1, NULL);
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return NAN;
}

static uint64_t
prom_u(const char *body, const char *series)
{
	double v = prom_value(body, series);

	if (isnan(v))
		fail_msg("series %s missing from the scrape", series);
	return (uint64_t)v;
}

static char *
scrape(unsigned port)
{
	struct http_reply r;
	char *body;

	assert_int_equal(http_get(port, "/metrics", &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.head, "text/plain; version=0.0.4"));
	body = strdup(r.body);
	http_free(&r);
	return body;
}

static bool
have_promtool(void)
{
	return system("command -v promtool >/dev/null 2>&1") == 0;
}

/* Every family has HELP then TYPE, and promtool (if installed) accepts
 * the whole exposition, lint included. */
static void
check_exposition(const char *body)
{
	const char *p = body;
	char path[64], cmd[160];
	unsigned families = 0;
	FILE *f;
	int fd;

	while (*p) {
		if (!strncmp(p, "# TYPE ", 7)) {
			char name[128];
			char help[160];

			assert_int_equal(sscanf(p + 7, "%127s", name), 1);
			snprintf(help, sizeof(help), "# HELP %s ", name);
			assert_non_null(strstr(body, help));
			families++;
		}
		p = strchr(p, '\n');
		if (!p)
			break;
		p++;
	}
	assert_true(families >= 30);
	if (!have_promtool()) {
		print_message("  SKIP promtool check: promtool not installed "
			      "(apt-get install prometheus)\n");
		return;
	}
	snprintf(path, sizeof(path), "/tmp/kvpt-metrics-%d-XXXXXX",
		 (int)getpid());
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	assert_int_equal(fputs(body, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	snprintf(cmd, sizeof(cmd), "promtool check metrics < %s", path);
	assert_int_equal(system(cmd), 0);
	unlink(path);
}

static unsigned
metrics_port(const char *pool)
{
	struct kvp_seg s;
	unsigned port;

	assert_int_equal(kvpt_seg_map(pool, &s), 0);
	/* relaxed: tool */
	port = (unsigned)kvp_load_relaxed(&s.hdr->h_metrics_port);
	kvp__seg_unmap(&s);
	return port;
}

static uint32_t
key_of(char *k, int i)
{
	return (uint32_t)snprintf(k, 100, "metrics-key-%06d", i);
}

/* N puts (a batch and singles), gets, misses, an exists batch: the
 * counters and the per-call histogram counts say exactly that. */
static void
test_scrape_dram(void **state)
{
	enum {
		N = 100,
		SZ = 5000,
		B = 40
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_op ops[N];
	char keys[N][100], *body, series[160];
	unsigned char *v = malloc(SZ), out[SZ];
	struct http_reply r;
	unsigned port;
	int i;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "64M", "--metrics-addr",
					  "127.0.0.1:0", NULL),
			 0);
	port = metrics_port(a.pool);
	assert_true(port > 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	for (i = 0; i < N; i++) {
		ops[i].klen = key_of(keys[i], i);
		ops[i].key = keys[i];
		ops[i].buf = v;
		ops[i].len = SZ;
		ops[i].off = 0;
	}
	memset(v, 7, SZ);
	assert_int_equal(kvp_batch_put(c, ops, B), B); /* one call */
	for (i = B; i < N; i++)                        /* N - B calls */
		assert_int_equal(kvp_put(c, keys[i], ops[i].klen, v, SZ), 0);
	for (i = 0; i < 30; i++)
		assert_int_equal(kvp_get(c, keys[i], ops[i].klen, out, SZ), SZ);
	for (i = 0; i < 5; i++)
		assert_int_equal(kvp_get(c, "absent", 6, out, SZ), -ENOENT);
	assert_int_equal(kvp_batch_exists_prefix(c, ops, N), N);

	body = scrape(port);
	check_exposition(body);
	assert_int_equal(prom_u(body, "kvpool_ops_total{op=\"put\"}"), N);
	assert_int_equal(prom_u(body, "kvpool_ops_total{op=\"get\"}"), 35);
	assert_int_equal(prom_u(body, "kvpool_ops_total{op=\"exists\"}"), N);
	assert_int_equal(
		prom_u(body, "kvpool_op_bytes_total{op=\"put\",tier=\"DRAM\"}"),
		(uint64_t)N * SZ);
	assert_int_equal(
		prom_u(body, "kvpool_op_bytes_total{op=\"get\",tier=\"DRAM\"}"),
		30ull * SZ);
	assert_int_equal(
		prom_u(body,
		       "kvpool_resolve_total{tier=\"DRAM\",status=\"ok\"}"),
		30);
	assert_int_equal(
		prom_u(body,
		       "kvpool_resolve_total{tier=\"DRAM\",status=\"miss\"}"),
		5);
	assert_int_equal(
		prom_u(body,
		       "kvpool_op_hits_total{op=\"exists\",tier=\"DRAM\"}"),
		N);
	/* one observation per call: the batch put is one */
	assert_int_equal(
		prom_u(body,
		       "kvpool_op_duration_seconds_count{op=\"put\",tier=\"DRAM\"}"),
		1 + N - B);
	assert_int_equal(
		prom_u(body,
		       "kvpool_op_duration_seconds_count{op=\"get\",tier=\"DRAM\"}"),
		35);
	assert_int_equal(
		prom_u(body,
		       "kvpool_op_duration_seconds_bucket{op=\"get\",tier=\"DRAM\","
		       "le=\"+Inf\"}"),
		35);
	assert_int_equal(
		prom_u(body,
		       "kvpool_op_duration_seconds_count{op=\"exists\",tier=\"DRAM\"}"),
		1);
	assert_true(
		prom_value(
			body,
			"kvpool_op_duration_seconds_sum{op=\"put\",tier=\"DRAM\"}") >
		0.0);
	assert_int_equal(
		prom_u(body,
		       "kvpool_medium_state{tier=\"DRAM\",state=\"entries\"}"),
		N);
	assert_true(
		prom_u(body,
		       "kvpool_medium_state{tier=\"DRAM\",state=\"bytes_used\"}") >=
		(uint64_t)N * SZ);
	assert_int_equal(
		prom_u(body,
		       "kvpool_medium_state{tier=\"DRAM\",state=\"bytes_total\"}"),
		64ull << 20);
	assert_int_equal(prom_u(body, "kvpool_index_entries{state=\"ready\"}"),
			 N);
	assert_true(prom_value(body, "kvpool_index_probe_length_mean") >= 1.0);
	assert_int_equal(prom_u(body, "kvpool_clients{state=\"alive\"}"), 1);
	snprintf(series, sizeof(series),
		 "kvpool_info{pool=\"%s\",abi=\"%u.%u\"}", a.pool,
		 KVP_ABI_MAJOR, KVP_ABI_MINOR);
	assert_int_equal(prom_u(body, series), 1);
	free(body);

	/* a closed client's counters and histograms stay (retired) */
	kvp_close(c);
	body = scrape(port);
	assert_int_equal(prom_u(body, "kvpool_ops_total{op=\"put\"}"), N);
	assert_int_equal(
		prom_u(body,
		       "kvpool_op_duration_seconds_count{op=\"put\",tier=\"DRAM\"}"),
		1 + N - B);
	assert_int_equal(prom_u(body, "kvpool_clients{state=\"alive\"}"), 0);
	free(body);

	assert_int_equal(http_get(port, "/nothing", &r), 0);
	assert_int_equal(r.status, 404);
	http_free(&r);
	free(v);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

/* A series of a fresh scrape reaches want (a condition with a deadline). */
struct series_cond {
	unsigned port;
	const char *series;
	uint64_t want;
};

static bool
series_reaches(void *p)
{
	struct series_cond *rc = p;
	struct http_reply r;
	double v;

	if (http_get(rc->port, "/metrics", &r) || r.status != 200) {
		http_free(&r);
		return false;
	}
	v = prom_value(r.body, rc->series);
	http_free(&r);
	return !isnan(v) && (uint64_t)v >= rc->want;
}

#define SSD_METRICS_ARGS                                                       \
	"--dram", "64M", "--dram-unit", "4K", "--dram-high", "0",              \
		"--dram-low", "0", "--ssd-dir", kvpt_ssd_dir, "--ssd-segment", \
		"16M", "--staging", "8M", "--staging-slot", "1M",              \
		"--no-promote", "--metrics-addr", "127.0.0.1:0", NULL

#define put_and_demote(c, s, n, vsize) \
	assert_int_equal(              \
		kvpt_put_and_demote(c, s, n, vsize, key_of, 9, 30000), 0)

/* An SSD batch larger than half the staging arena: served in parts, every
 * key ok, one get call in the SSD histogram, nothing staged left; the SSD
 * tier's gauges and events.  A lone client posts only what the arena has
 * room for (issue 29), so the agent answers it no BUSY: the BUSY series
 * are there and read 0 (requests that over-ask still get BUSY parts:
 * fuzz_ring, several clients in stress_pool). */
static void
test_scrape_ssd_busy(void **state)
{
	enum {
		N = 300,
		SZ = 64 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	struct kvp_op *ops = calloc(N, sizeof(*ops));
	char(*keys)[100] = calloc(N, 100), *body;
	unsigned char *out = malloc((size_t)N * SZ);
	struct series_cond uc;
	unsigned port;
	uint64_t peak;
	int i;

	(void)state;
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, SSD_METRICS_ARGS), 0);
	port = metrics_port(a.pool);
	put_and_demote(c, &s, N, SZ);
	for (i = 0; i < N; i++) {
		ops[i].klen = key_of(keys[i], i);
		ops[i].key = keys[i];
		ops[i].buf = out + (size_t)i * SZ;
		ops[i].len = SZ;
	}
	assert_int_equal(kvp_batch_get(c, ops, N), N);
	for (i = 0; i < N; i++)
		assert_true(
			kvpt_check(ops[i].buf, SZ, keys[i], ops[i].klen, 9));
	/* the tier thread publishes the SSD store's usage every 50 ms */
	uc.port = port;
	uc.series = "kvpool_medium_state{tier=\"SSD\",state=\"bytes_used\"}";
	uc.want = (uint64_t)N * SZ;
	assert_true(kvpt_wait_until(series_reaches, &uc, 10000) >= 0);

	body = scrape(port);
	check_exposition(body);
	assert_int_equal(
		prom_u(body,
		       "kvpool_medium_events_total{tier=\"SSD\",event=\"busy_reject\"}"),
		0);
	assert_int_equal(
		prom_u(body,
		       "kvpool_resolve_total{tier=\"SSD\",status=\"ok\"}"),
		N);
	assert_int_equal(
		prom_u(body,
		       "kvpool_resolve_total{tier=\"SSD\",status=\"miss\"}"),
		0);
	assert_int_equal(
		prom_u(body,
		       "kvpool_resolve_total{tier=\"SSD\",status=\"failed\"}"),
		0);
	assert_int_equal(prom_u(body, "kvpool_resolve_busy_total"), 0);
	/* in parts: the half of the arena one call may have, at most */
	assert_true(
		prom_u(body,
		       "kvpool_medium_state{tier=\"SSD\",state=\"staging_pages_peak\"}") <=
		8);
	assert_int_equal(
		prom_u(body, "kvpool_op_hits_total{op=\"get\",tier=\"SSD\"}"),
		N);
	assert_int_equal(
		prom_u(body, "kvpool_op_bytes_total{op=\"get\",tier=\"SSD\"}"),
		(uint64_t)N * SZ);
	assert_int_equal(
		prom_u(body,
		       "kvpool_op_duration_seconds_count{op=\"get\",tier=\"SSD\"}"),
		1);
	assert_int_equal(
		prom_u(body,
		       "kvpool_medium_events_total{tier=\"DRAM\",event=\"demotion\"}"),
		N);
	assert_int_equal(
		prom_u(body,
		       "kvpool_medium_events_total{tier=\"SSD\",event=\"promotion\"}"),
		0);
	assert_int_equal(
		prom_u(body,
		       "kvpool_medium_state{tier=\"SSD\",state=\"entries\"}"),
		N);
	assert_int_equal(
		prom_u(body,
		       "kvpool_medium_state{tier=\"DRAM\",state=\"entries\"}"),
		0);
	assert_true(
		prom_u(body,
		       "kvpool_medium_state{tier=\"SSD\",state=\"bytes_total\"}") >
		0);
	assert_int_equal(
		prom_u(body,
		       "kvpool_medium_state{tier=\"SSD\",state=\"staging_pages_total\"}"),
		8);
	/* the staging arena is empty again; its peak is what the agent
	 * allocated at most at once: at least one 1-slot span, at most the
	 * whole arena */
	assert_int_equal(
		prom_u(body,
		       "kvpool_medium_state{tier=\"SSD\",state=\"staging_pages_in_use\"}"),
		0);
	peak = prom_u(
		body,
		"kvpool_medium_state{tier=\"SSD\",state=\"staging_pages_peak\"}");
	assert_true(peak >= 1 && peak <= 8);
	assert_true(
		prom_u(body, "kvpool_ssd_bytes_total{direction=\"write\"}") >=
		(uint64_t)N * SZ);
	assert_true(
		prom_u(body, "kvpool_ssd_bytes_total{direction=\"read\"}") >=
		(uint64_t)N * SZ);
	assert_int_equal(prom_u(body, "kvpool_ssd_errors_total"), 0);
	print_message("  %d keys: %llu busy rejects, staging peak %llu of 8\n",
		      N,
		      (unsigned long long)prom_u(
			      body, "kvpool_medium_events_total{tier=\"SSD\","
				    "event=\"busy_reject\"}"),
		      (unsigned long long)peak);
	free(body);
	free(ops);
	free(keys);
	free(out);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

/* The staging peak is exact: two 3-slot values in one batch through an
 * 8-slot arena (half = 4): the first call has the first (3 slots; the
 * second would not fit its half), and the batch's spare call, posted
 * right after it, the second (3 of the 5 slots left: the client posts
 * what fits, so no BUSY answer): both staged at once, peak 6, never more
 * (nothing else is staged) and never less (the spare call is posted
 * microseconds after the first, whose 3 MiB read takes milliseconds). */
static void
test_staging_peak_exact(void **state)
{
	enum {
		SZ = 3 << 20
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	struct kvp_op ops[2];
	char keys[2][100], *body;
	unsigned char *out = malloc(2ull * SZ);
	unsigned port;
	int i;

	(void)state;
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, SSD_METRICS_ARGS), 0);
	port = metrics_port(a.pool);
	put_and_demote(c, &s, 2, SZ);
	for (i = 0; i < 2; i++) {
		ops[i].klen = key_of(keys[i], i);
		ops[i].key = keys[i];
		ops[i].buf = out + (size_t)i * SZ;
		ops[i].off = 0;
		ops[i].len = SZ;
	}
	assert_int_equal(kvp_batch_get(c, ops, 2), 2);
	body = scrape(port);
	assert_int_equal(
		prom_u(body,
		       "kvpool_medium_state{tier=\"SSD\",state=\"staging_pages_peak\"}"),
		6);
	assert_int_equal(
		prom_u(body,
		       "kvpool_medium_state{tier=\"SSD\",state=\"staging_pages_in_use\"}"),
		0);
	assert_int_equal(
		prom_u(body,
		       "kvpool_medium_events_total{tier=\"SSD\",event=\"busy_reject\"}"),
		0);
	assert_int_equal(
		prom_u(body,
		       "kvpool_resolve_total{tier=\"SSD\",status=\"ok\"}"),
		2);
	free(body);
	free(out);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

/* A held key whose SSD record is corrupt is failed, never a miss. */
static void
test_failed_not_miss(void **state)
{
	enum {
		N = 4,
		SZ = 128 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	unsigned char *out = malloc(SZ), b;
	char k[100], path[512], *body;
	uint32_t kl;
	uint64_t w, loc;
	int64_t slot;
	unsigned port;
	off_t at;
	int fd;

	(void)state;
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, SSD_METRICS_ARGS), 0);
	port = metrics_port(a.pool);
	put_and_demote(c, &s, N, SZ);
	kl = key_of(k, 2);
	slot = kvp_ix_find(&s, c->nsid, kvp_key_hash(c->nsid, k, kl), k, kl,
			   KVP_IX_M(KVP_IX_READY), &w);
	assert_true(slot >= 0);
	loc = kvp_load_relaxed(&s.entries[slot].e_ssd);
	snprintf(path, sizeof(path), "%s/seg-%08x.kvs", kvpt_ssd_dir,
		 KVP_SSD_LOC_SEG(loc));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	at = (off_t)KVP_SSD_LOC_VALUE(loc) * 4096 + 999;
	assert_int_equal(pread(fd, &b, 1, at), 1);
	b ^= 0x10;
	assert_int_equal(pwrite(fd, &b, 1, at), 1);
	fsync(fd);
	close(fd);
	assert_int_equal(kvp_get(c, k, kl, out, SZ), -EBADMSG);
	kl = key_of(k, 1);
	assert_int_equal(kvp_get(c, k, kl, out, SZ), SZ);
	body = scrape(port);
	assert_int_equal(
		prom_u(body,
		       "kvpool_resolve_total{tier=\"SSD\",status=\"failed\"}"),
		1);
	assert_int_equal(
		prom_u(body,
		       "kvpool_resolve_total{tier=\"SSD\",status=\"miss\"}"),
		0);
	assert_int_equal(
		prom_u(body,
		       "kvpool_resolve_total{tier=\"SSD\",status=\"ok\"}"),
		1);
	assert_int_equal(
		prom_u(body,
		       "kvpool_resolve_total{tier=\"DRAM\",status=\"miss\"}"),
		0);
	assert_true(prom_u(body, "kvpool_ssd_errors_total") >= 1);
	free(body);
	free(out);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

/* A client that dies holding pins: reaped, its holds and pins released,
 * its counters kept; an expired lease released by the reaper. */
static void
test_reaper_metrics(void **state)
{
	enum {
		N = 8,
		SZ = 4096
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_lease l;
	struct series_cond rc;
	unsigned char v[SZ];
	char k[100], *body;
	unsigned port;
	pid_t pid;
	int st, i;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "64M", "--metrics-addr",
					  "127.0.0.1:0", NULL),
			 0);
	port = metrics_port(a.pool);
	memset(v, 3, sizeof(v));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct kvp_client *cc;
		struct kvp_pinset *ps;
		struct kvp_op ops[N];
		char keys[N][100];

		if (kvp_open(a.pool, "ns", &cc))
			_exit(1);
		for (i = 0; i < N; i++) {
			ops[i].klen = key_of(keys[i], i);
			ops[i].key = keys[i];
			if (kvp_put(cc, keys[i], ops[i].klen, v, SZ))
				_exit(2);
		}
		if (kvp_batch_lookup_pin(cc, ops, N, &ps) != N)
			_exit(3);
		_exit(0); /* dies holding N pins */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	rc.port = port;
	rc.series = "kvpool_reaper_clients_total";
	rc.want = 1;
	assert_true(kvpt_wait_until(series_reaches, &rc, 10000) >= 0);
	/* a lease of 1 ms, left to expire */
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	key_of(k, 0);
	assert_int_equal(kvp_lease_acquire(c, k, (uint32_t)strlen(k), 1, &l),
			 0);
	rc.series = "kvpool_reaper_released_total{what=\"leases\"}";
	assert_true(kvpt_wait_until(series_reaches, &rc, 10000) >= 0);

	body = scrape(port);
	assert_int_equal(prom_u(body, "kvpool_reaper_clients_total"), 1);
	assert_int_equal(prom_u(body,
				"kvpool_reaper_released_total{what=\"holds\"}"),
			 N);
	assert_int_equal(
		prom_u(body, "kvpool_reaper_released_total{what=\"pins\"}"), N);
	assert_int_equal(
		prom_u(body, "kvpool_reaper_released_total{what=\"leases\"}"),
		1);
	/* retired */
	assert_int_equal(prom_u(body, "kvpool_ops_total{op=\"put\"}"), N);
	assert_int_equal(prom_u(body, "kvpool_pins_total"), N);
	assert_int_equal(prom_u(body, "kvpool_pinned_bytes{tier=\"DRAM\"}"), 0);
	assert_int_equal(prom_u(body, "kvpool_holds"), 0);
	assert_int_equal(prom_u(body, "kvpool_leases"), 0);
	assert_int_equal(prom_u(body, "kvpool_clients{state=\"alive\"}"), 1);
	assert_int_equal(prom_u(body, "kvpool_clients{state=\"dead\"}"), 0);
	free(body);
	kvp_close(c);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

/* `kvpool stat --json` reads the segment: it works with the agent dead. */
static void
test_stat_agent_down(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	char out[16384];
	unsigned char v[100] = { 1 };
	int i;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "64M", NULL), 0);
	assert_int_equal(kvp_open(a.pool, "ns", &c), 0);
	for (i = 0; i < 7; i++) {
		char k[100];
		assert_int_equal(kvp_put(c, k, key_of(k, i), v, sizeof(v)), 0);
	}
	kvp_close(c);
	kvpt_agent_kill(&a);
	assert_int_equal(kvpt_run(out, sizeof(out),
				  "%s/kvpool --pool %s stat --json",
				  kvpt_bindir(), a.pool),
			 0);
	assert_non_null(strstr(out, "\"agent_alive\":false"));
	assert_non_null(strstr(out, ",\"put\":7,"));
	assert_non_null(strstr(out, ",\"entries\":7,"));
	assert_non_null(strstr(out, ",\"metrics_port\":0,"));
	kvpt_pool_remove(a.pool);
}

/* Is every byte of s printable ASCII (or a line feed)? */
static bool
printable(const char *s)
{
	for (; *s; s++)
		if ((*s < 0x20 && *s != '\n') || (unsigned char)*s > 0x7e)
			return false;
	return true;
}

/*
 * The header's h_pool is written by whoever maps the segment: a client
 * that overwrites it with quotes, a line feed, a backslash, control and
 * non-ASCII bytes (and no NUL) changes nothing in what the agent and the
 * tools print: the Prometheus label, `stat --json`, the table and `top`
 * carry the validated pool name, and a namespace with control bytes is
 * escaped in `kvpool clients`.
 */
static void
test_pool_name_escaped(void **state)
{
	static const char evil[] =
		"x\"} 1\nkvpool_agent_up 7\n\\\x01\x1b[2J\xff\xfe{\"a\":1}";
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg w;
	char msg[256], *out = malloc(1 << 16), *body, line[256], *p;
	unsigned port;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "16M", "--metrics-addr",
					  "127.0.0.1:0", NULL),
			 0);
	port = metrics_port(a.pool);
	assert_int_equal(kvp_seg_map(a.pool, true, &w, msg, sizeof(msg)), 0);
	memset(w.hdr->h_pool, 'Z', sizeof(w.hdr->h_pool));
	memcpy(w.hdr->h_pool, evil, sizeof(evil) - 1);
	assert_int_equal(kvp_open(a.pool, "ns\x1b[2J\r\nfake", &c), 0);

	/* the scrape: one kvpool_info line, the agent's own name in it */
	body = scrape(port);
	check_exposition(body);
	assert_non_null(p = strstr(body, "\nkvpool_info{"));
	snprintf(line, sizeof(line),
		 "\nkvpool_info{pool=\"%s\",abi=\"%u.%u\"} 1\n", a.pool,
		 KVP_ABI_MAJOR, KVP_ABI_MINOR);
	assert_memory_equal(p, line, strlen(line));
	assert_int_equal(prom_u(body, "kvpool_agent_up"), 1);
	assert_true(printable(body));
	free(body);

	/* stat --json: one JSON object whose pool is the name asked for */
	assert_int_equal(kvpt_run(out, 1 << 16,
				  "%s/kvpool --pool %s stat --json",
				  kvpt_bindir(), a.pool),
			 0);
	snprintf(line, sizeof(line), "{\"pool\":\"%s\",\"agent_alive\":true,",
		 a.pool);
	assert_memory_equal(out, line, strlen(line));
	assert_true(printable(out));
	assert_int_equal(strchr(out, '\n') - out, (long)strlen(out) - 1);
	if (system("command -v jq >/dev/null 2>&1") == 0) {
		assert_int_equal(
			kvpt_run(
				out, 1 << 16,
				"%s/kvpool --pool %s stat --json | jq -e -r .pool",
				kvpt_bindir(), a.pool),
			0);
		snprintf(line, sizeof(line), "%s\n", a.pool);
		assert_string_equal(out, line);
	}
	/* the human table and top: the same name, no control byte */
	assert_int_equal(kvpt_run(out, 1 << 16, "%s/kvpool --pool %s stat",
				  kvpt_bindir(), a.pool),
			 0);
	snprintf(line, sizeof(line), "pool %s: agent up", a.pool);
	assert_memory_equal(out, line, strlen(line));
	assert_true(printable(out));
	assert_int_equal(
		kvpt_run(out, 1 << 16,
			 "%s/kvpool --pool %s top --count 1 --interval 0.01",
			 kvpt_bindir(), a.pool),
		0);
	snprintf(line, sizeof(line), "kvpool top - pool %s - ", a.pool);
	assert_memory_equal(out, line, strlen(line));
	assert_true(printable(out));
	/* clients: the namespace a client wrote, escaped */
	assert_int_equal(kvpt_run(out, 1 << 16, "%s/kvpool --pool %s clients",
				  kvpt_bindir(), a.pool),
			 0);
	assert_true(printable(out));
	assert_non_null(strstr(out, " ns\\x1b[2J\\x0d\\x0afake\n"));
	kvp_close(c);
	kvp__seg_unmap(&w);
	free(out);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

/* --metrics-addr off serves nothing; an address given on the command
 * line that cannot be bound stops the agent (it says why). */
static void
test_metrics_addr(void **state)
{
	struct kvpt_agent a, b;
	char addr[64];
	unsigned port;

	(void)state;
	assert_int_equal(kvpt_agent_start(&a, "--dram", "64M", "--metrics-addr",
					  "127.0.0.1:0", NULL),
			 0);
	port = metrics_port(a.pool);
	assert_true(port > 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	assert_true(kvpt_agent_start(&b, "--dram", "64M", "--metrics-addr",
				     addr, NULL) < 0);
	kvpt_pool_remove(b.pool);
	assert_int_equal(kvpt_agent_start(&b, "--dram", "64M", "--metrics-addr",
					  "off", NULL),
			 0);
	assert_int_equal(metrics_port(b.pool), 0);
	assert_int_equal(kvpt_agent_stop(&b), 0);
	assert_int_equal(kvpt_agent_stop(&a), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scrape_dram),
		cmocka_unit_test(test_scrape_ssd_busy),
		cmocka_unit_test(test_staging_peak_exact),
		cmocka_unit_test(test_failed_not_miss),
		cmocka_unit_test(test_reaper_metrics),
		cmocka_unit_test(test_stat_agent_down),
		cmocka_unit_test(test_metrics_addr),
		cmocka_unit_test(test_pool_name_escaped),
	};

	return cmocka_run_group_tests(tests, kvpt_ssd_dir_setup,
				      kvpt_ssd_dir_teardown);
}
