/* SPDX-License-Identifier: MIT */
/*
 * gpu_util.h - what the GPU endpoints' device programs share: the
 * functional checks (tests/gpu/test_gpu.c) and the figures
 * (stress/bench_gpu.c).  Reporting ("PASS name", "FAIL name: why"), the
 * CUDA runtime, self-verifying values, batches of keys with their device
 * copies, children that are this program again, the HBM slot's state.
 *
 * The runtime is loaded at run time, as the client loads it
 * (tiers/kvp_cuda.h: $KVPOOL_CUDART, or the usual names): the programs
 * build without the CUDA toolkit, run against the real libcudart on a
 * machine with a GPU and against the emulator (tests/gpu/fakecudart.c)
 * anywhere else.  The calls they make beyond the client's slice are
 * looked up in that same library: cudaMalloc, cudaFree, cudaMemset,
 * cudaMemcpy, cudaDeviceSynchronize, and cudaLaunchHostFunc where it has
 * one (the emulator does not).
 *
 * Header only, every function static inline, like stress/bench_util.h:
 * the client is inline too (kvpool.h), and its state (the device
 * registry of the segment's mappings) belongs to one compilation unit,
 * so a program's client calls all go through its own file.  Include
 * once per program.
 */
#ifndef KVP_GPU_UTIL_H
#define KVP_GPU_UTIL_H

#include <dlfcn.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "stress/bench_util.h"

#define NS "gpu"
#define DEV 0

/* cudaMemcpyKind beyond kvp_cuda.h's (tests/gpu/test_cuda_abi.c checks it) */
#define GPU_MEMCPY_D2D KVP_CU_MEMCPY_D2D

/* The calls beyond the client's slice (struct kvp_cuda), from the same
 * library; LaunchHostFunc NULL where it has none. */
struct gpu_rt {
	struct kvp_cuda *cu;
	unsigned int (*Malloc)(void **p, size_t n);
	unsigned int (*Free)(void *p);
	unsigned int (*Memset)(void *p, int v, size_t n);
	unsigned int (*Memcpy)(void *dst, const void *src, size_t n,
			       unsigned int kind);
	unsigned int (*DeviceSynchronize)(void);
	unsigned int (*LaunchHostFunc)(void *stream, void (*fn)(void *),
				       void *arg);
};

/* A batch of keys from one family (tag), each with its size. */
struct batch {
	size_t n;
	struct kvp_op *ops;
	unsigned char (*keys)[KVPB_KLEN];
	uint64_t *size, *off, *seed;
	uint64_t bytes;
};

#define HBM_TAG 0x47505560ull
/* how long the helper may take to copy what was hit (the emulator's is
 * slow: it registers the DRAM tier at a crawl) */
#define HBM_COPY_MS (emulated ? 30000u : 10000u)

struct hbm_cond {
	const struct kvp_seg *s;
	uint64_t gen;    /* UP at this generation or a later one */
	uint64_t copies; /* and gs_copies at least this */
};

/* the run: the pool (argv), emulated runtime (--emulated), checks failed,
 * the first reason of the check in progress, this process's stream */
static const char *pool;
static bool emulated;
static int failed;
static char why[1024];
static void *stream;
static struct gpu_rt rt; /* the runtime, loaded by the first cuda_up */

/* ---- reporting ---- */

/* Keep the first reason a check failed; false, for "return failf(...)". */
static inline bool __attribute__((format(printf, 1, 2)))
failf(const char *fmt, ...)
{
	va_list ap;

	if (!why[0]) {
		va_start(ap, fmt);
		vsnprintf(why, sizeof(why), fmt, ap);
		va_end(ap);
	}
	return false;
}

static inline void
report(const char *name, bool ok)
{
	if (ok && !why[0]) {
		printf("PASS %s\n", name);
	} else {
		printf("FAIL %s: %s\n", name, why[0] ? why : "(no reason)");
		failed++;
	}
	why[0] = '\0';
	fflush(stdout);
}

static inline bool
cu(unsigned int e, const char *what)
{
	if (e == KVP_CU_OK)
		return true;
	return failf("%s: %s", what,
		     rt.cu && rt.cu->GetErrorString ? rt.cu->GetErrorString(e) :
						      "no runtime");
}

