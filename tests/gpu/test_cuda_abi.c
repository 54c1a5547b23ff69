/* SPDX-License-Identifier: MIT */
/*
 * test_cuda_abi.c - tiers/kvp_cuda.h writes out the slice of the CUDA
 * runtime's ABI kvpool calls (so kvpool builds without the toolkit); this
 * file, compiled against the toolkit's own headers, fails to compile if
 * any constant, struct layout or function type there differs from them.
 * tests/gpu/test_cuda_abi.sh compiles it (SKIP without the headers).
 */
#include <cuda_runtime_api.h>
#include <stddef.h>

#include "tiers/kvp_cuda.h"

#define SAME(a, b) \
	_Static_assert((long long)(a) == (long long)(b), #a " != " #b)

SAME(KVP_CU_OK, cudaSuccess);
SAME(KVP_CU_ERR_INVALID_VALUE, cudaErrorInvalidValue);
SAME(KVP_CU_ERR_MEMORY_ALLOCATION, cudaErrorMemoryAllocation);
SAME(KVP_CU_ERR_STUB_LIBRARY, cudaErrorStubLibrary);
SAME(KVP_CU_ERR_INSUFFICIENT_DRIVER, cudaErrorInsufficientDriver);
SAME(KVP_CU_ERR_DEVICES_UNAVAILABLE, cudaErrorDevicesUnavailable);
SAME(KVP_CU_ERR_NO_DEVICE, cudaErrorNoDevice);
SAME(KVP_CU_ERR_INVALID_DEVICE, cudaErrorInvalidDevice);
SAME(KVP_CU_ERR_NOT_READY, cudaErrorNotReady);
SAME(KVP_CU_ERR_HOST_MEMORY_ALREADY_REGISTERED,
     cudaErrorHostMemoryAlreadyRegistered);
SAME(KVP_CU_ERR_HOST_MEMORY_NOT_REGISTERED, cudaErrorHostMemoryNotRegistered);
SAME(KVP_CU_ERR_SYSTEM_DRIVER_MISMATCH, cudaErrorSystemDriverMismatch);
SAME(KVP_CU_ERR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
     cudaErrorCompatNotSupportedOnDevice);
SAME(KVP_CU_MEMCPY_H2D, cudaMemcpyHostToDevice);
SAME(KVP_CU_MEMCPY_D2H, cudaMemcpyDeviceToHost);
SAME(KVP_CU_MEMCPY_D2D, cudaMemcpyDeviceToDevice);
SAME(KVP_CU_MEMCPY_DEFAULT, cudaMemcpyDefault);
SAME(KVP_CU_HOST_REGISTER_PORTABLE, cudaHostRegisterPortable);
SAME(KVP_CU_STREAM_NON_BLOCKING, cudaStreamNonBlocking);
SAME(KVP_CU_EVENT_DISABLE_TIMING, cudaEventDisableTiming);
SAME(KVP_CU_MEMLOC_DEVICE, cudaMemLocationTypeDevice);
SAME(KVP_CU_MEMLOC_HOST, cudaMemLocationTypeHost);
SAME(KVP_CU_SRC_ACCESS_ORDER_STREAM, cudaMemcpySrcAccessOrderStream);

/* the structs, field by field */
SAME(sizeof(struct kvp_cu_memloc), sizeof(struct cudaMemLocation));
SAME(offsetof(struct kvp_cu_memloc, ml_type),
     offsetof(struct cudaMemLocation, type));
SAME(offsetof(struct kvp_cu_memloc, ml_id),
     offsetof(struct cudaMemLocation, id));
SAME(sizeof(struct kvp_cu_copy_attr), sizeof(struct cudaMemcpyAttributes));
SAME(offsetof(struct kvp_cu_copy_attr, ca_src_access_order),
     offsetof(struct cudaMemcpyAttributes, srcAccessOrder));
SAME(offsetof(struct kvp_cu_copy_attr, ca_src_hint),
     offsetof(struct cudaMemcpyAttributes, srcLocHint));
SAME(offsetof(struct kvp_cu_copy_attr, ca_dst_hint),
     offsetof(struct cudaMemcpyAttributes, dstLocHint));
SAME(offsetof(struct kvp_cu_copy_attr, ca_flags),
     offsetof(struct cudaMemcpyAttributes, flags));

/* memory pools (the HBM tier) */
SAME(KVP_CU_ALLOC_PINNED, cudaMemAllocationTypePinned);
SAME(KVP_CU_HANDLE_POSIX_FD, cudaMemHandleTypePosixFileDescriptor);
SAME(KVP_CU_ACCESS_RW, cudaMemAccessFlagsProtReadWrite);
SAME(sizeof(struct kvp_cu_pool_props), sizeof(struct cudaMemPoolProps));
SAME(offsetof(struct kvp_cu_pool_props, pp_alloc_type),
     offsetof(struct cudaMemPoolProps, allocType));
SAME(offsetof(struct kvp_cu_pool_props, pp_handle_types),
     offsetof(struct cudaMemPoolProps, handleTypes));
SAME(offsetof(struct kvp_cu_pool_props, pp_location),
     offsetof(struct cudaMemPoolProps, location));
SAME(offsetof(struct kvp_cu_pool_props, pp_win32_security),
     offsetof(struct cudaMemPoolProps, win32SecurityAttributes));
SAME(offsetof(struct kvp_cu_pool_props, pp_max_size),
     offsetof(struct cudaMemPoolProps, maxSize));
SAME(offsetof(struct kvp_cu_pool_props, pp_usage),
     offsetof(struct cudaMemPoolProps, usage));
SAME(offsetof(struct kvp_cu_pool_props, pp_reserved),
     offsetof(struct cudaMemPoolProps, reserved));
SAME(sizeof(struct kvp_cu_access), sizeof(struct cudaMemAccessDesc));
SAME(offsetof(struct kvp_cu_access, ac_location),
     offsetof(struct cudaMemAccessDesc, location));
SAME(offsetof(struct kvp_cu_access, ac_flags),
     offsetof(struct cudaMemAccessDesc, flags));
SAME(sizeof(struct kvp_cu_ptr_export), sizeof(struct cudaMemPoolPtrExportData));
_Static_assert(sizeof(cudaMemPool_t) == sizeof(void *), "cudaMemPool_t");

/* cudaError_t and the enum parameters are passed as unsigned int, the
 * streams and events as pointers */
_Static_assert(sizeof(cudaError_t) == sizeof(unsigned int), "cudaError_t");
_Static_assert(__builtin_types_compatible_p(cudaError_t, unsigned int),
	       "cudaError_t is not unsigned int to this compiler");
_Static_assert(sizeof(enum cudaMemcpyKind) == sizeof(unsigned int), "kind");
_Static_assert(sizeof(cudaStream_t) == sizeof(void *), "cudaStream_t");
_Static_assert(sizeof(cudaEvent_t) == sizeof(void *), "cudaEvent_t");

/* Every function kvp_cuda calls: the toolkit's prototype, with cudaError_t
 * as unsigned int, enums as unsigned int and the opaque handles as void *,
 * is exactly the type of kvp_cuda's pointer. */
#define FN(field, real)                                                   \
	_Static_assert(__builtin_types_compatible_p(                      \
			       __typeof__(((struct kvp_cuda *)0)->field), \
			       __typeof__(&real)),                        \
		       #field)
FN(GetDeviceCount, cudaGetDeviceCount);
FN(GetDevice, cudaGetDevice);
FN(SetDevice, cudaSetDevice);
FN(RuntimeGetVersion, cudaRuntimeGetVersion);
FN(DriverGetVersion, cudaDriverGetVersion);
FN(HostRegister, cudaHostRegister);
FN(HostUnregister, cudaHostUnregister);
FN(MallocHost, cudaMallocHost);
FN(FreeHost, cudaFreeHost);
FN(GetErrorString, cudaGetErrorString);
FN(Free, cudaFree);

/* where the types are the same but for the handles' names, call each
 * through a wrapper of kvp_cuda's type: the compiler checks the argument
 * conversions (a wrong count or order fails) */
static unsigned int
w_copy(void *d, const void *s, size_t n, unsigned int kind, void *st)
{
	return cudaMemcpyAsync(d, s, n, (enum cudaMemcpyKind)kind,
			       (cudaStream_t)st);
}

static unsigned int
w_batch(void *const *d, const void *const *s, const size_t *n, size_t count,
	struct kvp_cu_copy_attr *a, size_t *idx, size_t na, void *st)
{
	return cudaMemcpyBatchAsync(d, s, n, count,
				    (struct cudaMemcpyAttributes *)(void *)a,
				    idx, na, (cudaStream_t)st);
}

static unsigned int
w_stream(void **st, unsigned int flags)
{
	return cudaStreamCreateWithFlags((cudaStream_t *)st, flags);
}

static unsigned int
w_event(void **ev, unsigned int flags)
{
	return cudaEventCreateWithFlags((cudaEvent_t *)ev, flags);
}

static unsigned int
w_record(void *ev, void *st)
{
	return cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)st);
}

