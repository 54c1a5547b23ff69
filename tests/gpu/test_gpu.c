/* SPDX-License-Identifier: MIT */
/*
 * test_gpu.c - the GPU endpoints (kvpool.h, "GPU endpoints") and the HBM
 * tier, checked on a device: the real one (stress/gpu_check.sh on a
 * machine with a GPU) or the emulated runtime (tests/gpu/fakecudart.c,
 * the default test run).  tests/gpu/test_gpu.sh starts the agents and
 * runs each subcommand once; every check prints one line, "PASS name",
 * "FAIL name: why" or "SKIP name: why" (details on indented lines before
 * it), and the exit status is 1 iff a check failed.  The figures (the
 * bandwidth of the pool against the runtime's own copies) are
 * stress/bench_gpu.c's.
 *
 *   test_gpu roundtrip POOL      roundtrip_single, statuses, roundtrip_batch
 *   test_gpu ssd POOL            ssd_path (an agent with --ssd-dir and
 *                                --dram-high 0 --dram-low 0)
 *   test_gpu two-process POOL    two_process (children: fork + exec)
 *   test_gpu killed POOL         worker_killed
 *   test_gpu nodev POOL          no_device (run with CUDA_VISIBLE_DEVICES=)
 *   test_gpu register POOL       registration (a fresh pool: nothing of it
 *                                registered in any process yet)
 *   test_gpu hbm POOL            hbm_promote, hbm_two_process,
 *                                hbm_helper_killed, hbm_worker_killed (an
 *                                agent with --hbm-gpu 0)
 * with --emulated on the emulated runtime (its helper is slower), and the
 * children's: child-put, child-get, child-hold, child-hbm-get,
 * child-hbm-hold.
 *
 * The runtime is loaded at run time (tests/gpu/gpu_util.h): built by
 * ninja with the rest, no CUDA needed to build.  The pool's own copies go
 * through kvpool.h's device calls (header only: the client loads the
 * runtime itself, the same library).
 */
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include "tests/gpu/gpu_util.h"

/* child-put POOL TAG IDX SIZE: put key (TAG, IDX) from device memory. */
static int
child_put(uint64_t tag, uint64_t idx, uint64_t size)
{
	unsigned char key[KVPB_KLEN], *h = malloc(size), *d;
	struct kvp_client *c = open_client();
	int rc;

	if (!c || !h || !cuda_up() || !(d = dmalloc(size))) {
		fprintf(stderr, "child-put: %s\n", why);
		return 1;
	}
	kvpb_key(key, tag, idx);
	pat_fill(h, size, seed_of(tag, idx));
	if (!h2d(d, h, size)) {
		fprintf(stderr, "child-put: %s\n", why);
		return 1;
	}
	rc = kvp_put_dev(c, DEV, NULL, key, KVPB_KLEN, d, size);
	if (rc)
		fprintf(stderr, "child-put: kvp_put_dev: %s\n",
			kvp_strerror(rc));
	dfree(d);
	kvp_close(c);
	return rc ? 1 : 0;
}

/* child-get POOL TAG IDX SIZE: read key (TAG, IDX) into device memory and
 * verify it. */
static int
child_get(uint64_t tag, uint64_t idx, uint64_t size)
{
	unsigned char key[KVPB_KLEN], *h = calloc(1, size), *d;
	struct kvp_client *c = open_client();
	ssize_t got;

	if (!c || !h || !cuda_up() || !(d = dmalloc(size)) || !dzero(d, size)) {
		fprintf(stderr, "child-get: %s\n", why);
		return 1;
	}
	kvpb_key(key, tag, idx);
	got = kvp_get_dev(c, DEV, stream, key, KVPB_KLEN, d, size);
	if (got != (ssize_t)size) {
		fprintf(stderr, "child-get: kvp_get_dev: %zd (%s)\n", got,
			got < 0 ? kvp_strerror((int)got) : "short");
		return 1;
	}
	if (!d2h(h, d, size) ||
	    !pat_check(h, size, seed_of(tag, idx), "child-get")) {
		fprintf(stderr, "child-get: %s\n", why);
		return 1;
	}
	kvp_close(c);
	return 0;
}

/*
 * child-hold POOL TAG N SIZE: queue device copies of keys (TAG, 0..N) and
 * never wait for them; say "queued K gated|ungated registered|
 * unregistered" on stdout, then sleep until killed.  The pool's DRAM is
 * registered first (no value then takes the bounce path, whose holds end
 * once copied, and no part of the batch waits for an earlier one); where
 * the runtime has cudaLaunchHostFunc (looked up at run time: the emulator
 * lacks it), the stream is then blocked by a host function that never
 * returns, so the copies are surely in flight when we are killed.
 */
static int
child_hold(uint64_t tag, uint64_t n, uint64_t size)
{
	const uint64_t groups[2] = { n, size };
	struct kvp_client *c = open_client();
	struct kvp_dev_copy *x = NULL;
	struct batch b;
	unsigned char *d;
	bool gated = false;
	ssize_t got;
	int rc;

	if (!c || !cuda_up() || !batch_make(&b, tag, groups, 1) ||
	    !(d = dmalloc(b.bytes))) {
		printf("error %s\n", why);
		return 1;
	}
	rc = kvp_dev_register(c, 60000);
	if (rc)
		fprintf(stderr, "child-hold: kvp_dev_register: %s\n",
			kvp_strerror(rc));
	if (!rc && rt.LaunchHostFunc)
		gated = rt.LaunchHostFunc(stream, block_stream, NULL) ==
			KVP_CU_OK;
	batch_ops(&b, d, 0, b.n);
	got = kvp_batch_get_dev(c, DEV, stream, b.ops, b.n, &x);
	printf("queued %zd %s %s\n", got, gated ? "gated" : "ungated",
	       rc ? "unregistered" : "registered");
	fflush(stdout);
	for (;;)
		pause();
	return 0;
}

/* ---- checks ---- */

static const uint64_t single_sizes[] = { 64u << 10, 1u << 20, 8u << 20,
					 (1u << 20) + 4097 };

