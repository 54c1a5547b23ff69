/* test_fakecuda.c - self-test of the fake CUDA runtime (tests/gpu/fakecudart.c).
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -I/usr/local/cuda/include \
 *      -o /tmp/fakecuda/test_fakecuda tests/gpu/test_fakecuda.c \
 *      -L/tmp/fakecuda -l:libcudart.so.13 -Wl,-rpath,/tmp/fakecuda -lpthread
 *
 * Without arguments it runs the in-process checks, then re-executes itself
 * (argv[0] MODE) with FAKECUDA_* variables set for the env-dependent ones.
 * Prints "FAIL ..." and exits 1 on the first failed check. */
#include <cuda_runtime_api.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/gpu/fakecuda.h"

#define CHECK(cond)                                                   \
	do {                                                          \
		if (!(cond)) {                                        \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, \
				__LINE__, #cond);                     \
			exit(1);                                      \
		}                                                     \
	} while (0)

#define CK(call) CHECK_EQ(call, cudaSuccess)
#define CHECK_EQ(call, want)                                                   \
	do {                                                                   \
		cudaError_t e_ = (call);                                       \
		if (e_ != (want)) {                                            \
			fprintf(stderr, "FAIL %s:%d: %s = %s (%s), want %s\n", \
				__FILE__, __LINE__, #call,                     \
				cudaGetErrorName(e_), cudaGetErrorString(e_),  \
				#want);                                        \
			exit(1);                                               \
		}                                                              \
	} while (0)

static struct fakecuda_stats
stats(void)
{
	struct fakecuda_stats s;
	CHECK(fakecuda_stats(&s) == 0);
	return s;
}

static void
fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 31u + seed);
}

static int
all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* ------------------------------------------------------------ in-process */

static void
test_basics(void)
{
	int n = -1, v = 0, d = -1;
	CK(cudaGetDeviceCount(&n));
	CHECK(n == 1);
	CK(cudaRuntimeGetVersion(&v));
	CHECK(v == 13000);
	CK(cudaDriverGetVersion(&v));
	CHECK(v == 13000);
	CK(cudaGetDevice(&d));
	CHECK(d == 0);
	CHECK_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
	CHECK_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
	CHECK_EQ(cudaGetLastError(), cudaSuccess);
	CHECK(strcmp(cudaGetErrorName(cudaErrorNoDevice),
		     "cudaErrorNoDevice") == 0);
}

