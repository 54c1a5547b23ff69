/* SPDX-License-Identifier: MIT */
/*
 * test_dev.c - the GPU endpoints (kvpool.h, "GPU endpoints") where there
 * is no GPU: the paths of "no CUDA" (no runtime), "no device or driver"
 * (the toolkit's real libcudart without a driver, and the emulated
 * runtime told to have none) and, against tests/gpu/fakecudart.c (a
 * host-memory stand-in for libcudart.so.13 whose copies run on threads
 * of their own, late when told to, and which counts every DMA from
 * memory that was not pinned), what the pool itself owes a DMA reader:
 * bytes right both ways, holds kept until the copies are done (never
 * reused under a late copy), batches served in parts, SSD values through
 * the bounce buffer, registration that never claims unpinned memory,
 * failed copies as -EIO with nothing published, and a worker killed with
 * copies in flight reaped.  The real device is stress/gpu_check.sh's.
 *
 * Each case runs in a child process: the runtime is loaded once per
 * process and the emulator reads its settings (FAKECUDA_*) once, so a
 * child gets the environment of its case before its first device call.
 * The emulator's path is $KVPT_FAKECUDA (tests/run.sh builds it where
 * the CUDA headers are installed); without it those cases are skipped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "tests/agent/harness.h"
#include "tests/gpu/fakecuda.h"
#include "tiers/kvp_hbm.h"

/* A failed check in a child: say where, exit 1 (the parent asserts 0). */
#define CK(cond)                                                               \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			_exit(1);                                              \
		}                                                              \
	} while (0)

/* The emulator's own calls the cases use for device buffers. */
static struct {
	void *lib;
	unsigned (*malloc_)(void **p, size_t n);
	unsigned (*free_)(void *p);
	unsigned (*memcpy_)(void *d, const void *s, size_t n, unsigned kind);
	unsigned (*mallochost)(void **p, size_t n);
	unsigned (*freehost)(void *p);
	int (*stats)(struct fakecuda_stats *out);
	void (*reset)(void);
} fk;

static const char *
fake_path(void)
{
	const char *p = getenv("KVPT_FAKECUDA");

	return p && *p && access(p, R_OK) == 0 ? p : NULL;
}

/* In a child, before anything loads the runtime: the emulator with env
 * "A=B C=D" set. */
static void
fake_setup(const char *env)
{
	char buf[256], *save = NULL, *tok;

	CK(fake_path());
	setenv("KVPOOL_CUDART", fake_path(), 1);
	snprintf(buf, sizeof(buf), "%s", env ? env : "");
	for (tok = strtok_r(buf, " ", &save); tok;
	     tok = strtok_r(NULL, " ", &save)) {
		char *eq = strchr(tok, '=');

		CK(eq);
		*eq = 0;
		setenv(tok, eq + 1, 1);
	}
	fk.lib = dlopen(fake_path(), RTLD_NOW | RTLD_LOCAL);
	CK(fk.lib);
	*(void **)&fk.malloc_ = dlsym(fk.lib, "cudaMalloc");
	*(void **)&fk.free_ = dlsym(fk.lib, "cudaFree");
	*(void **)&fk.memcpy_ = dlsym(fk.lib, "cudaMemcpy");
	*(void **)&fk.mallochost = dlsym(fk.lib, "cudaMallocHost");
	*(void **)&fk.freehost = dlsym(fk.lib, "cudaFreeHost");
	*(void **)&fk.stats = dlsym(fk.lib, "fakecuda_stats");
	*(void **)&fk.reset = dlsym(fk.lib, "fakecuda_reset_stats");
	CK(fk.malloc_ && fk.free_ && fk.memcpy_ && fk.stats && fk.reset &&
	   fk.mallochost && fk.freehost);
}

static void *
dev_alloc(size_t n)
{
	void *p = NULL;

	CK(fk.malloc_(&p, n) == 0 && p);
	return p;
}

/* Pinned host memory for the test's own copies (so the emulator's count
 * of DMA from unpinned memory is the pool's alone). */
static unsigned char *
host_alloc(size_t n)
{
	void *p = NULL;

	CK(fk.mallochost(&p, n) == 0 && p);
	return (unsigned char *)p;
}

static void
host_free(void *p)
{
	CK(fk.freehost(p) == 0);
}

/* host -> device, device -> host (cudaMemcpy, synchronous) */
static void
to_dev(void *d, const void *h, size_t n)
{
	CK(fk.memcpy_(d, h, n, KVP_CU_MEMCPY_H2D) == 0);
}

static void
from_dev(void *h, const void *d, size_t n)
{
	CK(fk.memcpy_(h, d, n, KVP_CU_MEMCPY_D2H) == 0);
}

static struct fakecuda_stats
fstats(void)
{
	struct fakecuda_stats st;

	CK(fk.stats(&st) == 0);
	return st;
}

static uint32_t
key_of(char *k, int i)
{
	return (uint32_t)snprintf(k, 100, "%064x_dev_%d",
				  (unsigned)i * 2654435761u, i);
}