static bool
check_single(struct kvp_client *c)
{
	const uint64_t tag = 0x47505531;
	uint64_t cap = (8u << 20) + 4096;
	unsigned char key[KVPB_KLEN], *h = malloc(cap), *h2 = malloc(cap);
	unsigned char *da = dmalloc(cap), *db = dmalloc(cap);
	bool ok = h && h2 && da && db;
	size_t i;

	if (!h || !h2)
		failf("out of memory");
	for (i = 0; ok && i < sizeof(single_sizes) / sizeof(single_sizes[0]);
	     i++) {
		uint64_t sz = single_sizes[i], seed = seed_of(tag, i);
		char what[64];
		ssize_t got;
		int rc;

		snprintf(what, sizeof(what), "%llu bytes",
			 (unsigned long long)sz);
		kvpb_key(key, tag, i);
		kvp_delete(c, key, KVPB_KLEN);
		pat_fill(h, sz, seed);
		ok = h2d(da, h, sz) && dzero(db, cap);
		if (!ok)
			break;
		rc = kvp_put_dev(c, DEV, i & 1 ? stream : NULL, key, KVPB_KLEN,
				 da, sz);
		if (rc) {
			ok = failf("kvp_put_dev %s: %s", what,
				   kvp_strerror(rc));
			break;
		}
		/* the value as the host reads it: the put alone */
		memset(h2, 0, sz);
		got = kvp_get(c, key, KVPB_KLEN, h2, cap);
		if (got != (ssize_t)sz) {
			ok = failf("kvp_get after kvp_put_dev %s: %zd", what,
				   got);
			break;
		}
		if (!(ok = pat_check(h2, sz, seed, "kvp_put_dev (host read)")))
			break;
		got = kvp_get_dev(c, DEV, i & 1 ? NULL : stream, key, KVPB_KLEN,
				  db, cap);
		if (got != (ssize_t)sz) {
			ok = failf("kvp_get_dev %s: %zd (%s)", what, got,
				   got < 0 ? kvp_strerror((int)got) : "short");
			break;
		}
		memset(h2, 0, cap);
		ok = d2h(h2, db, sz) && pat_check(h2, sz, seed, "kvp_get_dev");
		printf("  roundtrip %s: %s\n", what, ok ? "ok" : why);
	}
	free(h);
	free(h2);
	dfree(da);
	dfree(db);
	return ok;
}

static bool
check_statuses(struct kvp_client *c)
{
	const uint64_t tag = 0x47505531; /* check_single's keys */
	unsigned char key[KVPB_KLEN], *d = dmalloc(1u << 20);
	ssize_t got;
	int rc;

	if (!d)
		return false;
	kvpb_key(key, tag, 1); /* 1 MiB */
	got = kvp_get_dev(c, DEV, NULL, key, KVPB_KLEN, d, (1u << 20) - 1);
	if (got != -EMSGSIZE)
		failf("kvp_get_dev into 1 MiB - 1 of a 1 MiB value: %zd, want "
		      "-EMSGSIZE",
		      got);
	rc = kvp_put_dev(c, DEV, NULL, key, KVPB_KLEN, d, 4096);
	if (rc != -EEXIST)
		failf("kvp_put_dev of a present key: %d, want -EEXIST", rc);
	kvpb_key(key, tag, 999);
	got = kvp_get_dev(c, DEV, NULL, key, KVPB_KLEN, d, 1u << 20);
	if (got != -ENOENT)
		failf("kvp_get_dev of a missing key: %zd, want -ENOENT", got);
	got = kvp_get_dev(c, -1, NULL, key, KVPB_KLEN, d, 1u << 20);
	if (got != -EINVAL)
		failf("kvp_get_dev on device -1: %zd, want -EINVAL", got);
	if (kvp_batch_get_dev(c, DEV, NULL, NULL, 0, NULL) != -EINVAL)
		failf("kvp_batch_get_dev with out NULL: not -EINVAL");
	dfree(d);
	return !why[0];
}

static bool
check_batch(struct kvp_client *c)
{
	const uint64_t mixed[] = { 256, 64u << 10, 64, 1u << 20, 8, 8u << 20 };
	uint64_t many[2] = { 3000, 64u << 10 };
	unsigned char *h = NULL, *ds = NULL, *dd = NULL;
	struct batch b;
	bool ok;
	int pass;

	/* more keys than this client's hold slots: served in parts */
	if (many[0] < (uint64_t)c->seg.g.g_holds_per_client + 100)
		many[0] = (uint64_t)c->seg.g.g_holds_per_client + 100;
	for (pass = 0; pass < 2; pass++) {
		const char *what = pass ? "many" : "mixed";

		ok = pass ? batch_make(&b, 0x47505532, many, 1) :
			    batch_make(&b, 0x47505533, mixed, 3);
		if (!ok)
			return false;
		batch_delete(c, &b);
		h = malloc(b.bytes);
		ds = dmalloc(b.bytes);
		dd = dmalloc(b.bytes);
		ok = h && ds && dd;
		if (!h)
			failf("out of memory");
		if (ok) {
			batch_fill(&b, h);
			ok = h2d(ds, h, b.bytes) && dzero(dd, b.bytes);
		}
		if (ok && !pass) {
			/* each size class its own put batch */
			struct batch g = b;
			size_t from = 0, k;

			for (k = 0; ok && k < 3; k++) {
				g.n = mixed[2 * k];
				g.ops = b.ops + from;
				g.keys = b.keys + from;
				g.size = b.size + from;
				g.off = b.off + from;
				g.seed = b.seed + from;
				ok = put_dev_batch(c, &g, ds, what);
				from += g.n;
			}
		} else if (ok) {
			ok = put_dev_batch(c, &b, ds, what);
		}
		ok = ok && get_dev_batch(c, &b, dd, stream, what);
		if (ok) {
			memset(h, 0, b.bytes);
			ok = d2h(h, dd, b.bytes) && batch_verify(&b, h, what);
		}
		printf("  batch %s: %zu keys, %llu MiB (client hold slots "
		       "%u): %s\n",
		       what, b.n, (unsigned long long)(b.bytes >> 20),
		       (unsigned)c->seg.g.g_holds_per_client, ok ? "ok" : why);
		free(h);
		dfree(ds);
		dfree(dd);
		batch_delete(c, &b);
		batch_free(&b);
		if (!ok)
			return false;
	}
	return true;
}

static int
cmd_roundtrip(void)
{
	struct kvp_client *c = open_client();

	if (!c || !cuda_up()) {
		char w[sizeof(why)];

		memcpy(w, why, sizeof(w));
		report("roundtrip_single", false);
		failf("%s", w);
		report("statuses", false);
		failf("%s", w);
		report("roundtrip_batch", false);
		kvp_close(c);
		return 1;
	}
	wait_populated(c);
	report("roundtrip_single", check_single(c));
	report("statuses", check_statuses(c));
	report("roundtrip_batch", check_batch(c));
	print_info(c, "end");
	kvp_close(c);
	return failed ? 1 : 0;
}

/* ssd_path: the pool demotes everything at once (--dram-high 0). */
static uint32_t
ssd_key(char *k, int i)
{
	kvpb_key((unsigned char *)k, 0x47505534, (uint64_t)i);
	return KVPB_KLEN;
}

struct ssd_cond {
	struct kvp_client *c;
	const struct kvp_seg *s;
	int n;
};

/* Are the n values all SSD-resident? */
static bool
all_on_ssd(void *arg)
{
	struct ssd_cond *sc = arg;

	return kvpt_all_on_ssd(sc->c, sc->s, sc->n, ssd_key);
}