static inline void
print_info(struct kvp_client *c, const char *when)
{
	struct kvp_dev_info in;
	int rc;

	memset(&in, 0, sizeof(in));
	rc = kvp_dev_info(c, &in, sizeof(in));
	if (rc) {
		printf("  dev_info (%s): %s\n", when, kvp_strerror(rc));
		return;
	}
	printf("  dev_info (%s): status %d devices %d runtime %d driver %d "
	       "batch_copy %d reg %llu/%llu MiB (failed chunks %d) h2d %llu "
	       "keys %llu MiB, d2h %llu keys %llu MiB, bounce %llu MiB\n",
	       when, in.status, in.devices, in.runtime_version,
	       in.driver_version, in.batch_copy,
	       (unsigned long long)(in.reg_bytes >> 20),
	       (unsigned long long)(in.reg_total_bytes >> 20), in.reg_failed,
	       (unsigned long long)in.h2d_keys,
	       (unsigned long long)(in.h2d_bytes >> 20),
	       (unsigned long long)in.d2h_keys,
	       (unsigned long long)(in.d2h_bytes >> 20),
	       (unsigned long long)(in.bounce_bytes >> 20));
}

/* ---- values: every 8-byte word says (key seed, word index) ---- */

static inline uint64_t
pat_word(uint64_t seed, uint64_t i)
{
	return seed ^ (i * 0x9e3779b97f4a7c15ull);
}

static inline void
pat_fill(unsigned char *p, uint64_t len, uint64_t seed)
{
	uint64_t i, w;

	for (i = 0; i + 8 <= len; i += 8) {
		w = pat_word(seed, i >> 3);
		memcpy(p + i, &w, 8);
	}
	if (i < len) {
		w = pat_word(seed, i >> 3);
		memcpy(p + i, &w, len - i);
	}
}

static inline bool
pat_check(const unsigned char *p, uint64_t len, uint64_t seed, const char *what)
{
	uint64_t i, w;

	for (i = 0; i + 8 <= len; i += 8) {
		w = pat_word(seed, i >> 3);
		if (memcmp(p + i, &w, 8))
			return failf("%s: bytes differ at offset %llu of %llu",
				     what, (unsigned long long)i,
				     (unsigned long long)len);
	}
	if (i < len) {
		w = pat_word(seed, i >> 3);
		if (memcmp(p + i, &w, len - i))
			return failf("%s: tail bytes differ at offset %llu",
				     what, (unsigned long long)i);
	}
	return true;
}

static inline uint64_t
seed_of(uint64_t tag, uint64_t i)
{
	return kvpb_mix(tag * 1000003u + i) | 1;
}

/* ---- the pool ---- */

static inline struct kvp_client *
open_client(void)
{
	struct kvp_client *c = NULL;
	int rc = kvp_open(pool, NS, &c);

	if (rc) {
		failf("kvp_open(%s): %s", pool, kvp_strerror(rc));
		return NULL;
	}
	return c;
}

/* Has the agent populated its whole DRAM tier? */
static inline bool
populated(void *arg)
{
	struct kvp_stat st;

	memset(&st, 0, sizeof(st));
	return kvp_stat((struct kvp_client *)arg, &st, sizeof(st)) ||
	       st.dram_bytes >= st.dram_total_bytes;
}

/* The DRAM tier populated (a deadline of 2 minutes: then measure as is). */
static inline void
wait_populated(struct kvp_client *c)
{
	(void)kvpt_wait_until(populated, c, 120000);
}

static inline uint64_t
dram_total(struct kvp_client *c)
{
	struct kvp_stat st;

	memset(&st, 0, sizeof(st));
	if (kvp_stat(c, &st, sizeof(st)))
		return 0;
	return st.dram_total_bytes;
}

static inline void
batch_free(struct batch *b)
{
	free(b->ops);
	free(b->keys);
	free(b->size);
	free(b->off);
	free(b->seed);
	memset(b, 0, sizeof(*b));
}

