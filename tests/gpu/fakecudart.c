/* fakecudart.c - host-memory emulation of a subset of the CUDA runtime API,
 * built as a stand-in libcudart.so.13 for tests on machines without a GPU.
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -fPIC -shared \
 *      -I/usr/local/cuda/include -Wl,-soname,libcudart.so.13 \
 *      -o /tmp/fakecuda/libcudart.so.13 tests/gpu/fakecudart.c -lpthread
 *
 * Environment (read once):
 *   FAKECUDA_DEVICES=N           number of devices (default 1; 0 -> cudaErrorNoDevice)
 *   FAKECUDA_DRIVER=old|none     old: calls fail with cudaErrorInsufficientDriver,
 *                                cudaDriverGetVersion reports 12000;
 *                                none: same errors, cudaDriverGetVersion reports 0
 *   FAKECUDA_REG_US_PER_MIB=U    cudaHostRegister sleeps U us per MiB (default 0)
 *   FAKECUDA_REG_GATE=PATH       cudaHostRegister waits (1 ms polls) while the
 *                                file PATH exists: a test decides when a
 *                                registration may finish
 *   FAKECUDA_REG_FAIL_AFTER=N    the (N+1)th and later cudaHostRegister calls fail
 *                                with cudaErrorMemoryAllocation
 *   FAKECUDA_COPY_DELAY_US=U     every copy queued on a created stream sleeps U us
 *                                before copying (default 0)
 *   FAKECUDA_FAIL_COPY_AFTER=N   the (N+1)th and later executed copies do not copy and
 *                                record cudaErrorIllegalAddress on their stream
 *
 * Design: one global mutex protects all state.  Device memory is anonymous
 * mmap'd host memory; all device allocations, pinned host allocations and host
 * registrations live in one sorted array of non-overlapping ranges.  Every
 * created stream owns a worker thread that executes its queue in FIFO order.
 * The NULL / legacy / per-thread streams execute synchronously in the caller.
 * Stream-ordered memory pools are memfds, shareable between processes over
 * POSIX fds exactly like real CUDA IPC pools (see "memory pools" below).
 */
#include <cuda_runtime_api.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/gpu/fakecuda.h"

/* ------------------------------------------------------------------ config */

enum drv_mode {
	DRV_OK,
	DRV_OLD,
	DRV_NONE
};

static struct {
	int ndev;
	enum drv_mode drv;
	uint64_t reg_us_per_mib;
	char reg_gate[512];
	long long reg_fail_after; /* -1: never */
	uint64_t copy_delay_us;
	long long fail_copy_after; /* -1: never */
} g_cfg;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_progress =
	PTHREAD_COND_INITIALIZER; /* any op/event completed */

static long long
env_ll(const char *name, long long dflt)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return dflt;
	char *end = NULL;
	errno = 0;
	long long x = strtoll(v, &end, 10);
	if (errno || end == v || x < 0)
		return dflt;
	return x;
}

static void atfork_prepare(void);
static void atfork_parent(void);
static void atfork_child(void);