static void
test_round_trip(void)
{
	enum {
		N = 100000
	};
	unsigned char *h = malloc(N), *back = calloc(1, N);
	CHECK(h && back);
	fill(h, N, 7);
	void *dv = NULL;
	CK(cudaMalloc(&dv, N));
	CK(cudaMemcpy(dv, h, N, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(back, dv, N, cudaMemcpyDeviceToHost));
	CHECK(memcmp(h, back, N) == 0);

	/* kind validation */
	CHECK_EQ(cudaMemcpy(dv, h, N + 1, cudaMemcpyHostToDevice),
		 cudaErrorInvalidValue);
	CHECK_EQ(cudaMemcpy(h, dv, N, cudaMemcpyHostToDevice),
		 cudaErrorInvalidValue);
	CHECK_EQ(cudaMemcpy(back, h, N, cudaMemcpyDeviceToHost),
		 cudaErrorInvalidValue);
	CHECK_EQ(cudaMemcpy(dv, back, N, cudaMemcpyDeviceToDevice),
		 cudaErrorInvalidValue);
	CHECK_EQ(cudaMemcpy(back, dv, N, cudaMemcpyHostToHost),
		 cudaErrorInvalidValue);
	CHECK_EQ(cudaFree(h), cudaErrorInvalidValue);
	CHECK_EQ(cudaFree((char *)dv + 1), cudaErrorInvalidValue);

	/* D2D, default kind, memset */
	void *dv2 = NULL;
	CK(cudaMalloc(&dv2, N));
	CK(cudaMemcpy(dv2, dv, N, cudaMemcpyDefault));
	memset(back, 0, N);
	CK(cudaMemcpy(back, dv2, N, cudaMemcpyDefault));
	CHECK(memcmp(h, back, N) == 0);
	CK(cudaMemset(dv2, 0xAB, 10));
	CK(cudaMemcpy(back, dv2, 10, cudaMemcpyDeviceToHost));
	CHECK(back[0] == 0xAB && back[9] == 0xAB);

	struct cudaPointerAttributes a;
	CK(cudaPointerGetAttributes(&a, (char *)dv + 5));
	CHECK(a.type == cudaMemoryTypeDevice && a.device == 0 &&
	      a.devicePointer == (char *)dv + 5);
	CK(cudaPointerGetAttributes(&a, h));
	CHECK(a.type == cudaMemoryTypeUnregistered);
	void *ph = NULL;
	CK(cudaMallocHost(&ph, 4096));
	CK(cudaPointerGetAttributes(&a, ph));
	CHECK(a.type == cudaMemoryTypeHost && a.hostPointer == ph);
	CK(cudaFreeHost(ph));

	struct fakecuda_stats s = stats();
	CHECK(s.device_allocs_live == 2 && s.device_bytes_live == 2 * N);
	CK(cudaFree(dv));
	CK(cudaFree(dv2));
	s = stats();
	CHECK(s.device_allocs_live == 0 && s.device_bytes_live == 0);
	free(h);
	free(back);
}

static void
test_pageable(void)
{
	enum {
		N = 3 * 4096 + 100
	};
	unsigned char *pageable = malloc(N), *reg = malloc(N);
	CHECK(pageable && reg);
	fill(pageable, N, 1);
	fill(reg, N, 2);
	void *dv = NULL;
	CK(cudaMalloc(&dv, N));
	CK(cudaHostRegister(reg, N, cudaHostRegisterDefault));
	fakecuda_reset_stats();

	CK(cudaMemcpy(dv, pageable, N, cudaMemcpyHostToDevice));
	struct fakecuda_stats s = stats();
	CHECK(s.copies_h2d == 1 && s.bytes_h2d == N);
	CHECK(s.pageable_copies == 1 && s.pageable_bytes == N);

	CK(cudaMemcpy(dv, reg, N, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(reg, dv, N, cudaMemcpyDeviceToHost));
	s = stats();
	CHECK(s.copies_h2d == 2 && s.copies_d2h == 1);
	CHECK(s.pageable_copies == 1 && s.pageable_bytes == N);
	CHECK(s.registered_bytes == N && s.registered_ranges == 1);

	/* a range only partly inside the registration is pageable */
	CK(cudaMemcpy(dv, reg + 1, N - 1, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dv, reg, N, cudaMemcpyHostToDevice));
	s = stats();
	CHECK(s.pageable_copies == 1);

	CK(cudaHostUnregister(reg));
	CK(cudaMemcpy(dv, reg, N, cudaMemcpyHostToDevice));
	s = stats();
	CHECK(s.pageable_copies == 2 && s.registered_bytes == 0);
	CK(cudaFree(dv));
	free(pageable);
	free(reg);
}

static void
test_register_errors(void)
{
	enum {
		N = 4 * 4096
	};
	unsigned char *buf = aligned_alloc(4096, N);
	CHECK(buf);
	memset(buf, 0, N);
	CHECK_EQ(cudaHostRegister(buf, 0, 0), cudaErrorInvalidValue);
	CHECK_EQ(cudaHostRegister(NULL, 4096, 0), cudaErrorInvalidValue);
	CK(cudaHostRegister(buf, 2 * 4096, 0));
	CHECK_EQ(cudaHostRegister(buf + 4096, 2 * 4096, 0),
		 cudaErrorHostMemoryAlreadyRegistered);
	CHECK_EQ(cudaHostRegister(buf, 4096, 0),
		 cudaErrorHostMemoryAlreadyRegistered);
	CK(cudaHostRegister(buf + 2 * 4096, 2 * 4096,
			    0)); /* adjacent is fine */
	CHECK_EQ(cudaHostUnregister(buf + 4096),
		 cudaErrorHostMemoryNotRegistered);
	CK(cudaHostUnregister(buf));
	CHECK_EQ(cudaHostUnregister(buf), cudaErrorHostMemoryNotRegistered);
	CK(cudaHostUnregister(buf + 2 * 4096));
	struct fakecuda_stats s = stats();
	CHECK(s.registered_bytes == 0 && s.registered_ranges == 0);
	free(buf);
}

static void
test_batch(void)
{
	enum {
		N = 5000
	};
	unsigned char *h = malloc(3 * N), *out = calloc(1, 3 * N);
	CHECK(h && out);
	fill(h, 3 * N, 9);
	void *dv = NULL;
	CK(cudaMalloc(&dv, 3 * N));
	cudaStream_t st;
	CK(cudaStreamCreate(&st));

	void *dsts[3] = { dv, (char *)dv + N, (char *)dv + 2 * N };
	const void *srcs[3] = { h, h + N, h + 2 * N };
	size_t sizes[3] = { N, N, N };
	struct cudaMemcpyAttributes attr;
	memset(&attr, 0, sizeof attr);
	attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
	size_t idx0 = 0, idx1 = 1;

	fakecuda_reset_stats();
	CHECK_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 0, &attr, &idx0, 1,
				      st),
		 cudaErrorInvalidValue);
	CHECK_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx0, 0,
				      st),
		 cudaErrorInvalidValue);
	CHECK_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx1, 1,
				      st),
		 cudaErrorInvalidValue);
	size_t bad_sizes[3] = { N, N,
				N + 1 }; /* last one overruns the allocation */
	CHECK_EQ(cudaMemcpyBatchAsync(dsts, srcs, bad_sizes, 3, &attr, &idx0, 1,
				      st),
		 cudaErrorInvalidValue);
	CHECK(stats().batch_calls == 0);

	CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx0, 1, st));
	void *bd[3] = { out, out + N, out + 2 * N };
	const void *bs[3] = { dsts[0], dsts[1], dsts[2] };
	CK(cudaMemcpyBatchAsync(bd, bs, sizes, 3, &attr, &idx0, 1, st));
	CK(cudaStreamSynchronize(st));
	CHECK(memcmp(h, out, 3 * N) == 0);
	struct fakecuda_stats s = stats();
	CHECK(s.batch_calls == 2 && s.batch_copies == 6);
	CHECK(s.copies_h2d == 3 && s.copies_d2h == 3 && s.bytes_h2d == 3 * N);

	CK(cudaStreamDestroy(st));
	CK(cudaFree(dv));
	free(h);
	free(out);
}

