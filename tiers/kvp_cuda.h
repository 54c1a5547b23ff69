/* SPDX-License-Identifier: MIT */
/*
 * kvp_cuda.h - the CUDA runtime, loaded at run time (dlopen), never at
 * link time: kvpool builds without the toolkit, and a program built
 * against it runs on a machine with no GPU, no driver or no CUDA at all.
 * The one home of CUDA in kvpool (STYLE.md: tiers/ owns liburing and
 * CUDA); the client's device calls (shm/client_dev_int.h) use it.
 *
 * The declarations below are the slice of the runtime's C ABI kvpool
 * calls (cuda_runtime_api.h, CUDA 12 and 13), written out so no CUDA
 * header is needed to build; tests/gpu/test_cuda_abi.c compares every
 * constant and struct layout with the toolkit's headers where they are
 * installed.  cudaError_t and the enum parameters are passed as unsigned
 * int (what the compilers give an enum with no negative value).
 *
 * Which library: $KVPOOL_CUDART if set (only that one); else a runtime
 * this process has loaded already (an engine's torch brings its own: the
 * streams and device pointers it hands us are that runtime's, so we use
 * it too), else libcudart.so.13, .so.12, .so from the loader's path and
 * /usr/local/cuda/lib64.  Loaded once per process (per inlining unit).
 */
#ifndef KVP_CUDA_H
#define KVP_CUDA_H

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KVP_INLINE
#define KVP_INLINE static inline
#endif

/* cudaError_t values kvpool tells apart */
#define KVP_CU_OK 0u
#define KVP_CU_ERR_INVALID_VALUE 1u
#define KVP_CU_ERR_MEMORY_ALLOCATION 2u
#define KVP_CU_ERR_STUB_LIBRARY 34u
#define KVP_CU_ERR_INSUFFICIENT_DRIVER 35u
#define KVP_CU_ERR_DEVICES_UNAVAILABLE 46u
#define KVP_CU_ERR_NO_DEVICE 100u
#define KVP_CU_ERR_INVALID_DEVICE 101u
#define KVP_CU_ERR_NOT_READY 600u
#define KVP_CU_ERR_HOST_MEMORY_ALREADY_REGISTERED 712u
#define KVP_CU_ERR_HOST_MEMORY_NOT_REGISTERED 713u
#define KVP_CU_ERR_SYSTEM_DRIVER_MISMATCH 803u
#define KVP_CU_ERR_COMPAT_NOT_SUPPORTED_ON_DEVICE 804u

/* enum cudaMemcpyKind */
#define KVP_CU_MEMCPY_H2D 1u
#define KVP_CU_MEMCPY_D2H 2u
#define KVP_CU_MEMCPY_D2D 3u /* the GPU tests' own copies (tests/gpu/) */
#define KVP_CU_MEMCPY_DEFAULT 4u
/* flags */
#define KVP_CU_HOST_REGISTER_PORTABLE 0x01u /* cudaHostRegisterPortable */
#define KVP_CU_STREAM_NON_BLOCKING 0x01u    /* cudaStreamNonBlocking */
#define KVP_CU_EVENT_DISABLE_TIMING 0x02u   /* cudaEventDisableTiming */
/* enum cudaMemLocationType, cudaMemcpySrcAccessOrder */
#define KVP_CU_MEMLOC_DEVICE 1
#define KVP_CU_MEMLOC_HOST 2
#define KVP_CU_SRC_ACCESS_ORDER_STREAM 1

/* memory pools (the HBM tier): enum cudaMemAllocationType,
 * cudaMemAllocationHandleType, cudaMemAccessFlags */
#define KVP_CU_ALLOC_PINNED 1
#define KVP_CU_HANDLE_POSIX_FD 1
#define KVP_CU_ACCESS_RW 3
#define KVP_CU_MEMCPY_DEFAULT_KIND KVP_CU_MEMCPY_DEFAULT

/* struct cudaMemLocation, struct cudaMemcpyAttributes (CUDA >= 12.8) */
struct kvp_cu_memloc {
	int ml_type;
	int ml_id;
};

struct kvp_cu_copy_attr {
	int ca_src_access_order;
	struct kvp_cu_memloc ca_src_hint;
	struct kvp_cu_memloc ca_dst_hint;
	unsigned int ca_flags;
};

/* struct cudaMemPoolProps, cudaMemAccessDesc, cudaMemPoolPtrExportData */
struct kvp_cu_pool_props {
	int pp_alloc_type;
	int pp_handle_types;
	struct kvp_cu_memloc pp_location;
	void *pp_win32_security;
	size_t pp_max_size;
	unsigned short pp_usage;
	unsigned char pp_reserved[54];
};

struct kvp_cu_access {
	struct kvp_cu_memloc ac_location;
	int ac_flags;
};

struct kvp_cu_ptr_export {
	unsigned char pe_reserved[64];
};

/* The runtime as kvpool sees it: what loading found, and its calls.
 * Streams and events are opaque pointers (cudaStream_t, cudaEvent_t). */