/* Run fn(pool) in a child; its exit status (77: skipped). */
static int
in_child(void (*fn)(const char *pool), const char *pool)
{
	pid_t p = fork();
	int st = 0;

	if (p == 0) {
		fn(pool);
		fflush(stdout);
		_exit(0);
	}
	assert_true(p > 0);
	assert_int_equal(waitpid(p, &st, 0), p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static const char *
pool_of(struct kvpt_agent *a)
{
	return a->pool;
}

/* A client of pool in the child, and the segment mapped beside it. */
static struct kvp_client *
child_open(const char *pool, struct kvp_seg *s)
{
	struct kvp_client *c = NULL;

	CK(kvp_open(pool, "ns", &c) == 0); /* kvpt_pool_up's */
	if (s)
		CK(kvpt_seg_map(pool, s) == 0);
	return c;
}

/* Put n values of sz (plus k * extra) bytes from the device, one by one
 * and as a batch; read them back as a batch to the device; verify. */
static void
roundtrip(struct kvp_client *c, int from, int n, uint64_t sz, uint64_t extra,
	  uint64_t version)
{
	struct kvp_op *ops = calloc((size_t)n, sizeof(*ops));
	char(*keys)[100] = calloc((size_t)n, 100);
	void **din = calloc((size_t)n, sizeof(void *)),
	     **dout = calloc((size_t)n, sizeof(void *));
	unsigned char *h = host_alloc(sz + (uint64_t)n * extra);
	struct kvp_dev_copy *x = NULL;
	int i;

	CK(ops && keys && din && dout && h);
	for (i = 0; i < n; i++) {
		uint64_t len = sz + (uint64_t)i * extra;
		uint32_t kl = key_of(keys[i], from + i);

		kvpt_fill(h, len, keys[i], kl, version);
		din[i] = dev_alloc(len);
		dout[i] = dev_alloc(len);
		to_dev(din[i], h, len);
		ops[i].key = keys[i];
		ops[i].klen = kl;
		ops[i].buf = din[i];
		ops[i].len = len;
	}
	/* the first alone, the rest as one batch */
	CK(kvp_put_dev(c, 0, NULL, ops[0].key, ops[0].klen, din[0],
		       ops[0].len) == 0);
	CK(kvp_batch_put_dev(c, 0, NULL, ops + 1, (size_t)n - 1) == n - 1);
	for (i = 0; i < n; i++) {
		CK(ops[i].status == 0);
		ops[i].buf = dout[i];
		ops[i].len = sz + (uint64_t)i * extra;
		ops[i].off = 0;
	}
	CK(kvp_batch_get_dev(c, 0, NULL, ops, (size_t)n, &x) == n);
	CK(x);
	CK(kvp_dev_wait(c, x) == n);
	for (i = 0; i < n; i++) {
		uint64_t len = sz + (uint64_t)i * extra;

		CK(ops[i].status == 0 && ops[i].len == len);
		memset(h, 0, len);
		from_dev(h, dout[i], len);
		CK(kvpt_check(h, len, keys[i], ops[i].klen, version));
		fk.free_(din[i]);
		fk.free_(dout[i]);
	}
	host_free(h);
	free(dout);
	free(din);
	free(keys);
	free(ops);
}

/* ---- the cases ---- */

/* Registered DRAM: values of 64 KiB .. 8 MiB + odd sizes both ways, one
 * key and batches; every DMA from pinned memory, none through the
 * bounce buffer; single-key get, ranged and missing keys; counters. */
static void
case_roundtrip(const char *pool)
{
	struct kvp_dev_info di;
	struct fakecuda_stats st;
	struct kvp_seg s;
	struct kvp_client *c;
	struct kvp_op op[3];
	struct kvp_dev_copy *x;
	char k[100], miss[100];
	unsigned char *h;
	void *d = NULL;
	uint32_t kl;

	fake_setup(NULL);
	h = host_alloc(1 << 20);
	c = child_open(pool, &s);
	CK(kvp_dev_register(c, 30000) == 0);
	CK(kvp_dev_info(c, &di, sizeof(di)) == 0);
	CK(di.status == 0 && di.devices == 1 && di.batch_copy == 1);
	CK(di.reg_bytes == di.reg_total_bytes && di.reg_total_bytes > 0);
	CK(di.size == sizeof(di));
	fk.reset();
	roundtrip(c, 0, 3, 64 << 10, 0, 1);
	roundtrip(c, 10, 4, 1 << 20, 4097, 2);
	roundtrip(c, 20, 2, 8 << 20, 0, 3);
	roundtrip(c, 30, 64, 64 << 10, 0, 4);
	st = fstats();
	CK(st.pageable_copies == 0);
	CK(st.batch_calls > 0);
	CK(kvp_dev_info(c, &di, sizeof(di)) == 0);
	CK(di.bounce_bytes == 0);
	CK(di.h2d_keys == 3 + 4 + 2 + 64 && di.d2h_keys == di.h2d_keys);
	CK(di.h2d_bytes == di.d2h_bytes && di.h2d_bytes > (16ull << 20));
	/* the pool's counters say the same */
	CK(kvpt_ctr_total(&s, KVP_CTR_DEV_H2D_BYTES) == di.h2d_bytes);
	CK(kvpt_ctr_total(&s, KVP_CTR_DEV_D2H_BYTES) == di.d2h_bytes);
	CK(kvpt_ctr_total(&s, KVP_CTR_DEV_REG_BYTES) == di.reg_bytes);
	{
		static char out[16384];

		CK(kvpt_run(out, sizeof(out), "%s/kvpool --pool %s stat",
			    kvpt_bindir(), pool) == 0);
		CK(strstr(out, "gpu      146 keys copied")); /* both ways */
		CK(kvpt_run(out, sizeof(out), "%s/kvpool --pool %s stat --json",
			    kvpt_bindir(), pool) == 0);
		CK(strstr(out, "\"dev_keys\":146"));
	}
	/* one key: whole, too small a buffer, a miss */
	kl = key_of(k, 10);
	d = dev_alloc(2 << 20);
	CK(kvp_get_dev(c, 0, NULL, k, kl, d, 2 << 20) == (1 << 20));
	CK(kvp_get_dev(c, 0, NULL, k, kl, d, 4096) == -EMSGSIZE);
	CK(kvp_get_dev(c, 0, NULL, "absent", 6, d, 4096) == -ENOENT);
	/* a range, a miss and a bad op in one batch */
	memset(op, 0, sizeof(op));
	op[0].key = k;
	op[0].klen = kl;
	op[0].buf = d;
	op[0].off = 4096;
	op[0].len = 8192;
	op[1].klen = key_of(miss, 999);
	op[1].key = miss;
	op[1].buf = d;
	op[1].len = 10;
	op[2].key = k;
	op[2].klen = kl;
	op[2].len = 10; /* no buffer */
	CK(kvp_batch_get_dev(c, 0, NULL, op, 3, &x) == 1);
	CK(kvp_dev_wait(c, x) == 1);
	CK(op[0].status == 0 && op[0].len == 8192);
	CK(op[1].status == -ENOENT && op[2].status == -EINVAL);
	{
		unsigned char *whole = malloc(1 << 20);

		CK(kvp_get(c, k, kl, whole, 1 << 20) == (1 << 20));
		from_dev(h, d, 8192);
		CK(memcmp(h, whole + 4096, 8192) == 0);
		free(whole);
	}
	CK(kvpt_holds_total(&s) == 0);
	fk.free_(d);
	host_free(h);
	kvp_close(c);
	/* closing the last handle undoes the registration */
	CK(fstats().registered_bytes == 0);
	kvp__seg_unmap(&s);
}

/* More keys than this client's 16 hold slots: served in parts. */
static void
case_parts(const char *pool)
{
	struct kvp_seg s;
	struct kvp_client *c;

	fake_setup(NULL);
	c = child_open(pool, &s);
	roundtrip(c, 0, 200, 64 << 10, 0, 7);
	CK(kvpt_holds_total(&s) == 0);
	kvp_close(c);
	kvp__seg_unmap(&s);
}

/* Copies that land 20 ms late: the values stay held until kvp_dev_wait
 * (deleted and their room wanted meanwhile, their bytes are not reused),
 * and the bytes that land are the values read. */
static void
case_held(const char *pool)
{
	enum {
		N = 16,
		SZ = 256 << 10
	};
	struct kvp_seg s;
	struct kvp_client *c;
	struct kvp_op ops[N];
	struct kvp_dev_copy *x;
	char keys[N][100], k2[100];
	unsigned char *h;
	void *d[N];
	int i;

	fake_setup("FAKECUDA_COPY_DELAY_US=20000");
	h = host_alloc(SZ);
	c = child_open(pool, &s);
	memset(ops, 0, sizeof(ops));
	for (i = 0; i < N; i++) {
		ops[i].klen = key_of(keys[i], i);
		ops[i].key = keys[i];
		kvpt_fill(h, SZ, keys[i], ops[i].klen, 11);
		CK(kvp_put(c, keys[i], ops[i].klen, h, SZ) == 0);
		d[i] = dev_alloc(SZ);
		ops[i].buf = d[i];
		ops[i].len = SZ;
	}
	CK(kvp_batch_get_dev(c, 0, NULL, ops, N, &x) == N);
	CK(kvp_dev_done(c, x) == 0); /* 20 ms per copy: not yet */
	CK(kvpt_holds_total(&s) == N);
	/* the values go away and others want the room */
	for (i = 0; i < N; i++)
		CK(kvp_delete(c, keys[i], ops[i].klen) == 0);
	for (i = 0; i < 2 * N; i++) {
		uint32_t kl = key_of(k2, 1000 + i);

		kvpt_fill(h, SZ, k2, kl, 12);
		(void)kvp_put(c, k2, kl, h, SZ); /* room or not */
	}
	CK(kvp_dev_wait(c, x) == N);
	CK(kvpt_holds_total(&s) == 0);
	for (i = 0; i < N; i++) {
		CK(ops[i].status == 0);
		from_dev(h, d[i], SZ);
		CK(kvpt_check(h, SZ, keys[i], ops[i].klen, 11));
		fk.free_(d[i]);
	}
	host_free(h);
	kvp_close(c);
	kvp__seg_unmap(&s);
}

/* Registration held back (the emulator's gate: a file that exists until
 * the case removes it): copies meanwhile go through the bounce buffer,
 * both ways, and none of them is DMA from memory that is not pinned; the
 * buffer is reused only after the copies out of it (of this call and of
 * one not yet waited for) finished; once registered, the bounce buffer
 * is left alone. */
static void
case_bounce(const char *pool)
{
	enum {
		N = 12,
		SZ = 1 << 20
	};
	struct kvp_dev_info di;
	struct kvp_client *c;
	struct kvp_op a[N], b[N];
	struct kvp_dev_copy *xa, *xb;
	char keys[N][100];
	unsigned char *h;
	void *da[N], *db[N];
	uint64_t bounced;
	char gate[200], env[300];
	int i, gfd;

	snprintf(gate, sizeof(gate), "%s/kvpt-reg-gate.%d", kvpt_log_dir(),
		 (int)getpid());
	gfd = open(gate, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	CK(gfd >= 0);
	close(gfd);
	snprintf(env, sizeof(env),
		 "FAKECUDA_REG_GATE=%s FAKECUDA_COPY_DELAY_US=2000", gate);
	fake_setup(env);
	h = host_alloc(SZ);
	c = child_open(pool, NULL);
	fk.reset();
	/* 12 x 1 MiB both ways, twice over, while nothing is registered */
	roundtrip(c, 0, N, SZ, 0, 21);
	CK(kvp_dev_info(c, &di, sizeof(di)) == 0);
	CK(di.reg_bytes == 0 && di.bounce_bytes >= 2ull * N * SZ);
	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	for (i = 0; i < N; i++) {
		a[i].klen = b[i].klen = key_of(keys[i], i);
		a[i].key = b[i].key = keys[i];
		a[i].buf = da[i] = dev_alloc(SZ);
		b[i].buf = db[i] = dev_alloc(SZ);
		a[i].len = b[i].len = SZ;
	}
	/* 24 MiB through a 16 MiB buffer, the first batch not waited for */
	CK(kvp_batch_get_dev(c, 0, NULL, a, N, &xa) == N);
	CK(kvp_batch_get_dev(c, 0, NULL, b, N, &xb) == N);
	CK(kvp_dev_wait(c, xb) == N);
	CK(kvp_dev_wait(c, xa) == N);
	for (i = 0; i < N; i++) {
		from_dev(h, da[i], SZ);
		CK(kvpt_check(h, SZ, keys[i], a[i].klen, 21));
		from_dev(h, db[i], SZ);
		CK(kvpt_check(h, SZ, keys[i], b[i].klen, 21));
	}
	CK(fstats().pageable_copies == 0);
	CK(kvp_dev_register(c, 0) == -EINPROGRESS);
	/* registration finishes; never more than it registered */
	CK(unlink(gate) == 0);
	CK(kvp_dev_register(c, 20000) == 0);
	CK(kvp_dev_info(c, &di, sizeof(di)) == 0);
	CK(di.reg_bytes == di.reg_total_bytes);
	CK(di.reg_bytes == fstats().registered_bytes);
	bounced = di.bounce_bytes;
	CK(kvp_batch_get_dev(c, 0, NULL, a, N, &xa) == N);
	CK(kvp_dev_wait(c, xa) == N);
	CK(kvp_dev_info(c, &di, sizeof(di)) == 0);
	CK(di.bounce_bytes == bounced);
	CK(fstats().pageable_copies == 0);
	for (i = 0; i < N; i++) {
		fk.free_(da[i]);
		fk.free_(db[i]);
	}
	host_free(h);
	kvp_close(c);
}

/* The runtime refuses to register: kvp_dev_register says -EIO, the info
 * counts the refused chunk and no registered byte, and copies still work
 * (bounce), none from unpinned memory. */
static void
case_regfail(const char *pool)
{
	struct kvp_dev_info di;
	struct kvp_client *c;

	fake_setup("FAKECUDA_REG_FAIL_AFTER=0");
	c = child_open(pool, NULL);
	CK(kvp_dev_register(c, 10000) == -EIO);
	CK(kvp_dev_info(c, &di, sizeof(di)) == 0);
	CK(di.reg_failed == 1 && di.reg_bytes == 0);
	fk.reset();
	roundtrip(c, 0, 8, 256 << 10, 0, 31);
	CK(fstats().pageable_copies == 0);
	CK(fstats().registered_bytes == 0);
	kvp_close(c);
}

/* Copies the runtime fails: gets answer -EIO after kvp_dev_wait and drop
 * their holds; a put answers -EIO and publishes nothing. */
static void
case_copyfail(const char *pool)
{
	enum {
		N = 4,
		SZ = 64 << 10
	};
	struct kvp_seg s;
	struct kvp_client *c;
	struct kvp_op ops[N];
	struct kvp_dev_copy *x;
	char keys[N][100], k[100];
	unsigned char *h;
	void *d;
	uint32_t kl;
	int i;

	/* one copy succeeds (the test's own, below); every later one fails */
	fake_setup("FAKECUDA_FAIL_COPY_AFTER=1");
	h = host_alloc(SZ);
	c = child_open(pool, &s);
	CK(kvp_dev_register(c, 10000) == 0);
	d = dev_alloc(SZ);
	to_dev(d, h, SZ);
	memset(ops, 0, sizeof(ops));
	for (i = 0; i < N; i++) {
		ops[i].klen = key_of(keys[i], i);
		ops[i].key = keys[i];
		kvpt_fill(h, SZ, keys[i], ops[i].klen, 41);
		CK(kvp_put(c, keys[i], ops[i].klen, h, SZ) == 0);
		ops[i].buf = d;
		ops[i].len = SZ;
	}
	CK(kvp_batch_get_dev(c, 0, NULL, ops, N, &x) == N);
	CK(kvp_dev_wait(c, x) == -EIO);
	for (i = 0; i < N; i++)
		CK(ops[i].status == -EIO && ops[i].len == 0);
	CK(kvpt_holds_total(&s) == 0);
	kl = key_of(k, 100);
	CK(kvp_put_dev(c, 0, NULL, k, kl, d, SZ) == -EIO);
	CK(!kvpt_present(c, &s, k, kl));
	fk.free_(d);
	host_free(h);
	kvp_close(c);
	kvp__seg_unmap(&s);
}

/* SSD-resident values: read by the agent into the bounce buffer and
 * copied from there; the bytes right. */
static void
case_ssd(const char *pool)
{
	enum {
		N = 24,
		SZ = 256 << 10
	};
	struct kvp_seg s;
	struct kvp_client *c;
	struct kvp_op ops[N];
	struct kvp_dev_copy *x;
	char keys[N][100];
	unsigned char *h;
	void *d[N];
	int i;

	fake_setup(NULL);
	h = host_alloc(SZ);
	c = child_open(pool, &s);
	{
		int rc = kvpt_put_and_demote(c, &s, N, SZ, key_of, 5, 30000);

		if (rc)
			fprintf(stderr, "put_and_demote: %d\n", rc);
		CK(rc == 0);
	}
	memset(ops, 0, sizeof(ops));
	for (i = 0; i < N; i++) {
		ops[i].klen = key_of(keys[i], i);
		ops[i].key = keys[i];
		ops[i].buf = d[i] = dev_alloc(SZ);
		ops[i].len = SZ;
	}
	CK(kvp_batch_get_dev(c, 0, NULL, ops, N, &x) == N);
	CK(kvp_dev_wait(c, x) == N);
	/* each key counted once (the SSD path's kvp_batch_get counts them) */
	CK(kvpt_ctr_total(&s, KVP_CTR_GET) == N);
	CK(kvpt_ctr_total(&s, KVP_CTR_RESOLVE_OK) == N);
	for (i = 0; i < N; i++) {
		CK(ops[i].status == 0 && ops[i].len == SZ);
		from_dev(h, d[i], SZ);
		CK(kvpt_check(h, SZ, keys[i], ops[i].klen, 5));
		fk.free_(d[i]);
	}
	CK(kvpt_holds_total(&s) == 0);
	host_free(h);
	kvp_close(c);
	kvp__seg_unmap(&s);
}

/* kvp_close with copies in flight waits for them before its holds go. */
static void
case_close_inflight(const char *pool)
{
	enum {
		N = 4,
		SZ = 256 << 10
	};
	struct kvp_seg s;
	struct kvp_client *c;
	struct kvp_op ops[N];
	struct kvp_dev_copy *x;
	char keys[N][100];
	unsigned char *h;
	void *d[N];
	int i;

	fake_setup("FAKECUDA_COPY_DELAY_US=50000");
	h = host_alloc(SZ);
	c = child_open(pool, &s);
	memset(ops, 0, sizeof(ops));
	for (i = 0; i < N; i++) {
		ops[i].klen = key_of(keys[i], i);
		ops[i].key = keys[i];
		kvpt_fill(h, SZ, keys[i], ops[i].klen, 51);
		CK(kvp_put(c, keys[i], ops[i].klen, h, SZ) == 0);
		ops[i].buf = d[i] = dev_alloc(SZ);
		ops[i].len = SZ;
	}
	CK(kvp_batch_get_dev(c, 0, NULL, ops, N, &x) == N);
	CK(kvpt_holds_total(&s) == N);
	kvp_close(c); /* x with it */
	CK(kvpt_holds_total(&s) == 0);
	for (i = 0; i < N; i++) {
		from_dev(h, d[i], SZ);
		CK(kvpt_check(h, SZ, keys[i], ops[i].klen, 51));
	}
	host_free(h);
	kvp__seg_unmap(&s);
}

/* Bad arguments, and a device that is not there. */
static void
case_badinput(const char *pool)
{
	struct kvp_client *c;
	struct kvp_dev_copy *x = NULL;
	struct kvp_op op;
	void *d;

	fake_setup(NULL);
	c = child_open(pool, NULL);
	d = dev_alloc(4096);
	memset(&op, 0, sizeof(op));
	op.key = "k";
	op.klen = 1;
	op.buf = d;
	op.len = 4096;
	CK(kvp_batch_get_dev(c, -1, NULL, &op, 1, &x) == -EINVAL);
	CK(kvp_batch_get_dev(c, 0, NULL, NULL, 1, &x) == -EINVAL);
	CK(kvp_batch_get_dev(c, 0, NULL, &op, 1, NULL) == -EINVAL);
	CK(kvp_batch_get_dev(NULL, 0, NULL, &op, 1, &x) == -EINVAL);
	CK(kvp_batch_get_dev(c, 5, NULL, &op, 1, &x) == -ENODEV);
	CK(kvp_batch_put_dev(c, 5, NULL, &op, 1) == -ENODEV);
	CK(kvp_put_dev(c, 0, NULL, NULL, 1, d, 10) == -EINVAL);
	CK(kvp_put_dev(c, 0, NULL, "k", 1, d, 0) == -EINVAL);
	CK(kvp_get_dev(c, 0, NULL, "k", 1, NULL, 10) == -EINVAL);
	CK(kvp_dev_wait(c, NULL) == 0);
	CK(kvp_dev_info(c, NULL, 8) == -EINVAL);
	/* a host pointer where a device one belongs: the runtime refuses */
	{
		unsigned char host[64];

		memset(host, 1, sizeof(host));
		CK(kvp_put_dev(c, 0, NULL, "hostptr", 7, host, 64) == -EINVAL);
	}
	fk.free_(d);
	kvp_close(c);
}

/* No device: every device call -ENODEV, the rest of the pool works. */
static void
expect_nodev(const char *pool, int want)
{
	struct kvp_dev_info di;
	struct kvp_client *c;
	struct kvp_dev_copy *x = NULL;
	struct kvp_op op;
	char buf[16];
	int dummy = 0;

	c = child_open(pool, NULL);
	memset(&op, 0, sizeof(op));
	op.key = "k";
	op.klen = 1;
	op.buf = &dummy;
	op.len = 4;
	CK(kvp_dev_info(c, &di, sizeof(di)) == 0);
	CK(di.status == want && di.devices == 0);
	CK(kvp_batch_get_dev(c, 0, NULL, &op, 1, &x) == want && !x);
	CK(kvp_batch_put_dev(c, 0, NULL, &op, 1) == want);
	CK(kvp_get_dev(c, 0, NULL, "k", 1, &dummy, 4) == -ENOENT ||
	   kvp_get_dev(c, 0, NULL, "k", 1, &dummy, 4) == want);
	CK(kvp_put_dev(c, 0, NULL, "k", 1, &dummy, 4) == want);
	CK(kvp_dev_register(c, 0) == want);
	CK(strcmp(kvp_strerror(want), "unknown status") != 0);
	/* the host path is untouched */
	CK(kvp_put(c, "host", 4, "value", 5) == 0);
	CK(kvp_get(c, "host", 4, buf, sizeof(buf)) == 5);
	CK(kvp_delete(c, "host", 4) == 0);
	kvp_close(c);
}

static void
case_no_runtime(const char *pool)
{
	setenv("KVPOOL_CUDART", "/nonexistent/libcudart.so.13", 1);
	expect_nodev(pool, -ENOTSUP);
}

static void
case_fake_nodevice(const char *pool)
{
	fake_setup("FAKECUDA_DEVICES=0");
	expect_nodev(pool, -ENODEV);
}

static void
case_fake_olddriver(const char *pool)
{
	fake_setup("FAKECUDA_DRIVER=old");
	expect_nodev(pool, -ENODEV);
}

/* The toolkit's own runtime, if one loads: on a machine without a GPU
 * or driver it says so (-ENODEV); no CUDA at all: skipped (77); a GPU:
 * skipped too (stress/gpu_check.sh is the device's test). */
static void
case_real_runtime(const char *pool)
{
	struct kvp_dev_info di;
	struct kvp_client *c;

	unsetenv("KVPOOL_CUDART");
	c = child_open(pool, NULL);
	CK(kvp_dev_info(c, &di, sizeof(di)) == 0);
	kvp_close(c);
	if (di.status == -ENOTSUP) {
		printf("  SKIP real runtime: no CUDA (no libcudart found)\n");
		_exit(77);
	}
	if (di.status == 0) {
		printf("  SKIP real runtime: a GPU is present "
		       "(stress/gpu_check.sh tests it)\n");
		_exit(77);
	}
	printf("  the toolkit's runtime %d, driver %d: -ENODEV\n",
	       di.runtime_version, di.driver_version);
	expect_nodev(pool, -ENODEV);
}

/* ---- the HBM tier (agent/hbm.c, agent/gpud.c) ---- */

struct hbm_cond {
	const struct kvp_seg *s;
	uint64_t copies;
};

static bool
hbm_up(void *arg)
{
	const struct hbm_cond *hc = arg;
	/* acquire: the agent's release */
	uint64_t w = kvp_load_acquire(&hc->s->hdr->h_gpu[0].gs_state);

	return KVP_GS_STATE(w) == KVP_GPU_UP &&
	       /* relaxed: a statistic */
	       kvp_load_relaxed(&hc->s->hdr->h_gpu[0].gs_copies) >= hc->copies;
}

static bool
hbm_not_up(void *arg)
{
	const struct hbm_cond *hc = arg;

	/* acquire: the agent's release */
	return KVP_GS_STATE(kvp_load_acquire(&hc->s->hdr->h_gpu[0].gs_state)) !=
	       KVP_GPU_UP;
}

/* n values put from the host and read once (a hit): the agent copies
 * them into the GPU's pool. */
static void
hbm_fill(struct kvp_client *c, struct kvp_seg *s, int n, uint64_t sz,
	 uint64_t version, uint64_t want_copies)
{
	unsigned char *h = malloc(sz);
	struct hbm_cond hc = { s, want_copies };
	char k[100];
	int i;

	CK(h);
	for (i = 0; i < n; i++) {
		uint32_t kl = key_of(k, i);

		kvpt_fill(h, sz, k, kl, version);
		CK(kvp_put(c, k, kl, h, sz) == 0);
		CK(kvp_get(c, k, kl, h, sz) == (ssize_t)sz);
	}
	free(h);
	CK(kvpt_wait_until(hbm_up, &hc, 10000) >= 0);
}

/* Read keys 0..n-1 to the device and check them; the HBM hits. */
static uint64_t
hbm_read(struct kvp_client *c, int n, uint64_t sz, uint64_t version)
{
	struct kvp_op *ops = calloc((size_t)n, sizeof(*ops));
	char(*keys)[100] = calloc((size_t)n, 100);
	unsigned char *h = host_alloc(sz);
	void **d = calloc((size_t)n, sizeof(void *));
	struct kvp_dev_info before, after;
	struct kvp_dev_copy *x;
	int i;

	CK(ops && keys && d);
	CK(kvp_dev_info(c, &before, sizeof(before)) == 0);
	for (i = 0; i < n; i++) {
		ops[i].klen = key_of(keys[i], i);
		ops[i].key = keys[i];
		ops[i].buf = d[i] = dev_alloc(sz);
		ops[i].len = sz;
	}
	CK(kvp_batch_get_dev(c, 0, NULL, ops, (size_t)n, &x) == n);
	CK(kvp_dev_wait(c, x) == n);
	for (i = 0; i < n; i++) {
		CK(ops[i].status == 0 && ops[i].len == sz);
		from_dev(h, d[i], sz);
		CK(kvpt_check(h, sz, keys[i], ops[i].klen, version));
		fk.free_(d[i]);
	}
	CK(kvp_dev_info(c, &after, sizeof(after)) == 0);
	host_free(h);
	free(d);
	free(keys);
	free(ops);
	return after.hbm_hits - before.hbm_hits;
}

/* Hit values go to the GPU's pool; device gets of them are device to
 * device copies from this process's import of the helper's pool, in this
 * process and in another; a value deleted and put again is not served
 * from its old copy. */
static void
case_hbm_hits(const char *pool)
{
	enum {
		N = 16,
		SZ = 256 << 10
	};
	struct kvp_seg s;
	struct kvp_client *c;
	struct fakecuda_stats st;
	uint64_t hits;
	char k[100];
	uint32_t kl;
	unsigned char *h;
	pid_t p;
	int wst;

	fake_setup(NULL);
	c = child_open(pool, &s);
	hbm_fill(c, &s, N, SZ, 71, N);
	fk.reset();
	hits = hbm_read(c, N, SZ, 71);
	st = fstats();
	printf("  %llu of %d device gets served from HBM (%llu D2D copies)\n",
	       (unsigned long long)hits, N, (unsigned long long)st.copies_d2d);
	CK(hits == N);
	CK(st.copies_d2d >= N && st.pageable_copies == 0);
	CK(kvpt_ctr_total(&s, KVP_CTR_DEV_HBM_HITS) == N);
	{
		static char out[16384];

		CK(kvpt_run(out, sizeof(out), "%s/kvpool --pool %s stat",
			    kvpt_bindir(), pool) == 0);
		CK(strstr(out, "hbm      GPU 0: up (generation 1)"));
	}
	/* another process imports the pool too */
	p = fork();
	if (p == 0) {
		struct kvp_client *c2;

		/* a child of ours: CUDA does not cross fork, so a fresh exec
		 * would be needed on a real GPU; the emulator's state is
		 * per process and reset by its fork handler */
		CK(kvp_open(pool, "ns", &c2) == 0);
		CK(hbm_read(c2, N, SZ, 71) == N);
		kvp_close(c2);
		_exit(0);
	}
	CK(p > 0 && waitpid(p, &wst, 0) == p);
	CK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
	/* key 0 deleted and put again with other bytes: its old copy is
	 * stale (another generation of the slot, or another slot) */
	kl = key_of(k, 0);
	h = malloc(SZ);
	CK(kvp_delete(c, k, kl) == 0);
	kvpt_fill(h, SZ, k, kl, 72);
	{
		/* the agent reclaims the deleted entry: a deadline, not a
		 * sleep */
		uint64_t t_end = kvp_now_ns(CLOCK_MONOTONIC) + 10000000000ull;
		int rc;

		while ((rc = kvp_put(c, k, kl, h, SZ)) == -EEXIST &&
		       kvp_now_ns(CLOCK_MONOTONIC) < t_end)
			sched_yield();
		CK(rc == 0);
	}
	free(h);
	{
		struct kvp_op op;
		struct kvp_dev_copy *x;
		unsigned char *hb = host_alloc(SZ);
		void *d = dev_alloc(SZ);

		memset(&op, 0, sizeof(op));
		op.key = k;
		op.klen = kl;
		op.buf = d;
		op.len = SZ;
		CK(kvp_batch_get_dev(c, 0, NULL, &op, 1, &x) == 1);
		CK(kvp_dev_wait(c, x) == 1);
		from_dev(hb, d, SZ);
		CK(kvpt_check(hb, SZ, k, kl, 72));
		fk.free_(d);
		host_free(hb);
	}
	kvp_close(c);
	kvp__seg_unmap(&s);
}

/* The helper killed: the GPU's slot goes DOWN, every copy of it is
 * dropped, device gets read DRAM (right bytes, no HBM hit); the agent
 * starts a new helper (a new generation) and copies again. */
static void
case_hbm_helper_killed(const char *pool)
{
	enum {
		N = 8,
		SZ = 256 << 10
	};
	struct kvp_seg s;
	struct kvp_client *c;
	struct hbm_cond hc;
	uint64_t gen0;
	pid_t hp;

	fake_setup(NULL);
	c = child_open(pool, &s);
	hbm_fill(c, &s, N, SZ, 81, N);
	CK(hbm_read(c, N, SZ, 81) == N);
	/* acquire: the agent's release */
	gen0 = KVP_GS_GEN(kvp_load_acquire(&s.hdr->h_gpu[0].gs_state));
	hp = (pid_t)kvp_load_relaxed(&s.hdr->h_gpu[0].gs_pid);
	CK(hp > 0 && kill(hp, SIGKILL) == 0);
	hc.s = &s;
	hc.copies = 0;
	CK(kvpt_wait_until(hbm_not_up, &hc, 2000) >= 0);
	CK(hbm_read(c, N, SZ, 81) == 0); /* from DRAM */
	/* a new helper, a new generation, the copies again (a hit each) */
	CK(hbm_read(c, N, SZ, 81) == 0);
	hc.copies = N;
	CK(kvpt_wait_until(hbm_up, &hc, 10000) >= 0);
	CK(KVP_GS_GEN(kvp_load_acquire(&s.hdr->h_gpu[0].gs_state)) > gen0);
	CK(kvpt_actr(&s, KVP_ACTR_HBM_HELPER_DEATHS) >= 1);
	CK(hbm_read(c, N, SZ, 81) == N);
	kvp_close(c);
	kvp__seg_unmap(&s);
}

/* A pool of 4 MiB (64 units; a value takes at most a quarter): 64 hot
 * values of 256 KiB compete; copies are dropped for room (never a held
 * one), occupancy stays within the pool, every read is right. */
static void
case_hbm_pressure(const char *pool)
{
	enum {
		N = 64,
		SZ = 256 << 10
	};
	struct kvp_seg s;
	struct kvp_client *c;
	uint64_t hits = 0;
	int round;

	fake_setup(NULL);
	c = child_open(pool, &s);
	hbm_fill(c, &s, N, SZ, 91, 16);
	for (round = 0; round < 5; round++)
		hits += hbm_read(c, N, SZ, 91);
	printf("  %llu HBM hits over 5 x %d reads; %llu copies, %llu dropped "
	       "for room\n",
	       (unsigned long long)hits, N,
	       (unsigned long long)kvpt_actr(&s, KVP_ACTR_HBM_COPIES),
	       (unsigned long long)kvpt_actr(&s, KVP_ACTR_HBM_EVICTIONS));
	CK(hits > 0);
	CK(kvpt_actr(&s, KVP_ACTR_HBM_EVICTIONS) > 0);
	/* relaxed: statistics */
	CK(kvp_load_relaxed(&s.hdr->h_gpu[0].gs_used) <=
	   kvp_load_relaxed(&s.hdr->h_gpu[0].gs_bytes) /
		   kvp_load_relaxed(&s.hdr->h_gpu[0].gs_unit));
	kvp_close(c);
	kvp__seg_unmap(&s);
}

/* No device for the helper: the tier is off (OFF, once), the rest works. */
static void
case_hbm_nodevice(const char *pool)
{
	struct kvp_seg s;
	struct kvp_client *c;
	char buf[8];

	c = child_open(pool, &s);
	CK(KVP_GS_STATE(kvp_load_acquire(&s.hdr->h_gpu[0].gs_state)) ==
	   KVP_GPU_OFF);
	CK(kvp_put(c, "k", 1, "v", 1) == 0);
	CK(kvp_get(c, "k", 1, buf, sizeof(buf)) == 1);
	kvp_close(c);
	kvp__seg_unmap(&s);
}

/* ---- the tests: an agent per test, the case in a child ---- */

/* The environment the next agent starts with (its HBM helpers load the
 * runtime it names): "A=B C=D" on top of KVPOOL_CUDART = the emulator. */
static const char *agent_env;

static void
agent_env_apply(bool set)
{
	char buf[256], *save = NULL, *tok;

	if (!agent_env)
		return;
	if (set)
		setenv("KVPOOL_CUDART", fake_path(), 1);
	else
		unsetenv("KVPOOL_CUDART");
	snprintf(buf, sizeof(buf), "%s", agent_env);
	for (tok = strtok_r(buf, " ", &save); tok;
	     tok = strtok_r(NULL, " ", &save)) {
		char *eq = strchr(tok, '=');

		if (!eq)
			continue;
		*eq = 0;
		if (set)
			setenv(tok, eq + 1, 1);
		else
			unsetenv(tok);
	}
}

static void
run_case(void (*fn)(const char *pool), bool needs_fake, const char *arg, ...)
{
	struct kvpt_agent a;
	const char *args[24];
	va_list ap;
	int n = 0, rc;

	if (needs_fake && !fake_path()) {
		print_message("  SKIP: no CUDA (the emulated runtime is built "
			      "only where the CUDA headers are: "
			      "$KVPT_FAKECUDA unset)\n");
		skip();
	}
	va_start(ap, arg);
	for (; arg && n < 23; arg = va_arg(ap, const char *))
		args[n++] = arg;
	va_end(ap);
	args[n] = NULL;
	agent_env_apply(true);
	rc = kvpt_agent_start(&a, args[0], args[1], args[2], args[3], args[4],
			      args[5], args[6], args[7], args[8], args[9],
			      args[10], args[11], args[12], args[13], args[14],
			      args[15], args[16], args[17], args[18], args[19],
			      args[20], args[21], args[22]);
	agent_env_apply(false);
	agent_env = NULL;
	assert_int_equal(rc, 0);
	rc = in_child(fn, pool_of(&a));
	assert_int_equal(kvpt_cli_check(pool_of(&a), 5000, NULL, 0), 0);
	assert_int_equal(kvpt_agent_stop(&a), 0);
	if (rc == 77)
		skip();
	assert_int_equal(rc, 0);
}

#define POOL "--dram", "64M", "--max-value", "16M"

static void
test_roundtrip(void **state)
{
	(void)state;
	run_case(case_roundtrip, true, POOL, NULL);
}

static void
test_parts(void **state)
{
	(void)state;
	run_case(case_parts, true, POOL, "--holds-per-client", "16", NULL);
}

static void
test_held(void **state)
{
	(void)state;
	/* 8 MiB: the 16 held values are half of it; the 32 puts want it all */
	run_case(case_held, true, "--dram", "8M", "--dram-unit", "64K", NULL);
}

static void
test_bounce(void **state)
{
	(void)state;
	run_case(case_bounce, true, "--dram", "16M", "--dram-unit", "64K",
		 NULL);
}

static void
test_regfail(void **state)
{
	(void)state;
	run_case(case_regfail, true, "--dram", "16M", NULL);
}

static void
test_copyfail(void **state)
{
	(void)state;
	run_case(case_copyfail, true, "--dram", "16M", NULL);
}

static void
test_ssd(void **state)
{
	(void)state;
	assert_int_equal(kvpt_ssd_dir_fresh(), 0);
	run_case(case_ssd, true, "--dram", "16M", "--dram-unit", "4K",
		 "--dram-high", "0", "--dram-low", "0", "--ssd-dir",
		 kvpt_ssd_dir, "--ssd-segment", "8M", "--staging", "8M",
		 "--staging-slot", "1M", NULL);
}

static void
test_close_inflight(void **state)
{
	(void)state;
	run_case(case_close_inflight, true, "--dram", "16M", NULL);
}

static void
test_badinput(void **state)
{
	(void)state;
	run_case(case_badinput, true, "--dram", "16M", NULL);
}

#define HBM_POOL "--dram", "64M", "--hbm-gpu", "0", "--hbm-size"

static void
test_hbm_hits(void **state)
{
	(void)state;
	agent_env = "";
	run_case(case_hbm_hits, true, HBM_POOL, "32M", NULL);
}

static void
test_hbm_helper_killed(void **state)
{
	(void)state;
	agent_env = "";
	run_case(case_hbm_helper_killed, true, HBM_POOL, "32M", NULL);
}

static void
test_hbm_pressure(void **state)
{
	(void)state;
	agent_env = "";
	run_case(case_hbm_pressure, true, HBM_POOL, "4M", "--dram-unit", "64K",
		 NULL);
}

static bool
hbm_off(void *arg)
{
	/* acquire: the agent's release */
	return KVP_GS_STATE(kvp_load_acquire(
		       &((const struct kvp_seg *)arg)->hdr->h_gpu[0].gs_state)) ==
	       KVP_GPU_OFF;
}

static void
test_hbm_nodevice(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	char log[512], out[4096];

	(void)state;
	if (!fake_path())
		skip();
	agent_env = "FAKECUDA_DEVICES=0";
	agent_env_apply(true);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, HBM_POOL, "32M", NULL), 0);
	agent_env_apply(false);
	agent_env = NULL;
	assert_true(kvpt_wait_until(hbm_off, &s, 5000) >= 0);
	assert_int_equal(in_child(case_hbm_nodevice, a.pool), 0);
	kvpt_agent_log(a.pool, log, sizeof(log));
	assert_int_equal(kvpt_run(out, sizeof(out), "grep -c 'HBM tier off' %s",
				  log),
			 0);
	assert_int_equal(atoi(out), 1); /* said once */
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

static void
test_no_runtime(void **state)
{
	(void)state;
	run_case(case_no_runtime, false, "--dram", "16M", NULL);
}

static void
test_fake_nodevice(void **state)
{
	(void)state;
	run_case(case_fake_nodevice, true, "--dram", "16M", NULL);
}

static void
test_fake_olddriver(void **state)
{
	(void)state;
	run_case(case_fake_olddriver, true, "--dram", "16M", NULL);
}

static void
test_real_runtime(void **state)
{
	(void)state;
	run_case(case_real_runtime, false, "--dram", "16M", NULL);
}

static bool
no_holds(void *arg)
{
	return kvpt_holds_total((const struct kvp_seg *)arg) == 0;
}

/* A worker killed with device copies in flight (its copies 200 ms each):
 * the reaper releases its holds within a second, and the values read
 * whole. */
static void
test_worker_killed(void **state)
{
	enum {
		N = 8,
		SZ = 256 << 10
	};
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	char keys[N][100];
	unsigned char *h;
	int pfd[2], i, st;
	pid_t p;
	char ready;

	(void)state;
	if (!fake_path()) {
		print_message("  SKIP: no CUDA ($KVPT_FAKECUDA unset)\n");
		skip();
	}
	h = malloc(SZ); /* after the skip: a skipped case leaks nothing */
	assert_non_null(h);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, "--dram", "16M", NULL), 0);
	for (i = 0; i < N; i++) {
		uint32_t kl = key_of(keys[i], i);

		kvpt_fill(h, SZ, keys[i], kl, 61);
		assert_int_equal(kvp_put(c, keys[i], kl, h, SZ), 0);
	}
	assert_int_equal(pipe(pfd), 0);
	p = fork();
	if (p == 0) {
		struct kvp_client *w;
		struct kvp_op ops[N];
		struct kvp_dev_copy *x;

		close(pfd[0]);
		fake_setup("FAKECUDA_COPY_DELAY_US=200000");
		w = child_open(a.pool, NULL);
		memset(ops, 0, sizeof(ops));
		for (i = 0; i < N; i++) {
			ops[i].klen = key_of(keys[i], i);
			ops[i].key = keys[i];
			ops[i].buf = dev_alloc(SZ);
			ops[i].len = SZ;
		}
		{
			ssize_t r = kvp_batch_get_dev(w, 0, NULL, ops, N, &x);

			if (r != N)
				fprintf(stderr, "batch_get_dev: %zd (%d)\n", r,
					ops[0].status);
			CK(r == N);
		}
		CK(write(pfd[1], "r", 1) == 1);
		for (;;)
			pause();
	}
	assert_true(p > 0);
	close(pfd[1]);
	assert_int_equal(read(pfd[0], &ready, 1), 1);
	close(pfd[0]);
	assert_true(kvpt_holds_total(&s) >= N);
	kill(p, SIGKILL);
	assert_int_equal(waitpid(p, &st, 0), p);
	{
		long long ns = kvpt_wait_until(no_holds, &s, 2000);

		assert_true(ns >= 0);
		print_message("  holds reaped %.1f ms after the kill\n",
			      (double)ns / 1e6);
	}
	assert_int_equal(kvpt_holds_total(&s), 0);
	assert_int_equal(kvpt_wrong_keys(c, key_of, 0, N, SZ, 61, true), 0);
	free(h);
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

/* ---- who serves a GPU's pool (issue 25, item 9) ---- */

/* A server of abstract names that is not the pool's helper: it answers
 * every connection with m and fd (a pool's descriptor, as a helper would)
 * and counts them in *served, until the test closes stop (its EOF).  Its
 * names are bound before it says ready on the pipe. */
static void
rogue_serve(const int *ls, int nls, const struct kvp_hbm_msg *m, int fd,
	    kvp_aword_t *served, int ready, int stop)
{
	struct pollfd pf[40];
	int i;

	CK(nls < 40);
	CK(write(ready, "r", 1) == 1);
	for (i = 0; i < nls; i++) {
		pf[i].fd = ls[i];
		pf[i].events = POLLIN;
	}
	pf[nls].fd = stop;
	pf[nls].events = POLLIN;
	for (;;) {
		CK(poll(pf, (nfds_t)nls + 1, -1) > 0 || errno == EINTR);
		if (pf[nls].revents)
			_exit(0); /* the test is done with us */
		for (i = 0; i < nls; i++) {
			char cbuf[CMSG_SPACE(sizeof(int))];
			struct iovec iov = { (void *)(uintptr_t)m, sizeof(*m) };
			struct msghdr mh;
			struct cmsghdr *cm;
			int s;

			if (!(pf[i].revents & POLLIN))
				continue;
			s = accept4(ls[i], NULL, NULL, SOCK_CLOEXEC);
			if (s < 0)
				continue;
			/* full (no ordering needed): the test reads it
			 * after our exit (waitpid) */
			kvp_fetch_add(served, 1);
			memset(&mh, 0, sizeof(mh));
			memset(cbuf, 0, sizeof(cbuf));
			mh.msg_iov = &iov;
			mh.msg_iovlen = 1;
			mh.msg_control = cbuf;
			mh.msg_controllen = sizeof(cbuf);
			cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(cm), &fd, sizeof(int));
			(void)sendmsg(s, &mh, MSG_NOSIGNAL);
			close(s);
		}
	}
}