static bool
ssd_check(struct kvp_client *c)
{
	const uint64_t groups[] = { 16, 64u << 10, 48, 1u << 20, 4, 8u << 20 };
	struct kvp_seg s;
	struct batch b;
	unsigned char *h = NULL, *dd = NULL;
	int rep;
	bool ok;

	if (kvpt_seg_map(pool, &s))
		return failf("cannot map pool %s", pool);
	if (!batch_make(&b, 0x47505534, groups, 3)) {
		kvp__seg_unmap(&s);
		return false;
	}
	h = malloc(b.bytes);
	dd = dmalloc(b.bytes);
	ok = h && dd;
	if (!h)
		failf("out of memory");
	if (ok) {
		batch_fill(&b, h);
		ok = put_host_batch(c, &b, h, "ssd put");
	}
	for (rep = 0; ok && rep < 2; rep++) {
		if (rep == 0) {
			struct ssd_cond sc = { c, &s, (int)b.n };
			double t0 = kvpb_now_s();

			if (kvpt_wait_until(all_on_ssd, &sc, 30000) < 0) {
				ok = failf("values not all demoted to SSD "
					   "after 30 s");
				break;
			}
			printf("  %zu values (%llu MiB) on SSD after %.2f s\n",
			       b.n, (unsigned long long)(b.bytes >> 20),
			       kvpb_now_s() - t0);
		}
		ok = dzero(dd, b.bytes) &&
		     get_dev_batch(c, &b, dd, rep ? NULL : stream,
				   rep ? "ssd read 2" : "ssd read 1");
		if (ok) {
			memset(h, 0, b.bytes);
			ok = d2h(h, dd, b.bytes) &&
			     batch_verify(&b, h,
					  rep ? "ssd read 2" : "ssd read 1");
		}
		printf("  read %d of SSD-resident values: %s\n", rep + 1,
		       ok ? "ok" : why);
	}
	if (ok && kvpt_holds_total(&s))
		ok = failf("%llu holds left after kvp_dev_wait",
			   (unsigned long long)kvpt_holds_total(&s));
	print_info(c, "after SSD reads");
	free(h);
	dfree(dd);
	batch_delete(c, &b);
	batch_free(&b);
	kvp__seg_unmap(&s);
	return ok;
}

static int
cmd_ssd(void)
{
	struct kvp_client *c = open_client();

	if (!c || !cuda_up()) {
		report("ssd_path", false);
		return 1;
	}
	report("ssd_path", ssd_check(c));
	kvp_close(c);
	return failed ? 1 : 0;
}

/* two_process: a child puts from its device memory, we read; we put, a
 * child reads. */
static int
cmd_two_process(void)
{
	const uint64_t tag = 0x47505535, size = (4u << 20) + 123;
	struct kvp_client *c = open_client();
	unsigned char key[KVPB_KLEN], *h = malloc(size), *d = NULL;
	char s_tag[32], s_idx[32], s_size[32];
	const char *argv[] = { "test_gpu", NULL,   pool, s_tag,
			       s_idx,      s_size, NULL };
	bool ok = c && h && cuda_up() && (d = dmalloc(size));
	ssize_t got;
	pid_t pid;
	int st, rc;

	snprintf(s_tag, sizeof(s_tag), "%llu", (unsigned long long)tag);
	snprintf(s_size, sizeof(s_size), "%llu", (unsigned long long)size);
	if (ok) {
		kvpb_key(key, tag, 0);
		kvp_delete(c, key, KVPB_KLEN);
		kvpb_key(key, tag, 1);
		kvp_delete(c, key, KVPB_KLEN);
		/* 1. the child puts key 0 from its GPU buffer */
		argv[1] = "child-put";
		snprintf(s_idx, sizeof(s_idx), "0");
		pid = spawn_self(argv, NULL);
		st = pid < 0 ? -1 : wait_child(pid, 60000);
		if (st)
			ok = failf("child-put exited %d", st);
	}
	if (ok) {
		kvpb_key(key, tag, 0);
		ok = dzero(d, size);
		got = ok ? kvp_get_dev(c, DEV, NULL, key, KVPB_KLEN, d, size) :
			   0;
		if (ok && got != (ssize_t)size)
			ok = failf("parent kvp_get_dev of the child's key: "
				   "%zd",
				   got);
		ok = ok && d2h(h, d, size) &&
		     pat_check(h, size, seed_of(tag, 0),
			       "the child's put, read by the parent");
		printf("  child put, parent read: %s\n", ok ? "ok" : why);
	}
	if (ok) {
		/* 2. we put key 1 from ours, the child reads it */
		kvpb_key(key, tag, 1);
		pat_fill(h, size, seed_of(tag, 1));
		ok = h2d(d, h, size);
		rc = ok ? kvp_put_dev(c, DEV, NULL, key, KVPB_KLEN, d, size) :
			  0;
		if (ok && rc)
			ok = failf("parent kvp_put_dev: %s", kvp_strerror(rc));
		if (ok) {
			argv[1] = "child-get";
			snprintf(s_idx, sizeof(s_idx), "1");
			pid = spawn_self(argv, NULL);
			st = pid < 0 ? -1 : wait_child(pid, 60000);
			if (st)
				ok = failf("child-get (reads and verifies the "
					   "parent's put) exited %d",
					   st);
		}
		printf("  parent put, child read: %s\n", ok ? "ok" : why);
	}
	report("two_process", ok);
	free(h);
	if (d)
		dfree(d);
	kvp_close(c);
	return failed ? 1 : 0;
}

/* worker_killed: holds of device copies in flight are reaped with their
 * process. */
struct reaped {
	const struct kvp_seg *s;
	uint64_t holds, clients;
};

static bool
is_reaped(void *arg)
{
	struct reaped *r = arg;

	return kvpt_holds_total(r->s) <= r->holds &&
	       kvpt_clients_nonfree(r->s) <= r->clients;
}

