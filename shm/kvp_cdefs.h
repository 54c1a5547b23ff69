/* SPDX-License-Identifier: MIT */
/*
 * kvp_cdefs.h - what every header that kvpool.h includes needs to compile
 * both as C11 and as C++17 (inference engines are C++): the storage class
 * of inline code and a static assertion both languages spell the same.
 * C++ also refuses what C allows silently, so the headers kvpool.h
 * includes keep to the common subset: no parameter named after a C++
 * keyword (new, class, ...), an explicit cast from void *, no designated
 * initializer or compound literal, no arithmetic on enums (tests/client/
 * test_cxx.cc compiles them with g++ -Wall -Wextra -Werror).
 */
#ifndef KVP_CDEFS_H
#define KVP_CDEFS_H

/* Inline code of the modules: one private copy per translation unit,
 * never exported (libkvpool.so exports the public API of kvpool.h, whose
 * functions are KVP_API: ffi.c). */
#ifndef KVP_INLINE
#define KVP_INLINE static inline
#endif

/* _Static_assert is C11's spelling; C++ has static_assert */
#ifdef __cplusplus
#define KVP_STATIC_ASSERT(expr, msg) static_assert(expr, msg)
#else
#define KVP_STATIC_ASSERT(expr, msg) _Static_assert(expr, msg)
#endif

#endif /* KVP_CDEFS_H */