static unsigned int
w_sdestroy(void *st)
{
	return cudaStreamDestroy((cudaStream_t)st);
}

static unsigned int
w_ssync(void *st)
{
	return cudaStreamSynchronize((cudaStream_t)st);
}

static unsigned int
w_equery(void *ev)
{
	return cudaEventQuery((cudaEvent_t)ev);
}

static unsigned int
w_esync(void *ev)
{
	return cudaEventSynchronize((cudaEvent_t)ev);
}

static unsigned int
w_edestroy(void *ev)
{
	return cudaEventDestroy((cudaEvent_t)ev);
}

static unsigned int
w_pcreate(void **p, const struct kvp_cu_pool_props *pp)
{
	return cudaMemPoolCreate(
		(cudaMemPool_t *)p,
		(const struct cudaMemPoolProps *)(const void *)pp);
}

static unsigned int
w_pdestroy(void *p)
{
	return cudaMemPoolDestroy((cudaMemPool_t)p);
}

static unsigned int
w_pmalloc(void **d, size_t n, void *p, void *st)
{
	return cudaMallocFromPoolAsync(d, n, (cudaMemPool_t)p,
				       (cudaStream_t)st);
}

static unsigned int
w_freeasync(void *d, void *st)
{
	return cudaFreeAsync(d, (cudaStream_t)st);
}