static int
cmd_killed(void)
{
	const uint64_t tag = 0x47505536, groups[2] = { 64, 1u << 20 };
	struct kvp_client *c = open_client(), *c2 = NULL;
	char s_tag[32], s_n[32], s_size[32], line[128] = "";
	const char *argv[] = { "test_gpu", "child-hold", pool, s_tag,
			       s_n,        s_size,       NULL };
	struct reaped r = { NULL, 0, 0 };
	struct kvp_seg s;
	struct batch b;
	unsigned char *h = NULL, *dd = NULL;
	bool mapped = false, ok = c && cuda_up();
	int fd = -1, st;
	pid_t pid = -1;

	memset(&b, 0, sizeof(b));
	ok = ok && batch_make(&b, tag, groups, 1);
	if (ok) {
		h = malloc(b.bytes);
		if (!h)
			ok = failf("out of memory");
	}
	if (ok) {
		batch_delete(c, &b);
		batch_fill(&b, h);
		ok = put_host_batch(c, &b, h, "put");
	}
	if (ok && !(mapped = !kvpt_seg_map(pool, &s)))
		ok = failf("cannot map pool %s", pool);
	if (ok) {
		r.s = &s;
		r.holds = kvpt_holds_total(&s);
		r.clients = kvpt_clients_nonfree(&s);
		snprintf(s_tag, sizeof(s_tag), "%llu", (unsigned long long)tag);
		snprintf(s_n, sizeof(s_n), "%llu",
			 (unsigned long long)groups[0]);
		snprintf(s_size, sizeof(s_size), "%llu",
			 (unsigned long long)groups[1]);
		pid = spawn_self(argv, &fd);
		if (pid < 0)
			ok = failf("cannot start the child");
	}
	if (ok) {
		struct pollfd pf = { fd, POLLIN, 0 };
		ssize_t n = 0;

		/* the child's one line, within 45 s (CUDA's start) */
		if (poll(&pf, 1, 45000) == 1)
			n = read(fd, line, sizeof(line) - 1);
		line[n > 0 ? n : 0] = '\0';
		if (n <= 0)
			ok = failf("child: no answer in 45 s (did "
				   "kvp_batch_get_dev wait for the stream it "
				   "was given? the child blocks it)");
		else if (strncmp(line, "queued ", 7) ||
			 atoll(line + 7) != (long long)groups[0])
			ok = failf("child: '%.100s' (want 'queued %llu')", line,
				   (unsigned long long)groups[0]);
	}
	if (ok) {
		uint64_t held = kvpt_holds_total(&s) - r.holds;
		long long ns;

		printf("  child %d: %llu device copies queued (stream %s), "
		       "%llu holds of it in the pool; SIGKILL\n",
		       (int)pid, (unsigned long long)groups[0],
		       strstr(line, " gated") ? "blocked by a host function" :
						"not blocked",
		       (unsigned long long)held);
		if (strstr(line, " registered") && held < groups[0])
			/* every value of the batch is copied straight out of
			 * its DRAM runs: each stays held until kvp_dev_wait */
			failf("%llu holds while the child's %llu copies were "
			      "queued (kvp_dev_wait not called): want one per "
			      "value at least",
			      (unsigned long long)held,
			      (unsigned long long)groups[0]);
		else if (held == 0)
			printf("  note: no holds seen before the kill (the "
			       "child's DRAM was not all registered: bounce "
			       "copies need no hold once copied)\n");
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		pid = -1;
		ns = kvpt_wait_until(is_reaped, &r, 2000);
		if (ns < 0)
			ok = failf("after 2 s: %llu holds, %llu client slots "
				   "in use (before the child: %llu, %llu)",
				   (unsigned long long)kvpt_holds_total(&s),
				   (unsigned long long)kvpt_clients_nonfree(&s),
				   (unsigned long long)r.holds,
				   (unsigned long long)r.clients);
		else
			printf("  reaped %.1f ms after the kill\n",
			       (double)ns / 1e6);
	}
	if (ok) {
		char out[4096] = "";
		int rc = kvpt_cli_check(pool, -1, out, sizeof(out));

		if (rc)
			ok = failf("kvpool check exit %d: %.300s", rc, out);
	}
	if (ok) {
		c2 = open_client();
		dd = c2 ? dmalloc(b.bytes) : NULL;
		ok = c2 && dd && dzero(dd, b.bytes) &&
		     get_dev_batch(c2, &b, dd, stream, "new client") &&
		     d2h(h, dd, b.bytes) && batch_verify(&b, h, "new client");
		printf("  a new client reads the keys: %s\n", ok ? "ok" : why);
	}
	report("worker_killed", ok);
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	if (fd >= 0)
		close(fd);
	if (c)
		batch_delete(c, &b);
	batch_free(&b);
	free(h);
	if (dd)
		dfree(dd);
	if (mapped)
		kvp__seg_unmap(&s);
	kvp_close(c2);
	kvp_close(c);
	return failed ? 1 : 0;
}

/* no_device: run with CUDA_VISIBLE_DEVICES= (no device visible); this
 * program makes no CUDA call of its own here. */
static int
cmd_nodev(void)
{
	struct kvp_client *c = open_client();
	unsigned char key[KVPB_KLEN], *h = malloc(1u << 20),
				      *h2 = malloc(1u << 20);
	struct kvp_dev_info in;
	struct kvp_dev_copy *x = NULL;
	struct kvp_op op;
	ssize_t got;
	bool ok = c && h && h2;
	int rc;

	if (ok) {
		kvpb_key(key, 0x47505537, 0);
		kvp_delete(c, key, KVPB_KLEN);
		pat_fill(h, 1u << 20, 7);
		rc = kvp_put(c, key, KVPB_KLEN, h, 1u << 20);
		if (rc)
			ok = failf("kvp_put: %s", kvp_strerror(rc));
	}
	if (ok) {
		/* a host pointer as the "device" buffer: never touched */
		got = kvp_get_dev(c, DEV, NULL, key, KVPB_KLEN, h2, 1u << 20);
		if (got != -ENODEV)
			failf("kvp_get_dev: %zd (%s), want -ENODEV", got,
			      got < 0 ? kvp_strerror((int)got) : "copied");
		kvpb_key(key, 0x47505537, 1);
		rc = kvp_put_dev(c, DEV, NULL, key, KVPB_KLEN, h, 1u << 20);
		if (rc != -ENODEV)
			failf("kvp_put_dev: %d (%s), want -ENODEV", rc,
			      kvp_strerror(rc));
		memset(&op, 0, sizeof(op));
		kvpb_key(key, 0x47505537, 0);
		op.key = key;
		op.klen = KVPB_KLEN;
		op.buf = h2;
		op.len = 1u << 20;
		got = kvp_batch_get_dev(c, DEV, NULL, &op, 1, &x);
		if (got != -ENODEV)
			failf("kvp_batch_get_dev: %zd, want -ENODEV", got);
		if (got >= 0)
			kvp_dev_wait(c, x);
		memset(&in, 0, sizeof(in));
		rc = kvp_dev_info(c, &in, sizeof(in));
		printf("  kvp_dev_info: %d, status %d, devices %d, driver %d\n",
		       rc, in.status, in.devices, in.driver_version);
		if (rc == 0 && in.status != -ENODEV)
			failf("kvp_dev_info status %d, want -ENODEV",
			      in.status);
		/* the host calls still work */
		memset(h2, 0, 1u << 20);
		got = kvp_get(c, key, KVPB_KLEN, h2, 1u << 20);
		if (got != (ssize_t)(1u << 20))
			failf("kvp_get: %zd", got);
		else
			pat_check(h2, 1u << 20, 7, "kvp_get");
		kvp_delete(c, key, KVPB_KLEN);
		ok = !why[0];
	}
	report("no_device", ok);
	free(h);
	free(h2);
	kvp_close(c);
	return failed ? 1 : 0;
}

/* ---- registration of a large DRAM tier, reads meanwhile ---- */

