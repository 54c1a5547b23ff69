/* SPDX-License-Identifier: MIT */
/*
 * kvp_crash.h - crash points: the one list of every state transition at
 * which a test may make a kvpool process die.
 *
 * With KVP_CRASH_AT=<name or number> in its environment (read at the
 * first crash point it passes), a process _exit()s with status
 * KVP_CRASH_EXIT the moment it reaches that point; KVP_CRASH_SKIP=N lets
 * N passes go by first.  A forked child re-arms with kvp_crash_arm().
 * The IDs are stable: new points are appended, none is renumbered.
 * Building with -DKVP_NO_CRASHPOINTS compiles every point out; in normal
 * builds an unarmed point costs one relaxed load and a predicted branch.
 *
 * tests/agent/test_crashpoints.c iterates all of them; docs/reliability.md
 * says what each one proves.
 */
#ifndef KVP_CRASH_H
#define KVP_CRASH_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#ifndef KVP_INLINE
#define KVP_INLINE static inline
#endif

/* exit status of a process stopped at a crash point */
#define KVP_CRASH_EXIT 86

/* X(name, who, where the process dies) */
#define KVP_CRASHPOINTS(X)                                                     \
	X(C_OPEN_CLAIMED, client,                                              \
	  "client slot CAS'd LIVE, pid/start time unwritten")                  \
	X(C_OPEN_DONE, client, "kvp_open finished, nothing held")              \
	X(C_HOLD_STORED, client,                                               \
	  "hold slot written, before the fence/validate")                      \
	X(C_HOLD_TAKEN, client, "hold validated, nothing copied yet")          \
	X(C_COPY_DONE, client, "DRAM bytes copied, hold not yet dropped")      \
	X(C_PUT_CLAIMED, client,                                               \
	  "index slot claimed for a put, nothing allocated")                   \
	X(C_ALLOC_LOCKED, client, "inside the DRAM allocator's lock")          \
	X(C_PUT_ALLOCATED, client,                                             \
	  "runs allocated and tagged, bytes not copied")                       \
	X(C_PUT_COPIED, client, "bytes copied, entry not yet published")       \
	X(C_PUT_PUBLISHED, client, "entry published READY")                    \
	X(C_DELETE_MARKED, client,                                             \
	  "entry marked DELETED, bytes not yet reclaimed")                     \
	X(C_RESOLVE_POSTED, client,                                            \
	  "SSD requests posted, holds up, not answered")                       \
	X(C_RESOLVE_ANSWERED, client,                                          \
	  "SSD answer DONE, staged bytes not copied")                          \
	X(C_SPAN_BIT_CLEARED, client,                                          \
	  "our staging bit cleared, span not freed")                           \
	X(C_SPAN_FREEING, client, "last holder marked the span FREEING")       \
	X(C_LEASE_RESERVED, client, "lease slot RESERVED, not yet LIVE")       \
	X(C_LEASE_LIVE, client, "lease LIVE, lookup hold still up")            \
	X(C_PIN_TAKEN, client,                                                 \
	  "lookup-and-pin: some keys pinned, call unfinished")                 \
	X(C_CLOSE_HALF, client, "kvp_close: holds cleared, slot still LIVE")   \
	X(A_ATTACH, agent,                                                     \
	  "agent attached (incarnation bumped), before cleanup")               \
	X(A_EVICT_CHECK, agent,                                                \
	  "victim under CHECK, before the hold scan verdict")                  \
	X(A_EVICT_FREED, agent,                                                \
	  "victim's slot EMPTY (gen + 1), its runs not yet freed")             \
	X(A_DEMOTE_SUBMITTED, agent,                                           \
	  "demotion write queued, value still DRAM-resident")                  \
	X(A_DEMOTE_SWITCHED, agent,                                            \
	  "location switched to SSD, DRAM not yet freed")                      \
	X(A_PROMOTE_SUBMITTED, agent,                                          \
	  "promotion: DRAM runs allocated, read in flight")                    \
	X(A_PROMOTE_SWITCHED, agent,                                           \
	  "promotion: location switched to DRAM, not answered")                \
	X(A_STAGE_SUBMITTED, agent,                                            \
	  "staging span READING, device read in flight")                       \
	X(A_STAGE_READY, agent, "staging span READY, requests not yet DONE")   \
	X(A_REQ_TAKEN, agent, "request CAS'd TAKEN, not yet served")           \
	X(A_REAP_HOLDS, agent,                                                 \
	  "reaper cleared a dead client's holds, rest undone")                 \
	X(A_REAP_FREEING, agent, "reaper done but for the slot's FREE store")  \
	X(A_LEASE_SWEEP, agent, "lease sweep about to free an expired lease")  \
	X(A_SEG_RECLAIM, agent,                                                \
	  "SSD segment reclaim: entries dropped, segment not given back")      \
	X(A_GC_FREE, agent,                                                    \
	  "orphan-run sweep about to free a run (allocator lock held)")        \
	X(A_TOMBSTONE, agent, "record marked dead, tombstone not yet written") \
	X(A_REQ_ANSWERING, agent,                                              \
	  "request claimed ANSWERING, answer not yet DONE")                    \
	X(C_IX_COUNTED, client,                                                \
	  "index count raised for a put, not yet recorded as ours")            \
	X(A_SEG_REINSERT, agent,                                               \
	  "SSD reclaim: kept records rewritten, entry not yet switched")       \
	X(A_SSD_BATCH_BUILT, agent,                                            \
	  "SSD batch header block sealed, its write not yet queued")           \
	X(A_SSD_BATCH_WRITTEN, agent,                                          \
	  "SSD batch written, its records' completions not yet handed back")