static unsigned int
w_pexport(void *h, void *p, unsigned int type, unsigned int flags)
{
	return cudaMemPoolExportToShareableHandle(
		h, (cudaMemPool_t)p, (enum cudaMemAllocationHandleType)type,
		flags);
}

static unsigned int
w_pimport(void **p, void *h, unsigned int type, unsigned int flags)
{
	return cudaMemPoolImportFromShareableHandle(
		(cudaMemPool_t *)p, h, (enum cudaMemAllocationHandleType)type,
		flags);
}

static unsigned int
w_ptrexport(struct kvp_cu_ptr_export *e, void *d)
{
	return cudaMemPoolExportPointer(
		(struct cudaMemPoolPtrExportData *)(void *)e, d);
}

static unsigned int
w_ptrimport(void **d, void *p, struct kvp_cu_ptr_export *e)
{
	return cudaMemPoolImportPointer(
		d, (cudaMemPool_t)p,
		(struct cudaMemPoolPtrExportData *)(void *)e);
}

static unsigned int
w_access(void *p, const struct kvp_cu_access *a, size_t n)
{
	return cudaMemPoolSetAccess(
		(cudaMemPool_t)p,
		(const struct cudaMemAccessDesc *)(const void *)a, n);
}

int kvpt_cuda_abi(struct kvp_cuda *cu);
int
kvpt_cuda_abi(struct kvp_cuda *cu)
{
	cu->MemcpyAsync = w_copy;
	cu->MemcpyBatchAsync13 = w_batch;
	cu->StreamCreateWithFlags = w_stream;
	cu->EventCreateWithFlags = w_event;
	cu->EventRecord = w_record;
	cu->StreamDestroy = w_sdestroy;
	cu->StreamSynchronize = w_ssync;
	cu->EventQuery = w_equery;
	cu->EventSynchronize = w_esync;
	cu->EventDestroy = w_edestroy;
	cu->MemPoolCreate = w_pcreate;
	cu->MemPoolDestroy = w_pdestroy;
	cu->MallocFromPoolAsync = w_pmalloc;
	cu->FreeAsync = w_freeasync;
	cu->MemPoolExportToShareableHandle = w_pexport;
	cu->MemPoolImportFromShareableHandle = w_pimport;
	cu->MemPoolExportPointer = w_ptrexport;
	cu->MemPoolImportPointer = w_ptrimport;
	cu->MemPoolSetAccess = w_access;
	return 0;
}