static int
cmd_register(void)
{
	struct kvp_client *c = open_client();
	struct kvp_dev_info in;
	struct batch b;
	unsigned char *h = NULL, *d = NULL;
	uint64_t dram, size = 8u << 20, groups[2], last = 0, i;
	unsigned reads = 0, reads_during = 0, polls = 0;
	double t0, t_done = -1;
	bool ok = c && cuda_up();
	int rc;

	memset(&b, 0, sizeof(b));
	if (!ok) {
		report("registration", false);
		return 1;
	}
	wait_populated(c);
	dram = dram_total(c);
	/* values over 85% of the tier, so most of its chunks hold some;
	 * put from the host: no device call may start registration yet */
	groups[0] = dram / 100 * 85 / size;
	groups[1] = size;
	ok = groups[0] >= 8 && batch_make(&b, 0x47505550, groups, 1);
	if (groups[0] < 8)
		failf("DRAM tier too small (%llu MiB)",
		      (unsigned long long)(dram >> 20));
	h = ok ? malloc(size * 8) : NULL;
	d = ok ? dmalloc(size * 8) : NULL;
	ok = ok && h && d;
	if (ok) {
		double tp = kvpb_now_s();

		/* at most 40 s of puts (a slow host fills less) */
		for (i = 0; ok && i < b.n && kvpb_now_s() - tp < 40; i++) {
			int r;
			double tb = kvpb_now_s();

			kvp_delete(c, b.keys[i], KVPB_KLEN);
			pat_fill(h, size, b.seed[i]);
			while ((r = kvp_put(c, b.keys[i], KVPB_KLEN, h,
					    size)) == -EBUSY &&
			       kvpb_now_s() - tb < 30)
				;
			if (r)
				ok = failf("kvp_put %llu: %s",
					   (unsigned long long)i,
					   kvp_strerror(r));
		}
		if (ok && i < b.n) {
			/* puts were slow: read only what was put */
			printf("  slow puts: stopped after 40 s\n");
			b.n = i;
		}
		printf("  %llu values of 8 MiB put from the host in %.2f s "
		       "(DRAM tier %llu MiB)\n",
		       (unsigned long long)b.n, kvpb_now_s() - tp,
		       (unsigned long long)(dram >> 20));
	}
	t0 = kvpb_now_s();
	rc = ok ? kvp_dev_register(c, 0) : 0;
	if (ok && rc && rc != -EINPROGRESS)
		ok = failf("kvp_dev_register(c, 0): %s", kvp_strerror(rc));
	while (ok && kvpb_now_s() - t0 < 120) {
		struct batch s = b;
		size_t k;

		memset(&in, 0, sizeof(in));
		rc = kvp_dev_info(c, &in, sizeof(in));
		polls++;
		if (rc) {
			ok = failf("kvp_dev_info: %s", kvp_strerror(rc));
			break;
		}
		if (in.reg_bytes < last)
			ok = failf("reg_bytes went down: %llu -> %llu",
				   (unsigned long long)last,
				   (unsigned long long)in.reg_bytes);
		if (in.reg_bytes > in.reg_total_bytes)
			ok = failf("reg_bytes %llu > reg_total_bytes %llu",
				   (unsigned long long)in.reg_bytes,
				   (unsigned long long)in.reg_total_bytes);
		if (in.reg_failed)
			ok = failf("the runtime refused %d chunks",
				   in.reg_failed);
		last = in.reg_bytes;
		if (!ok || (in.reg_total_bytes &&
			    in.reg_bytes == in.reg_total_bytes)) {
			if (ok)
				t_done = kvpb_now_s() - t0;
			break;
		}
		/* 8 values spread over the tier, a different 8 each time */
		s.n = 8;
		s.ops = calloc(8, sizeof(*s.ops));
		s.keys = calloc(8, KVPB_KLEN);
		s.size = calloc(8, sizeof(uint64_t));
		s.off = calloc(8, sizeof(uint64_t));
		s.seed = calloc(8, sizeof(uint64_t));
		if (!s.ops || !s.keys || !s.size || !s.off || !s.seed) {
			batch_free(&s);
			ok = failf("out of memory");
			break;
		}
		for (k = 0; k < 8; k++) {
			size_t j = (k * b.n / 8 + polls) % b.n;

			memcpy(s.keys[k], b.keys[j], KVPB_KLEN);
			s.size[k] = size;
			s.off[k] = k * size;
			s.seed[k] = b.seed[j];
		}
		ok = dzero(d, 8 * size) &&
		     get_dev_batch(c, &s, d, stream,
				   "read while registering") &&
		     d2h(h, d, 8 * size) &&
		     batch_verify(&s, h, "read while registering");
		batch_free(&s);
		reads += 8;
		memset(&in, 0, sizeof(in));
		kvp_dev_info(c, &in, sizeof(in));
		if (in.reg_bytes < in.reg_total_bytes)
			reads_during += 8;
		if (ok) {
			rc = kvp_dev_register(c, 100);
			if (rc && rc != -EINPROGRESS)
				ok = failf("kvp_dev_register(c, 100): %s",
					   kvp_strerror(rc));
		}
	}
	memset(&in, 0, sizeof(in));
	kvp_dev_info(c, &in, sizeof(in));
	if (ok && t_done < 0)
		ok = failf("registration not done after 120 s: %llu of %llu "
			   "MiB",
			   (unsigned long long)(in.reg_bytes >> 20),
			   (unsigned long long)(in.reg_total_bytes >> 20));
	if (ok && in.reg_failed)
		ok = failf("%d chunks refused", in.reg_failed);
	if (t_done >= 0)
		printf("  registered %llu MiB in %.2f s (%.2f GB/s; polled "
		       "%u times)\n",
		       (unsigned long long)(in.reg_total_bytes >> 20), t_done,
		       t_done > 0 ? (double)in.reg_total_bytes / t_done / 1e9 :
				    0.0,
		       polls);
	printf("  %u values read and verified while registering (%u of them "
	       "before it was done); bounce bytes %llu MiB\n",
	       reads, reads_during,
	       (unsigned long long)(in.bounce_bytes >> 20));
	if (ok && reads_during == 0)
		printf("  note: registration finished before a read could "
		       "overlap it; the bounce path was not exercised here\n");
	print_info(c, "end");
	report("registration", ok);
	if (c)
		batch_delete(c, &b);
	batch_free(&b);
	free(h);
	if (d)
		dfree(d);
	kvp_close(c);
	return failed ? 1 : 0;
}

/* ---- the HBM tier (agent/hbm.c, agent/gpud.c): an agent started with
 * --hbm-gpu 0 --hbm-size SIZE ---- */

#define HBM_N 16 /* values of each size (1 MiB, 8 MiB) in the checks */

/* The HBM checks' keys: n of 1 MiB then n of big (tag/0..2n-1). */
static bool
hbm_batch(struct batch *b, uint64_t tag, uint64_t n, uint64_t big)
{
	const uint64_t groups[4] = { n, 1u << 20, n, big };

	return batch_make(b, tag, groups, 2);
}

