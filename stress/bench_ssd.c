/* SPDX-License-Identifier: MIT */
/*
 * bench_ssd - the SSD tier against the device's own limits, in one run:
 *   1. fio sequential write and read (1 MiB, O_DIRECT, io_uring) on the
 *      same file system as --ssd-dir;
 *   2. demotion throughput (values demoted to SSD per second) vs fio write
 *      at the same block size, 4 KiB, 16 KiB, 64 KiB and 1 MiB values, and
 *      the SSD bytes each value took (format 3: batch header blocks);
 *   3. cold SSD kvp_get of 1 MiB values (O_DIRECT, no page cache) vs fio
 *      read, through staging and through promotion;
 *   4. a 2,000-key batch of 64 KiB SSD values through an 8-slot arena vs
 *      the bandwidth bound (bytes / fio 64 KiB read bandwidth);
 *   5. index rebuild at agent start: entries per second (100 k and 1 M
 *      records of 1 byte in the full run);
 *   6. a single cold SSD kvp_get of 64 KiB (p50, p99) vs fio's random
 *      64 KiB read at queue depth 1 (p50 completion latency);
 *   7. with --drives DIR1,DIR2[,...]: demotion and cold batch_get of
 *      1 MiB values with the first directory alone, then with all of them
 *      (stress/bench_drives.sh makes two devices and runs this).
 * Not a test: nothing is asserted.  --quick for CI (< 1 min).
 *
 *   bench_ssd [--dir DIR] [--quick] [--json FILE] [--only ROWS]
 *             [--drives DIR1,DIR2,...] [--records N]
 * ROWS: a comma list of pin, seq, sizes (or one size: size4, size16,
 * size64, size1024, in KiB), batch, rebuild, latency, seed (8 readers
 * through an 8-slot arena, demotion busy), drives (default: all but
 * drives, which needs --drives).  --records N: the rebuild rows at N
 * records only (default: 100 k and 1 M; --quick 20 k).
 */
#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tiers/kvp_ssd.h"

#include "stress/bench_util.h"

static char dir[512] = "/var/tmp";
static char sdir[600];
static bool quick;
static FILE *json;
static char only[256];
static char drives[2048];

static double
now_s(void)
{
	return kvpb_now_s();
}

/* fio on this run's directory: bandwidth in bytes/s, or 0 without fio. */
static double
fio_bw(const char *rw, const char *bs, unsigned mib)
{
	return kvpb_fio_bw(sdir, rw, bs, mib, 16);
}

/*
 * What is left of the device for writes while reads run: fio's 1 MiB
 * sequential write (queue depth 4) beside fio's reader of 1 MiB values in
 * batches of 16 (16 sent at once, the next batch once all 16 are back:
 * the cold-reads process of demote_with_reads), for secs seconds.  The
 * writer's bandwidth in *wbw, the reader's in *rbw (0, 0 without fio).
 */
static void
fio_mixed(unsigned mib, unsigned secs, double *wbw, double *rbw)
{
	char cmd[1400], buf[1 << 16];
	const char *p;
	size_t n;
	FILE *f;

	*wbw = *rbw = 0;
	snprintf(cmd, sizeof(cmd),
		 "fio --directory=%s --direct=1 --ioengine=io_uring "
		 "--output-format=json --time_based --runtime=%u "
		 "--name=kvpw --rw=write --bs=1M --size=%uM --iodepth=4 "
		 "--name=kvpr --rw=randread --bs=1M --size=%uM --iodepth=16 "
		 "--iodepth_batch_submit=16 --iodepth_batch_complete_min=16 "
		 "2>/dev/null",
		 sdir, secs, mib, mib);
	f = popen(cmd, "r");
	if (!f)
		return;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	pclose(f);
	/* each job's section starts at its name */
	p = strstr(buf, "\"jobname\" : \"kvpw\"");
	p = p ? strstr(p, "\"write\" : {") : NULL;
	p = p ? strstr(p, "\"bw_bytes\"") : NULL;
	*wbw = p ? strtod(strchr(p, ':') + 1, NULL) : 0;
	p = strstr(buf, "\"jobname\" : \"kvpr\"");
	p = p ? strstr(p, "\"read\" : {") : NULL;
	p = p ? strstr(p, "\"bw_bytes\"") : NULL;
	*rbw = p ? strtod(strchr(p, ':') + 1, NULL) : 0;
}

static void
report(const char *name, double v, const char *unit, double ref,
       const char *refname)
{
	if (ref > 0)
		printf("  %-44s %10.2f %-6s  %.2fx %s\n", name, v, unit,
		       v / ref, refname);
	else
		printf("  %-44s %10.2f %-6s\n", name, v, unit);
	if (json)
		fprintf(json,
			"%s\"%s\":{\"value\":%.4f,\"unit\":\"%s\",\"ratio\":%.4f}",
			ftell(json) > 1 ? "," : "", name, v, unit,
			ref > 0 ? v / ref : 0);
}

/*
 * Where a cold read's time goes (issue 29): the agent's stages of every
 * device read (enum kvp_io_stage, h_io_hist) and the clients' copy-outs
 * (KVP_HIST_SSD_COPY), summed between two snapshots, against the
 * client's own wall time for the calls (ncalls of them, total_ns).
 * "wake + rest" is what no stage covers: the client's post and its
 * futex wake-up after the answer, the holds, the call's own work.
 */
struct stage_snap {
	uint64_t sum[KVP_IOS__N + 1], cnt[KVP_IOS__N + 1];
	uint64_t bk[KVP_IOS__N + 1][KVP_HIST_BUCKETS]; /* per bucket */
	uint64_t hdr_cached,
		hdr_read; /* where reads' batch headers came from */
	uint64_t busy;    /* requests the agent answered BUSY (arena budget) */
};

