/* SPDX-License-Identifier: MIT */
/*
 * bench_gpu.c - the GPU endpoints' figures on a device: the bandwidth of
 * the pool against the runtime's own copies, host to device and back
 * (through the DRAM tier) and device to device (values served from the
 * HBM tier).  The functional checks are tests/gpu/test_gpu.c's; this
 * program only measures (the bytes it moves are verified all the same).
 * stress/gpu_check.sh runs each subcommand once, on an agent it started;
 * every figure prints one line, "PASS name", "FAIL name: why" or "SKIP
 * name: why" (details on indented lines before it), and the exit status
 * is 1 iff one failed.
 *
 *   bench_gpu bandwidth POOL      bandwidth (--emulated: figures not judged)
 *   bench_gpu hbm POOL            hbm_bandwidth (an agent with --hbm-gpu 0;
 *                                 --emulated: figures not judged)
 *
 * The runtime is loaded at run time (tests/gpu/gpu_util.h: its own
 * buffers, the baseline copies through cudaMemcpyAsync on one stream);
 * the pool's copies go through kvpool.h's device calls.
 */
#include "tests/gpu/gpu_util.h"

/* ---- bandwidth: the pool against the runtime's own pinned copies ---- */

struct bw_row {
	const char *dir;
	uint64_t size, keys;
	double pool, raw; /* bytes/s, best of BW_REPS */
};

#define BW_REPS 5

/* Best of BW_REPS (after one untimed warm-up) of the raw copies of
 * n x size bytes between pinned p and device d, on our stream. */
static double
raw_bw(unsigned char *p, unsigned char *d, uint64_t n, uint64_t size,
       bool to_dev)
{
	double best = 0;
	uint64_t k;
	int rep;

	for (rep = 0; rep <= BW_REPS; rep++) {
		double t0 = kvpb_now_s(), t;

		for (k = 0; k < n; k++) {
			unsigned int e =
				to_dev ? rt.cu->MemcpyAsync(d + k * size,
							    p + k * size, size,
							    KVP_CU_MEMCPY_H2D,
							    stream) :
					 rt.cu->MemcpyAsync(p + k * size,
							    d + k * size, size,
							    KVP_CU_MEMCPY_D2H,
							    stream);

			if (!cu(e, "cudaMemcpyAsync"))
				return 0;
		}
		if (!cu(rt.cu->StreamSynchronize(stream),
			"cudaStreamSynchronize"))
			return 0;
		t = kvpb_now_s() - t0;
		if (rep && (double)(n * size) / t > best)
			best = (double)(n * size) / t;
	}
	return best;
}

static bool
bw_size(struct kvp_client *c, uint64_t total, uint64_t size, unsigned char *h,
	unsigned char *p, unsigned char *d, struct bw_row *rows)
{
	uint64_t groups[2] = { total / size, size };
	uint64_t tag = 0x47505540 + (size >> 20);
	struct batch b, w;
	double best = 0;
	int rep;
	bool ok;

	rows[0].dir = "H2D";
	rows[1].dir = "D2H";
	rows[0].size = rows[1].size = size;
	rows[0].keys = rows[1].keys = groups[0];
	if (!batch_make(&b, tag, groups, 1))
		return false;
	batch_delete(c, &b);
	batch_fill(&b, h);
	ok = put_host_batch(c, &b, h, "bandwidth put");
	/* H2D through the pool */
	for (rep = 0; ok && rep <= BW_REPS; rep++) {
		double t0 = kvpb_now_s(), t;

		ok = get_dev_batch(c, &b, d, stream, "bandwidth H2D");
		t = kvpb_now_s() - t0;
		if (rep && (double)b.bytes / t > best)
			best = (double)b.bytes / t;
	}
	rows[0].pool = best;
	if (ok) {
		memset(h, 0, b.bytes);
		ok = d2h(h, d, b.bytes) && batch_verify(&b, h, "bandwidth H2D");
	}
	batch_delete(c, &b); /* room for the D2H keys */
	/* D2H through the pool: fresh keys each time, deleted after */
	best = 0;
	for (rep = 0; ok && rep <= BW_REPS; rep++) {
		double t0, t;

		if (!batch_make(&w, tag + 0x1000 + (uint64_t)rep, groups, 1)) {
			ok = false;
			break;
		}
		batch_delete(c, &w);
		t0 = kvpb_now_s();
		ok = put_dev_batch(c, &w, d, "bandwidth D2H");
		t = kvpb_now_s() - t0;
		if (rep && (double)w.bytes / t > best)
			best = (double)w.bytes / t;
		if (ok && rep == 1) {
			/* the first and last values, as the host reads them */
			size_t i;

			for (i = 0; ok && i < w.n; i += w.n - 1) {
				ssize_t got = kvp_get(c, w.keys[i], KVPB_KLEN,
						      h, size);

				ok = got == (ssize_t)size ?
					     pat_check(h, size, b.seed[i],
						       "bandwidth D2H") :
					     failf("bandwidth D2H: kvp_get "
						   "%zd",
						   got);
				if (w.n == 1)
					break;
			}
		}
		batch_delete(c, &w);
		batch_free(&w);
	}
	rows[1].pool = best;
	if (ok) {
		rows[0].raw = raw_bw(p, d, groups[0], size, true);
		rows[1].raw = raw_bw(p, d, groups[0], size, false);
		ok = rows[0].raw > 0 && rows[1].raw > 0;
	}
	batch_free(&b);
	return ok;
}