/* The last hbm_read's get: when it began and ended, the GPU slot's word
 * right after it (hbm_seg: the pool mapped, in the parent). */
static const struct kvp_seg *hbm_seg;
static double hbm_get_t0, hbm_get_t1;
static uint64_t hbm_get_w;

/* kvp_batch_get_dev of b into d (zeroed first, if zero), verified on the
 * host (h); *hits: the HBM hits of this client meanwhile. */
static bool
hbm_read_z(struct kvp_client *c, struct batch *b, unsigned char *d,
	   unsigned char *h, uint64_t *hits, const char *what, bool zero)
{
	struct kvp_dev_info i0, i1;
	bool ok;

	memset(&i0, 0, sizeof(i0));
	memset(&i1, 0, sizeof(i1));
	*hits = 0;
	kvp_dev_info(c, &i0, sizeof(i0));
	ok = !zero || dzero(d, b->bytes);
	hbm_get_t0 = kvpb_now_s();
	ok = ok && get_dev_batch(c, b, d, stream, what);
	hbm_get_t1 = kvpb_now_s();
	if (hbm_seg)
		hbm_get_w = hbm_word(hbm_seg);
	kvp_dev_info(c, &i1, sizeof(i1));
	*hits = i1.hbm_hits - i0.hbm_hits;
	if (ok) {
		memset(h, 0, b->bytes);
		ok = d2h(h, d, b->bytes) && batch_verify(b, h, what);
	}
	return ok;
}

static bool
hbm_read(struct kvp_client *c, struct batch *b, unsigned char *d,
	 unsigned char *h, uint64_t *hits, const char *what)
{
	return hbm_read_z(c, b, d, h, hits, what, true);
}

/* child-hbm-get POOL TAG N SIZE: read the HBM checks' keys (N of 1 MiB,
 * N of SIZE) into this process's device memory and verify them; exit 0,
 * or 3 if right but not all served from HBM, 1 if wrong. */
static int
child_hbm_get(uint64_t tag, uint64_t n, uint64_t size)
{
	struct kvp_client *c = open_client();
	unsigned char *h = NULL, *d = NULL;
	struct batch b;
	uint64_t hits = 0;
	bool ok;
	int rc;

	memset(&b, 0, sizeof(b));
	ok = c && cuda_up() && hbm_batch(&b, tag, n, size);
	if (ok) {
		h = malloc(b.bytes);
		d = dmalloc(b.bytes);
		ok = h && d;
	}
	ok = ok && hbm_read(c, &b, d, h, &hits, "child read");
	printf("  child %d: %zu keys read and verified: %s; %llu HBM hits\n",
	       (int)getpid(), b.n, ok ? "ok" : why, (unsigned long long)hits);
	rc = !ok ? 1 : hits != b.n ? 3 : 0;
	free(h);
	if (d)
		dfree(d);
	batch_free(&b);
	kvp_close(c);
	return rc;
}

/* child-hbm-hold POOL TAG N SIZE: queue device copies of the HBM checks'
 * keys and never wait for them (the stream blocked first where the
 * runtime has cudaLaunchHostFunc); say "queued K hbm H gated|ungated",
 * then sleep until killed. */
static int
child_hbm_hold(uint64_t tag, uint64_t n, uint64_t size)
{
	struct kvp_client *c = open_client();
	struct kvp_dev_copy *x = NULL;
	struct kvp_dev_info in;
	struct batch b;
	unsigned char *d;
	bool gated = false;
	ssize_t got;

	if (!c || !cuda_up() || !hbm_batch(&b, tag, n, size) ||
	    !(d = dmalloc(b.bytes))) {
		printf("error %s\n", why);
		return 1;
	}
	if (rt.LaunchHostFunc)
		gated = rt.LaunchHostFunc(stream, block_stream, NULL) ==
			KVP_CU_OK;
	batch_ops(&b, d, 0, b.n);
	got = kvp_batch_get_dev(c, DEV, stream, b.ops, b.n, &x);
	memset(&in, 0, sizeof(in));
	kvp_dev_info(c, &in, sizeof(in));
	printf("queued %zd hbm %llu %s\n", got, (unsigned long long)in.hbm_hits,
	       gated ? "gated" : "ungated");
	fflush(stdout);
	for (;;)
		pause();
	return 0;
}

/* hbm_promote: values hit once are copied to the pool; device gets of
 * them are HBM hits, every byte right. */
static bool
hbm_promote(struct kvp_client *c, const struct kvp_seg *s, struct batch *b,
	    unsigned char *h, unsigned char *d)
{
	uint64_t copies0 = hbm_copies(s), gen = KVP_GS_GEN(hbm_word(s)), hits;
	bool ok;

	batch_delete(c, b);
	batch_fill(b, h);
	ok = put_host_batch(c, b, h, "hbm put") && hbm_hit_once(c, b, h) &&
	     hbm_wait_copies(s, gen, copies0 + b->n, HBM_COPY_MS,
			     "promotion of the values hit once");
	ok = ok && hbm_read(c, b, d, h, &hits, "hbm read");
	if (ok) {
		printf("  %llu of %zu device gets served from HBM (%zu x 1 "
		       "MiB, %zu x 8 MiB)\n",
		       (unsigned long long)hits, b->n, b->n / 2, b->n / 2);
		if (hits != b->n)
			ok = failf("%llu HBM hits of %zu device gets",
				   (unsigned long long)hits, b->n);
	}
	return ok;
}

/* hbm_two_process: another process (exec'd) imports the helper's pool. */
static bool
hbm_two_process(void)
{
	char s_tag[32], s_n[32], s_size[32];
	const char *argv[] = { "test_gpu", "child-hbm-get", pool, s_tag,
			       s_n,        s_size,          NULL };
	pid_t pid;
	int st;

	snprintf(s_tag, sizeof(s_tag), "%llu", (unsigned long long)HBM_TAG);
	snprintf(s_n, sizeof(s_n), "%d", HBM_N);
	snprintf(s_size, sizeof(s_size), "%u", 8u << 20);
	pid = spawn_self(argv, NULL);
	st = pid < 0 ? -1 : wait_child(pid, 60000);
	if (st == 3)
		return failf("the child read the right bytes, not all from "
			     "HBM (its line above)");
	if (st)
		return failf("child-hbm-get exited %d", st);
	return true;
}

/* hbm_helper_killed: the helper SIGKILLed: DOWN within 2 s, reads from
 * DRAM meanwhile, UP again at a later generation within 10 s, hits after
 * the copies are made again. */
static bool
hbm_helper_killed(struct kvp_client *c, const struct kvp_seg *s,
		  struct batch *b, unsigned char *h, unsigned char *d)
{
	struct hbm_cond hc = { s, 0, 0 };
	uint64_t w0 = hbm_word(s), gen0 = KVP_GS_GEN(w0), hits, w, w1;
	pid_t hp = (pid_t)kvp_load_relaxed(&s->hdr->h_gpu[0].gs_pid);
	double t0;
	long long ns;
	bool ok;