enum kvp_crash_id {
#define KVP_CP_ENUM_(name, who, what) KVP_CP_##name,
	KVP_CRASHPOINTS(KVP_CP_ENUM_)
#undef KVP_CP_ENUM_
	KVP_CP__N
};

/* One process-wide arming (weak: every translation unit that includes
 * this header shares it, libkvpool.so included).  0: not read yet,
 * -1: unarmed, id + 1: armed.  Process-private, so plain GCC atomics. */
__attribute__((weak)) int kvp__crash_at;
__attribute__((weak)) long kvp__crash_skip;

KVP_INLINE const char *
kvp_crash_name(unsigned id)
{
	static const char *const names[] = {
#define KVP_CP_NAME_(name, who, what) #name,
		KVP_CRASHPOINTS(KVP_CP_NAME_)
#undef KVP_CP_NAME_
	};
	return id < KVP_CP__N ? names[id] : "?";
}

KVP_INLINE const char *
kvp_crash_what(unsigned id)
{
	static const char *const what[] = {
#define KVP_CP_WHAT_(name, who, w) w,
		KVP_CRASHPOINTS(KVP_CP_WHAT_)
#undef KVP_CP_WHAT_
	};
	return id < KVP_CP__N ? what[id] : "?";
}

/* 1 if the point is the agent's (kvpoold), 0 a client's. */
KVP_INLINE int
kvp_crash_is_agent(unsigned id)
{
	return id < KVP_CP__N && kvp_crash_name(id)[0] == 'A';
}

/* Look a point up by name (case-insensitive) or number; -1 if none. */
KVP_INLINE int
kvp_crash_lookup(const char *s)
{
	unsigned k;
	char *end;
	long v;

	if (!s || !*s)
		return -1;
	v = strtol(s, &end, 10);
	if (!*end)
		return v >= 0 && v < KVP_CP__N ? (int)v : -1;
	for (k = 0; k < KVP_CP__N; k++)
		if (!strcasecmp(s, kvp_crash_name(k)))
			return (int)k;
	return -1;
}

/* Arm point id (or disarm with id < 0): die at its (skip + 1)-th pass. */
KVP_INLINE void
kvp_crash_arm(int id, long skip)
{
	__atomic_store_n(&kvp__crash_skip, skip, __ATOMIC_RELAXED);
	__atomic_store_n(&kvp__crash_at,
			 id >= 0 && id < KVP_CP__N ? id + 1 : -1,
			 __ATOMIC_RELAXED);
}

KVP_INLINE int
kvp__crash_from_env(void)
{
	const char *e = getenv("KVP_CRASH_AT"), *sk = getenv("KVP_CRASH_SKIP");
	int id = e ? kvp_crash_lookup(e) : -1;

	if (e && id < 0)
		fprintf(stderr,
			"kvpool: KVP_CRASH_AT=%s names no crash point\n", e);
	kvp_crash_arm(id, sk ? strtol(sk, NULL, 10) : 0);
	return id >= 0 ? id + 1 : -1;
}

static __attribute__((cold, unused)) void
kvp__crash_hit(unsigned id)
{
	static const char pre[] = "kvpool: crash point ";
	const char *n = kvp_crash_name(id);

	/* atomic: threads of one process may pass the point together */
	if (__atomic_fetch_sub(&kvp__crash_skip, 1, __ATOMIC_RELAXED) > 0)
		return;
	/* async-signal-safe output, then die without running anything */
	if (write(2, pre, sizeof(pre) - 1) < 0 || write(2, n, strlen(n)) < 0 ||
	    write(2, "\n", 1) < 0) {
		/* nothing to do: we are about to die anyway */
	}
	_exit(KVP_CRASH_EXIT);
}

#ifdef KVP_NO_CRASHPOINTS
#define kvp_crashpoint(id) ((void)0)
#else
#define kvp_crashpoint(id) kvp__crashpoint(KVP_CP_##id)
#endif

KVP_INLINE void
kvp__crashpoint(unsigned id)
{
	int at = __atomic_load_n(&kvp__crash_at, __ATOMIC_RELAXED);

	if (__builtin_expect(at == 0, 0))
		at = kvp__crash_from_env();
	if (__builtin_expect(at == (int)id + 1, 0))
		kvp__crash_hit(id);
}

#endif /* KVP_CRASH_H */