/* Become another user (nobody) where we can (root); the squatter is a
 * process of the test otherwise. */
static void
become_nobody(void)
{
	if (geteuid() != 0)
		return;
	CK(setgroups(0, NULL) == 0);
	CK(setresgid(65534, 65534, 65534) == 0);
	CK(setresuid(65534, 65534, 65534) == 0);
}

enum {
	ROGUE_GENS = 16
};

/* A squatter started before the agent holds every name a helper of the
 * next pool would have served under with a guessable name (generations
 * 1..16: "kvpool.<pool>.gpu0.<gen>"): the HBM tier still comes up, device
 * gets hit HBM with the right bytes, and no worker ever connects to the
 * squatter. */
static void
case_hbm_squatted(const char *pool)
{
	enum {
		N = 8,
		SZ = 256 << 10
	};
	struct kvp_seg s;
	struct kvp_client *c;

	fake_setup(NULL);
	c = child_open(pool, &s);
	hbm_fill(c, &s, N, SZ, 101, N);
	CK(hbm_read(c, N, SZ, 101) == N);
	kvp_close(c);
	kvp__seg_unmap(&s);
}

static void
test_hbm_squatter(void **state)
{
	kvp_aword_t *served;
	char pool[64];
	int ready[2], stop[2], st;
	pid_t p;
	char r;

	(void)state;
	if (!fake_path()) {
		print_message("  SKIP: no CUDA ($KVPT_FAKECUDA unset)\n");
		skip();
	}
	assert_int_equal(kvpt_pool_next(pool, sizeof(pool)), 0);
	served = mmap(NULL, sizeof(*served), PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(served != MAP_FAILED);
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(stop), 0);
	p = fork();
	if (p == 0) {
		struct kvp_hbm_msg m;
		int ls[ROGUE_GENS], i, fd = open("/dev/null", O_RDONLY);

		close(ready[0]);
		close(stop[1]);
		become_nobody();
		CK(fd >= 0);
		memset(&m, 0, sizeof(m));
		m.hm_magic = KVP_HBM_MSG_MAGIC;
		m.hm_bytes = 32 << 20;
		for (i = 0; i < ROGUE_GENS; i++) {
			struct sockaddr_un sa;
			int n;

			memset(&sa, 0, sizeof(sa));
			sa.sun_family = AF_UNIX;
			n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1,
				     "kvpool.%s.gpu0.%d", pool, i + 1);
			ls[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC,
				       0);
			CK(ls[i] >= 0);
			CK(bind(ls[i], (struct sockaddr *)&sa,
				(socklen_t)(offsetof(struct sockaddr_un,
						     sun_path) +
					    1 + (size_t)n)) == 0);
			CK(listen(ls[i], 16) == 0);
		}
		m.hm_gen = 1; /* the first helper's */
		rogue_serve(ls, ROGUE_GENS, &m, fd, served, ready[1], stop[0]);
	}
	assert_true(p > 0);
	close(ready[1]);
	close(stop[0]);
	assert_int_equal(read(ready[0], &r, 1), 1);
	close(ready[0]);
	agent_env = "";
	run_case(case_hbm_squatted, true, HBM_POOL, "32M", NULL);
	close(stop[1]);
	assert_int_equal(waitpid(p, &st, 0), p);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* relaxed: the squatter exited (waitpid orders it) */
	assert_int_equal(kvp_load_relaxed(served), 0);
	munmap(served, sizeof(*served));
}