static void
test_stream_event_errors(void)
{
	cudaStream_t st;
	cudaEvent_t ev;
	CK(cudaStreamCreate(&st));
	CK(cudaEventCreate(&ev));
	CK(cudaEventQuery(ev)); /* never recorded: complete */
	CK(cudaEventSynchronize(ev));
	CK(cudaEventRecord(ev, st));
	CK(cudaEventSynchronize(ev));
	CK(cudaStreamQuery(st));
	CK(cudaStreamDestroy(st));
	CHECK_EQ(cudaStreamDestroy(st), cudaErrorInvalidResourceHandle);
	CK(cudaEventDestroy(ev));
	CHECK_EQ(cudaEventQuery(ev), cudaErrorInvalidResourceHandle);
	struct fakecuda_stats s = stats();
	CHECK(s.streams_live == 0 && s.events_live == 0);
}

/* many threads, each with its own stream, chained through events */
struct worker_arg {
	cudaStream_t st;
	cudaEvent_t prev, mine;
	int id;
};

static void *
thread_main(void *p)
{
	struct worker_arg *w = p;
	enum {
		N = 8192
	};
	unsigned char *h = malloc(N), *back = malloc(N);
	CHECK(h && back);
	void *dv = NULL;
	CK(cudaMalloc(&dv, N));
	for (int it = 0; it < 20; it++) {
		fill(h, N, (unsigned)(w->id * 100 + it));
		memset(back, 0, N);
		if (w->prev)
			CK(cudaStreamWaitEvent(w->st, w->prev, 0));
		CK(cudaMemcpyAsync(dv, h, N, cudaMemcpyHostToDevice, w->st));
		CK(cudaMemsetAsync(dv, 0x5A, 16, w->st));
		CK(cudaMemcpyAsync(back, dv, N, cudaMemcpyDeviceToHost, w->st));
		CK(cudaEventRecord(w->mine, w->st));
		CK(cudaEventSynchronize(w->mine));
		CHECK(back[0] == 0x5A && back[15] == 0x5A &&
		      memcmp(h + 16, back + 16, N - 16) == 0);
	}
	CK(cudaFree(dv));
	free(h);
	free(back);
	return NULL;
}

static void
test_threads(void)
{
	enum {
		T = 4
	};
	pthread_t th[T];
	struct worker_arg w[T];
	for (int i = 0; i < T; i++) {
		memset(&w[i], 0, sizeof w[i]);
		w[i].id = i;
		CK(cudaStreamCreateWithFlags(&w[i].st, cudaStreamNonBlocking));
		CK(cudaEventCreateWithFlags(&w[i].mine,
					    cudaEventDisableTiming));
	}
	for (int i = 1; i < T; i++)
		w[i].prev = w[i - 1].mine;
	for (int i = 0; i < T; i++)
		CHECK(pthread_create(&th[i], NULL, thread_main, &w[i]) == 0);
	for (int i = 0; i < T; i++)
		pthread_join(th[i], NULL);
	CK(cudaDeviceSynchronize());
	for (int i = 0; i < T; i++) {
		CK(cudaStreamDestroy(w[i].st));
		CK(cudaEventDestroy(w[i].mine));
	}
}

/* ---------------------------------------------------------- memory pools */

static struct cudaMemPoolProps
pool_props(int dev, enum cudaMemAllocationHandleType ht)
{
	struct cudaMemPoolProps p;
	memset(&p, 0, sizeof p);
	p.allocType = cudaMemAllocationTypePinned;
	p.handleTypes = ht;
	p.location.type = cudaMemLocationTypeDevice;
	p.location.id = dev;
	return p;
}