struct kvp_cuda {
	int cu_status; /* 0: usable; -ENOTSUP no runtime; -ENODEV none/driver */
	int cu_devices;
	int cu_runtime_version;
	int cu_driver_version;
	unsigned int cu_init_err; /* the runtime's answer when it refused */
	char cu_path[256];        /* the library loaded, for the log */
	void *cu_lib;
	unsigned int (*GetDeviceCount)(int *count);
	unsigned int (*GetDevice)(int *device);
	unsigned int (*SetDevice)(int device);
	unsigned int (*RuntimeGetVersion)(int *v);
	unsigned int (*DriverGetVersion)(int *v);
	const char *(*GetErrorString)(unsigned int err);
	unsigned int (*StreamCreateWithFlags)(void **stream,
					      unsigned int flags);
	unsigned int (*StreamDestroy)(void *stream);
	unsigned int (*StreamSynchronize)(void *stream);
	unsigned int (*EventCreateWithFlags)(void **event, unsigned int flags);
	unsigned int (*EventRecord)(void *event, void *stream);
	unsigned int (*EventQuery)(void *event);
	unsigned int (*EventSynchronize)(void *event);
	unsigned int (*EventDestroy)(void *event);
	unsigned int (*MemcpyAsync)(void *dst, const void *src, size_t n,
				    unsigned int kind, void *stream);
	unsigned int (*HostRegister)(void *p, size_t n, unsigned int flags);
	unsigned int (*HostUnregister)(void *p);
	unsigned int (*MallocHost)(void **p, size_t n);
	unsigned int (*FreeHost)(void *p);
	/* memory pools with POSIX fd export (the HBM tier); NULL where the
	 * runtime has none (then there is no HBM tier) */
	unsigned int (*MemPoolCreate)(void **pool,
				      const struct kvp_cu_pool_props *props);
	unsigned int (*MemPoolDestroy)(void *pool);
	unsigned int (*MallocFromPoolAsync)(void **p, size_t n, void *pool,
					    void *stream);
	unsigned int (*FreeAsync)(void *p, void *stream);
	unsigned int (*MemPoolExportToShareableHandle)(void *handle, void *pool,
						       unsigned int type,
						       unsigned int flags);
	unsigned int (*MemPoolImportFromShareableHandle)(void **pool,
							 void *handle,
							 unsigned int type,
							 unsigned int flags);
	unsigned int (*MemPoolExportPointer)(struct kvp_cu_ptr_export *d,
					     void *p);
	unsigned int (*MemPoolImportPointer)(void **p, void *pool,
					     struct kvp_cu_ptr_export *d);
	unsigned int (*MemPoolSetAccess)(void *pool,
					 const struct kvp_cu_access *desc,
					 size_t count);
	unsigned int (*Free)(void *p);
	/* cudaMemcpyBatchAsync: CUDA 13 (no failIdx) or 12.8/12.9 (with
	 * it); NULL where the runtime has neither */
	unsigned int (*MemcpyBatchAsync13)(void *const *dsts,
					   const void *const *srcs,
					   const size_t *sizes, size_t count,
					   struct kvp_cu_copy_attr *attrs,
					   size_t *attr_idxs, size_t nattrs,
					   void *stream);
	unsigned int (*MemcpyBatchAsync12)(void *const *dsts,
					   const void *const *srcs,
					   const size_t *sizes, size_t count,
					   struct kvp_cu_copy_attr *attrs,
					   size_t *attr_idxs, size_t nattrs,
					   size_t *fail_idx, void *stream);
};

/* A runtime error as a status of kvpool: no device or no usable driver
 * -ENODEV, a bad pointer or size -EINVAL, out of memory -ENOMEM, any
 * other a failed copy (-EIO). */