static void
init_once(void)
{
	g_cfg.ndev = (int)env_ll("FAKECUDA_DEVICES", 1);
	if (g_cfg.ndev > 1024)
		g_cfg.ndev = 1024;
	const char *d = getenv("FAKECUDA_DRIVER");
	g_cfg.drv = DRV_OK;
	if (d && strcmp(d, "old") == 0)
		g_cfg.drv = DRV_OLD;
	else if (d && strcmp(d, "none") == 0)
		g_cfg.drv = DRV_NONE;
	g_cfg.reg_us_per_mib = (uint64_t)env_ll("FAKECUDA_REG_US_PER_MIB", 0);
	{
		const char *gate = getenv("FAKECUDA_REG_GATE");

		snprintf(g_cfg.reg_gate, sizeof(g_cfg.reg_gate), "%s",
			 gate ? gate : "");
	}
	g_cfg.reg_fail_after = env_ll("FAKECUDA_REG_FAIL_AFTER", -1);
	g_cfg.copy_delay_us = (uint64_t)env_ll("FAKECUDA_COPY_DELAY_US", 0);
	g_cfg.fail_copy_after = env_ll("FAKECUDA_FAIL_COPY_AFTER", -1);
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* ------------------------------------------------------------ last error */

static _Thread_local cudaError_t t_last_err = cudaSuccess;
static _Thread_local int t_device = 0;

static cudaError_t
ret(cudaError_t e)
{
	if (e != cudaSuccess && e != cudaErrorNotReady)
		t_last_err = e;
	return e;
}

/* The "device present" rule, applied first by every non-exempt call. */
static cudaError_t
gate(void)
{
	pthread_once(&g_once, init_once);
	if (g_cfg.drv != DRV_OK)
		return cudaErrorInsufficientDriver;
	if (g_cfg.ndev <= 0)
		return cudaErrorNoDevice;
	return cudaSuccess;
}

#define GATE()                                \
	do {                                  \
		cudaError_t gate_e_ = gate(); \
		if (gate_e_ != cudaSuccess)   \
			return ret(gate_e_);  \
	} while (0)

/* ----------------------------------------------------------------- stats */

static struct fakecuda_stats g_st;
static uint64_t g_copy_exec; /* executed copies, for FAKECUDA_FAIL_COPY_AFTER */
static uint64_t
	g_reg_calls; /* cudaHostRegister calls, for FAKECUDA_REG_FAIL_AFTER */

int
fakecuda_stats(struct fakecuda_stats *out)
{
	if (!out)
		return -1;
	pthread_mutex_lock(&g_mu);
	*out = g_st;
	pthread_mutex_unlock(&g_mu);
	return 0;
}

void
fakecuda_reset_stats(void)
{
	pthread_mutex_lock(&g_mu);
	struct fakecuda_stats keep = g_st;
	memset(&g_st, 0, sizeof g_st);
	g_st.registered_bytes = keep.registered_bytes;
	g_st.registered_ranges = keep.registered_ranges;
	g_st.pinned_allocs_live = keep.pinned_allocs_live;
	g_st.pinned_bytes_live = keep.pinned_bytes_live;
	g_st.device_allocs_live = keep.device_allocs_live;
	g_st.device_bytes_live = keep.device_bytes_live;
	g_st.streams_live = keep.streams_live;
	g_st.events_live = keep.events_live;
	g_st.pools_live = keep.pools_live;
	g_st.pool_bytes_live = keep.pool_bytes_live;
	g_st.pool_allocs_live = keep.pool_allocs_live;
	g_st.pool_alloc_bytes_live = keep.pool_alloc_bytes_live;
	g_st.imports_live = keep.imports_live;
	pthread_mutex_unlock(&g_mu);
}

/* -------------------------------------------------------------- registry */

enum rkind {
	R_DEV,
	R_HOSTALLOC,
	R_HOSTREG
};

struct range {
	uintptr_t base;
	size_t size;     /* > 0 */
	size_t map_size; /* mmap length for R_DEV / R_HOSTALLOC */
	enum rkind kind;
	int dev;
	bool pending; /* R_HOSTREG being pinned: reserved, not yet pinned */
	/* R_DEV from a memory pool: a MAP_SHARED mapping of the pool's memfd
	 * at pool_off (owned allocation, or imported pointer when imported) */
	struct CUmemPoolHandle_st *pool;
	uint64_t pool_off;
	bool imported;
};

static struct range *g_r;
static size_t g_nr, g_capr;

/* index of the last range with base <= p, or -1 */
static long
rfind(uintptr_t p)
{
	long lo = 0, hi = (long)g_nr - 1, ans = -1;
	while (lo <= hi) {
		long mid = lo + (hi - lo) / 2;
		if (g_r[mid].base <= p) {
			ans = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return ans;
}

static struct range *
rcontaining(uintptr_t p)
{
	long i = rfind(p);
	if (i < 0 || p - g_r[i].base >= g_r[i].size)
		return NULL;
	return &g_r[i];
}

/* first range overlapping [p, p+n), n > 0; NULL if none */
static struct range *
roverlap(uintptr_t p, size_t n, bool dev_only)
{
	long i = rfind(p);
	if (i < 0)
		i = 0;
	uintptr_t end = p + n;
	for (size_t j = (size_t)i; j < g_nr && g_r[j].base < end; j++) {
		if (g_r[j].base + g_r[j].size > p &&
		    (!dev_only || g_r[j].kind == R_DEV))
			return &g_r[j];
	}
	return NULL;
}

static bool
rinsert(struct range r)
{
	if (g_nr == g_capr) {
		size_t nc = g_capr ? g_capr * 2 : 64;
		struct range *nr = realloc(g_r, nc * sizeof *nr);
		if (!nr)
			return false;
		g_r = nr;
		g_capr = nc;
	}
	long i = rfind(r.base) + 1;
	memmove(&g_r[i + 1], &g_r[i], (g_nr - (size_t)i) * sizeof *g_r);
	g_r[i] = r;
	g_nr++;
	return true;
}

static void
rremove(struct range *r)
{
	size_t i = (size_t)(r - g_r);
	memmove(&g_r[i], &g_r[i + 1], (g_nr - i - 1) * sizeof *g_r);
	g_nr--;
}

enum cls {
	C_HOST,
	C_DEV,
	C_BAD
};

/* C_DEV: [p,p+n) lies inside one device allocation; C_HOST: touches no device
 * allocation; C_BAD otherwise. Caller holds g_mu. */
static enum cls
classify(const void *ptr, size_t n)
{
	uintptr_t p = (uintptr_t)ptr;
	if (n == 0)
		n = 1;
	if (n > UINTPTR_MAX - p)
		return C_BAD;
	struct range *r = rcontaining(p);
	if (r && r->kind == R_DEV)
		return (p - r->base) + n <= r->size ? C_DEV : C_BAD;
	return roverlap(p, n, true) ? C_BAD : C_HOST;
}

static bool
host_pinned(const void *ptr, size_t n)
{
	uintptr_t p = (uintptr_t)ptr;
	struct range *r = rcontaining(p);
	if (!r || r->kind == R_DEV || r->pending)
		return false;
	return (p - r->base) + (n ? n : 1) <= r->size;
}

/* ------------------------------------------------------- streams/events */

struct CUevent_st {
	struct CUevent_st *next;
	unsigned flags;
	uint64_t rec_seq;  /* number of records issued */
	uint64_t done_seq; /* highest record executed */
	struct timespec t;
	cudaError_t err;
	int refs;  /* queued ops referring to it */
	bool dead; /* destroyed by the user, freed when refs == 0 */
};

enum op_type {
	OP_COPY,
	OP_MEMSET,
	OP_RECORD,
	OP_WAIT
};

struct op {
	struct op *next;
	enum op_type type;
	void *dst;
	const void *src;
	size_t n;
	enum cudaMemcpyKind kind; /* resolved: never cudaMemcpyDefault */
	int val;
	void *bounce;        /* owned snapshot of the source (DuringApiCall) */
	bool pinned_at_call; /* host side pinned-ness when src was snapshotted */
	struct CUevent_st *ev;
	uint64_t seq;
	/* run by a stream worker: OP_RECORD retires its own pending count in
	 * the same critical section that completes the event, so a stream is
	 * idle (cudaStreamQuery) as soon as an event recorded last is done */
	bool from_worker, retired;
};

struct CUstream_st {
	struct CUstream_st *next;
	pthread_t thr;
	pthread_cond_t cv; /* work available / shutdown */
	struct op *head, *tail;
	uint64_t pending; /* queued + executing */
	cudaError_t err;  /* first uncleared async error */
	bool shutdown;
	bool is_null;
	unsigned flags;
	int dev;
};

static struct CUstream_st g_null = { .is_null = true };
static struct CUstream_st *g_streams;
static struct CUevent_st *g_events;

static void
atfork_prepare(void)
{
	pthread_mutex_lock(&g_mu);
}
static void
atfork_parent(void)
{
	pthread_mutex_unlock(&g_mu);
}
static void
atfork_child(void)
{
	/* Worker threads do not survive fork: forget inherited streams (leaked)
     * and complete every event so nothing in the child waits forever. */
	g_streams = NULL;
	g_st.streams_live = 0;
	for (struct CUevent_st *e = g_events; e; e = e->next)
		e->done_seq = e->rec_seq;
	pthread_cond_init(&g_progress, NULL);
	pthread_mutex_unlock(&g_mu);
}

static void
sleep_us(uint64_t us)
{
	if (!us)
		return;
	struct timespec ts = { (time_t)(us / 1000000u),
			       (long)(us % 1000000u) * 1000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* caller holds g_mu */
static void
ev_unref(struct CUevent_st *e)
{
	if (--e->refs == 0 && e->dead)
		free(e);
}

static void
set_stream_err(struct CUstream_st *s, cudaError_t e)
{
	if (s->err == cudaSuccess)
		s->err = e;
}

/* Execute one op in the calling thread (worker or API caller), g_mu NOT held.
 * Returns the op's own error. */
static cudaError_t
exec_op(struct CUstream_st *s, struct op *op)
{
	cudaError_t e = cudaSuccess;
	switch (op->type) {
	case OP_COPY: {
		if (!s->is_null)
			sleep_us(g_cfg.copy_delay_us);
		pthread_mutex_lock(&g_mu);
		uint64_t idx = g_copy_exec++;
		if (g_cfg.fail_copy_after >= 0 &&
		    idx >= (uint64_t)g_cfg.fail_copy_after)
			e = cudaErrorIllegalAddress;
		/* re-validate: memory may have been freed since the call */
		enum cls want_d = (op->kind == cudaMemcpyHostToDevice ||
				   op->kind == cudaMemcpyDeviceToDevice) ?
					  C_DEV :
					  C_HOST;
		enum cls want_s = (op->kind == cudaMemcpyDeviceToHost ||
				   op->kind == cudaMemcpyDeviceToDevice) ?
					  C_DEV :
					  C_HOST;
		if (e == cudaSuccess && op->n &&
		    (classify(op->dst, op->n) != want_d ||
		     (!op->bounce && classify(op->src, op->n) != want_s)))
			e = cudaErrorIllegalAddress;
		if (e != cudaSuccess) {
			g_st.failed_copies++;
			set_stream_err(s, e);
			pthread_mutex_unlock(&g_mu);
			break;
		}
		bool pinned = true;
		switch (op->kind) {
		case cudaMemcpyHostToDevice:
			g_st.copies_h2d++;
			g_st.bytes_h2d += op->n;
			pinned = op->bounce ? op->pinned_at_call :
					      host_pinned(op->src, op->n);
			break;
		case cudaMemcpyDeviceToHost:
			g_st.copies_d2h++;
			g_st.bytes_d2h += op->n;
			pinned = host_pinned(op->dst, op->n);
			break;
		case cudaMemcpyDeviceToDevice:
			g_st.copies_d2d++;
			g_st.bytes_d2d += op->n;
			break;
		default:
			g_st.copies_h2h++;
			g_st.bytes_h2h += op->n;
			break;
		}
		if (!pinned) {
			g_st.pageable_copies++;
			g_st.pageable_bytes += op->n;
		}
		pthread_mutex_unlock(&g_mu);
		if (op->n)
			memmove(op->dst, op->bounce ? op->bounce : op->src,
				op->n);
		break;
	}
	case OP_MEMSET:
		pthread_mutex_lock(&g_mu);
		if (op->n && classify(op->dst, op->n) != C_DEV) {
			e = cudaErrorIllegalAddress;
			set_stream_err(s, e);
			pthread_mutex_unlock(&g_mu);
			break;
		}
		g_st.memsets++;
		g_st.memset_bytes += op->n;
		pthread_mutex_unlock(&g_mu);
		if (op->n)
			memset(op->dst, op->val, op->n);
		break;
	case OP_RECORD: {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		pthread_mutex_lock(&g_mu);
		struct CUevent_st *ev = op->ev;
		if (op->seq >= ev->done_seq) {
			ev->done_seq = op->seq;
			ev->t = now;
			ev->err = s->err;
		}
		ev_unref(ev);
		if (op->from_worker) {
			s->pending--;
			op->retired = true;
		}
		pthread_cond_broadcast(&g_progress);
		pthread_mutex_unlock(&g_mu);
		break;
	}
	case OP_WAIT:
		pthread_mutex_lock(&g_mu);
		while (op->ev->done_seq < op->seq)
			pthread_cond_wait(&g_progress, &g_mu);
		ev_unref(op->ev);
		pthread_mutex_unlock(&g_mu);
		break;
	}
	return e;
}

static void
free_op(struct op *op)
{
	free(op->bounce);
	free(op);
}

static void *
worker(void *arg)
{
	struct CUstream_st *s = arg;
	pthread_mutex_lock(&g_mu);
	for (;;) {
		while (!s->head && !s->shutdown)
			pthread_cond_wait(&s->cv, &g_mu);
		struct op *op = s->head;
		if (!op)
			break;
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		pthread_mutex_unlock(&g_mu);
		op->from_worker = true;
		exec_op(s, op);
		bool retired = op->retired;
		free_op(op);
		pthread_mutex_lock(&g_mu);
		if (!retired)
			s->pending--;
		pthread_cond_broadcast(&g_progress);
	}
	pthread_mutex_unlock(&g_mu);
	return NULL;
}

/* caller holds g_mu */
static cudaError_t
resolve_stream(cudaStream_t h, struct CUstream_st **out)
{
	if (h == 0 || h == cudaStreamLegacy || h == cudaStreamPerThread) {
		*out = &g_null;
		return cudaSuccess;
	}
	for (struct CUstream_st *s = g_streams; s; s = s->next) {
		if (s == h) {
			*out = s;
			return cudaSuccess;
		}
	}
	return cudaErrorInvalidResourceHandle;
}

static bool
event_live(struct CUevent_st *e)
{
	for (struct CUevent_st *x = g_events; x; x = x->next)
		if (x == e)
			return true;
	return false;
}

/* caller holds g_mu; s is a worker stream */
static void
enqueue(struct CUstream_st *s, struct op *op)
{
	op->next = NULL;
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	s->pending++;
	pthread_cond_signal(&s->cv);
}

/* Called with g_mu held; releases it. Null stream: run now in the caller. */
static cudaError_t
submit_unlock(struct CUstream_st *s, struct op *op)
{
	if (!s->is_null) {
		enqueue(s, op);
		pthread_mutex_unlock(&g_mu);
		return cudaSuccess;
	}
	pthread_mutex_unlock(&g_mu);
	cudaError_t e = exec_op(&g_null, op);
	free_op(op);
	return e;
}

/* caller holds g_mu */
static void
drain_all_locked(void)
{
again:
	for (struct CUstream_st *s = g_streams; s; s = s->next) {
		if (s->pending) {
			pthread_cond_wait(&g_progress, &g_mu);
			goto again;
		}
	}
}

/* ------------------------------------------------------ device/version */

cudaError_t
cudaGetDeviceCount(int *count)
{
	cudaError_t e = gate();
	if (e != cudaSuccess) {
		if (count)
			*count = 0;
		return ret(e);
	}
	if (!count)
		return ret(cudaErrorInvalidValue);
	*count = g_cfg.ndev;
	return cudaSuccess;
}

cudaError_t
cudaGetDevice(int *device)
{
	GATE();
	if (!device)
		return ret(cudaErrorInvalidValue);
	*device = t_device;
	return cudaSuccess;
}

cudaError_t
cudaSetDevice(int device)
{
	GATE();
	if (device < 0 || device >= g_cfg.ndev)
		return ret(cudaErrorInvalidDevice);
	t_device = device;
	return cudaSuccess;
}

cudaError_t
cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (!runtimeVersion)
		return ret(cudaErrorInvalidValue);
	*runtimeVersion = 13000;
	return cudaSuccess;
}

cudaError_t
cudaDriverGetVersion(int *driverVersion)
{
	pthread_once(&g_once, init_once);
	if (!driverVersion)
		return ret(cudaErrorInvalidValue);
	*driverVersion = g_cfg.drv == DRV_NONE ? 0 :
			 g_cfg.drv == DRV_OLD  ? 12000 :
						 13000;
	return cudaSuccess;
}

#define ERRLIST(X)                                                             \
	X(cudaSuccess, "no error")                                             \
	X(cudaErrorInvalidValue, "invalid argument")                           \
	X(cudaErrorMemoryAllocation, "out of memory")                          \
	X(cudaErrorInitializationError, "initialization error")                \
	X(cudaErrorCudartUnloading, "driver shutting down")                    \
	X(cudaErrorInvalidConfiguration, "invalid configuration argument")     \
	X(cudaErrorInvalidPitchValue, "invalid pitch argument")                \
	X(cudaErrorInvalidSymbol, "invalid device symbol")                     \
	X(cudaErrorInvalidHostPointer, "invalid host pointer")                 \
	X(cudaErrorInvalidDevicePointer, "invalid device pointer")             \
	X(cudaErrorInvalidMemcpyDirection,                                     \
	  "invalid copy direction for memcpy")                                 \
	X(cudaErrorInsufficientDriver,                                         \
	  "CUDA driver version is insufficient for CUDA runtime version")      \
	X(cudaErrorNoDevice, "no CUDA-capable device is detected")             \
	X(cudaErrorInvalidDevice, "invalid device ordinal")                    \
	X(cudaErrorInvalidResourceHandle, "invalid resource handle")           \
	X(cudaErrorNotReady, "device not ready")                               \
	X(cudaErrorIllegalAddress, "an illegal memory access was encountered") \
	X(cudaErrorHostMemoryAlreadyRegistered,                                \
	  "part or all of the requested memory range is already mapped")       \
	X(cudaErrorHostMemoryNotRegistered,                                    \
	  "pointer does not correspond to a registered memory region")         \
	X(cudaErrorNotSupported, "operation not supported")                    \
	X(cudaErrorPeerAccessUnsupported,                                      \
	  "peer access is not supported between these two devices")            \
	X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled") \
	X(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled")   \
	X(cudaErrorNotPermitted, "operation not permitted")                    \
	X(cudaErrorLaunchFailure, "unspecified launch failure")                \
	X(cudaErrorUnknown, "unknown error")

const char *
cudaGetErrorName(cudaError_t error)
{
#define X(code, str) \
	case code:   \
		return #code;
	switch (error) {
		ERRLIST(X)
	default:
		return "unrecognized error code";
	}
#undef X
}

const char *
cudaGetErrorString(cudaError_t error)
{
#define X(code, str) \
	case code:   \
		return str;
	switch (error) {
		ERRLIST(X)
	default:
		return "unrecognized error code";
	}
#undef X
}

cudaError_t
cudaGetLastError(void)
{
	cudaError_t e = t_last_err;
	t_last_err = cudaSuccess;
	return e;
}

cudaError_t
cudaPeekAtLastError(void)
{
	return t_last_err;
}

cudaError_t
cudaDeviceSynchronize(void)
{
	GATE();
	pthread_mutex_lock(&g_mu);
	drain_all_locked();
	/* report (without clearing) the first outstanding async error */
	cudaError_t e = g_null.err;
	for (struct CUstream_st *s = g_streams; s && e == cudaSuccess;
	     s = s->next)
		e = s->err;
	pthread_mutex_unlock(&g_mu);
	return ret(e);
}

/* --------------------------------------------------------------- streams */

cudaError_t
cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	GATE();
	if (!pStream || (flags & ~(unsigned)cudaStreamNonBlocking))
		return ret(cudaErrorInvalidValue);
	struct CUstream_st *s = calloc(1, sizeof *s);
	if (!s)
		return ret(cudaErrorMemoryAllocation);
	s->flags = flags;
	s->dev = t_device;
	pthread_cond_init(&s->cv, NULL);
	if (pthread_create(&s->thr, NULL, worker, s) != 0) {
		pthread_cond_destroy(&s->cv);
		free(s);
		return ret(cudaErrorMemoryAllocation);
	}
	pthread_mutex_lock(&g_mu);
	s->next = g_streams;
	g_streams = s;
	g_st.streams_created++;
	g_st.streams_live++;
	pthread_mutex_unlock(&g_mu);
	*pStream = s;
	return cudaSuccess;
}

cudaError_t
cudaStreamCreate(cudaStream_t *pStream)
{
	return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t
cudaStreamDestroy(cudaStream_t stream)
{
	GATE();
	pthread_mutex_lock(&g_mu);
	struct CUstream_st **pp = &g_streams;
	while (*pp && *pp != stream)
		pp = &(*pp)->next;
	struct CUstream_st *s = *pp;
	if (!s) {
		pthread_mutex_unlock(&g_mu);
		return ret(cudaErrorInvalidResourceHandle);
	}
	*pp = s->next;
	s->shutdown = true;
	pthread_cond_signal(&s->cv);
	g_st.streams_live--;
	pthread_mutex_unlock(&g_mu);
	pthread_join(s->thr,
		     NULL); /* the worker drains the queue before exiting */
	pthread_mutex_lock(&g_mu);
	pthread_cond_broadcast(&g_progress);
	pthread_mutex_unlock(&g_mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	return cudaSuccess;
}

cudaError_t
cudaStreamSynchronize(cudaStream_t stream)
{
	GATE();
	pthread_mutex_lock(&g_mu);
	struct CUstream_st *s;
	cudaError_t e = resolve_stream(stream, &s);
	if (e == cudaSuccess) {
		while (s->pending)
			pthread_cond_wait(&g_progress, &g_mu);
		e = s->err;
		s->err = cudaSuccess;
	}
	pthread_mutex_unlock(&g_mu);
	return ret(e);
}

cudaError_t
cudaStreamQuery(cudaStream_t stream)
{
	GATE();
	pthread_mutex_lock(&g_mu);
	struct CUstream_st *s;
	cudaError_t e = resolve_stream(stream, &s);
	if (e == cudaSuccess && s->pending)
		e = cudaErrorNotReady;
	pthread_mutex_unlock(&g_mu);
	return ret(e);
}

/* ---------------------------------------------------------------- events */

cudaError_t
cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	GATE();
	const unsigned ok = cudaEventBlockingSync | cudaEventDisableTiming |
			    cudaEventInterprocess;
	if (!event || (flags & ~ok) ||
	    ((flags & cudaEventInterprocess) &&
	     !(flags & cudaEventDisableTiming)))
		return ret(cudaErrorInvalidValue);
	struct CUevent_st *e = calloc(1, sizeof *e);
	if (!e)
		return ret(cudaErrorMemoryAllocation);
	e->flags = flags;
	pthread_mutex_lock(&g_mu);
	e->next = g_events;
	g_events = e;
	g_st.events_live++;
	pthread_mutex_unlock(&g_mu);
	*event = e;
	return cudaSuccess;
}

cudaError_t
cudaEventCreate(cudaEvent_t *event)
{
	return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t
cudaEventDestroy(cudaEvent_t event)
{
	GATE();
	pthread_mutex_lock(&g_mu);
	struct CUevent_st **pp = &g_events;
	while (*pp && *pp != event)
		pp = &(*pp)->next;
	struct CUevent_st *e = *pp;
	if (!e) {
		pthread_mutex_unlock(&g_mu);
		return ret(cudaErrorInvalidResourceHandle);
	}
	*pp = e->next;
	g_st.events_live--;
	e->dead = true;
	if (e->refs == 0)
		free(e);
	pthread_mutex_unlock(&g_mu);
	return cudaSuccess;
}

cudaError_t
cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	GATE();
	struct op *op = calloc(1, sizeof *op);
	if (!op)
		return ret(cudaErrorMemoryAllocation);
	pthread_mutex_lock(&g_mu);
	struct CUstream_st *s;
	cudaError_t e = resolve_stream(stream, &s);
	if (e == cudaSuccess && !event_live(event))
		e = cudaErrorInvalidResourceHandle;
	if (e != cudaSuccess) {
		pthread_mutex_unlock(&g_mu);
		free(op);
		return ret(e);
	}
	op->type = OP_RECORD;
	op->ev = event;
	op->seq = ++event->rec_seq;
	event->refs++;
	return ret(submit_unlock(s, op));
}

cudaError_t
cudaEventQuery(cudaEvent_t event)
{
	GATE();
	pthread_mutex_lock(&g_mu);
	cudaError_t e = cudaSuccess;
	if (!event_live(event))
		e = cudaErrorInvalidResourceHandle;
	else if (event->done_seq < event->rec_seq)
		e = cudaErrorNotReady;
	else
		e = event->err;
	pthread_mutex_unlock(&g_mu);
	return ret(e);
}

cudaError_t
cudaEventSynchronize(cudaEvent_t event)
{
	GATE();
	pthread_mutex_lock(&g_mu);
	if (!event_live(event)) {
		pthread_mutex_unlock(&g_mu);
		return ret(cudaErrorInvalidResourceHandle);
	}
	uint64_t target = event->rec_seq;
	event->refs++; /* keep it alive if destroyed while we wait */
	while (event->done_seq < target)
		pthread_cond_wait(&g_progress, &g_mu);
	cudaError_t e = event->err;
	ev_unref(event);
	pthread_mutex_unlock(&g_mu);
	return ret(e);
}

cudaError_t
cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	GATE();
	if (!ms)
		return ret(cudaErrorInvalidValue);
	pthread_mutex_lock(&g_mu);
	cudaError_t e = cudaSuccess;
	if (!event_live(start) || !event_live(end))
		e = cudaErrorInvalidResourceHandle;
	else if ((start->flags | end->flags) & cudaEventDisableTiming)
		e = cudaErrorInvalidResourceHandle;
	else if (start->rec_seq == 0 || end->rec_seq == 0)
		e = cudaErrorInvalidResourceHandle;
	else if (start->done_seq < start->rec_seq ||
		 end->done_seq < end->rec_seq)
		e = cudaErrorNotReady;
	else
		*ms = (float)((double)(end->t.tv_sec - start->t.tv_sec) * 1e3 +
			      (double)(end->t.tv_nsec - start->t.tv_nsec) /
				      1e6);
	pthread_mutex_unlock(&g_mu);
	return ret(e);
}

cudaError_t
cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	GATE();
	if (flags & ~(unsigned)cudaEventWaitExternal)
		return ret(cudaErrorInvalidValue);
	struct op *op = calloc(1, sizeof *op);
	if (!op)
		return ret(cudaErrorMemoryAllocation);
	pthread_mutex_lock(&g_mu);
	struct CUstream_st *s;
	cudaError_t e = resolve_stream(stream, &s);
	if (e == cudaSuccess && !event_live(event))
		e = cudaErrorInvalidResourceHandle;
	if (e != cudaSuccess || event->done_seq >= event->rec_seq) {
		/* error, never recorded, or already complete: nothing to wait for */
		pthread_mutex_unlock(&g_mu);
		free(op);
		return ret(e);
	}
	op->type = OP_WAIT;
	op->ev = event;
	op->seq = event->rec_seq;
	event->refs++;
	return ret(submit_unlock(s, op));
}

/* ---------------------------------------------------------------- memory */

static void *
map_anon(size_t size, size_t *map_size)
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t ps = pg > 0 ? (size_t)pg : 4096;
	if (size > SIZE_MAX - ps)
		return NULL;
	size_t len = (size + ps - 1) / ps * ps;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	*map_size = len;
	return p;
}