static void
test_pool_local(void)
{
	enum {
		N = 10000
	};
	struct cudaMemPoolProps pp = pool_props(0, cudaMemHandleTypeNone);
	cudaMemPool_t pool, bad;
	CHECK_EQ(cudaMemPoolCreate(&bad, NULL), cudaErrorInvalidValue);
	pp.location.id = 1;
	CHECK_EQ(cudaMemPoolCreate(&bad, &pp), cudaErrorInvalidValue);
	pp.location.id = 0;
	pp.location.type = cudaMemLocationTypeHost;
	CHECK_EQ(cudaMemPoolCreate(&bad, &pp), cudaErrorInvalidValue);
	pp.location.type = cudaMemLocationTypeDevice;
	pp.handleTypes = cudaMemHandleTypeWin32;
	CHECK_EQ(cudaMemPoolCreate(&bad, &pp), cudaErrorNotSupported);
	pp.handleTypes = cudaMemHandleTypeNone;
	CK(cudaMemPoolCreate(&pool, &pp));
	struct fakecuda_stats s = stats();
	CHECK(s.pools_live == 1 && s.pool_bytes_live == 4096);

	cudaStream_t st;
	CK(cudaStreamCreate(&st));
	void *a = NULL, *b = NULL, *c = NULL;
	CK(cudaMallocFromPoolAsync(&a, N, pool, st));
	CK(cudaMallocFromPoolAsync(&b, 100, pool, st));
	CHECK(a && b && ((uintptr_t)a & 4095) == 0);
	s = stats();
	CHECK(s.pool_allocs_live == 2 && s.pool_alloc_bytes_live == N + 100);
	CHECK(s.pool_bytes_live == 4096 + 3 * 4096 + 4096);
	CHECK(s.device_allocs_live == 0);
	struct cudaPointerAttributes at;
	CK(cudaPointerGetAttributes(&at, (char *)a + 7));
	CHECK(at.type == cudaMemoryTypeDevice && at.device == 0);

	unsigned char *h = malloc(N), *back = calloc(1, N);
	CHECK(h && back);
	fill(h, N, 21);
	CK(cudaMemcpyAsync(a, h, N, cudaMemcpyHostToDevice, st));
	CK(cudaMemcpyAsync(b, a, 100, cudaMemcpyDefault, st));
	CK(cudaMemcpyAsync(back, b, 100, cudaMemcpyDeviceToHost, st));
	CK(cudaStreamSynchronize(st));
	CHECK(memcmp(h, back, 100) == 0);
	CHECK_EQ(cudaMemcpy(a, h, N + 1, cudaMemcpyHostToDevice),
		 cudaErrorInvalidValue);
	CHECK_EQ(cudaHostRegister(a, 4096, 0), cudaErrorInvalidValue);

	/* not exportable: no fd handle type */
	int fd = -1;
	CHECK_EQ(cudaMemPoolExportToShareableHandle(
			 &fd, pool, cudaMemHandleTypePosixFileDescriptor, 0),
		 cudaErrorInvalidValue);
	struct cudaMemPoolPtrExportData ed;
	CHECK_EQ(cudaMemPoolExportPointer(&ed, a), cudaErrorInvalidValue);

	/* access descriptors */
	struct cudaMemAccessDesc ad;
	memset(&ad, 0, sizeof ad);
	ad.location.type = cudaMemLocationTypeDevice;
	ad.location.id = 0;
	ad.flags = cudaMemAccessFlagsProtReadWrite;
	CK(cudaMemPoolSetAccess(pool, &ad, 1));
	ad.location.id = 3;
	CHECK_EQ(cudaMemPoolSetAccess(pool, &ad, 1), cudaErrorInvalidDevice);
	ad.location.id = 0;
	ad.flags = (enum cudaMemAccessFlags)7;
	CHECK_EQ(cudaMemPoolSetAccess(pool, &ad, 1), cudaErrorInvalidValue);

	/* free: cudaFreeAsync, cudaFree; extents are reused */
	CHECK_EQ(cudaFreeAsync((char *)a + 1, st), cudaErrorInvalidValue);
	void *dm = NULL;
	CK(cudaMalloc(&dm, 16));
	CHECK_EQ(cudaFreeAsync(dm, st), cudaErrorInvalidValue);
	CK(cudaFree(dm));
	CK(cudaFreeAsync(a, st));
	CHECK_EQ(cudaMemcpy(back, a, 1, cudaMemcpyDeviceToHost),
		 cudaErrorInvalidValue);
	CK(cudaMallocFromPoolAsync(&c, 2 * 4096, pool, st));
	s = stats();
	CHECK(s.pool_bytes_live == 4096 + 3 * 4096 + 4096); /* reused */
	CK(cudaMemset(c, 1, 2 * 4096));

	/* destroy with live allocations: they stay usable until freed */
	CK(cudaMemPoolDestroy(pool));
	CHECK_EQ(cudaMemPoolDestroy(pool), cudaErrorInvalidValue);
	CHECK_EQ(cudaMallocFromPoolAsync(&a, 16, pool, st),
		 cudaErrorInvalidValue);
	CK(cudaMemcpy(back, c, 100, cudaMemcpyDeviceToHost));
	CHECK(back[0] == 1 && back[99] == 1);
	CHECK(stats().pools_live == 1);
	CK(cudaFree(b));
	CK(cudaFreeAsync(c, st));
	s = stats();
	CHECK(s.pools_live == 0 && s.pool_bytes_live == 0 &&
	      s.pool_allocs_live == 0 && s.pool_alloc_bytes_live == 0);
	CK(cudaStreamDestroy(st));
	free(h);
	free(back);
}