	if (KVP_GS_STATE(w0) != KVP_GPU_UP || hp <= 0)
		return failf("the slot is %s (helper pid %d) before the kill",
			     hbm_state_name(w0), (int)hp);
	/* d zeroed before: the read while down is quick (the helper
	 * comes back after 1 s, and copies again) */
	if (!dzero(d, b->bytes) ||
	    !cu(rt.DeviceSynchronize(), "cudaDeviceSynchronize"))
		return false;
	if (kill(hp, SIGKILL))
		return failf("kill(%d, SIGKILL): %s", (int)hp, strerror(errno));
	t0 = kvpb_now_s();
	ns = kvpt_wait_until(hbm_not_up, &hc, 2000);
	if (ns < 0)
		return failf("helper %d killed: the slot still up after 2 s",
			     (int)hp);
	w = hbm_word(s);
	printf("  helper %d (generation %llu) killed: slot %s after %.1f ms\n",
	       (int)hp, (unsigned long long)gen0, hbm_state_name(w),
	       (double)ns / 1e6);
	ok = hbm_read_z(c, b, d, h, &hits, "read while down", false);
	w1 = hbm_get_w;
	printf("  read while the helper is down (its get %.0f-%.0f ms after "
	       "the kill): %s, %llu HBM hits; slot %s at generation %llu "
	       "right after the get\n",
	       (hbm_get_t0 - t0) * 1e3, (hbm_get_t1 - t0) * 1e3,
	       ok ? "ok" : why, (unsigned long long)hits, hbm_state_name(w1),
	       (unsigned long long)KVP_GS_GEN(w1));
	if (ok && hits && KVP_GS_STATE(w1) != KVP_GPU_UP)
		ok = failf("%llu HBM hits while the slot was %s (generation "
			   "%llu) all along",
			   (unsigned long long)hits, hbm_state_name(w1),
			   (unsigned long long)KVP_GS_GEN(w1));
	else if (ok && hits)
		ok = failf("%llu HBM hits in a read while down: the slot came "
			   "up again (generation %llu) before the read ended "
			   "(too slow to tell)",
			   (unsigned long long)hits,
			   (unsigned long long)KVP_GS_GEN(w1));
	if (ok) {
		double left = 10000 - (kvpb_now_s() - t0) * 1e3;

		hc.gen = gen0 + 1;
		ns = kvpt_wait_until(hbm_is_up, &hc,
				     left > 0 ? (unsigned)left : 0);
		w = hbm_word(s);
		if (ns < 0)
			ok = failf("10 s after the kill: slot %s at generation "
				   "%llu (was %llu)",
				   hbm_state_name(w),
				   (unsigned long long)KVP_GS_GEN(w),
				   (unsigned long long)gen0);
		else
			printf("  up again %.2f s after the kill: generation "
			       "%llu, helper %d\n",
			       kvpb_now_s() - t0,
			       (unsigned long long)KVP_GS_GEN(w),
			       (int)kvp_load_relaxed(&s->hdr->h_gpu[0].gs_pid));
	}
	/* one more read of each (a hit), the copies made again */
	ok = ok && hbm_read(c, b, d, h, &hits, "read after the restart") &&
	     hbm_wait_copies(s, KVP_GS_GEN(w), b->n, HBM_COPY_MS,
			     "copies into the new pool");
	ok = ok && hbm_read(c, b, d, h, &hits, "read from the new pool");
	if (ok && hits != b->n)
		ok = failf("after the restart: %llu HBM hits of %zu device "
			   "gets",
			   (unsigned long long)hits, b->n);
	if (ok)
		printf("  after the restart: %llu of %zu device gets served "
		       "from HBM\n",
		       (unsigned long long)hits, b->n);
	return ok;
}

/* hbm_worker_killed: a child with HBM-served copies in flight SIGKILLed:
 * its holds are reaped, the pool checks clean, the keys read right. */
static bool
hbm_worker_killed(struct kvp_client *c, struct kvp_seg *s, struct batch *b,
		  unsigned char *h, unsigned char *d)
{
	char s_tag[32], s_n[32], s_size[32], line[128] = "";
	const char *argv[] = { "test_gpu", "child-hbm-hold", pool, s_tag,
			       s_n,        s_size,           NULL };
	struct reaped r = { s, kvpt_holds_total(s), kvpt_clients_nonfree(s) };
	struct pollfd pf;
	uint64_t held, hits;
	long long ns;
	ssize_t n = 0;
	bool ok = true;
	int fd = -1, st;
	pid_t pid;

	snprintf(s_tag, sizeof(s_tag), "%llu", (unsigned long long)HBM_TAG);
	snprintf(s_n, sizeof(s_n), "%d", HBM_N);
	snprintf(s_size, sizeof(s_size), "%u", 8u << 20);
	pid = spawn_self(argv, &fd);
	if (pid < 0)
		return failf("cannot start the child");
	pf.fd = fd;
	pf.events = POLLIN;
	pf.revents = 0;
	/* the child's one line, within 45 s (CUDA's start) */
	if (poll(&pf, 1, 45000) == 1)
		n = read(fd, line, sizeof(line) - 1);
	line[n > 0 ? n : 0] = '\0';
	close(fd);
	if (n <= 0)
		ok = failf("child: no answer in 45 s");
	else if (strncmp(line, "queued ", 7) ||
		 atoll(line + 7) != (long long)b->n || !strstr(line, " hbm ") ||
		 atoll(strstr(line, " hbm ") + 5) != (long long)b->n)
		ok = failf("child: '%.100s' (want 'queued %zu hbm %zu')", line,
			   b->n, b->n);
	held = kvpt_holds_total(s) - r.holds;
	printf("  child %d: %zu device copies queued from HBM (stream %s), "
	       "%llu holds of it in the pool; SIGKILL\n",
	       (int)pid, b->n,
	       strstr(line, " gated") ? "blocked by a host function" :
					"not blocked",
	       (unsigned long long)held);
	if (ok && held < b->n)
		ok = failf("%llu holds while the child's %zu HBM copies were "
			   "queued (kvp_dev_wait not called): want one per "
			   "value",
			   (unsigned long long)held, b->n);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	ns = kvpt_wait_until(is_reaped, &r, 2000);
	if (ns < 0)
		ok = failf("after 2 s: %llu holds, %llu client slots in use "
			   "(before the child: %llu, %llu)",
			   (unsigned long long)kvpt_holds_total(s),
			   (unsigned long long)kvpt_clients_nonfree(s),
			   (unsigned long long)r.holds,
			   (unsigned long long)r.clients);
	else
		printf("  reaped %.1f ms after the kill\n", (double)ns / 1e6);
	if (ok) {
		char out[4096] = "";
		int rc = kvpt_cli_check(pool, -1, out, sizeof(out));

		if (rc)
			ok = failf("kvpool check exit %d: %.300s", rc, out);
	}
	if (ok) {
		ok = hbm_read(c, b, d, h, &hits, "read after the kill");
		printf("  the keys read after the kill: %s (%llu HBM hits of "
		       "%zu)\n",
		       ok ? "ok" : why, (unsigned long long)hits, b->n);
	}
	return ok;
}

