/* SPDX-License-Identifier: MIT */
/*
 * ffi.c - export the inline client from libkvpool.so (as liburing does):
 * KVP_INLINE is defined empty, so every client function becomes an
 * external, visible symbol for Python ctypes and other FFIs.
 */
#define KVP_INLINE __attribute__((visibility("default")))
#include "kvpool.h"