static void
stage_snap(const struct kvp_seg *s, struct stage_snap *x)
{
	unsigned k, b, c;

	memset(x, 0, sizeof(*x));
	x->hdr_cached =
		kvp_load_relaxed(&s->hdr->h_actr[KVP_ACTR_SSD_HDR_CACHED]);
	x->hdr_read = kvp_load_relaxed(&s->hdr->h_actr[KVP_ACTR_SSD_HDR_READ]);
	x->busy = kvp_load_relaxed(&s->hdr->h_actr[KVP_ACTR_BUSY_REJECT]);
	for (k = 0; k <= KVP_IOS__N; k++) {
		for (b = 0; b <= KVP_HIST_SUM; b++) {
			uint64_t v = 0;

			if (k < KVP_IOS__N)
				v = kvp_load_relaxed(&s->hdr->h_io_hist[k][b]);
			else
				for (c = 0; c < s->g.g_max_clients; c++)
					v += kvp_load_relaxed(
						&s->clients[c].cs_hist
							 [KVP_HIST_SSD_COPY][b]);
			if (b == KVP_HIST_SUM)
				x->sum[k] = v;
			else if (b < KVP_HIST_BUCKETS) {
				x->cnt[k] += v;
				x->bk[k][b] = v;
			}
		}
	}
}

static void
stage_report(const char *name, const struct kvp_seg *s,
	     const struct stage_snap *before, double ncalls, double total_ns)
{
	static const char *const names[KVP_IOS__N + 1] = {
		"queue (posted -> taken)", "submit (taken -> sent)",
		"device (sent -> reaped)", "answer (reaped -> woken)",
		"copy-out (client)"
	};
	struct stage_snap now;
	double covered = 0;
	char row[160];
	unsigned k, b;

	stage_snap(s, &now);
	printf("  %s: %.0f calls, %.1f us a call (client wall time)\n", name,
	       ncalls, total_ns / ncalls / 1e3);
	for (k = 0; k <= KVP_IOS__N; k++) {
		double n = (double)(now.cnt[k] - before->cnt[k]),
		       sum = (double)(now.sum[k] - before->sum[k]);

		covered += sum;
		snprintf(row, sizeof(row), "%s: %s, mean per read", name,
			 names[k]);
		/* the bucket that holds the 99th percentile: its bound */
		double seen = 0, p99 = 0;

		for (b = 0; b < KVP_HIST_BUCKETS && n > 0; b++) {
			seen += (double)(now.bk[k][b] - before->bk[k][b]);
			if (seen >= 0.99 * n) {
				p99 = (double)(1ull << (b + KVP_HIST_SHIFT)) /
				      1e3;
				break;
			}
		}
		printf("    %-30s %8.0f reads %10.1f us mean %10.1f us a call  %5.1f%%  p99 <= %.0f us\n",
		       names[k], n, n ? sum / n / 1e3 : 0, sum / ncalls / 1e3,
		       100 * sum / total_ns, p99);
		if (json)
			fprintf(json,
				"%s\"%s\":{\"value\":%.4f,\"unit\":\"us\",\"ratio\":%.4f}",
				ftell(json) > 1 ? "," : "", row,
				n ? sum / n / 1e3 : 0, sum / total_ns);
	}
	printf("    %-30s %8s       %10s    %10.1f us a call  %5.1f%%\n",
	       "wake + rest (client)", "", "",
	       (total_ns - covered) / ncalls / 1e3,
	       100 * (total_ns - covered) / total_ns);
	printf("    batch headers: %llu from the agent's cache, %llu read "
	       "beside the value; %llu requests answered BUSY\n",
	       (unsigned long long)(now.hdr_cached - before->hdr_cached),
	       (unsigned long long)(now.hdr_read - before->hdr_read),
	       (unsigned long long)(now.busy - before->busy));
}

/* Is row name to be run (--only)? */
static bool
want(const char *name)
{
	char list[260];
	size_t n = strlen(name);
	const char *p;

	if (!only[0])
		return strcmp(name, "drives") != 0 || drives[0];
	snprintf(list, sizeof(list), ",%s,", only);
	for (p = list; (p = strstr(p, name)); p++)
		if (p[-1] == ',' && p[n] == ',')
			return true;
	return false;
}

static int
cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* fio's random read at queue depth 1: p50 completion latency in us
 * (clat: from the submission to the completion), and in *total the p50 of
 * fio's whole latency (lat: submission included, as a get's wall time
 * includes the agent's submit); 0 without fio. */