static cudaError_t
alloc_common(void **out, size_t size, enum rkind kind)
{
	if (!out)
		return cudaErrorInvalidValue;
	if (size == 0) {
		*out = NULL;
		return cudaSuccess;
	}
	size_t len = 0;
	void *p = map_anon(size, &len);
	if (!p)
		return cudaErrorMemoryAllocation;
	struct range r = { .base = (uintptr_t)p,
			   .size = size,
			   .map_size = len,
			   .kind = kind,
			   .dev = t_device };
	pthread_mutex_lock(&g_mu);
	bool ok = rinsert(r);
	if (ok && kind == R_DEV) {
		g_st.device_allocs_live++;
		g_st.device_bytes_live += size;
	} else if (ok) {
		g_st.pinned_allocs_live++;
		g_st.pinned_bytes_live += size;
	}
	pthread_mutex_unlock(&g_mu);
	if (!ok) {
		munmap(p, len);
		return cudaErrorMemoryAllocation;
	}
	*out = p;
	return cudaSuccess;
}

static void pool_release_locked(const struct range *r);

static cudaError_t
free_common(void *ptr, enum rkind kind)
{
	if (!ptr)
		return cudaSuccess;
	pthread_mutex_lock(&g_mu);
	struct range *r = rcontaining((uintptr_t)ptr);
	if (!r || r->kind != kind || r->base != (uintptr_t)ptr) {
		pthread_mutex_unlock(&g_mu);
		return cudaErrorInvalidValue;
	}
	/* like the real runtime, freeing synchronizes the device */
	drain_all_locked();
	r = rcontaining((uintptr_t)ptr);
	if (!r || r->kind != kind ||
	    r->base != (uintptr_t)ptr) { /* raced with another free */
		pthread_mutex_unlock(&g_mu);
		return cudaErrorInvalidValue;
	}
	size_t size = r->size, len = r->map_size;
	if (kind == R_DEV && r->pool) {
		/* the mapping goes first: the extent may be reused at once */
		struct range copy = *r;
		rremove(r);
		munmap(ptr, len);
		pool_release_locked(&copy);
		pthread_mutex_unlock(&g_mu);
		return cudaSuccess;
	} else if (kind == R_DEV) {
		g_st.device_allocs_live--;
		g_st.device_bytes_live -= size;
	} else {
		g_st.pinned_allocs_live--;
		g_st.pinned_bytes_live -= size;
	}
	rremove(r);
	pthread_mutex_unlock(&g_mu);
	munmap(ptr, len);
	return cudaSuccess;
}

