/* fakecuda.h - test-only statistics interface of the host-memory CUDA runtime
 * emulation in tests/gpu/fakecudart.c (built as a stand-in libcudart.so.13).
 * Counters marked (cum) are cumulative and cleared by fakecuda_reset_stats();
 * counters marked (live) describe current state and are never reset. */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fakecuda_stats {
	/* executed (successful) copies and bytes, by resolved kind (cum) */
	uint64_t copies_h2d, copies_d2h, copies_d2d, copies_h2h;
	uint64_t bytes_h2d, bytes_d2h, bytes_d2d, bytes_h2h;
	/* h2d/d2h copies whose host side was not entirely inside a pinned range
     * (cudaMallocHost/cudaHostAlloc/cudaHostRegister) at execution time (cum) */
	uint64_t pageable_copies, pageable_bytes;
	/* copies that executed but failed (FAKECUDA_FAIL_COPY_AFTER, or memory
     * freed before the queued copy ran) (cum) */
	uint64_t failed_copies;
	uint64_t memsets, memset_bytes; /* executed memsets (cum) */
	uint64_t batch_calls,
		batch_copies; /* accepted cudaMemcpyBatchAsync (cum) */
	uint64_t host_register_calls, host_register_ok,
		host_register_failed; /* (cum) */
	uint64_t host_unregister_ok;  /* (cum) */
	uint64_t registered_bytes,
		registered_ranges; /* cudaHostRegister'ed now (live) */
	uint64_t pinned_allocs_live,
		pinned_bytes_live; /* cudaMallocHost/cudaHostAlloc now (live) */
	uint64_t device_allocs_live,
		device_bytes_live;          /* cudaMalloc now (live) */
	uint64_t streams_created;           /* (cum) */
	uint64_t streams_live, events_live; /* (live) */
	/* stream-ordered memory pools (cudaMemPoolCreate and imported pools):
     * pool objects whose memory is still held (handle not destroyed, or
     * allocations / imported pointers outstanding) (live) */
	uint64_t pools_live;
	/* bytes of the memfds backing the pools this process created (one
     * header page each + every page ever allocated: they grow, never
     * shrink) (live) */
	uint64_t pool_bytes_live;
	/* cudaMallocFromPoolAsync allocations not yet freed, and their bytes
     * (not counted in device_allocs_live) (live) */
	uint64_t pool_allocs_live, pool_alloc_bytes_live;
	/* cudaMemPoolImportPointer mappings not yet freed (live) */
	uint64_t imports_live;
};

/* Fills *out; returns 0, or -1 when out is NULL. */
int fakecuda_stats(struct fakecuda_stats *out);
/* Clears the cumulative counters (not the live ones, not the
 * FAKECUDA_FAIL_COPY_AFTER / FAKECUDA_REG_FAIL_AFTER call counters). */
void fakecuda_reset_stats(void);

#ifdef __cplusplus
}
#endif
#endif