/* groups: ng pairs (count, size); keys tag/0.., laid out back to back. */
static inline bool
batch_make(struct batch *b, uint64_t tag, const uint64_t *groups, size_t ng)
{
	size_t g, k, i = 0;

	memset(b, 0, sizeof(*b));
	for (g = 0; g < ng; g++)
		b->n += groups[2 * g];
	b->ops = calloc(b->n, sizeof(*b->ops));
	b->keys = calloc(b->n, KVPB_KLEN);
	b->size = calloc(b->n, sizeof(uint64_t));
	b->off = calloc(b->n, sizeof(uint64_t));
	b->seed = calloc(b->n, sizeof(uint64_t));
	if (!b->ops || !b->keys || !b->size || !b->off || !b->seed) {
		batch_free(b);
		return failf("out of memory");
	}
	for (g = 0; g < ng; g++)
		for (k = 0; k < groups[2 * g]; k++, i++) {
			kvpb_key(b->keys[i], tag, i);
			b->size[i] = groups[2 * g + 1];
			b->off[i] = b->bytes;
			b->seed[i] = seed_of(tag, i);
			b->bytes += b->size[i];
		}
	return true;
}

/* Point ops[from..to) at base + their offsets (len: their sizes). */
static inline void
batch_ops(struct batch *b, unsigned char *base, size_t from, size_t to)
{
	size_t i;

	for (i = from; i < to; i++) {
		b->ops[i].key = b->keys[i];
		b->ops[i].klen = KVPB_KLEN;
		b->ops[i].buf = base + b->off[i];
		b->ops[i].off = 0;
		b->ops[i].len = b->size[i];
		b->ops[i].status = 1;
	}
}

static inline void
batch_fill(struct batch *b, unsigned char *host)
{
	size_t i;

	for (i = 0; i < b->n; i++)
		pat_fill(host + b->off[i], b->size[i], b->seed[i]);
}

static inline bool
batch_verify(struct batch *b, const unsigned char *host, const char *what)
{
	char w[128];
	size_t i;

	for (i = 0; i < b->n; i++) {
		snprintf(w, sizeof(w), "%s key %zu (%llu bytes)", what, i,
			 (unsigned long long)b->size[i]);
		if (!pat_check(host + b->off[i], b->size[i], b->seed[i], w))
			return false;
	}
	return true;
}

static inline bool
batch_statuses(struct batch *b, size_t from, size_t to, bool lens,
	       const char *what)
{
	size_t i;

	for (i = from; i < to; i++) {
		if (b->ops[i].status)
			return failf("%s: key %zu status %s", what, i,
				     kvp_strerror(b->ops[i].status));
		if (lens && b->ops[i].len != b->size[i])
			return failf("%s: key %zu len %llu, want %llu", what, i,
				     (unsigned long long)b->ops[i].len,
				     (unsigned long long)b->size[i]);
	}
	return true;
}

/* Delete every key of b (misses ignored). */
static inline void
batch_delete(struct kvp_client *c, struct batch *b)
{
	size_t i;

	for (i = 0; i < b->n; i++)
		kvp_delete(c, b->keys[i], KVPB_KLEN);
}

/* kvp_batch_put_dev of b from dev (whole batch): every key stored. */
static inline bool
put_dev_batch(struct kvp_client *c, struct batch *b, unsigned char *dev,
	      const char *what)
{
	ssize_t got;

	batch_ops(b, dev, 0, b->n);
	got = kvp_batch_put_dev(c, DEV, stream, b->ops, b->n);
	if (got != (ssize_t)b->n) {
		batch_statuses(b, 0, b->n, false, what);
		return failf("%s: kvp_batch_put_dev %zd of %zu", what, got,
			     b->n);
	}
	return batch_statuses(b, 0, b->n, false, what);
}

/* kvp_batch_get_dev of b into dev, then kvp_dev_wait: every key whole. */
static inline bool
get_dev_batch(struct kvp_client *c, struct batch *b, unsigned char *dev,
	      void *strm, const char *what)
{
	struct kvp_dev_copy *x = NULL;
	ssize_t got, done;

	batch_ops(b, dev, 0, b->n);
	got = kvp_batch_get_dev(c, DEV, strm, b->ops, b->n, &x);
	if (got < 0)
		return failf("%s: kvp_batch_get_dev: %s", what,
			     kvp_strerror((int)got));
	if (!x)
		return failf("%s: kvp_batch_get_dev returned %zd and no copy",
			     what, got);
	done = kvp_dev_wait(c, x);
	if (got != (ssize_t)b->n || done != (ssize_t)b->n) {
		batch_statuses(b, 0, b->n, true, what);
		return failf("%s: %zd queued, %zd done of %zu", what, got, done,
			     b->n);
	}
	return batch_statuses(b, 0, b->n, true, what);
}