cudaError_t
cudaMalloc(void **devPtr, size_t size)
{
	GATE();
	return ret(alloc_common(devPtr, size, R_DEV));
}

cudaError_t
cudaFree(void *devPtr)
{
	GATE();
	return ret(free_common(devPtr, R_DEV));
}

cudaError_t
cudaMallocHost(void **ptr, size_t size)
{
	GATE();
	return ret(alloc_common(ptr, size, R_HOSTALLOC));
}

cudaError_t
cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	GATE();
	const unsigned ok = cudaHostAllocPortable | cudaHostAllocMapped |
			    cudaHostAllocWriteCombined;
	if (flags & ~ok)
		return ret(cudaErrorInvalidValue);
	return ret(alloc_common(pHost, size, R_HOSTALLOC));
}

cudaError_t
cudaFreeHost(void *ptr)
{
	GATE();
	return ret(free_common(ptr, R_HOSTALLOC));
}

/* is every page of [p, p+n) mapped? */
static bool
range_mapped(uintptr_t p, size_t n)
{
	const uintptr_t ps = 4096;
	uintptr_t a = p & ~(ps - 1);
	uintptr_t end = p + n;
	unsigned char vec[4096];
	while (a < end) {
		uintptr_t chunk_end = a + sizeof vec * ps;
		if (chunk_end > end || chunk_end < a)
			chunk_end = end;
		if (mincore((void *)a, (size_t)(chunk_end - a), vec) != 0 &&
		    errno == ENOMEM)
			return false;
		a = chunk_end;
	}
	return true;
}