static double
fio_qd1_p50_us(const char *bs, unsigned mib, double *total)
{
	char cmd[1024], buf[1 << 16];
	const char *p, *q;
	size_t n;
	FILE *f;

	*total = 0;
	snprintf(
		cmd, sizeof(cmd),
		"fio --name=kvpb --directory=%s --direct=1 --ioengine=io_uring "
		"--rw=randread --bs=%s --size=%uM --iodepth=1 --runtime=5 "
		"--time_based --lat_percentiles=1 --output-format=json "
		"2>/dev/null",
		sdir, bs, mib);
	f = popen(cmd, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	pclose(f);
	p = strstr(buf, "\"read\" : {");
	q = p ? strstr(p, "\"lat_ns\"") : NULL;
	q = q ? strstr(q, "\"50.000000\"") : NULL;
	*total = q ? strtod(strchr(q, ':') + 1, NULL) / 1e3 : 0;
	p = p ? strstr(p, "\"clat_ns\"") : NULL;
	p = p ? strstr(p, "\"50.000000\"") : NULL;
	return p ? strtod(strchr(p, ':') + 1, NULL) / 1e3 : 0;
}

/* Cold single gets of 64 KiB values, one key per call, from SSD (no
 * promotion): p50 and p99 in us. */
static void
cold_get_latency(void)
{
	enum {
		N = 2000,
		SZ = 64 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	unsigned char *out = malloc(SZ);
	uint64_t lat[N], lbusy[N], tot = 0;
	struct stage_snap snap;
	ssize_t rc;
	double fio50, fio50t;
	char ssd[700];
	int i, n = quick ? 500 : N;

	snprintf(ssd, sizeof(ssd), "%s/lat", sdir);
	if (!out ||
	    kvpt_pool_up(&a, &s, &c, "--dram", "1G", "--dram-unit", "4K",
			 "--dram-high", "0", "--dram-low", "0", "--ssd-dir",
			 ssd, "--staging", "64M", "--staging-slot", "1M",
			 "--no-promote", NULL)) {
		printf("cannot start the agent\n");
		free(out);
		return;
	}
	kvpb_ssd_fill_and_demote(c, &s, n, SZ);
	stage_snap(&s, &snap);
	for (i = 0; i < n; i++) {
		/* a stride through the keys: no two neighbours in a row */
		int k = (int)(((unsigned)i * 7919u) % (unsigned)n);
		char key[100];
		uint32_t kl = kvpb_ssd_key(key, k);
		double t0 = now_s();

		if ((rc = kvp_get(c, key, kl, out, SZ)) != SZ)
			fprintf(stderr, "bench: cold get %d: %s\n", k,
				rc < 0 ? kvp_strerror((int)rc) : "short");
		lat[i] = (uint64_t)((now_s() - t0) * 1e9);
		tot += lat[i];
	}
	stage_report("cold 64KiB get, quiet", &s, &snap, n, (double)tot);
	qsort(lat, (size_t)n, sizeof(lat[0]), cmp_u64);
	{
		/* the same gets while another process puts 256 KiB values
		 * the agent keeps demoting: the tier thread has writes in
		 * flight when each get arrives */
		pid_t pid = fork();
		int st;

		if (pid == 0) {
			struct kvp_client *w;
			unsigned char *v = calloc(1, 256 << 10);
			int j;

			if (!v || kvp_open(a.pool, "bench", &w))
				_exit(1);
			/* 8 GiB at most (the log only grows) */
			for (j = 0; j < 16384; j++) {
				char key[100];
				uint32_t kl = (uint32_t)snprintf(
					key, sizeof(key), "busy-%d", j % 4000);

				kvp_put(w, key, kl, v, 256 << 10);
				kvp_delete(w, key, kl);
				kvp_put(w, key, kl, v, 256 << 10);
			}
			_exit(0);
		}
		stage_snap(&s, &snap);
		tot = 0;
		for (i = 0; i < n; i++) {
			int k = (int)(((unsigned)i * 7919u) % (unsigned)n);
			char key[100];
			uint32_t kl = kvpb_ssd_key(key, k);
			double t0 = now_s();

			if ((rc = kvp_get(c, key, kl, out, SZ)) != SZ)
				fprintf(stderr, "bench: cold get %d: %s\n", k,
					rc < 0 ? kvp_strerror((int)rc) :
						 "short");
			lbusy[i] = (uint64_t)((now_s() - t0) * 1e9);
			tot += lbusy[i];
		}
		stage_report("cold 64KiB get, demotion running", &s, &snap, n,
			     (double)tot);
		if (pid > 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
		}
		qsort(lbusy, (size_t)n, sizeof(lbusy[0]), cmp_u64);
	}
	kvpt_pool_down(&a, &s, c);
	kvpb_rm_rf(ssd);
	mkdir(sdir, 0700);
	fio50 = fio_qd1_p50_us("64k", 256, &fio50t);
	kvpb_rm_rf(sdir);
	mkdir(sdir, 0700);
	report("fio randread 64KiB QD1 p50", fio50, "us", 0, "");
	report("  fio's whole latency (submit included) p50", fio50t, "us", 0,
	       "");
	report("cold SSD kvp_get 64KiB p50", (double)lat[n / 2] / 1e3, "us",
	       fio50, "fio QD1 p50");
	report("  the same get p50 / fio's whole latency",
	       (double)lat[n / 2] / 1e3, "us", fio50t, "fio QD1 lat p50");
	report("cold SSD kvp_get 64KiB p99", (double)lat[n * 99 / 100] / 1e3,
	       "us", 0, "");
	report("  same, demotion running: p50", (double)lbusy[n / 2] / 1e3,
	       "us", 0, "");
	report("  same, demotion running: p99",
	       (double)lbusy[n * 99 / 100] / 1e3, "us",
	       (double)lat[n * 99 / 100] / 1e3, "its p99 without the writer");
	free(out);
}

/* Demotion of n more 1 MiB values (keys n..2n-1) while another process
 * reads keys 0..n-1 cold in batches of 16 without pause: bytes/s from
 * the first put to the last demotion; the reader's bytes/s over the same
 * time in *rbw. */
static double
demote_with_reads(const char *pool, struct kvp_client *c, struct kvp_seg *s,
		  int n, double *rbw)
{
	unsigned char *v = malloc(1 << 20);
	uint64_t *got = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
			     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	double t0, bw, secs;
	uint64_t got0;
	pid_t r;
	char k[100];
	int i, rc, st;

	*rbw = 0;
	if (!v || got == MAP_FAILED) {
		free(v);
		return 0;
	}
	r = fork();
	if (r == 0) {
		struct kvp_client *rc2;

		if (kvp_open(pool, "ns", &rc2))
			_exit(1);
		for (;;)
			kvpb_ssd_cold_gets_p(rc2, n, 1 << 20, 16, NULL, got);
	}
	memset(v, 0x5a, 1 << 20);
	t0 = now_s();
	got0 = __atomic_load_n(got, __ATOMIC_RELAXED);
	for (i = n; i < 2 * n; i++) {
		uint32_t kl = kvpb_ssd_key(k, i);

		while ((rc = kvp_put(c, k, kl, v, 1 << 20)) == -EBUSY)
			;
		if (rc)
			fprintf(stderr, "bench: put: %s\n", kvp_strerror(rc));
	}
	kvpt_wait_until(kvpb_ssd_demoted, s, 600000);
	secs = now_s() - t0;
	bw = (double)n * (1 << 20) / secs;
	*rbw = (double)(__atomic_load_n(got, __ATOMIC_RELAXED) - got0) / secs;
	kill(r, SIGKILL);
	waitpid(r, &st, 0);
	munmap(got, 4096);
	free(v);
	return bw;
}

static uint64_t demoted_want;
static bool demoted_enough(void *p);

/*
 * The seed's production scenario: 8 readers, each loading its own 2,664
 * SSD-resident 64 KiB values in one kvp_batch_get through an 8-slot
 * staging arena (served in parts: rule 5), while a ninth process keeps
 * demotion busy (put, delete, put of 256 KiB values).  Every value is
 * checked byte for byte.  Reports the wall time until the last reader is
 * done (--quick: 333 keys each).
 */
static void
seed_scenario(void)
{
	enum {
		R = 8,
		SZ = 64 << 10
	};
	int per = quick ? 333 : 2664, n = R * per, r, st, bad = 0;
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	unsigned char *v = malloc(SZ);
	pid_t rd[R], w;
	char ssd[700], idx[32], one = 1;
	double t0, secs;
	int ready[2], go[2];

	snprintf(ssd, sizeof(ssd), "%s/seed", sdir);
	snprintf(idx, sizeof(idx), "%d", 4 * n + 65536);
	if (pipe(ready) || pipe(go)) {
		printf("  seed scenario: no pipe\n");
		free(v);
		return;
	}
	if (!v || kvpt_pool_up(&a, &s, &c, "--dram", "1G", "--dram-unit", "4K",
			       "--dram-high", "0", "--dram-low", "0",
			       "--index-entries", idx, "--ssd-dir", ssd,
			       "--staging", "512K", "--staging-slot", "64K",
			       "--no-promote", NULL)) {
		printf("cannot start the agent\n");
		free(v);
		return;
	}
	for (r = 0; r < n; r++) {
		char k[100];
		uint32_t kl = kvpb_ssd_key(k, r);
		int rc;

		kvpt_fill(v, SZ, k, kl, 7);
		while ((rc = kvp_put(c, k, kl, v, SZ)) == -EBUSY)
			;
		if (rc)
			fprintf(stderr, "bench: put: %s\n", kvp_strerror(rc));
	}
	kvpt_wait_until(kvpb_ssd_demoted, &s, 600000);
	w = fork();
	if (w == 0) {
		struct kvp_client *wc;
		unsigned char *b = calloc(1, 256 << 10);
		int j;

		if (!b || kvp_open(a.pool, "busy", &wc))
			_exit(1);
		/* at most 8 GiB written: without --ssd-size the log only
		 * grows (the agent before issue 29 wrote 78 GB here in the
		 * 155 s the readers took) */
		for (j = 0; j < 16384; j++) {
			char key[100];
			uint32_t kl = (uint32_t)snprintf(key, sizeof(key),
							 "busy-%d", j % 512);

			kvp_put(wc, key, kl, b, 256 << 10);
			kvp_delete(wc, key, kl);
			kvp_put(wc, key, kl, b, 256 << 10);
		}
		_exit(0);
	}
	/* demotion running before the readers start */
	{
		uint64_t d0 = kvpt_actr(&s, KVP_ACTR_DEMOTE);

		demoted_want = d0 + 200;
		kvpt_wait_until(demoted_enough, &s, 30000);
	}
	/* every reader opens its client and touches its destination (an
	 * engine's buffers are allocated once) before the clock starts: a
	 * first touch of 8 x 166 MiB is 2-4 s on this VM, not the pool's */
	for (r = 0; r < R; r++) {
		rd[r] = fork();
		if (rd[r] == 0) {
			struct kvp_client *rc;
			struct kvp_op *ops = calloc((size_t)per, sizeof(*ops));
			char(*keys)[100] = calloc((size_t)per, 100);
			unsigned char *out = malloc((size_t)per * SZ);
			int k, wrong = 0;
			char b;

			close(ready[0]);
			close(go[1]);
			if (!ops || !keys || !out ||
			    kvp_open(a.pool, "ns", &rc))
				_exit(100);
			memset(out, 0x5a, (size_t)per * SZ);
			for (k = 0; k < per; k++) {
				ops[k].klen =
					kvpb_ssd_key(keys[k], r * per + k);
				ops[k].key = keys[k];
				ops[k].buf = out + (size_t)k * SZ;
				ops[k].len = SZ;
			}
			if (write(ready[1], &one, 1) != 1 ||
			    read(go[0], &b, 1) != 1)
				_exit(100);
			kvp_batch_get(rc, ops, (size_t)per);
			for (k = 0; k < per; k++) {
				bool ok = ops[k].status == 0 &&
					  kvpt_check(ops[k].buf, SZ, keys[k],
						     ops[k].klen, 7);

				if (!ok && wrong < 3)
					fprintf(stderr,
						"bench: reader %d key %d: %s\n",
						r, r * per + k,
						ops[k].status ?
							kvp_strerror(
								ops[k].status) :
							"wrong bytes");
				wrong += !ok;
			}
			kvp_close(rc);
			_exit(wrong > 99 ? 99 : wrong);
		}
	}
	close(ready[1]);
	close(go[0]);
	for (r = 0; r < R; r++) {
		char b;

		if (read(ready[0], &b, 1) != 1)
			break; /* a reader died: its status says so */
	}
	t0 = now_s();
	for (r = 0; r < R; r++)
		if (write(go[1], &one, 1) != 1)
			break;
	close(ready[0]);
	close(go[1]);
	for (r = 0; r < R; r++) {
		waitpid(rd[r], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			bad += WIFEXITED(st) ? WEXITSTATUS(st) : 100;
	}
	secs = now_s() - t0;
	kill(w, SIGKILL);
	waitpid(w, &st, 0);
	printf("  seed scenario: %d readers x %d x 64KiB through 8 staging "
	       "slots, demotion busy: %.3f s, %d values wrong or failed\n",
	       R, per, secs, bad);
	report("seed scenario: 8 readers, demotion busy", secs, "s", 0, "");
	report("seed scenario: values wrong or failed", bad, "", 0, "");
	kvpt_pool_down(&a, &s, c);
	kvpb_rm_rf(ssd);
	free(v);
}

/* Demotion and cold batch_get of 1 MiB values with the first of the
 * --drives directories alone, then with all of them. */
static void
drives_scaling(void)
{
	char list[2048], *dirs[12], *save = NULL, *p, name[96];
	double dem[2] = { 0, 0 }, rd[2] = { 0, 0 };
	int nd = 0, round, n = quick ? 512 : 2048;

	snprintf(list, sizeof(list), "%s", drives);
	for (p = strtok_r(list, ",", &save); p && nd < 12;
	     p = strtok_r(NULL, ",", &save))
		dirs[nd++] = p;
	if (nd < 2) {
		printf("  --drives needs two directories or more\n");
		return;
	}
	for (round = 0; round < 2; round++) {
		const char *args[64] = { NULL };
		struct kvpt_agent a;
		struct kvp_client *c;
		struct kvp_seg s;
		int k, m = 0, use = round ? nd : 1;

		for (k = 0; k < nd; k++) {
			char cmd[600];

			snprintf(cmd, sizeof(cmd),
				 "rm -rf '%s'/* '%s'/.??* 2>/dev/null", dirs[k],
				 dirs[k]);
			if (system(cmd) < 0)
				return;
		}
		args[m++] = "--dram";
		args[m++] = quick ? "768M" : "3G";
		args[m++] = "--dram-high";
		args[m++] = "0";
		args[m++] = "--dram-low";
		args[m++] = "0";
		args[m++] = "--staging";
		args[m++] = "64M";
		args[m++] = "--staging-slot";
		args[m++] = "1M";
		args[m++] = "--no-promote";
		for (k = 0; k < use; k++) {
			args[m++] = "--ssd-dir";
			args[m++] = dirs[k];
		}
		args[m] = NULL;
		/* kvpt_pool_up takes a NULL-terminated list: pass 30 slots */
		if (kvpt_pool_up(
			    &a, &s, &c, args[0], args[1], args[2], args[3],
			    args[4], args[5], args[6], args[7], args[8],
			    args[9], args[10], args[11], args[12], args[13],
			    args[14], args[15], args[16], args[17], args[18],
			    args[19], args[20], args[21], args[22], args[23],
			    args[24], args[25], args[26], args[27], args[28],
			    args[29], args[30], args[31], args[32], args[33],
			    args[34], args[35], args[36], NULL)) {
			printf("cannot start the agent\n");
			return;
		}
		dem[round] = kvpb_ssd_fill_and_demote(c, &s, n, 1 << 20);
		rd[round] = kvpb_ssd_cold_gets(c, n, 1 << 20, 16, NULL);
		kvpt_pool_down(&a, &s, c);
		snprintf(name, sizeof(name), "demotion 1MiB, %d drive%s", use,
			 use > 1 ? "s" : "");
		report(name, dem[round] / 1e9, "GB/s", round ? dem[0] / 1e9 : 0,
		       "one drive");
		snprintf(name, sizeof(name), "cold batch_get 1MiB, %d drive%s",
			 use, use > 1 ? "s" : "");
		report(name, rd[round] / 1e9, "GB/s", round ? rd[0] / 1e9 : 0,
		       "one drive");
	}
}

/* Bytes of records (batch header blocks and values) in the sealed
 * segments of store dir ssd: each trailer says where its records end. */
static uint64_t
ssd_record_bytes(const char *ssd)
{
	struct kvp_ssd_trailer tr;
	struct dirent *de;
	uint64_t total = 0;
	char path[1400];
	DIR *d = opendir(ssd);

	while (d && (de = readdir(d))) {
		struct stat st;
		int fd;

		if (strncmp(de->d_name, "seg-", 4))
			continue;
		snprintf(path, sizeof(path), "%s/%s", ssd, de->d_name);
		fd = open(path, O_RDONLY);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 &&
		    pread(fd, &tr, sizeof(tr), st.st_size - 4096) ==
			    (ssize_t)sizeof(tr) &&
		    tr.st_magic == KVP_SSD_MAGIC_TRAIL)
			total += tr.st_sum_off -
				 4096; /* after the file header */
		close(fd);
	}
	if (d)
		closedir(d);
	return total;
}

/* Have 'demoted_want' demotions completed?  (the agent's counter: a
 * scan of the index every millisecond would take a core from the agent) */
static bool
demoted_enough(void *p)
{
	return kvpt_actr(p, KVP_ACTR_DEMOTE) >= demoted_want;
}

/* Put values from..to-1 of sz bytes and wait until every value is
 * written to SSD; seconds from the first put. */
static double
fill_range(struct kvp_client *c, struct kvp_seg *s, int from, int to,
	   uint64_t sz)
{
	unsigned char *v = malloc(sz);
	double t0 = now_s();
	char k[100];
	int i, rc;

	memset(v, 0x5a, sz);
	for (i = from; i < to; i++) {
		uint32_t kl = kvpb_ssd_key(k, i);

		v[0] = (unsigned char)i;
		while ((rc = kvp_put(c, k, kl, v, sz)) == -EBUSY)
			;
		if (rc)
			fprintf(stderr, "bench: put: %s\n", kvp_strerror(rc));
	}
	demoted_want = (uint64_t)to;
	kvpt_wait_until(demoted_enough, s, 600000);
	free(v);
	return now_s() - t0;
}

/* Demotion of n values of sz bytes (put, then written to SSD by the
 * agent: every value leaves DRAM at once) against fio's sequential write
 * of the same block size; and what each value took on disk.  A first
 * round of n other values warms the pool (the segment's pages faulted in
 * by the puts, the store's first segments): the second is measured. */
static void
demote_by_size(uint64_t sz, int n)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	char ssd[700], bs[32], name[96], idx[32], unit[32];
	double fw, bw;
	uint64_t rec;

	snprintf(bs, sizeof(bs), "%lluk", (unsigned long long)(sz >> 10));
	fw = fio_bw("write", bs, (unsigned)((((uint64_t)n * sz) >> 20) + 1));
	kvpb_rm_rf(sdir);
	mkdir(sdir, 0700);
	snprintf(ssd, sizeof(ssd), "%s/store-%s", sdir, bs);
	snprintf(idx, sizeof(idx), "%d", 2 * n + n / 2 + 1024);
	/* one unit per value (an operator sizes the unit to the namespace's
	 * value size), 64 KiB units for 1 MiB values */
	snprintf(unit, sizeof(unit), "%lluK",
		 (unsigned long long)((sz < (64u << 10) ? sz : 64u << 10) >>
				      10));
	if (kvpt_pool_up(&a, &s, &c, "--dram", "2G", "--dram-unit", unit,
			 "--dram-high", "0", "--dram-low", "0",
			 "--index-entries", idx, "--ssd-dir", ssd,
			 "--no-promote", NULL)) {
		printf("cannot start the agent\n");
		return;
	}
	fill_range(c, &s, 0, n, sz);
	bw = (double)n * (double)sz / fill_range(c, &s, n, 2 * n, sz);
	kvpt_pool_down(&a, &s, c); /* seals: the trailers count */
	snprintf(name, sizeof(name), "demotion %s (put + write to SSD)", bs);
	report(name, bw / 1e6, "MB/s", fw / 1e6, "fio write");
	snprintf(name, sizeof(name), "demotion %s values per second", bs);
	report(name, bw / (double)sz / 1e3, "k/s", 0, "");
	rec = ssd_record_bytes(ssd);
	snprintf(name, sizeof(name), "SSD bytes per %s value", bs);
	report(name, (double)rec / (2.0 * n) / (double)sz, "x", 0, "");
	kvpb_rm_rf(ssd);
}

/* 2,000 cold 64 KiB values in one kvp_batch_get through a staging arena
 * of 'staging' bytes in slots of 'slot' (NULL: the agent's default):
 * the time against the bandwidth bound (bytes / fio's 64 KiB read).
 * record: the row of the table.  Nonzero if the agent did not
 * start. */
static int
batch_2000(const char *staging, const char *slot, const char *what, bool record,
	   double fio_r64)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	struct stage_snap snap;
	char ssd[700], name[160];
	double secs, bound;

	snprintf(ssd, sizeof(ssd), "%s/store64", sdir);
	if (kvpt_pool_up(&a, &s, &c, "--dram", "1G", "--dram-unit", "4K",
			 "--dram-high", "0", "--dram-low", "0", "--ssd-dir",
			 ssd, "--staging", staging, "--no-promote",
			 slot ? "--staging-slot" : NULL, slot, NULL)) {
		printf("cannot start the agent\n");
		return 1;
	}
	kvpb_ssd_fill_and_demote(c, &s, 2000, 64 << 10);
	stage_snap(&s, &snap);
	/* the gets' own time: the destination's allocation and first touch
	 * (125 MiB, 0.3-0.4 s on this VM) are not the pool's */
	secs = 2000.0 * (64 << 10) /
	       kvpb_ssd_cold_gets(c, 2000, 64 << 10, 2000, NULL);
	snprintf(name, sizeof(name), "2000 x 64KiB, one batch, %s", what);
	stage_report(name, &s, &snap, 1, secs * 1e9);
	bound = 2000.0 * 65536 / fio_r64;
	printf("  2000 x 64KiB through %s: %.3f s (bandwidth bound %.3f s), "
	       "staging peak %llu slots\n",
	       what, secs, bound,
	       (unsigned long long)kvp_load_relaxed(&s.hdr->h_staging_peak));
	if (record)
		report("2000-key batch time / bandwidth bound", secs / bound,
		       "x", 0, "");
	else {
		snprintf(name, sizeof(name), "  same, %s", what);
		report(name, secs / bound, "x", 0, "");
	}
	kvpt_pool_down(&a, &s, c);
	kvpb_rm_rf(ssd);
	return 0;
}