/* What the parent sends the child over the socket, with the pool fd. */
struct ipc_msg {
	struct cudaMemPoolPtrExportData data;
	uint64_t size;
};

static void
send_fd(int sock, int fd, const void *buf, size_t n)
{
	struct iovec iov = { (void *)buf, n };
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct msghdr m;
	memset(&m, 0, sizeof m);
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = u.b;
	m.msg_controllen = sizeof u.b;
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof fd);
	CHECK(sendmsg(sock, &m, 0) == (ssize_t)n);
}

static int
recv_fd(int sock, void *buf, size_t n)
{
	struct iovec iov = { buf, n };
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct msghdr m;
	memset(&m, 0, sizeof m);
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = u.b;
	m.msg_controllen = sizeof u.b;
	CHECK(recvmsg(sock, &m, MSG_CMSG_CLOEXEC) == (ssize_t)n);
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	CHECK(c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS);
	int fd = -1;
	memcpy(&fd, CMSG_DATA(c), sizeof fd);
	return fd;
}

enum {
	IPC_N = 3 * 4096 + 123
};

/* the child (FAKECUDA_DEVICES=2): argv[2] is its end of the socketpair */
static void
mode_ipc_child(const char *sockarg)
{
	int sock = atoi(sockarg);
	struct ipc_msg msg;
	int fd = recv_fd(sock, &msg, sizeof msg);
	CHECK(fd >= 0 && msg.size == IPC_N);

	int can = -1;
	CK(cudaDeviceCanAccessPeer(&can, 0, 1));
	CHECK(can == 1);
	CK(cudaDeviceCanAccessPeer(&can, 1, 1));
	CHECK(can == 0);
	CHECK_EQ(cudaDeviceCanAccessPeer(&can, 0, 2), cudaErrorInvalidDevice);
	CK(cudaSetDevice(1));
	CK(cudaDeviceEnablePeerAccess(0, 0));
	CHECK_EQ(cudaDeviceEnablePeerAccess(0, 0),
		 cudaErrorPeerAccessAlreadyEnabled);
	CHECK_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorInvalidDevice);

	cudaMemPool_t pool;
	CHECK_EQ(cudaMemPoolImportFromShareableHandle(&pool,
						      (void *)(uintptr_t)fd,
						      cudaMemHandleTypeNone, 0),
		 cudaErrorInvalidValue);
	CK(cudaMemPoolImportFromShareableHandle(
		&pool, (void *)(uintptr_t)fd,
		cudaMemHandleTypePosixFileDescriptor, 0));
	CHECK(close(fd) == 0); /* the pool holds its own dup */
	CHECK(stats().pools_live == 1 && stats().pool_bytes_live == 0);
	void *m = NULL;
	CHECK_EQ(cudaMallocFromPoolAsync(&m, 16, pool, 0),
		 cudaErrorInvalidValue); /* imported pools do not allocate */

	/* garbage export data */
	struct cudaMemPoolPtrExportData junk;
	memset(&junk, 0x5c, sizeof junk);
	CHECK_EQ(cudaMemPoolImportPointer(&m, pool, &junk),
		 cudaErrorInvalidValue);
	junk = msg.data;
	junk.reserved[30] ^= 1; /* a corrupted offset */
	CHECK_EQ(cudaMemPoolImportPointer(&m, pool, &junk),
		 cudaErrorInvalidValue);

	void *p = NULL, *p2 = NULL;
	CK(cudaMemPoolImportPointer(&p, pool, &msg.data));
	CK(cudaMemPoolImportPointer(&p2, pool,
				    &msg.data)); /* a second mapping */
	CHECK(p && p2);
	struct cudaPointerAttributes at;
	CK(cudaPointerGetAttributes(&at, p));
	CHECK(at.type == cudaMemoryTypeDevice && at.device == 0);
	CHECK(stats().imports_live == 2);
	CK(cudaMemPoolDestroy(pool)); /* imports keep it */

	unsigned char *want = malloc(IPC_N), *back = calloc(1, IPC_N);
	CHECK(want && back);
	fill(want, IPC_N, 41);
	CK(cudaMemcpy(back, p, IPC_N, cudaMemcpyDeviceToHost));
	CHECK(memcmp(want, back, IPC_N) == 0);
	CHECK_EQ(cudaMemcpy(back, p, IPC_N + 1, cudaMemcpyDeviceToHost),
		 cudaErrorInvalidValue);

	/* new bytes, D2D from a cudaMalloc buffer on device 1 */
	fill(want, IPC_N, 42);
	void *dv = NULL;
	CK(cudaMalloc(&dv, IPC_N));
	CK(cudaPointerGetAttributes(&at, dv));
	CHECK(at.device == 1);
	CK(cudaMemcpy(dv, want, IPC_N, cudaMemcpyHostToDevice));
	cudaStream_t st;
	CK(cudaStreamCreate(&st));
	fakecuda_reset_stats();
	CK(cudaMemcpyAsync(p, dv, 4096, cudaMemcpyDeviceToDevice, st));
	void *dsts[1] = { (char *)p + 4096 };
	const void *srcs[1] = { (char *)dv + 4096 };
	size_t sizes[1] = { IPC_N - 4096 }, idx = 0;
	struct cudaMemcpyAttributes attr;
	memset(&attr, 0, sizeof attr);
	attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
	CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, &idx, 1, st));
	CK(cudaStreamSynchronize(st));
	struct fakecuda_stats s = stats();
	CHECK(s.copies_d2d == 2 && s.bytes_d2d == IPC_N);
	memset(back, 0, IPC_N);
	CK(cudaMemcpy(back, p2, IPC_N, cudaMemcpyDefault)); /* other mapping */
	CHECK(memcmp(want, back, IPC_N) == 0);

	CK(cudaFreeAsync(p2, st));
	CK(cudaFree(p));
	s = stats();
	CHECK(s.imports_live == 0 && s.pools_live == 0);
	CK(cudaStreamDestroy(st));
	CK(cudaFree(dv));
	free(want);
	free(back);
	CHECK(write(sock, "k", 1) == 1);
	close(sock);
}