cudaError_t
cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	GATE();
	const unsigned okf = cudaHostRegisterPortable | cudaHostRegisterMapped |
			     cudaHostRegisterIoMemory |
			     cudaHostRegisterReadOnly;
	uintptr_t p = (uintptr_t)ptr;
	pthread_mutex_lock(&g_mu);
	g_st.host_register_calls++;
	uint64_t callno = ++g_reg_calls;
	cudaError_t e = cudaSuccess;
	if (!ptr || size == 0 || (flags & ~okf) || size > UINTPTR_MAX - p)
		e = cudaErrorInvalidValue;
	else if (roverlap(p, size, true))
		e = cudaErrorInvalidValue; /* device memory */
	else if (roverlap(p, size, false))
		e = cudaErrorHostMemoryAlreadyRegistered;
	else if (g_cfg.reg_fail_after >= 0 &&
		 callno > (uint64_t)g_cfg.reg_fail_after)
		e = cudaErrorMemoryAllocation;
	else {
		struct range r = { .base = p,
				   .size = size,
				   .kind = R_HOSTREG,
				   .dev = t_device,
				   .pending = true };
		if (!rinsert(r))
			e = cudaErrorMemoryAllocation;
	}
	if (e != cudaSuccess) {
		g_st.host_register_failed++;
		pthread_mutex_unlock(&g_mu);
		return ret(e);
	}
	pthread_mutex_unlock(&g_mu);

	/* the range is reserved (pending); pin it without holding the lock */
	bool mapped = range_mapped(p, size);
	if (mapped) {
		volatile const unsigned char *b =
			(volatile const unsigned char *)ptr;
		unsigned char acc = 0;
		uintptr_t end = p + size;
		for (uintptr_t a = p; a < end;
		     a = (a & ~(uintptr_t)4095) + 4096)
			acc ^= b[a - p];
		volatile unsigned char sink = acc;
		(void)sink;
		sleep_us(
			(uint64_t)((double)size * (double)g_cfg.reg_us_per_mib /
				   (1024.0 * 1024.0)));
		while (g_cfg.reg_gate[0] && access(g_cfg.reg_gate, F_OK) == 0)
			sleep_us(1000); /* the test opens the gate */
	}

	pthread_mutex_lock(&g_mu);
	struct range *r = rcontaining(p);
	/* the pending range cannot be removed by anyone else */
	if (!mapped) {
		rremove(r);
		g_st.host_register_failed++;
		e = cudaErrorInvalidValue;
	} else {
		r->pending = false;
		g_st.host_register_ok++;
		g_st.registered_bytes += size;
		g_st.registered_ranges++;
	}
	pthread_mutex_unlock(&g_mu);
	return ret(e);
}

cudaError_t
cudaHostUnregister(void *ptr)
{
	GATE();
	pthread_mutex_lock(&g_mu);
	struct range *r = ptr ? rcontaining((uintptr_t)ptr) : NULL;
	if (!r || r->kind != R_HOSTREG || r->pending ||
	    r->base != (uintptr_t)ptr) {
		pthread_mutex_unlock(&g_mu);
		return ret(cudaErrorHostMemoryNotRegistered);
	}
	g_st.registered_bytes -= r->size;
	g_st.registered_ranges--;
	g_st.host_unregister_ok++;
	rremove(r);
	pthread_mutex_unlock(&g_mu);
	return cudaSuccess;
}

cudaError_t
cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
			 const void *ptr)
{
	GATE();
	if (!attributes)
		return ret(cudaErrorInvalidValue);
	memset(attributes, 0, sizeof *attributes);
	pthread_mutex_lock(&g_mu);
	struct range *r = ptr ? rcontaining((uintptr_t)ptr) : NULL;
	if (r && r->pending)
		r = NULL;
	if (!r) {
		attributes->type = cudaMemoryTypeUnregistered;
		attributes->device = -2;
	} else if (r->kind == R_DEV) {
		attributes->type = cudaMemoryTypeDevice;
		attributes->device = r->dev;
		attributes->devicePointer = (void *)ptr;
	} else {
		attributes->type = cudaMemoryTypeHost;
		attributes->device = r->dev;
		attributes->devicePointer = (void *)ptr;
		attributes->hostPointer = (void *)ptr;
	}
	pthread_mutex_unlock(&g_mu);
	return cudaSuccess;
}

/* ----------------------------------------------------------------- copies */

/* caller holds g_mu; resolves kind, validates pointers */
static cudaError_t
check_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
	   enum cudaMemcpyKind *resolved)
{
	if (!dst || !src)
		return cudaErrorInvalidValue;
	enum cls cd = classify(dst, n), cs = classify(src, n);
	if (cd == C_BAD || cs == C_BAD)
		return cudaErrorInvalidValue;
	enum cls wd, ws;
	switch (kind) {
	case cudaMemcpyHostToHost:
		wd = C_HOST;
		ws = C_HOST;
		break;
	case cudaMemcpyHostToDevice:
		wd = C_DEV;
		ws = C_HOST;
		break;
	case cudaMemcpyDeviceToHost:
		wd = C_HOST;
		ws = C_DEV;
		break;
	case cudaMemcpyDeviceToDevice:
		wd = C_DEV;
		ws = C_DEV;
		break;
	case cudaMemcpyDefault:
		wd = cd;
		ws = cs;
		kind = cd == C_DEV ? (cs == C_DEV ? cudaMemcpyDeviceToDevice :
						    cudaMemcpyHostToDevice) :
				     (cs == C_DEV ? cudaMemcpyDeviceToHost :
						    cudaMemcpyHostToHost);
		break;
	default:
		return cudaErrorInvalidMemcpyDirection;
	}
	if (cd != wd || cs != ws)
		return cudaErrorInvalidValue;
	*resolved = kind;
	return cudaSuccess;
}

cudaError_t
cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	GATE();
	if (count == 0)
		return cudaSuccess;
	struct op op = { .type = OP_COPY, .dst = dst, .src = src, .n = count };
	pthread_mutex_lock(&g_mu);
	cudaError_t e = check_copy(dst, src, count, kind, &op.kind);
	pthread_mutex_unlock(&g_mu);
	if (e != cudaSuccess)
		return ret(e);
	/* synchronous: the copy's own error is returned, nothing is recorded */
	struct CUstream_st tmp = { .is_null = true };
	return ret(exec_op(&tmp, &op));
}

cudaError_t
cudaMemcpyAsync(void *dst, const void *src, size_t count,
		enum cudaMemcpyKind kind, cudaStream_t stream)
{
	GATE();
	struct op *op = calloc(1, sizeof *op);
	if (!op)
		return ret(cudaErrorMemoryAllocation);
	op->type = OP_COPY;
	op->dst = dst;
	op->src = src;
	op->n = count;
	pthread_mutex_lock(&g_mu);
	struct CUstream_st *s;
	cudaError_t e = resolve_stream(stream, &s);
	if (e == cudaSuccess && count)
		e = check_copy(dst, src, count, kind, &op->kind);
	if (e != cudaSuccess || count == 0) {
		pthread_mutex_unlock(&g_mu);
		free(op);
		return ret(e);
	}
	submit_unlock(s, op); /* async: errors land on the stream */
	return cudaSuccess;
}

