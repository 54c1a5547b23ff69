// SPDX-License-Identifier: MIT
/*
 * test_cxx_shared.cc - test_cxx.cc with KVP_LINK_SHARED: kvpool.h's
 * declarations alone, linked with libkvpool.so (configure: LIB_PROGRAMS).
 */
#define KVP_LINK_SHARED
#include "tests/client/test_cxx.cc"