static void
test_pool_ipc(const char *self)
{
	struct cudaMemPoolProps pp =
		pool_props(0, cudaMemHandleTypePosixFileDescriptor);
	cudaMemPool_t pool;
	CK(cudaMemPoolCreate(&pool, &pp));
	void *pad = NULL, *p = NULL;
	CK(cudaMallocFromPoolAsync(&pad, 5000, pool, 0)); /* nonzero offset */
	CK(cudaMallocFromPoolAsync(&p, IPC_N, pool, 0));
	unsigned char *want = malloc(IPC_N), *back = calloc(1, IPC_N);
	CHECK(want && back);
	fill(want, IPC_N, 41);
	CK(cudaMemcpy(p, want, IPC_N, cudaMemcpyHostToDevice));

	struct ipc_msg msg;
	memset(&msg, 0, sizeof msg);
	msg.size = IPC_N;
	CHECK_EQ(cudaMemPoolExportPointer(&msg.data, (char *)p + 1),
		 cudaErrorInvalidValue);
	CK(cudaMemPoolExportPointer(&msg.data, p));
	int fd = -1;
	CHECK_EQ(cudaMemPoolExportToShareableHandle(&fd, pool,
						    cudaMemHandleTypeFabric, 0),
		 cudaErrorInvalidValue);
	CK(cudaMemPoolExportToShareableHandle(
		&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
	CHECK(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC));

	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	CHECK(fcntl(sv[0], F_SETFD, FD_CLOEXEC) ==
	      0); /* the child gets sv[1] */
	char arg[16];
	snprintf(arg, sizeof arg, "%d", sv[1]);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		setenv("FAKECUDA_DEVICES", "2", 1);
		execl(self, self, "ipc-child", arg, (char *)NULL);
		perror("execl");
		_exit(127);
	}
	close(sv[1]);
	send_fd(sv[0], fd, &msg, sizeof msg);
	CHECK(close(fd) == 0);
	char ack = 0;
	CHECK(read(sv[0], &ack, 1) == 1 && ack == 'k');
	close(sv[0]);
	int wst = 0;
	CHECK(waitpid(pid, &wst, 0) == pid);
	if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
		fprintf(stderr, "FAIL child mode ipc-child (status %d)\n", wst);
		exit(1);
	}
	/* the child's bytes, through this process's mapping */
	fill(want, IPC_N, 42);
	CK(cudaMemcpy(back, p, IPC_N, cudaMemcpyDeviceToHost));
	CHECK(memcmp(want, back, IPC_N) == 0);

	CK(cudaFree(pad));
	CK(cudaMemPoolDestroy(pool));
	CHECK(stats().pools_live == 1);
	CK(cudaFreeAsync(p, 0));
	struct fakecuda_stats s = stats();
	CHECK(s.pools_live == 0 && s.pool_bytes_live == 0 &&
	      s.imports_live == 0 && s.pool_allocs_live == 0);
	free(want);
	free(back);
}