cudaError_t
cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs,
		     const size_t *sizes, size_t count,
		     struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
		     size_t numAttrs, cudaStream_t stream)
{
	GATE();
	if (count == 0 || numAttrs == 0 || numAttrs > count || !dsts || !srcs ||
	    !sizes || !attrs || !attrsIdxs || attrsIdxs[0] != 0)
		return ret(cudaErrorInvalidValue);
	/* the batch API rejects the legacy NULL stream */
	if (stream == 0 || stream == cudaStreamLegacy)
		return ret(cudaErrorInvalidValue);
	for (size_t k = 0; k < numAttrs; k++) {
		if ((k > 0 && attrsIdxs[k] <= attrsIdxs[k - 1]) ||
		    attrsIdxs[k] >= count)
			return ret(cudaErrorInvalidValue);
		enum cudaMemcpySrcAccessOrder o = attrs[k].srcAccessOrder;
		if (o != cudaMemcpySrcAccessOrderStream &&
		    o != cudaMemcpySrcAccessOrderDuringApiCall &&
		    o != cudaMemcpySrcAccessOrderAny)
			return ret(cudaErrorInvalidValue);
	}
	struct op **ops = calloc(count, sizeof *ops);
	if (!ops)
		return ret(cudaErrorMemoryAllocation);
	cudaError_t e = cudaSuccess;
	for (size_t i = 0; i < count && e == cudaSuccess; i++) {
		if (!(ops[i] = calloc(1, sizeof *ops[i])))
			e = cudaErrorMemoryAllocation;
	}
	struct CUstream_st *s = NULL;
	pthread_mutex_lock(&g_mu);
	if (e == cudaSuccess)
		e = resolve_stream(stream, &s);
	size_t k = 0;
	for (size_t i = 0; i < count && e == cudaSuccess; i++) {
		while (k + 1 < numAttrs && attrsIdxs[k + 1] <= i)
			k++;
		struct op *op = ops[i];
		op->type = OP_COPY;
		op->dst = dsts[i];
		op->src = srcs[i];
		op->n = sizes[i];
		if (sizes[i] == 0)
			continue;
		e = check_copy(dsts[i], srcs[i], sizes[i], cudaMemcpyDefault,
			       &op->kind);
		if (e == cudaSuccess &&
		    attrs[k].srcAccessOrder ==
			    cudaMemcpySrcAccessOrderDuringApiCall) {
			/* the source may be reused as soon as the call returns: snapshot it */
			op->bounce = malloc(sizes[i]);
			if (!op->bounce) {
				e = cudaErrorMemoryAllocation;
				break;
			}
			memcpy(op->bounce, srcs[i], sizes[i]);
			op->pinned_at_call = host_pinned(srcs[i], sizes[i]);
		}
	}
	if (e != cudaSuccess) {
		pthread_mutex_unlock(&g_mu);
		for (size_t i = 0; i < count; i++)
			if (ops[i])
				free_op(ops[i]);
		free(ops);
		return ret(e);
	}
	g_st.batch_calls++;
	g_st.batch_copies += count;
	if (!s->is_null) {
		for (size_t i = 0; i < count; i++) {
			if (ops[i]->n)
				enqueue(s, ops[i]);
			else
				free_op(ops[i]);
		}
		pthread_mutex_unlock(&g_mu);
	} else {
		pthread_mutex_unlock(&g_mu);
		for (size_t i = 0; i < count; i++) {
			if (ops[i]->n)
				exec_op(&g_null, ops[i]);
			free_op(ops[i]);
		}
	}
	free(ops);
	return cudaSuccess;
}

static cudaError_t
memset_common(void *devPtr, int value, size_t count, cudaStream_t stream,
	      bool sync)
{
	struct op *op = calloc(1, sizeof *op);
	if (!op)
		return cudaErrorMemoryAllocation;
	op->type = OP_MEMSET;
	op->dst = devPtr;
	op->n = count;
	op->val = value;
	pthread_mutex_lock(&g_mu);
	struct CUstream_st *s = &g_null;
	cudaError_t e = sync ? cudaSuccess : resolve_stream(stream, &s);
	if (e == cudaSuccess && count &&
	    (!devPtr || classify(devPtr, count) != C_DEV))
		e = cudaErrorInvalidValue;
	if (e != cudaSuccess || count == 0) {
		pthread_mutex_unlock(&g_mu);
		free(op);
		return e;
	}
	if (sync) {
		pthread_mutex_unlock(&g_mu);
		struct CUstream_st tmp = { .is_null = true };
		e = exec_op(&tmp, op);
		free_op(op);
		return e;
	}
	submit_unlock(s, op);
	return cudaSuccess;
}

cudaError_t
cudaMemset(void *devPtr, int value, size_t count)
{
	GATE();
	return ret(memset_common(devPtr, value, count, 0, true));
}

cudaError_t
cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	GATE();
	return ret(memset_common(devPtr, value, count, stream, false));
}

/* ------------------------------------------------------------ memory pools
 *
 * Every pool is a memfd.  Its first page is a header (magic, device) so an
 * importing process can tell the device and reject a foreign fd; allocations
 * are page-aligned extents after it, found first-fit in a free list or else
 * appended (ftruncate grows the memfd; it never shrinks).  An allocation is a
 * MAP_SHARED mapping of its extent, registered as device memory of the pool's
 * device; an imported pointer is a MAP_SHARED mapping of the same extent of
 * the dup'ed fd in the importing process, so both see the same bytes.
 * A pool object is refcounted: its handle (until cudaMemPoolDestroy) plus one
 * per live allocation / imported pointer; the memfd closes at zero. */

#define POOL_MAGIC 0x4c4f4f5041444b46ull   /* "FKDAPOOL" */
#define EXPORT_MAGIC 0x5254504144554b46ull /* "FKUDAPTR" */

struct pool_hdr {
	uint64_t magic;
	int32_t dev;
	uint32_t pad;
};

struct extent {
	uint64_t off, len;
};

struct CUmemPoolHandle_st {
	struct CUmemPoolHandle_st *next;
	int fd;
	int dev;
	bool imported;  /* from cudaMemPoolImportFromShareableHandle */
	bool ipc;       /* created with cudaMemHandleTypePosixFileDescriptor */
	bool destroyed; /* cudaMemPoolDestroy called: the handle is invalid */
	int refs;
	uint64_t ino, fsdev;     /* identity of the memfd (fstat) */
	uint64_t end;            /* owning: current memfd size */
	uint64_t max_size;       /* owning: props->maxSize (0: unlimited) */
	struct extent *free_ext; /* owning: sorted free extents below end */
	size_t nfree, capfree;
	unsigned char *access; /* per device: enum cudaMemAccessFlags */
};

/* the export data, inside the 64 opaque bytes */
struct export_blob {
	uint64_t magic;
	uint64_t ino, fsdev; /* which memfd */
	uint64_t off, size;
	uint64_t check;
};
_Static_assert(sizeof(struct export_blob) <=
		       sizeof(struct cudaMemPoolPtrExportData),
	       "export blob too large");

static struct CUmemPoolHandle_st *g_pools;
static unsigned char *g_peer; /* ndev * ndev: peer access enabled */

static size_t
page_size(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	return pg > 0 ? (size_t)pg : 4096;
}

static uint64_t
blob_check(const struct export_blob *b)
{
	uint64_t h = 0x9e3779b97f4a7c15ull;
	const uint64_t v[5] = { b->magic, b->ino, b->fsdev, b->off, b->size };
	for (int i = 0; i < 5; i++) {
		h ^= v[i];
		h *= 0x100000001b3ull;
		h ^= h >> 29;
	}
	return h;
}

/* caller holds g_mu: a pool whose handle is valid (not destroyed) */
static struct CUmemPoolHandle_st *
pool_live(cudaMemPool_t p)
{
	for (struct CUmemPoolHandle_st *x = g_pools; x; x = x->next)
		if (x == p && !x->destroyed)
			return x;
	return NULL;
}

/* caller holds g_mu */
static void
pool_unref_locked(struct CUmemPoolHandle_st *p)
{
	if (--p->refs > 0)
		return;
	struct CUmemPoolHandle_st **pp = &g_pools;
	while (*pp && *pp != p)
		pp = &(*pp)->next;
	if (*pp)
		*pp = p->next;
	g_st.pools_live--;
	if (!p->imported)
		g_st.pool_bytes_live -= p->end;
	close(p->fd);
	free(p->free_ext);
	free(p->access);
	free(p);
}