KVP_INLINE int
kvp_cuda_status(unsigned int err)
{
	switch (err) {
	case KVP_CU_OK:
		return 0;
	case KVP_CU_ERR_NO_DEVICE:
	case KVP_CU_ERR_INVALID_DEVICE:
	case KVP_CU_ERR_INSUFFICIENT_DRIVER:
	case KVP_CU_ERR_STUB_LIBRARY:
	case KVP_CU_ERR_DEVICES_UNAVAILABLE:
	case KVP_CU_ERR_SYSTEM_DRIVER_MISMATCH:
	case KVP_CU_ERR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
		return -ENODEV;
	case KVP_CU_ERR_INVALID_VALUE:
		return -EINVAL;
	case KVP_CU_ERR_MEMORY_ALLOCATION:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

KVP_INLINE struct kvp_cuda *
kvp__cuda_state(void)
{
	static struct kvp_cuda cu;

	return &cu;
}

/* Open the runtime: $KVPOOL_CUDART alone, else one already loaded, else
 * the usual names. */
KVP_INLINE void *
kvp__cuda_open(char *path, size_t cap)
{
	static const char *const names[] = {
		"libcudart.so.13",
		"libcudart.so.12",
		"libcudart.so",
		"/usr/local/cuda/lib64/libcudart.so.13",
		"/usr/local/cuda/lib64/libcudart.so.12",
	};
	const char *env = getenv("KVPOOL_CUDART");
	void *h;
	size_t k;
	int pass;

	if (env && *env) {
		snprintf(path, cap, "%s", env);
		return dlopen(env, RTLD_NOW | RTLD_LOCAL);
	}
	for (pass = 0; pass < 2; pass++)
		for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
			h = dlopen(names[k], RTLD_NOW | RTLD_LOCAL |
						     (pass ? 0 : RTLD_NOLOAD));
			if (h) {
				snprintf(path, cap, "%s", names[k]);
				return h;
			}
		}
	snprintf(path, cap, "libcudart.so.13");
	return NULL;
}

KVP_INLINE void
kvp__cuda_load(void)
{
	struct kvp_cuda *cu = kvp__cuda_state();
	void *h = kvp__cuda_open(cu->cu_path, sizeof(cu->cu_path));
	unsigned int err;
	int n = 0;

	cu->cu_status = -ENOTSUP;
	if (!h)
		return;
	cu->cu_lib = h;
#define KVP__CU_SYM(f) (*(void **)(&cu->f) = dlsym(h, "cuda" #f), cu->f != NULL)
	if (!KVP__CU_SYM(GetDeviceCount) || !KVP__CU_SYM(GetDevice) ||
	    !KVP__CU_SYM(SetDevice) || !KVP__CU_SYM(RuntimeGetVersion) ||
	    !KVP__CU_SYM(DriverGetVersion) || !KVP__CU_SYM(GetErrorString) ||
	    !KVP__CU_SYM(StreamCreateWithFlags) ||
	    !KVP__CU_SYM(StreamDestroy) || !KVP__CU_SYM(StreamSynchronize) ||
	    !KVP__CU_SYM(EventCreateWithFlags) || !KVP__CU_SYM(EventRecord) ||
	    !KVP__CU_SYM(EventQuery) || !KVP__CU_SYM(EventSynchronize) ||
	    !KVP__CU_SYM(EventDestroy) || !KVP__CU_SYM(MemcpyAsync) ||
	    !KVP__CU_SYM(HostRegister) || !KVP__CU_SYM(HostUnregister) ||
	    !KVP__CU_SYM(MallocHost) || !KVP__CU_SYM(FreeHost))
		return; /* not a CUDA runtime we can use: -ENOTSUP */
	/* optional: the HBM tier needs them all */
	if (!KVP__CU_SYM(MemPoolCreate) || !KVP__CU_SYM(MemPoolDestroy) ||
	    !KVP__CU_SYM(MallocFromPoolAsync) || !KVP__CU_SYM(FreeAsync) ||
	    !KVP__CU_SYM(MemPoolExportToShareableHandle) ||
	    !KVP__CU_SYM(MemPoolImportFromShareableHandle) ||
	    !KVP__CU_SYM(MemPoolExportPointer) ||
	    !KVP__CU_SYM(MemPoolImportPointer) ||
	    !KVP__CU_SYM(MemPoolSetAccess) || !KVP__CU_SYM(Free))
		cu->MemPoolCreate = NULL;
#undef KVP__CU_SYM
	cu->RuntimeGetVersion(&cu->cu_runtime_version);
	cu->DriverGetVersion(&cu->cu_driver_version);
	{
		void *b = dlsym(h, "cudaMemcpyBatchAsync");

		/* the signature changed in 13.0 (failIdx went away) */
		if (b && cu->cu_runtime_version >= 13000)
			*(void **)&cu->MemcpyBatchAsync13 = b;
		else if (b && cu->cu_runtime_version >= 12080)
			*(void **)&cu->MemcpyBatchAsync12 = b;
	}
	err = cu->GetDeviceCount(&n);
	cu->cu_init_err = err;
	if (err != KVP_CU_OK || n <= 0) {
		cu->cu_status = -ENODEV;
		return;
	}
	cu->cu_devices = n;
	cu->cu_status = 0;
}

/* The runtime, loaded on first use (thread-safe); check cu_status. */
KVP_INLINE struct kvp_cuda *
kvp_cuda(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, kvp__cuda_load);
	return kvp__cuda_state();
}

/* A human line on why the runtime is not usable (or which one is). */
KVP_INLINE const char *
kvp_cuda_describe(const struct kvp_cuda *cu, char *buf, size_t cap)
{
	if (cu->cu_status == -ENOTSUP)
		snprintf(buf, cap, "no CUDA runtime (%s: %s)", cu->cu_path,
			 cu->cu_lib ? "not a usable runtime" :
				      "cannot be loaded");
	else if (cu->cu_status == -ENODEV)
		snprintf(buf, cap,
			 "CUDA runtime %d loaded (%s), no device: %s "
			 "(driver %d)",
			 cu->cu_runtime_version, cu->cu_path,
			 cu->GetErrorString ?
				 cu->GetErrorString(cu->cu_init_err) :
				 "?",
			 cu->cu_driver_version);
	else
		snprintf(buf, cap,
			 "CUDA runtime %d (%s), driver %d, %d device%s",
			 cu->cu_runtime_version, cu->cu_path,
			 cu->cu_driver_version, cu->cu_devices,
			 cu->cu_devices == 1 ? "" : "s");
	return buf;
}

#endif /* KVP_CUDA_H */