/* ------------------------------------------------------ env-driven modes */

static double
now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* FAKECUDA_COPY_DELAY_US=100000 */
static void
mode_delay(void)
{
	enum {
		N = 65536
	};
	unsigned char *h = malloc(N), *back = calloc(1, N);
	CHECK(h && back);
	fill(h, N, 3);
	void *dv = NULL;
	CK(cudaMalloc(&dv, N));
	CK(cudaMemcpy(dv, h, N,
		      cudaMemcpyHostToDevice)); /* synchronous: not delayed */

	cudaStream_t st;
	cudaEvent_t e0, e1;
	CK(cudaStreamCreate(&st));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaEventRecord(e0, st));
	double t0 = now_ms();
	CK(cudaMemcpyAsync(back, dv, N, cudaMemcpyDeviceToHost, st));
	CK(cudaEventRecord(e1, st));
	CHECK(now_ms() - t0 < 50.0); /* the call did not wait */
	CHECK(all_zero(back, N));    /* not done at return */
	CHECK_EQ(cudaEventQuery(e1), cudaErrorNotReady);
	CHECK_EQ(cudaStreamQuery(st), cudaErrorNotReady);
	CK(cudaEventSynchronize(e1));
	CHECK(memcmp(h, back, N) == 0); /* done after event sync */
	float ms = 0;
	CK(cudaEventElapsedTime(&ms, e0, e1));
	CHECK(ms >= 90.0f && ms < 5000.0f);

	/* re-recording resets the event */
	CK(cudaMemcpyAsync(back, dv, N, cudaMemcpyDeviceToHost, st));
	CK(cudaEventRecord(e1, st));
	CHECK_EQ(cudaEventQuery(e1), cudaErrorNotReady);
	CK(cudaStreamSynchronize(st));
	CK(cudaEventQuery(e1));

	/* DuringApiCall batch: the source may be clobbered right after the call */
	unsigned char *src = malloc(N);
	CHECK(src);
	fill(src, N, 11);
	unsigned char *want = malloc(N);
	CHECK(want);
	memcpy(want, src, N);
	void *dsts[1] = { dv };
	const void *srcs[1] = { src };
	size_t sizes[1] = { N }, idx = 0;
	struct cudaMemcpyAttributes attr;
	memset(&attr, 0, sizeof attr);
	attr.srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
	CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, &idx, 1, st));
	memset(src, 0, N);
	CK(cudaMemcpyAsync(back, dv, N, cudaMemcpyDeviceToHost, st));
	CK(cudaStreamSynchronize(st));
	CHECK(memcmp(want, back, N) == 0);

	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	CK(cudaStreamDestroy(st));
	CK(cudaFree(dv));
	free(h);
	free(back);
	free(src);
	free(want);
}

/* FAKECUDA_DEVICES=0 */
static void
mode_nodev(void)
{
	int n = 5, v = 0;
	CHECK_EQ(cudaGetDeviceCount(&n), cudaErrorNoDevice);
	CHECK(n == 0);
	void *p = NULL;
	CHECK_EQ(cudaMalloc(&p, 16), cudaErrorNoDevice);
	cudaStream_t st;
	CHECK_EQ(cudaStreamCreate(&st), cudaErrorNoDevice);
	char buf[64];
	CHECK_EQ(cudaHostRegister(buf, sizeof buf, 0), cudaErrorNoDevice);
	CK(cudaRuntimeGetVersion(&v));
	CHECK(v == 13000);
	CHECK(strcmp(cudaGetErrorName(cudaErrorNoDevice),
		     "cudaErrorNoDevice") == 0);
}

/* FAKECUDA_DRIVER=old / none */
static void
mode_driver(int none)
{
	int n = 5, v = -1;
	CHECK_EQ(cudaGetDeviceCount(&n), cudaErrorInsufficientDriver);
	CHECK_EQ(cudaSetDevice(0), cudaErrorInsufficientDriver);
	CK(cudaDriverGetVersion(&v));
	CHECK(none ? v == 0 : (v > 0 && v < 13000));
}