/* caller holds g_mu; r was a pool range, already removed and unmapped */
static void
pool_release_locked(const struct range *r)
{
	struct CUmemPoolHandle_st *p = r->pool;
	if (r->imported) {
		g_st.imports_live--;
	} else {
		g_st.pool_allocs_live--;
		g_st.pool_alloc_bytes_live -= r->size;
		/* return the extent to the free list, coalescing */
		uint64_t off = r->pool_off, len = r->map_size;
		size_t i = 0;
		while (i < p->nfree && p->free_ext[i].off < off)
			i++;
		bool merged = false;
		if (i > 0 &&
		    p->free_ext[i - 1].off + p->free_ext[i - 1].len == off) {
			p->free_ext[i - 1].len += len;
			merged = true;
			if (i < p->nfree &&
			    p->free_ext[i - 1].off + p->free_ext[i - 1].len ==
				    p->free_ext[i].off) {
				p->free_ext[i - 1].len += p->free_ext[i].len;
				memmove(&p->free_ext[i], &p->free_ext[i + 1],
					(p->nfree - i - 1) *
						sizeof *p->free_ext);
				p->nfree--;
			}
		} else if (i < p->nfree && off + len == p->free_ext[i].off) {
			p->free_ext[i].off = off;
			p->free_ext[i].len += len;
			merged = true;
		}
		if (!merged) {
			if (p->nfree == p->capfree) {
				size_t nc = p->capfree ? p->capfree * 2 : 16;
				struct extent *ne =
					realloc(p->free_ext, nc * sizeof *ne);
				if (!ne)
					goto out; /* the extent is leaked */
				p->free_ext = ne;
				p->capfree = nc;
			}
			memmove(&p->free_ext[i + 1], &p->free_ext[i],
				(p->nfree - i) * sizeof *p->free_ext);
			p->free_ext[i].off = off;
			p->free_ext[i].len = len;
			p->nfree++;
		}
	}
out:
	pool_unref_locked(p);
}

static cudaError_t
pool_new(int fd, int dev, bool imported, struct CUmemPoolHandle_st **out)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return cudaErrorInvalidValue;
	struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
	unsigned char *acc = calloc((size_t)g_cfg.ndev, 1);
	if (!p || !acc) {
		free(p);
		free(acc);
		return cudaErrorMemoryAllocation;
	}
	p->fd = fd;
	p->dev = dev;
	p->imported = imported;
	p->refs = 1;
	p->ino = (uint64_t)st.st_ino;
	p->fsdev = (uint64_t)st.st_dev;
	p->access = acc;
	p->access[dev] = (unsigned char)cudaMemAccessFlagsProtReadWrite;
	*out = p;
	return cudaSuccess;
}

cudaError_t
cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *props)
{
	GATE();
	if (!memPool || !props)
		return ret(cudaErrorInvalidValue);
	if (props->allocType != cudaMemAllocationTypePinned ||
	    props->location.type != cudaMemLocationTypeDevice ||
	    props->location.id < 0 || props->location.id >= g_cfg.ndev)
		return ret(cudaErrorInvalidValue);
	bool ipc;
	switch ((unsigned)props->handleTypes) {
	case cudaMemHandleTypeNone:
		ipc = false;
		break;
	case cudaMemHandleTypePosixFileDescriptor:
		ipc = true;
		break;
	case cudaMemHandleTypeWin32:
	case cudaMemHandleTypeWin32Kmt:
	case cudaMemHandleTypeFabric:
		return ret(cudaErrorNotSupported);
	default:
		return ret(cudaErrorInvalidValue);
	}
	if (props->win32SecurityAttributes)
		return ret(cudaErrorInvalidValue);
	size_t ps = page_size();
	int fd = memfd_create("fakecuda-pool", MFD_CLOEXEC);
	if (fd < 0)
		return ret(cudaErrorMemoryAllocation);
	struct pool_hdr h = { .magic = POOL_MAGIC, .dev = props->location.id };
	if (ftruncate(fd, (off_t)ps) != 0 ||
	    pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
		close(fd);
		return ret(cudaErrorMemoryAllocation);
	}
	struct CUmemPoolHandle_st *p;
	cudaError_t e = pool_new(fd, props->location.id, false, &p);
	if (e != cudaSuccess) {
		close(fd);
		return ret(e);
	}
	p->ipc = ipc;
	p->end = ps;
	p->max_size = props->maxSize;
	pthread_mutex_lock(&g_mu);
	p->next = g_pools;
	g_pools = p;
	g_st.pools_live++;
	g_st.pool_bytes_live += ps;
	pthread_mutex_unlock(&g_mu);
	*memPool = p;
	return cudaSuccess;
}

cudaError_t
cudaMemPoolDestroy(cudaMemPool_t memPool)
{
	GATE();
	pthread_mutex_lock(&g_mu);
	struct CUmemPoolHandle_st *p = pool_live(memPool);
	if (!p) {
		pthread_mutex_unlock(&g_mu);
		return ret(cudaErrorInvalidValue);
	}
	/* live allocations keep the pool (and its memfd) until freed */
	p->destroyed = true;
	pool_unref_locked(p);
	pthread_mutex_unlock(&g_mu);
	return cudaSuccess;
}

cudaError_t
cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
			cudaStream_t stream)
{
	GATE();
	if (!ptr)
		return ret(cudaErrorInvalidValue);
	size_t ps = page_size();
	pthread_mutex_lock(&g_mu);
	struct CUstream_st *s;
	cudaError_t e = resolve_stream(stream, &s);
	struct CUmemPoolHandle_st *p = NULL;
	if (e == cudaSuccess && !(p = pool_live(memPool)))
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess && p->imported)
		e = cudaErrorInvalidValue; /* imported pools cannot allocate */
	if (e == cudaSuccess && size > SIZE_MAX - ps)
		e = cudaErrorMemoryAllocation;
	if (e != cudaSuccess || size == 0) {
		pthread_mutex_unlock(&g_mu);
		if (e == cudaSuccess)
			*ptr = NULL;
		return ret(e);
	}
	uint64_t len = (size + ps - 1) / ps * ps, off = 0;
	size_t i = 0;
	while (i < p->nfree && p->free_ext[i].len < len)
		i++;
	if (i < p->nfree) {
		off = p->free_ext[i].off;
		p->free_ext[i].off += len;
		p->free_ext[i].len -= len;
		if (p->free_ext[i].len == 0) {
			memmove(&p->free_ext[i], &p->free_ext[i + 1],
				(p->nfree - i - 1) * sizeof *p->free_ext);
			p->nfree--;
		}
	} else {
		off = p->end;
		if ((p->max_size && off - ps + len > p->max_size) ||
		    off + len > (uint64_t)INT64_MAX ||
		    ftruncate(p->fd, (off_t)(off + len)) != 0) {
			pthread_mutex_unlock(&g_mu);
			return ret(cudaErrorMemoryAllocation);
		}
		p->end += len;
		g_st.pool_bytes_live += len;
	}
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd,
		       (off_t)off);
	struct range r = { .base = (uintptr_t)m,
			   .size = size,
			   .map_size = len,
			   .kind = R_DEV,
			   .dev = p->dev,
			   .pool = p,
			   .pool_off = off };
	if (m == MAP_FAILED || !rinsert(r)) {
		if (m != MAP_FAILED)
			munmap(m, len);
		/* give the extent back (pool_release_locked unrefs: ref first) */
		p->refs++;
		g_st.pool_allocs_live++;
		g_st.pool_alloc_bytes_live += size;
		pool_release_locked(&r);
		pthread_mutex_unlock(&g_mu);
		return ret(cudaErrorMemoryAllocation);
	}
	p->refs++;
	g_st.pool_allocs_live++;
	g_st.pool_alloc_bytes_live += size;
	pthread_mutex_unlock(&g_mu);
	*ptr = m;
	return cudaSuccess;
}

cudaError_t
cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	GATE();
	if (!devPtr)
		return cudaSuccess;
	pthread_mutex_lock(&g_mu);
	struct CUstream_st *s;
	cudaError_t e = resolve_stream(hStream, &s);
	struct range *r = rcontaining((uintptr_t)devPtr);
	if (e == cudaSuccess && (!r || r->kind != R_DEV || !r->pool ||
				 r->base != (uintptr_t)devPtr))
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess) /* the free follows the stream's earlier work */
		while (s->pending)
			pthread_cond_wait(&g_progress, &g_mu);
	pthread_mutex_unlock(&g_mu);
	if (e != cudaSuccess)
		return ret(e);
	return ret(free_common(devPtr, R_DEV));
}

