/* SPDX-License-Identifier: MIT */
/*
 * kvp_assert.h - KVP_ASSERT(cond, "Inn"): an invariant of the agent's
 * own state, named by its number in docs/invariants.md, checked in the
 * debug, asan, tsan and fuzz builds (configure defines KVP_DEBUG there)
 * and compiled out of release builds (the condition is not evaluated).
 *
 * Only for what the agent alone writes: its private tables (operations
 * in flight, per-slot busy counts, deferred frees, its copy of the
 * geometry), or what it computed itself from validated input.  Never for
 * anything in the segment a client can write: a hostile or broken client
 * must get an error or a repair (I28), not an agent that aborts (rule 7).
 * A failed assertion logs one line (the invariant, the condition, where)
 * and aborts, so the core dump shows the state that broke it.
 */
#ifndef KVP_ASSERT_H
#define KVP_ASSERT_H

#include <stdlib.h>

#include "shm/kvp_env.h"

#ifdef KVP_DEBUG
#define KVP_ASSERT(cond, inv)                                               \
	do {                                                                \
		if (!(cond)) {                                              \
			kvp_log(KVP_LOG_ERROR, "assert",                    \
				"invariant %s broken: %s (%s:%d, %s)", inv, \
				#cond, __FILE__, __LINE__, __func__);       \
			abort();                                            \
		}                                                           \
	} while (0)
#else
#define KVP_ASSERT(cond, inv) ((void)sizeof(!(cond)))
#endif

#endif /* KVP_ASSERT_H */
