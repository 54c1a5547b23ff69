/* SPDX-License-Identifier: MIT */
/*
 * ffi.c - libkvpool.so: the calls of kvpool.h as exported functions, for
 * programs that link -lkvpool (KVP_LINK_SHARED) and for languages that
 * cannot inline C (Python ctypes).  As liburing's ffi.c does: KVP_API,
 * the storage class of every public call, is made an exported definition
 * here, and the inline code behind the calls (KVP_INLINE) stays static,
 * so the library defines the public calls and nothing else.
 * libkvpool.map says so once more to the linker (local: *), gives the
 * calls their symbol version, and is what tests/client/test_exports.sh
 * compares with kvpool.h and with nm -D.
 */
#define KVP_API __attribute__((visibility("default")))
#include "kvpool.h"