/*
 * The SSD index rebuild: nrec values of 1 byte written and demoted, the
 * agent stopped, started again on the same pool (the index rebuilt from
 * the log).  Reports the restart's rate and, from the agent's log line,
 * the recovery's, the index inserts' alone and their threads.  huge: the
 * segment on 2 MiB pages (--hugepages on; skipped, saying so, where no
 * hugetlbfs mount of 2 MiB pages with room for it is to be had: mount -t
 * hugetlbfs -o pagesize=2M none /dev/hugepages and reserve
 * /proc/sys/vm/nr_hugepages).
 */
static void
rebuild(const char *base, int nrec, bool huge)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	char ssd[700], idx[32], path[2200], line[512];
	const char *pages = huge ? "on" : "off";
	char tag[48];
	unsigned char one = 1;
	double t0, secs, rec_s = 0, ins_s = 0;
	unsigned long long nr = 0;
	unsigned threads = 0;
	char name[160];
	FILE *f;
	int i;

	/* the row's name: records, pages ("1M records, 2M pages") */
	snprintf(tag, sizeof(tag), "%d%s records, %s",
		 nrec >= 1000000 ? nrec / 1000000 : nrec / 1000,
		 nrec >= 1000000 ? "M" : "k", huge ? "2M" : "4K");
	snprintf(ssd, sizeof(ssd), "%s/rebuild", base);
	snprintf(idx, sizeof(idx), "%d", nrec + nrec / 4 + 1024);
	if (kvpt_agent_start(
		    &a, "--dram", "256M", "--dram-unit", "4K", "--dram-high",
		    "0", "--dram-low", "0", "--index-entries", idx, "--ssd-dir",
		    ssd, "--ssd-segment", "64M", "--hugepages", pages, NULL) ||
	    kvpt_seg_map(a.pool, &s) || kvp_open(a.pool, "bench", &c)) {
		printf("  rebuild, %s pages: skipped (the agent did not "
		       "start%s)\n",
		       tag,
		       huge ? ": no hugetlbfs mount of 2 MiB pages with room" :
			      "");
		kvpb_rm_rf(ssd);
		return;
	}
	for (i = 0; i < nrec; i++) {
		char k[100];
		uint32_t kl = kvpb_ssd_key(k, i);
		while (kvp_put(c, k, kl, &one, 1) == -EBUSY)
			;
	}
	kvpt_wait_until(kvpb_ssd_demoted, &s, 600000);
	kvp_close(c);
	kvp__seg_unmap(&s);
	kvpt_agent_stop(&a); /* seals the active segment */
	t0 = now_s();
	kvpt_agent_restart(&a, "--dram", "256M", "--dram-unit", "4K",
			   "--index-entries", idx, "--ssd-dir", ssd,
			   "--ssd-segment", "64M", "--hugepages", pages, NULL);
	secs = now_s() - t0;
	snprintf(name, sizeof(name), "rebuild, %s pages: agent restart", tag);
	report(name, (double)nrec / secs / 1e6, "M/s", 0, "");
	kvpt_agent_stop(&a);
	/* the recovery's parts, from the agent's own log line */
	kvpt_agent_log(a.pool, path, sizeof(path));
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		const char *r = strstr(line, "recovered "),
			   *in = strstr(line, " in "),
			   *ins = strstr(line, "inserts ");
		if (r && in && ins && strstr(line, "segments")) {
			nr = strtoull(r + 10, NULL, 10);
			rec_s = strtod(in + 4, NULL);
			ins_s = strtod(ins + 8, NULL);
			if (strstr(ins, " on "))
				threads =
					(unsigned)atoi(strstr(ins, " on ") + 4);
		}
	}
	if (f)
		fclose(f);
	if (nr && rec_s > 0) {
		snprintf(name, sizeof(name),
			 "rebuild, %s pages: recovery (log)", tag);
		report(name, (double)nr / rec_s / 1e6, "M/s", 0, "");
	}
	if (nr && ins_s > 0) {
		snprintf(name, sizeof(name),
			 "rebuild, %s pages: inserts, %u threads", tag,
			 threads);
		report(name, (double)nr / ins_s / 1e6, "M/s", 0, "");
	}
	kvpb_rm_rf(ssd);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "quick", no_argument, NULL, 'q' },
		{ "json", required_argument, NULL, 'j' },
		{ "only", required_argument, NULL, 'o' },
		{ "records", required_argument, NULL, 'r' },
		{ "drives", required_argument, NULL, 'D' },
		{ NULL, 0, NULL, 0 },
	};
	double fio_w = 0, fio_r = 0, fio_r64 = 0, bw, rbw, fw_mixed, fr_mixed;
	int opt, n1m, n4k, nrec, records = 0;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			snprintf(dir, sizeof(dir), "%s", optarg);
			break;
		case 'q':
			quick = true;
			break;
		case 'j':
			json = fopen(optarg, "w");
			break;
		case 'o':
			snprintf(only, sizeof(only), "%s", optarg);
			break;
		case 'D':
			snprintf(drives, sizeof(drives), "%s", optarg);
			break;
		case 'r':
			records = atoi(optarg);
			break;
		default:
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IONBF, 0); /* the harness forks */
	if (json)
		fputc('{', json);
	n1m = quick ? 256 : 1024;
	n4k = quick ? 10000 : 50000;
	nrec = records > 0 ? records : quick ? 20000 : 1000000;
	snprintf(sdir, sizeof(sdir), "%s/kvpool-bench-ssd.%d", dir,
		 (int)getpid());
	mkdir(sdir, 0700);
	printf("bench_ssd: %s in %s (%s)\n", quick ? "quick" : "full", sdir,
	       "2 vCPU; same file system for fio and kvpool");

	if (want("pin")) {
		/* the cost of the promise: lookup_pin vs the plain probe */
		enum {
			N = 2000
		};
		struct kvpt_agent a;
		struct kvp_client *c;
		struct kvp_op *ops = calloc(N, sizeof(*ops));
		char(*keys)[100] = calloc(N, 100);
		unsigned char one = 1;
		double t0, tp, tl;
		int i, r, rounds = quick ? 200 : 1000;

		if (kvpt_agent_start(&a, "--dram", "256M", "--dram-unit", "4K",
				     "--index-entries", "262144", NULL) ||
		    kvp_open(a.pool, "bench", &c)) {
			printf("cannot start the agent\n");
			return 1;
		}
		for (i = 0; i < N; i++) {
			ops[i].klen = kvpb_ssd_key(keys[i], i);
			ops[i].key = keys[i];
			kvp_put(c, keys[i], ops[i].klen, &one, 1);
		}
		t0 = now_s();
		for (r = 0; r < rounds; r++)
			kvp_batch_exists_prefix(c, ops, N);
		tp = (now_s() - t0) / rounds;
		t0 = now_s();
		for (r = 0; r < rounds; r++) {
			struct kvp_pinset *ps = NULL;
			kvp_batch_lookup_pin(c, ops, N, &ps);
			kvp_pinset_free(c, ps);
		}
		tl = (now_s() - t0) / rounds;
		report("exists_prefix of 2000 keys", tp * 1e6, "us", 0, "");
		report("lookup_pin + release of 2000 keys", tl * 1e6, "us",
		       tp * 1e6, "exists_prefix");
		kvp_close(c);
		kvpt_agent_stop(&a);
		free(ops);
		free(keys);
	}
	fio_w = fio_r = fio_r64 = 0;
	if (want("seq") || want("batch")) {
		fio_w = fio_bw("write", "1M", (unsigned)n1m);
		fio_r = fio_bw("read", "1M", (unsigned)n1m);
		fio_r64 = fio_bw("read", "64k", quick ? 128 : 512);
		kvpb_rm_rf(sdir);
		mkdir(sdir, 0700);
		report("fio seq write 1MiB (O_DIRECT, io_uring)", fio_w / 1e9,
		       "GB/s", 0, "");
		report("fio seq read 1MiB", fio_r / 1e9, "GB/s", 0, "");
		report("fio seq read 64KiB", fio_r64 / 1e9, "GB/s", 0, "");
	}
	if (want("seq")) {
		struct kvpt_agent a;
		struct kvp_client *c;
		struct kvp_seg s;
		struct stage_snap snap;
		char ssd[700];

		snprintf(ssd, sizeof(ssd), "%s/store", sdir);
		if (kvpt_pool_up(&a, &s, &c, "--dram", "2G", "--dram-high", "0",
				 "--dram-low", "0", "--ssd-dir", ssd,
				 "--staging", "64M", "--staging-slot", "1M",
				 "--no-promote", NULL)) {
			printf("cannot start the agent\n");
			return 1;
		}
		bw = kvpb_ssd_fill_and_demote(c, &s, n1m, 1 << 20);
		report("demotion 1MiB (put + write to SSD)", bw / 1e9, "GB/s",
		       fio_w / 1e9, "fio write");
		stage_snap(&s, &snap);
		bw = kvpb_ssd_cold_gets(c, n1m, 1 << 20, 16, NULL);
		stage_report("cold batch_get 1MiB x 16", &s, &snap,
			     (n1m + 15) / 16,
			     (double)n1m * (1 << 20) / bw * 1e9);
		report("cold SSD batch_get 1MiB via staging", bw / 1e9, "GB/s",
		       fio_r / 1e9, "fio read");
		bw = demote_with_reads(a.pool, c, &s, n1m, &rbw);
		report("demotion 1MiB, cold reads running", bw / 1e9, "GB/s",
		       fio_w / 1e9, "fio write");
		report("  its reader: cold batch_get 1MiB x 16", rbw / 1e9,
		       "GB/s", fio_r / 1e9, "fio read");
		fio_mixed((unsigned)n1m, quick ? 2 : 5, &fw_mixed, &fr_mixed);
		report("  fio write beside fio's 16 x 1MiB reader",
		       fw_mixed / 1e9, "GB/s", 0, "");
		report("  fio's reader beside it", fr_mixed / 1e9, "GB/s", 0,
		       "");
		report("demotion with reads / fio write with reads", bw / 1e9,
		       "GB/s", fw_mixed / 1e9, "fio write beside the reader");
		kvpt_pool_down(&a, &s, c);
		kvpb_rm_rf(ssd);
	}
	if (want("sizes") || want("size4") || want("size16") ||
	    want("size64") || want("size1024")) {
		/* demotion by value size, against fio at that size: ~1 GiB
		 * each (64 MiB with --quick), and 4 KiB as n4k values */
		static const uint64_t sizes[] = { 4 << 10, 16 << 10, 64 << 10,
						  1 << 20 };
		unsigned k;

		for (k = 0; k < 4; k++) {
			uint64_t tot = (quick ? 64ull : 1024ull) << 20;
			int n = sizes[k] == 4096 ? n4k : (int)(tot / sizes[k]);

			char one[32];

			snprintf(one, sizeof(one), "size%llu",
				 (unsigned long long)(sizes[k] >> 10));
			if (want("sizes") || want(one))
				demote_by_size(sizes[k], n);
		}
	}
	if (want("batch")) {
		/* the figure: 8 slots of 64 KiB */
		if (batch_2000("512K", "64K", "an 8-slot arena", true, fio_r64))
			return 1;
		/* the default arena, in the old default slots and the new */
		batch_2000("64M", "1M", "64 MiB of 1 MiB slots", false,
			   fio_r64);
		batch_2000("64M", NULL, "64 MiB of 64 KiB slots (default)",
			   false, fio_r64);
	}
	if (want("latency"))
		cold_get_latency();
	if (want("seed"))
		seed_scenario();
	if (want("drives"))
		drives_scaling();
	if (want("rebuild")) {
		/* the figure (100k records) and the large one */
		if (!quick && records <= 0) {
			rebuild(sdir, 100000, false);
			rebuild(sdir, 100000, true);
		}
		rebuild(sdir, nrec, false);
		rebuild(sdir, nrec, true);
	}
	kvpb_rm_rf(sdir);
	if (json) {
		fputs("}\n", json);
		fclose(json);
	}
	printf("bench_ssd: done\n");
	return 0;
}