static const char *const hbm_checks[] = { "hbm_promote", "hbm_two_process",
					  "hbm_helper_killed",
					  "hbm_worker_killed" };

static int
cmd_hbm(void)
{
	struct kvp_client *c = open_client();
	struct kvp_seg s;
	struct hbm_cond hc = { &s, 0, 0 };
	struct batch b;
	unsigned char *h = NULL, *d = NULL;
	bool mapped = false, ok = c && cuda_up(), promoted = false;
	size_t k;

	memset(&b, 0, sizeof(b));
	if (ok && !(mapped = !kvpt_seg_map(pool, &s)))
		ok = failf("cannot map pool %s", pool);
	if (mapped)
		hbm_seg = &s;
	if (ok) {
		/* the helper's start: CUDA's, its pool, the DRAM tier
		 * registered in it */
		long long ns = kvpt_wait_until(hbm_is_up, &hc, 60000);
		uint64_t w = hbm_word(&s);

		if (ns < 0)
			ok = failf("GPU slot 0 is %s 60 s after the start "
				   "(the agent's log says why)",
				   hbm_state_name(w));
		else
			printf("  GPU slot 0 up: device %llu, pool %llu MiB "
			       "(unit %llu KiB), helper pid %llu, generation "
			       "%llu\n",
			       (unsigned long long)kvp_load_relaxed(
				       &s.hdr->h_gpu[0].gs_device),
			       (unsigned long long)(kvp_load_relaxed(
							    &s.hdr->h_gpu[0]
								     .gs_bytes) >>
						    20),
			       (unsigned long long)(kvp_load_relaxed(
							    &s.hdr->h_gpu[0]
								     .gs_unit) >>
						    10),
			       (unsigned long long)kvp_load_relaxed(
				       &s.hdr->h_gpu[0].gs_pid),
			       (unsigned long long)KVP_GS_GEN(w));
	}
	if (ok) {
		/* this process's DRAM registered first: reads of DRAM (the
		 * helper down) are quick, not bounced while it registers */
		double t0 = kvpb_now_s();
		int rc = kvp_dev_register(c, 60000);

		printf("  kvp_dev_register(c, 60000): %s after %.2f s\n",
		       kvp_strerror(rc), kvpb_now_s() - t0);
	}
	ok = ok && hbm_batch(&b, HBM_TAG, HBM_N, 8u << 20);
	if (ok) {
		h = malloc(b.bytes);
		d = dmalloc(b.bytes);
		ok = h && d;
		if (!h)
			failf("out of memory");
	}
	if (!ok) {
		char w[sizeof(why)];

		memcpy(w, why, sizeof(w));
		for (k = 0; k < sizeof(hbm_checks) / sizeof(hbm_checks[0]);
		     k++) {
			failf("%s", w);
			report(hbm_checks[k], false);
		}
		goto out;
	}
	report("hbm_promote", (promoted = hbm_promote(c, &s, &b, h, d)));
	if (promoted) {
		report("hbm_two_process", hbm_two_process());
		report("hbm_helper_killed", hbm_helper_killed(c, &s, &b, h, d));
		/* the copies of the new pool (the check above made them) */
		ok = hbm_wait_copies(&s, KVP_GS_GEN(hbm_word(&s)), b.n,
				     HBM_COPY_MS, "copies before the kill") &&
		     hbm_worker_killed(c, &s, &b, h, d);
		report("hbm_worker_killed", ok);
	} else {
		for (k = 1; k < 4; k++)
			printf("FAIL %s: hbm_promote failed\n", hbm_checks[k]);
		failed += 3;
	}
	batch_delete(c, &b);
	print_info(c, "end");
	printf("  agent: %llu copies into HBM, %llu dropped for room, %llu "
	       "helper deaths\n",
	       (unsigned long long)kvpt_actr(&s, KVP_ACTR_HBM_COPIES),
	       (unsigned long long)kvpt_actr(&s, KVP_ACTR_HBM_EVICTIONS),
	       (unsigned long long)kvpt_actr(&s, KVP_ACTR_HBM_HELPER_DEATHS));
out:
	free(h);
	if (d)
		dfree(d);
	batch_free(&b);
	hbm_seg = NULL;
	if (mapped)
		kvp__seg_unmap(&s);
	kvp_close(c);
	return failed ? 1 : 0;
}

static int
usage(void)
{
	fprintf(stderr,
		"usage: test_gpu roundtrip|ssd|two-process|killed|nodev|"
		"register|hbm POOL [--emulated]\n"
		"       test_gpu child-put|child-get POOL TAG IDX SIZE\n"
		"       test_gpu child-hold|child-hbm-get|child-hbm-hold POOL "
		"TAG N SIZE\n");
	return 2;
}

int
main(int argc, char **argv)
{
	const char *cmd;
	int k;

	setvbuf(stdout, NULL, _IOLBF, 0); /* lines in order with children's */
	if (argc < 3)
		return usage();
	cmd = argv[1];
	pool = argv[2];
	for (k = 3; k < argc; k++)
		if (!strcmp(argv[k], "--emulated"))
			emulated = true;
	if (!strncmp(cmd, "child-", 6)) {
		uint64_t a, n, size;

		if (argc != 6)
			return usage();
		a = strtoull(argv[3], NULL, 0);
		n = strtoull(argv[4], NULL, 0);
		size = strtoull(argv[5], NULL, 0);
		if (!size)
			return usage();
		if (!strcmp(cmd, "child-put"))
			return child_put(a, n, size);
		if (!strcmp(cmd, "child-get"))
			return child_get(a, n, size);
		if (!strcmp(cmd, "child-hold"))
			return child_hold(a, n, size);
		if (!strcmp(cmd, "child-hbm-get"))
			return child_hbm_get(a, n, size);
		if (!strcmp(cmd, "child-hbm-hold"))
			return child_hbm_hold(a, n, size);
		return usage();
	}
	if (!strcmp(cmd, "roundtrip"))
		return cmd_roundtrip();
	if (!strcmp(cmd, "ssd"))
		return cmd_ssd();
	if (!strcmp(cmd, "two-process"))
		return cmd_two_process();
	if (!strcmp(cmd, "killed"))
		return cmd_killed();
	if (!strcmp(cmd, "nodev"))
		return cmd_nodev();
	if (!strcmp(cmd, "register"))
		return cmd_register();
	if (!strcmp(cmd, "hbm"))
		return cmd_hbm();
	return usage();
}