static int
cmd_bandwidth(void)
{
	struct kvp_client *c = open_client();
	struct bw_row rows[4];
	struct kvp_dev_info i0, i1;
	unsigned char *h = NULL, *p = NULL, *d = NULL;
	uint64_t total;
	bool ok = c && cuda_up(), below = false;
	int rc, k;

	memset(rows, 0, sizeof(rows));
	memset(&i0, 0, sizeof(i0));
	memset(&i1, 0, sizeof(i1));
	if (!ok) {
		report("bandwidth", false);
		return 1;
	}
	wait_populated(c);
	/* 1 GiB a copy, or 1/8 of the DRAM tier (two such sets at most
	 * live at once, and deletes are freed by the agent behind us) */
	total = dram_total(c) / 8;
	total = total > (1ull << 30) ? 1ull << 30 : total;
	total &= ~((8ull << 20) - 1);
	if (total < (8u << 20)) {
		printf("SKIP bandwidth: DRAM tier too small (%llu MiB)\n",
		       (unsigned long long)(dram_total(c) >> 20));
		kvp_close(c);
		return 0;
	}
	{
		double t0 = kvpb_now_s();

		rc = kvp_dev_register(c, 60000);
		printf("  kvp_dev_register(c, 60000): %s after %.2f s\n",
		       kvp_strerror(rc), kvpb_now_s() - t0);
		if (rc)
			failf("kvp_dev_register(c, 60000): %s (the pool's "
			      "copies go through the bounce buffer)",
			      kvp_strerror(rc));
	}
	kvp_dev_info(c, &i0, sizeof(i0));
	print_info(c, "before");
	h = malloc(total);
	d = dmalloc(total);
	ok = h && d &&
	     cu(rt.cu->MallocHost((void **)&p, total), "cudaMallocHost");
	if (!h)
		failf("out of memory");
	if (ok) {
		memset(p, 0x5a, total);
		ok = bw_size(c, total, 1u << 20, h, p, d, rows) &&
		     bw_size(c, total, 8u << 20, h, p, d, rows + 2);
	}
	kvp_dev_info(c, &i1, sizeof(i1));
	print_info(c, "after");
	printf("  batch_copy %d, registered %llu of %llu MiB, bounce bytes "
	       "during the runs %llu\n",
	       i1.batch_copy, (unsigned long long)(i1.reg_bytes >> 20),
	       (unsigned long long)(i1.reg_total_bytes >> 20),
	       (unsigned long long)(i1.bounce_bytes - i0.bounce_bytes));
	printf("  %-9s %-6s %6s %10s %10s %6s   (%llu MiB a copy, best of "
	       "%d)\n",
	       "direction", "size", "keys", "pool GB/s", "raw GB/s", "ratio",
	       (unsigned long long)(total >> 20), BW_REPS);
	for (k = 0; k < 4; k++) {
		double ratio = rows[k].raw > 0 ? rows[k].pool / rows[k].raw : 0;

		if (!rows[k].dir)
			continue;
		printf("  %-9s %4lluM %6llu %10.2f %10.2f %6.3f\n", rows[k].dir,
		       (unsigned long long)(rows[k].size >> 20),
		       (unsigned long long)rows[k].keys, rows[k].pool / 1e9,
		       rows[k].raw / 1e9, ratio);
		if (ratio < 0.9 && !below) {
			below = true;
			if (!emulated)
				failf("%s %lluM: pool %.2f GB/s is %.3f of the "
				      "raw %.2f GB/s (goal >= 0.9)",
				      rows[k].dir,
				      (unsigned long long)(rows[k].size >> 20),
				      rows[k].pool / 1e9, ratio,
				      rows[k].raw / 1e9);
		}
	}
	if (emulated)
		printf("  emulated runtime: these figures mean nothing and the "
		       "ratio is not judged (bytes and statuses are)\n");
	report("bandwidth", ok);
	if (p)
		rt.cu->FreeHost(p);
	if (d)
		dfree(d);
	free(h);
	kvp_close(c);
	return failed ? 1 : 0;
}