/* The worker's side of test_hbm_impostor: fill (host gets: no import),
 * say so, wait for the impostor, then read to the device: no HBM hit
 * (the pool is refused: its server is not the helper the segment names),
 * every byte right (from DRAM). */
static int imp_to_test = -1, imp_from_test = -1;

static void
case_hbm_impostor(const char *pool)
{
	enum {
		N = 8,
		SZ = 256 << 10
	};
	struct kvp_seg s;
	struct kvp_client *c;
	char g;

	fake_setup(NULL);
	c = child_open(pool, &s);
	hbm_fill(c, &s, N, SZ, 111, N);
	CK(write(imp_to_test, "f", 1) == 1);
	CK(read(imp_from_test, &g, 1) == 1);
	CK(hbm_read(c, N, SZ, 111) == 0);
	kvp_close(c);
	kvp__seg_unmap(&s);
}

/* The impostor: a pool of its own (zeros, the size of the real one),
 * served under the helper's exact name once the helper is gone (the name
 * is free: bind until it is, with a deadline). */
static void
impostor_run(const char *pool, uint64_t gen, uint64_t nonce, uint64_t bytes,
	     kvp_aword_t *served, int ready, int stop)
{
	struct kvp_cu_pool_props props;
	struct kvp_hbm_msg m;
	struct sockaddr_un sa;
	struct kvp_cuda *cu;
	void *mp = NULL, *base = NULL, *stream = NULL;
	uint64_t t_end = kvp_now_ns(CLOCK_MONOTONIC) + 5000000000ull;
	socklen_t sl = kvp_hbm_addr(&sa, pool, 0, gen, nonce);
	int fd = -1, ls;

	fake_setup(NULL);
	cu = kvp_cuda();
	CK(!cu->cu_status && cu->MemPoolCreate);
	CK(cu->StreamCreateWithFlags(&stream, KVP_CU_STREAM_NON_BLOCKING) ==
	   KVP_CU_OK);
	memset(&props, 0, sizeof(props));
	props.pp_alloc_type = KVP_CU_ALLOC_PINNED;
	props.pp_handle_types = KVP_CU_HANDLE_POSIX_FD;
	props.pp_location.ml_type = KVP_CU_MEMLOC_DEVICE;
	CK(cu->MemPoolCreate(&mp, &props) == KVP_CU_OK);
	CK(cu->MallocFromPoolAsync(&base, bytes, mp, stream) == KVP_CU_OK);
	CK(cu->StreamSynchronize(stream) == KVP_CU_OK);
	memset(&m, 0, sizeof(m));
	m.hm_magic = KVP_HBM_MSG_MAGIC;
	m.hm_gen = gen;
	m.hm_bytes = bytes;
	m.hm_nonce = nonce;
	CK(cu->MemPoolExportToShareableHandle(&fd, mp, KVP_CU_HANDLE_POSIX_FD,
					      0) == KVP_CU_OK);
	CK(cu->MemPoolExportPointer(&m.hm_export, base) == KVP_CU_OK);
	ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	CK(ls >= 0 && sl);
	/* the dead helper's socket goes with its exit: a deadline wait */
	while (bind(ls, (struct sockaddr *)&sa, sl) < 0) {
		CK(errno == EADDRINUSE && kvp_now_ns(CLOCK_MONOTONIC) < t_end);
		sched_yield();
	}
	CK(listen(ls, 16) == 0);
	rogue_serve(&ls, 1, &m, fd, served, ready, stop);
}

