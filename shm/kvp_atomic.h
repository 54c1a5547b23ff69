/* SPDX-License-Identifier: MIT */
/*
 * kvp_atomic.h - the one home of every atomic operation on shared memory.
 *
 * Everything the segment shares between processes goes through these
 * wrappers, which are built on libatomic_ops (lock-free and address-free:
 * they work on a MAP_SHARED mapping at different addresses in different
 * processes).  gcc's 16-byte __atomic calls fall back to a process-private
 * lock in libatomic and are never used here.
 *
 * Every call site carries a comment naming what the ordering pairs with.
 *
 * All shared words are 64-bit AO_t (x86-64, aarch64: AO_t is 64 bits wide;
 * a static assert below refuses anything else) or 32-bit futex words
 * (unsigned int, AO_int_* operations).
 */
#ifndef KVP_ATOMIC_H
#define KVP_ATOMIC_H

#include <stdint.h>
#include <atomic_ops.h>

#include "shm/kvp_cdefs.h"

KVP_STATIC_ASSERT(sizeof(AO_t) == 8, "kvpool needs a 64-bit AO_t");
KVP_STATIC_ASSERT(sizeof(unsigned int) == 4, "futex words are 32 bits");

typedef AO_t kvp_aword_t;        /* a 64-bit shared word */
typedef unsigned int kvp_aint_t; /* a 32-bit shared word (futexes) */

/* Relaxed: the caller states why no ordering is needed. */
static inline uint64_t
kvp_load_relaxed(const volatile kvp_aword_t *p)
{
	return (uint64_t)AO_load((const volatile AO_t *)p);
}

static inline void
kvp_store_relaxed(volatile kvp_aword_t *p, uint64_t v)
{
	AO_store(p, (AO_t)v);
}

/* Acquire load: pairs with a kvp_store_release / kvp_cas of the writer. */
static inline uint64_t
kvp_load_acquire(const volatile kvp_aword_t *p)
{
	return (uint64_t)AO_load_acquire((const volatile AO_t *)p);
}

/* Release store: pairs with a kvp_load_acquire of the reader. */
static inline void
kvp_store_release(volatile kvp_aword_t *p, uint64_t v)
{
	AO_store_release(p, (AO_t)v);
}

/* Full-barrier compare-and-swap; true when *p was old and is now nv. */
static inline int
kvp_cas(volatile kvp_aword_t *p, uint64_t old, uint64_t nv)
{
	return AO_compare_and_swap_full(p, (AO_t)old, (AO_t)nv);
}

/* Full-barrier fetch-and-add; returns the old value. */
static inline uint64_t
kvp_fetch_add(volatile kvp_aword_t *p, uint64_t d)
{
	return (uint64_t)AO_fetch_and_add_full(p, (AO_t)d);
}

/*
 * Full fence: orders earlier stores before later loads (store-load).
 * ThreadSanitizer does not model standalone fences, so its builds use a
 * sequentially consistent RMW on one process-wide word instead: on x86 a
 * locked instruction is a full barrier too, and TSan sees the fences of
 * all threads totally ordered through that word.
 */
#if defined(__SANITIZE_THREAD__)
static AO_t kvp__tsan_fence_word;
static inline void
kvp_fence_full(void)
{
	AO_fetch_and_add_full(&kvp__tsan_fence_word, 0);
}
#else
static inline void
kvp_fence_full(void)
{
	AO_nop_full();
}
#endif

/* 32-bit futex words. */
static inline unsigned int
kvp_iload_acquire(const volatile kvp_aint_t *p)
{
	return AO_int_load_acquire((const volatile unsigned int *)p);
}

static inline unsigned int
kvp_ifetch_add(volatile kvp_aint_t *p, unsigned int d)
{
	return AO_int_fetch_and_add_full(p, d);
}

static inline void
kvp_istore_release(volatile kvp_aint_t *p, unsigned int v)
{
	AO_int_store_release(p, v);
}

static inline int
kvp_icas(volatile kvp_aint_t *p, unsigned int old, unsigned int nv)
{
	return AO_int_compare_and_swap_full(p, old, nv);
}

#endif /* KVP_ATOMIC_H */