/* Best of BW_REPS (after one untimed warm-up) of n device-to-device
 * copies of size bytes from src to dst, on our stream. */
static double
raw_d2d(unsigned char *dst, unsigned char *src, uint64_t n, uint64_t size)
{
	double best = 0;
	uint64_t k;
	int rep;

	for (rep = 0; rep <= BW_REPS; rep++) {
		double t0 = kvpb_now_s(), t;

		for (k = 0; k < n; k++)
			if (!cu(rt.cu->MemcpyAsync(dst + k * size,
						   src + k * size, size,
						   GPU_MEMCPY_D2D, stream),
				"cudaMemcpyAsync D2D"))
				return 0;
		if (!cu(rt.cu->StreamSynchronize(stream),
			"cudaStreamSynchronize"))
			return 0;
		t = kvpb_now_s() - t0;
		if (rep && (double)(n * size) / t > best)
			best = (double)(n * size) / t;
	}
	return best;
}

/* One row of hbm_bandwidth: total / size values, promoted, read BW_REPS
 * times (every get an HBM hit), against the raw copies. */
static bool
hbm_bw_size(struct kvp_client *c, const struct kvp_seg *s, uint64_t total,
	    uint64_t size, unsigned char *h, unsigned char *d,
	    unsigned char *d2, struct bw_row *row)
{
	uint64_t groups[2] = { total / size, size };
	uint64_t copies0 = hbm_copies(s), gen = KVP_GS_GEN(hbm_word(s)), hits;
	struct batch b;
	double best = 0;
	int rep;
	bool ok;

	row->dir = "D2D";
	row->size = size;
	row->keys = groups[0];
	if (!batch_make(&b, HBM_TAG + 0x100 + (size >> 20), groups, 1))
		return false;
	batch_delete(c, &b);
	batch_fill(&b, h);
	ok = put_host_batch(c, &b, h, "hbm bandwidth put") &&
	     hbm_hit_once(c, &b, h) &&
	     hbm_wait_copies(s, gen, copies0 + b.n, 30000,
			     size >> 20 == 1 ? "1 MiB values promoted" :
					       "8 MiB values promoted");
	for (rep = 0; ok && rep <= BW_REPS; rep++) {
		struct kvp_dev_info i0, i1;
		double t0, t;

		memset(&i0, 0, sizeof(i0));
		memset(&i1, 0, sizeof(i1));
		kvp_dev_info(c, &i0, sizeof(i0));
		t0 = kvpb_now_s();
		ok = get_dev_batch(c, &b, d, stream, "hbm bandwidth");
		t = kvpb_now_s() - t0;
		kvp_dev_info(c, &i1, sizeof(i1));
		hits = i1.hbm_hits - i0.hbm_hits;
		if (ok && hits != b.n)
			ok = failf("hbm bandwidth %lluM: %llu HBM hits of %zu "
				   "gets (run %d)",
				   (unsigned long long)(size >> 20),
				   (unsigned long long)hits, b.n, rep);
		if (rep && (double)b.bytes / t > best)
			best = (double)b.bytes / t;
	}
	row->pool = best;
	if (ok) {
		memset(h, 0, b.bytes);
		ok = d2h(h, d, b.bytes) && batch_verify(&b, h, "hbm bandwidth");
	}
	if (ok) {
		row->raw = raw_d2d(d2, d, groups[0], size);
		ok = row->raw > 0;
	}
	batch_delete(c, &b); /* the pool's room for the next size */
	batch_free(&b);
	return ok;
}