/* Put b from the host (kvp_batch_put, -EBUSY retried): every key stored. */
static inline bool
put_host_batch(struct kvp_client *c, struct batch *b, unsigned char *host,
	       const char *what)
{
	size_t i;
	int rc;

	for (i = 0; i < b->n; i++) {
		double t0 = kvpb_now_s();

		while ((rc = kvp_put(c, b->keys[i], KVPB_KLEN, host + b->off[i],
				     b->size[i])) == -EBUSY &&
		       kvpb_now_s() - t0 < 30)
			;
		if (rc)
			return failf("%s: kvp_put key %zu: %s", what, i,
				     kvp_strerror(rc));
	}
	return true;
}

/* ---- the runtime ---- */

/* The runtime's calls beyond the client's slice, from its library. */
static inline bool
rt_load(void)
{
	char d[320];

	if (rt.Malloc)
		return true;
	rt.cu = kvp_cuda();
	if (rt.cu->cu_status)
		return failf("%s", kvp_cuda_describe(rt.cu, d, sizeof(d)));
#define GPU_SYM(f, name) (*(void **)(&rt.f) = dlsym(rt.cu->cu_lib, name))
	if (!GPU_SYM(Malloc, "cudaMalloc") || !GPU_SYM(Free, "cudaFree") ||
	    !GPU_SYM(Memset, "cudaMemset") || !GPU_SYM(Memcpy, "cudaMemcpy") ||
	    !GPU_SYM(DeviceSynchronize, "cudaDeviceSynchronize"))
		return failf("%s lacks cudaMalloc, cudaFree, cudaMemset, "
			     "cudaMemcpy or cudaDeviceSynchronize",
			     rt.cu->cu_path);
	/* optional (the emulator has none) */
	GPU_SYM(LaunchHostFunc, "cudaLaunchHostFunc");
#undef GPU_SYM
	return true;
}

/* The runtime loaded, device DEV current, our stream made: true, or false
 * with the reason. */
static inline bool
cuda_up(void)
{
	if (!rt_load())
		return false;
	if (!cu(rt.cu->SetDevice(DEV), "cudaSetDevice"))
		return false;
	return cu(rt.cu->StreamCreateWithFlags(&stream,
					       KVP_CU_STREAM_NON_BLOCKING),
		  "cudaStreamCreateWithFlags");
}

/* Device memory (cudaMalloc), NULL with the reason. */
static inline unsigned char *
dmalloc(uint64_t n)
{
	void *p = NULL;

	if (!rt_load() || !cu(rt.Malloc(&p, n ? n : 1), "cudaMalloc"))
		return NULL;
	return (unsigned char *)p;
}

static inline void
dfree(void *d)
{
	if (d && rt.Free)
		rt.Free(d);
}

/* Device memory zeroed, or the reason. */
static inline bool
dzero(void *d, uint64_t n)
{
	return cu(rt.Memset(d, 0, n), "cudaMemset");
}

/* Host to device, device to host (cudaMemcpy): true, or the reason. */
static inline bool
h2d(void *d, const void *h, uint64_t n)
{
	return cu(rt.Memcpy(d, h, n, KVP_CU_MEMCPY_H2D), "cudaMemcpy H2D");
}

static inline bool
d2h(void *h, const void *d, uint64_t n)
{
	return cu(rt.Memcpy(h, d, n, KVP_CU_MEMCPY_D2H), "cudaMemcpy D2H");
}

/* A host function that never returns: the stream it is queued on runs
 * nothing after it (until the process dies). */
static inline void
block_stream(void *arg)
{
	(void)arg;
	for (;;)
		pause();
}

/* ---- children: this program again (CUDA does not survive fork) ---- */

/* fork + exec of ourselves with argv (argv[0] ignored); *out_fd: the
 * child's stdout, when not NULL. */