/* FAKECUDA_FAIL_COPY_AFTER=1 FAKECUDA_REG_FAIL_AFTER=1 */
static void
mode_fail(void)
{
	enum {
		N = 4096
	};
	unsigned char *h = calloc(1, N), *back = calloc(1, N);
	CHECK(h && back);
	memset(h, 0x11, N);
	void *dv = NULL;
	CK(cudaMalloc(&dv, N));
	cudaStream_t st;
	cudaEvent_t ev;
	CK(cudaStreamCreate(&st));
	CK(cudaEventCreate(&ev));
	CK(cudaMemcpyAsync(dv, h, N, cudaMemcpyHostToDevice, st)); /* 1st: ok */
	CK(cudaMemcpyAsync(back, dv, N, cudaMemcpyDeviceToHost,
			   st)); /* 2nd: fails */
	CK(cudaEventRecord(ev, st));
	CHECK_EQ(cudaEventSynchronize(ev), cudaErrorIllegalAddress);
	CHECK_EQ(cudaEventQuery(ev), cudaErrorIllegalAddress);
	CHECK(all_zero(back, N));
	CHECK_EQ(cudaStreamSynchronize(st), cudaErrorIllegalAddress);
	CK(cudaStreamSynchronize(st)); /* cleared */
	struct fakecuda_stats s = stats();
	CHECK(s.failed_copies == 1 && s.copies_h2d == 1 && s.copies_d2h == 0);

	unsigned char *r = malloc(2 * N);
	CHECK(r);
	CK(cudaHostRegister(r, N, 0));
	CHECK_EQ(cudaHostRegister(r + N, N, 0), cudaErrorMemoryAllocation);
	s = stats();
	CHECK(s.host_register_calls == 2 && s.host_register_ok == 1 &&
	      s.host_register_failed == 1);
	CK(cudaHostUnregister(r));

	CK(cudaEventDestroy(ev));
	CK(cudaStreamDestroy(st));
	CK(cudaFree(dv));
	free(h);
	free(back);
	free(r);
}

/* FAKECUDA_REG_US_PER_MIB=100000: registering 2 MiB takes ~200 ms */
static void
mode_regslow(void)
{
	size_t n = 2u << 20;
	unsigned char *p = malloc(n);
	CHECK(p);
	memset(p, 1, n);
	double t0 = now_ms();
	CK(cudaHostRegister(p, n, 0));
	double dt = now_ms() - t0;
	CHECK(dt >= 190.0 && dt < 5000.0);
	CK(cudaHostUnregister(p));
	free(p);
}

static void
run_child(const char *self, const char *mode, const char *const *env)
{
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		for (const char *const *e = env; *e; e += 2)
			setenv(e[0], e[1], 1);
		execl(self, self, mode, (char *)NULL);
		perror("execl");
		_exit(127);
	}
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "FAIL child mode %s (status %d)\n", mode, st);
		exit(1);
	}
}

int
main(int argc, char **argv)
{
	if (argc > 1) {
		if (!strcmp(argv[1], "delay"))
			mode_delay();
		else if (!strcmp(argv[1], "nodev"))
			mode_nodev();
		else if (!strcmp(argv[1], "driver-old"))
			mode_driver(0);
		else if (!strcmp(argv[1], "driver-none"))
			mode_driver(1);
		else if (!strcmp(argv[1], "fail"))
			mode_fail();
		else if (!strcmp(argv[1], "regslow"))
			mode_regslow();
		else if (!strcmp(argv[1], "ipc-child") && argc > 2)
			mode_ipc_child(argv[2]);
		else {
			fprintf(stderr, "FAIL unknown mode %s\n", argv[1]);
			return 1;
		}
		printf("ok mode %s\n", argv[1]);
		return 0;
	}
	test_basics();
	test_round_trip();
	test_pageable();
	test_register_errors();
	test_batch();
	test_stream_event_errors();
	test_threads();
	test_pool_local();
	printf("ok in-process\n");
	if (getenv("FAKECUDA_NO_CHILDREN"))
		return 0;

	test_pool_ipc(argv[0]);
	printf("ok pool ipc\n");

	static const char *const e_delay[] = { "FAKECUDA_COPY_DELAY_US",
					       "100000", NULL };
	static const char *const e_nodev[] = { "FAKECUDA_DEVICES", "0", NULL };
	static const char *const e_old[] = { "FAKECUDA_DRIVER", "old", NULL };
	static const char *const e_none[] = { "FAKECUDA_DRIVER", "none", NULL };
	static const char *const e_fail[] = { "FAKECUDA_FAIL_COPY_AFTER", "1",
					      "FAKECUDA_REG_FAIL_AFTER", "1",
					      NULL };
	static const char *const e_slow[] = { "FAKECUDA_REG_US_PER_MIB",
					      "100000", NULL };
	run_child(argv[0], "delay", e_delay);
	run_child(argv[0], "nodev", e_nodev);
	run_child(argv[0], "driver-old", e_old);
	run_child(argv[0], "driver-none", e_none);
	run_child(argv[0], "fail", e_fail);
	run_child(argv[0], "regslow", e_slow);
	printf("ok all\n");
	return 0;
}