static bool
hbm_bandwidth(struct kvp_client *c, const struct kvp_seg *s)
{
	/* a quarter of the pool a size (both may live at once), 512 MiB at
	 * most */
	uint64_t total = kvp_load_relaxed(&s->hdr->h_gpu[0].gs_bytes) / 4;
	struct bw_row rows[2];
	unsigned char *h = NULL, *d = NULL, *d2 = NULL;
	bool ok, below = false;
	int k;

	memset(rows, 0, sizeof(rows));
	total = total > (512ull << 20) ? 512ull << 20 : total;
	/* and the DRAM tier's room (two sizes' values may live at once) */
	total = total > dram_total(c) / 4 ? dram_total(c) / 4 : total;
	total &= ~((8ull << 20) - 1);
	if (total < (8u << 20))
		return failf("the HBM pool is too small (%llu MiB)",
			     (unsigned long long)(kvp_load_relaxed(
							  &s->hdr->h_gpu[0]
								   .gs_bytes) >>
						  20));
	h = malloc(total);
	d = dmalloc(total);
	d2 = dmalloc(total);
	ok = h && d && d2;
	if (!h)
		failf("out of memory");
	ok = ok && hbm_bw_size(c, s, total, 1u << 20, h, d, d2, rows) &&
	     hbm_bw_size(c, s, total, 8u << 20, h, d, d2, rows + 1);
	printf("  %-9s %-6s %6s %10s %10s %6s   (%llu MiB a copy, best of "
	       "%d)\n",
	       "direction", "size", "keys", "pool GB/s", "raw GB/s", "ratio",
	       (unsigned long long)(total >> 20), BW_REPS);
	for (k = 0; k < 2; k++) {
		double ratio = rows[k].raw > 0 ? rows[k].pool / rows[k].raw : 0;

		if (!rows[k].dir)
			continue;
		printf("  %-9s %4lluM %6llu %10.2f %10.2f %6.3f\n", rows[k].dir,
		       (unsigned long long)(rows[k].size >> 20),
		       (unsigned long long)rows[k].keys, rows[k].pool / 1e9,
		       rows[k].raw / 1e9, ratio);
		if (ok && ratio < 0.9 && !below) {
			below = true;
			if (!emulated)
				ok = failf("D2D %lluM: pool %.2f GB/s is %.3f "
					   "of the raw %.2f GB/s (goal >= "
					   "0.9)",
					   (unsigned long long)(rows[k].size >>
								20),
					   rows[k].pool / 1e9, ratio,
					   rows[k].raw / 1e9);
		}
	}
	if (emulated)
		printf("  emulated runtime: these figures mean nothing and the "
		       "ratio is not judged (bytes, statuses and hits are)\n");
	free(h);
	if (d)
		dfree(d);
	if (d2)
		dfree(d2);
	return ok;
}

/* hbm: the slot up (the helper's start), this process's DRAM registered,
 * then the figures. */
static int
cmd_hbm(void)
{
	struct kvp_client *c = open_client();
	struct kvp_seg s;
	struct hbm_cond hc = { &s, 0, 0 };
	bool mapped = false, ok = c && cuda_up();

	if (ok && !(mapped = !kvpt_seg_map(pool, &s)))
		ok = failf("cannot map pool %s", pool);
	if (ok && kvpt_wait_until(hbm_is_up, &hc, 60000) < 0)
		ok = failf("GPU slot 0 is %s 60 s after the start (the agent's "
			   "log says why)",
			   hbm_state_name(hbm_word(&s)));
	if (ok) {
		double t0 = kvpb_now_s();
		int rc = kvp_dev_register(c, 60000);

		printf("  kvp_dev_register(c, 60000): %s after %.2f s\n",
		       kvp_strerror(rc), kvpb_now_s() - t0);
	}
	report("hbm_bandwidth", ok && hbm_bandwidth(c, &s));
	if (ok)
		print_info(c, "end");
	if (mapped)
		kvp__seg_unmap(&s);
	kvp_close(c);
	return failed ? 1 : 0;
}

static int
usage(void)
{
	fprintf(stderr, "usage: bench_gpu bandwidth|hbm POOL [--emulated]\n");
	return 2;
}

int
main(int argc, char **argv)
{
	int k;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3)
		return usage();
	pool = argv[2];
	for (k = 3; k < argc; k++)
		if (!strcmp(argv[k], "--emulated"))
			emulated = true;
	if (!strcmp(argv[1], "bandwidth"))
		return cmd_bandwidth();
	if (!strcmp(argv[1], "hbm"))
		return cmd_hbm();
	return usage();
}