static inline pid_t
spawn_self(const char *const *argv, int *out_fd)
{
	int p[2] = { -1, -1 };
	pid_t pid;

	if (out_fd && pipe(p))
		return -1;
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		/* never outlive us (a child-hold sleeps until killed) */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (out_fd) {
			dup2(p[1], 1);
			close(p[0]);
			close(p[1]);
		}
		execv("/proc/self/exe", (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	if (out_fd) {
		close(p[1]);
		*out_fd = p[0];
	}
	return pid;
}

struct child_wait {
	pid_t pid;
	int st;
	pid_t r;
};

static inline bool
child_done(void *arg)
{
	struct child_wait *w = arg;

	w->r = waitpid(w->pid, &w->st, WNOHANG);
	return w->r != 0;
}

/* The child's exit code (128 + signal), -1 (no such child), or -2 (killed
 * at the deadline). */
static inline int
wait_child(pid_t pid, unsigned timeout_ms)
{
	struct child_wait w = { pid, 0, 0 };

	if (kvpt_wait_until(child_done, &w, timeout_ms) < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &w.st, 0);
		return -2;
	}
	if (w.r != pid)
		return -1;
	return WIFEXITED(w.st) ? WEXITSTATUS(w.st) : 128 + WTERMSIG(w.st);
}

/* ---- the HBM tier ---- */

static inline uint64_t
hbm_word(const struct kvp_seg *s)
{
	/* acquire: the agent's release */
	return kvp_load_acquire(&s->hdr->h_gpu[0].gs_state);
}

static inline uint64_t
hbm_copies(const struct kvp_seg *s)
{
	/* relaxed: a statistic */
	return kvp_load_relaxed(&s->hdr->h_gpu[0].gs_copies);
}

static inline bool
hbm_is_up(void *arg)
{
	const struct hbm_cond *hc = arg;
	uint64_t w = hbm_word(hc->s);

	return KVP_GS_STATE(w) == KVP_GPU_UP && KVP_GS_GEN(w) >= hc->gen &&
	       hbm_copies(hc->s) >= hc->copies;
}

static inline bool
hbm_not_up(void *arg)
{
	return KVP_GS_STATE(hbm_word(((const struct hbm_cond *)arg)->s)) !=
	       KVP_GPU_UP;
}

static inline const char *
hbm_state_name(uint64_t w)
{
	switch (KVP_GS_STATE(w)) {
	case KVP_GPU_OFF:
		return "off";
	case KVP_GPU_STARTING:
		return "starting";
	case KVP_GPU_UP:
		return "up";
	case KVP_GPU_DOWN:
		return "down";
	}
	return "?";
}

/* Read every key of b once from the host (a hit: the agent promotes it). */
static inline bool
hbm_hit_once(struct kvp_client *c, struct batch *b, unsigned char *h)
{
	size_t i;

	for (i = 0; i < b->n; i++) {
		ssize_t got = kvp_get(c, b->keys[i], KVPB_KLEN, h + b->off[i],
				      b->size[i]);

		if (got != (ssize_t)b->size[i])
			return failf("kvp_get key %zu: %zd (%s)", i, got,
				     got < 0 ? kvp_strerror((int)got) :
					       "short");
	}
	return true;
}

/* Wait (timeout_ms at most) until the slot is UP at gen or later with
 * gs_copies >= copies; false (a reason kept) if not. */
static inline bool
hbm_wait_copies(const struct kvp_seg *s, uint64_t gen, uint64_t copies,
		unsigned timeout_ms, const char *what)
{
	struct hbm_cond hc = { s, gen, copies };
	long long ns = kvpt_wait_until(hbm_is_up, &hc, timeout_ms);
	uint64_t w = hbm_word(s);

	if (ns < 0)
		return failf("%s: after %u ms the slot is %s at generation "
			     "%llu with %llu copies (want up at %llu or later, "
			     "%llu copies)",
			     what, timeout_ms, hbm_state_name(w),
			     (unsigned long long)KVP_GS_GEN(w),
			     (unsigned long long)hbm_copies(s),
			     (unsigned long long)gen,
			     (unsigned long long)copies);
	printf("  %s: %llu copies in the pool after %.1f ms\n", what,
	       (unsigned long long)hbm_copies(s), (double)ns / 1e6);
	return true;
}

#endif /* KVP_GPU_UTIL_H */