/* A process that serves the helper's exact name (the same user: only the
 * peer check tells it apart) while the segment still says UP: the agent
 * stopped, its helper killed, the name free.  A worker that has not
 * imported the pool yet connects, and refuses what it is given: no HBM
 * hit, right bytes. */
static void
test_hbm_impostor(void **state)
{
	struct kvpt_agent a;
	struct kvp_client *c;
	struct kvp_seg s;
	kvp_aword_t *served;
	int to_test[2], from_test[2], ready[2], stop[2], st, ist;
	uint64_t gw, nonce, bytes;
	pid_t w, imp, hp;
	char r;

	(void)state;
	if (!fake_path()) {
		print_message("  SKIP: no CUDA ($KVPT_FAKECUDA unset)\n");
		skip();
	}
	served = mmap(NULL, sizeof(*served), PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(served != MAP_FAILED);
	agent_env = "";
	agent_env_apply(true);
	assert_int_equal(kvpt_pool_up(&a, &s, &c, HBM_POOL, "32M", NULL), 0);
	agent_env_apply(false);
	agent_env = NULL;
	assert_int_equal(pipe(to_test), 0);
	assert_int_equal(pipe(from_test), 0);
	imp_to_test = to_test[1];
	imp_from_test = from_test[0];
	w = fork();
	if (w == 0) {
		close(to_test[0]);
		close(from_test[1]);
		case_hbm_impostor(a.pool);
		_exit(0);
	}
	assert_true(w > 0);
	close(to_test[1]);
	close(from_test[0]);
	assert_int_equal(read(to_test[0], &r, 1), 1); /* filled, copied */
	/* acquire: the agent's UP release (the fields before it) */
	gw = kvp_load_acquire(&s.hdr->h_gpu[0].gs_state);
	assert_int_equal(KVP_GS_STATE(gw), KVP_GPU_UP);
	/* relaxed: written before UP */
	nonce = kvp_load_relaxed(&s.hdr->h_gpu[0].gs_nonce);
	bytes = kvp_load_relaxed(&s.hdr->h_gpu[0].gs_bytes);
	hp = (pid_t)kvp_load_relaxed(&s.hdr->h_gpu[0].gs_pid);
	assert_true(hp > 0);
	/* the agent cannot see its helper go: the segment still says UP
	 * (and the helper's pid stays a zombie's, not reused) */
	assert_int_equal(kvpt_agent_pause(&a), 0);
	assert_int_equal(kill(hp, SIGKILL), 0);
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(stop), 0);
	imp = fork();
	if (imp == 0) {
		close(ready[0]);
		close(stop[1]);
		impostor_run(a.pool, KVP_GS_GEN(gw), nonce, bytes, served,
			     ready[1], stop[0]);
		_exit(1);
	}
	assert_true(imp > 0);
	close(ready[1]);
	close(stop[0]);
	assert_int_equal(read(ready[0], &r, 1), 1);
	close(ready[0]);
	assert_int_equal(write(from_test[1], "g", 1), 1);
	/* the worker's verdict; the impostor and the agent are ended and
	 * resumed before any assertion (none outlives a failure) */
	assert_int_equal(waitpid(w, &st, 0), w);
	close(stop[1]);
	assert_int_equal(waitpid(imp, &ist, 0), imp);
	assert_int_equal(kill(a.pid, SIGCONT), 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_true(WIFEXITED(ist) && WEXITSTATUS(ist) == 0);
	/* relaxed: the impostor exited; the worker did connect (the name
	 * is the helper's) and took nothing */
	assert_true(kvp_load_relaxed(served) >= 1);
	close(to_test[0]);
	close(from_test[1]);
	munmap(served, sizeof(*served));
	assert_int_equal(kvpt_pool_down(&a, &s, c), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_runtime),
		cmocka_unit_test(test_real_runtime),
		cmocka_unit_test(test_fake_nodevice),
		cmocka_unit_test(test_fake_olddriver),
		cmocka_unit_test(test_badinput),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_parts),
		cmocka_unit_test(test_held),
		cmocka_unit_test(test_bounce),
		cmocka_unit_test(test_regfail),
		cmocka_unit_test(test_copyfail),
		cmocka_unit_test(test_ssd),
		cmocka_unit_test(test_close_inflight),
		cmocka_unit_test(test_worker_killed),
		cmocka_unit_test(test_hbm_nodevice),
		cmocka_unit_test(test_hbm_hits),
		cmocka_unit_test(test_hbm_helper_killed),
		cmocka_unit_test(test_hbm_pressure),
		cmocka_unit_test(test_hbm_squatter),
		cmocka_unit_test(test_hbm_impostor),
	};

	return cmocka_run_group_tests(tests, kvpt_ssd_dir_setup,
				      kvpt_ssd_dir_teardown);
}