cudaError_t
cudaMemPoolSetAccess(cudaMemPool_t memPool,
		     const struct cudaMemAccessDesc *descList, size_t count)
{
	GATE();
	if (count && !descList)
		return ret(cudaErrorInvalidValue);
	for (size_t i = 0; i < count; i++) {
		const struct cudaMemAccessDesc *d = &descList[i];
		if (d->location.type != cudaMemLocationTypeDevice)
			return ret(cudaErrorInvalidValue);
		if (d->location.id < 0 || d->location.id >= g_cfg.ndev)
			return ret(cudaErrorInvalidDevice);
		if (d->flags != cudaMemAccessFlagsProtNone &&
		    d->flags != cudaMemAccessFlagsProtReadWrite)
			return ret(cudaErrorInvalidValue);
	}
	pthread_mutex_lock(&g_mu);
	struct CUmemPoolHandle_st *p = pool_live(memPool);
	if (!p) {
		pthread_mutex_unlock(&g_mu);
		return ret(cudaErrorInvalidValue);
	}
	for (size_t i = 0; i < count; i++)
		p->access[descList[i].location.id] =
			(unsigned char)descList[i].flags;
	pthread_mutex_unlock(&g_mu);
	return cudaSuccess;
}

cudaError_t
cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
		     struct cudaMemLocation *location)
{
	GATE();
	if (!flags || !location || location->type != cudaMemLocationTypeDevice)
		return ret(cudaErrorInvalidValue);
	if (location->id < 0 || location->id >= g_cfg.ndev)
		return ret(cudaErrorInvalidDevice);
	pthread_mutex_lock(&g_mu);
	struct CUmemPoolHandle_st *p = pool_live(memPool);
	if (p)
		*flags = (enum cudaMemAccessFlags)p->access[location->id];
	pthread_mutex_unlock(&g_mu);
	return p ? cudaSuccess : ret(cudaErrorInvalidValue);
}

cudaError_t
cudaMemPoolExportToShareableHandle(void *shareableHandle, cudaMemPool_t memPool,
				   enum cudaMemAllocationHandleType handleType,
				   unsigned int flags)
{
	GATE();
	if (!shareableHandle || flags != 0 ||
	    handleType != cudaMemHandleTypePosixFileDescriptor)
		return ret(cudaErrorInvalidValue);
	pthread_mutex_lock(&g_mu);
	struct CUmemPoolHandle_st *p = pool_live(memPool);
	cudaError_t e = cudaSuccess;
	if (!p || p->imported || !p->ipc) {
		e = cudaErrorInvalidValue;
	} else {
		int fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0);
		if (fd < 0)
			e = cudaErrorMemoryAllocation;
		else
			*(int *)shareableHandle = fd;
	}
	pthread_mutex_unlock(&g_mu);
	return ret(e);
}

cudaError_t
cudaMemPoolImportFromShareableHandle(
	cudaMemPool_t *memPool, void *shareableHandle,
	enum cudaMemAllocationHandleType handleType, unsigned int flags)
{
	GATE();
	/* the real API takes the fd value itself, cast to a pointer */
	intptr_t v = (intptr_t)shareableHandle;
	if (!memPool || flags != 0 ||
	    handleType != cudaMemHandleTypePosixFileDescriptor || v < 0 ||
	    v > INT32_MAX)
		return ret(cudaErrorInvalidValue);
	int fd = fcntl((int)v, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return ret(cudaErrorInvalidValue);
	struct pool_hdr h;
	if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
	    h.magic != POOL_MAGIC || h.dev < 0) {
		close(fd);
		return ret(cudaErrorInvalidValue);
	}
	if (h.dev >= g_cfg.ndev) {
		close(fd);
		return ret(cudaErrorInvalidDevice);
	}
	struct CUmemPoolHandle_st *p;
	cudaError_t e = pool_new(fd, h.dev, true, &p);
	if (e != cudaSuccess) {
		close(fd);
		return ret(e);
	}
	pthread_mutex_lock(&g_mu);
	p->next = g_pools;
	g_pools = p;
	g_st.pools_live++;
	pthread_mutex_unlock(&g_mu);
	*memPool = p;
	return cudaSuccess;
}

cudaError_t
cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData *exportData, void *ptr)
{
	GATE();
	if (!exportData || !ptr)
		return ret(cudaErrorInvalidValue);
	pthread_mutex_lock(&g_mu);
	struct range *r = rcontaining((uintptr_t)ptr);
	if (!r || r->kind != R_DEV || !r->pool || r->imported ||
	    !r->pool->ipc || r->base != (uintptr_t)ptr) {
		pthread_mutex_unlock(&g_mu);
		return ret(cudaErrorInvalidValue);
	}
	struct export_blob b = { .magic = EXPORT_MAGIC,
				 .ino = r->pool->ino,
				 .fsdev = r->pool->fsdev,
				 .off = r->pool_off,
				 .size = r->size };
	pthread_mutex_unlock(&g_mu);
	b.check = blob_check(&b);
	memset(exportData, 0, sizeof *exportData);
	memcpy(exportData->reserved, &b, sizeof b);
	return cudaSuccess;
}

cudaError_t
cudaMemPoolImportPointer(void **ptr, cudaMemPool_t memPool,
			 struct cudaMemPoolPtrExportData *exportData)
{
	GATE();
	if (!ptr || !exportData)
		return ret(cudaErrorInvalidValue);
	struct export_blob b;
	memcpy(&b, exportData->reserved, sizeof b);
	size_t ps = page_size();
	if (b.magic != EXPORT_MAGIC || b.check != blob_check(&b) ||
	    b.size == 0 || b.off < ps || b.off % ps != 0 ||
	    b.size > UINT64_MAX - ps || b.off > UINT64_MAX - b.size - ps)
		return ret(cudaErrorInvalidValue);
	uint64_t len = (b.size + ps - 1) / ps * ps;
	pthread_mutex_lock(&g_mu);
	struct CUmemPoolHandle_st *p = pool_live(memPool);
	struct stat st;
	cudaError_t e = cudaSuccess;
	if (!p || !p->imported || b.ino != p->ino || b.fsdev != p->fsdev)
		e = cudaErrorInvalidValue;
	else if (fstat(p->fd, &st) != 0 || b.off + len > (uint64_t)st.st_size)
		e = cudaErrorInvalidValue; /* beyond the memfd: not allocated */
	if (e != cudaSuccess) {
		pthread_mutex_unlock(&g_mu);
		return ret(e);
	}
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd,
		       (off_t)b.off);
	struct range r = { .base = (uintptr_t)m,
			   .size = b.size,
			   .map_size = len,
			   .kind = R_DEV,
			   .dev = p->dev,
			   .pool = p,
			   .pool_off = b.off,
			   .imported = true };
	if (m == MAP_FAILED || !rinsert(r)) {
		if (m != MAP_FAILED)
			munmap(m, len);
		pthread_mutex_unlock(&g_mu);
		return ret(cudaErrorMemoryAllocation);
	}
	p->refs++;
	g_st.imports_live++;
	pthread_mutex_unlock(&g_mu);
	*ptr = m;
	return cudaSuccess;
}

/* ------------------------------------------------------------ peer access */

cudaError_t
cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
	GATE();
	if (!canAccessPeer)
		return ret(cudaErrorInvalidValue);
	if (device < 0 || device >= g_cfg.ndev || peerDevice < 0 ||
	    peerDevice >= g_cfg.ndev)
		return ret(cudaErrorInvalidDevice);
	*canAccessPeer = device != peerDevice;
	return cudaSuccess;
}

static cudaError_t
peer_set(int peerDevice, unsigned int flags, bool enable)
{
	if (flags != 0)
		return cudaErrorInvalidValue;
	if (peerDevice < 0 || peerDevice >= g_cfg.ndev ||
	    peerDevice == t_device)
		return cudaErrorInvalidDevice;
	pthread_mutex_lock(&g_mu);
	if (!g_peer)
		g_peer = calloc((size_t)g_cfg.ndev * (size_t)g_cfg.ndev, 1);
	if (!g_peer) {
		pthread_mutex_unlock(&g_mu);
		return cudaErrorMemoryAllocation;
	}
	unsigned char *bit = &g_peer[(size_t)t_device * (size_t)g_cfg.ndev +
				     (size_t)peerDevice];
	cudaError_t e = cudaSuccess;
	if (enable && *bit)
		e = cudaErrorPeerAccessAlreadyEnabled;
	else if (!enable && !*bit)
		e = cudaErrorPeerAccessNotEnabled;
	else
		*bit = enable;
	pthread_mutex_unlock(&g_mu);
	return e;
}

cudaError_t
cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
	GATE();
	return ret(peer_set(peerDevice, flags, true));
}

cudaError_t
cudaDeviceDisablePeerAccess(int peerDevice)
{
	GATE();
	return ret(peer_set(peerDevice, 0, false));
}
