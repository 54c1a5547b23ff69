/* SPDX-License-Identifier: MIT */
/*
 * reaper.c - release everything a dead client held.
 *
 * Death is decided by the kernel (the client's OFD lock on its byte of
 * the segment file is gone, or its recorded pid now names another
 * process) and noticed at once through a pidfd, or at the latest after
 * one reaper period (--reap-ms, default 100 ms).
 *
 * Reaping slot i is a sequence of idempotent steps, so an agent killed
 * half-way redoes it after restart (the slot stays REAPING):
 *  1. CAS LIVE(g) -> REAPING(g)                    (nobody claims it now)
 *  2. clear its hold slots                           (holds released)
 *  2b. its unit of the index count: given back if it held one for a
 *     slot it never published (HAVE_SLOT, the slot still its PENDING);
 *     if it died taking or giving one (RESERVING, RELEASING: did its
 *     CAS happen?) none is given back and the tier thread recounts
 *     (the count may only be high, never low); cs_ix_resv -> IDLE
 *     first, so a repeat of this step gives back nothing twice
 *  3. CAS its RESERVED/CLAIM/PENDING index slots -> EMPTY(gen+1)
 *  4. release its staging span bits; ask the tier thread (which owns
 *     every DRAM free) to sweep the page map: runs whose owner slot
 *     moved on (its half-written allocation) are freed
 *  5. fold its counters and histograms into the retired totals, zero them
 *  6. store FREE(g)                                  (slot reusable)
 * Step 5 may count twice if the agent dies between the fold and the
 * zeroing; counters are statistics, never used for correctness.
 */
#include <poll.h>

#include "agent/agent_int.h"

#define KVP_REAPER_WATCH_MS 20

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

int
kvp_reap_client_agent(struct kvp_agent *a, uint32_t i)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_client_slot *cs = &s->clients[i];
	struct kvp_shm_header *h = s->hdr;
	/* acquire: pairs with claim CAS */
	uint64_t w = kvp_load_acquire(&cs->cs_state);
	uint64_t holds, pins = 0, pending = 0, pages, k, pid;

	/* step 1 (shm/kvp_slot.h) */
	if (!kvp_slot_reap_begin(cs, &w))
		return 0;
	pid = kvp_load_relaxed(&cs->cs_pid); /* relaxed: for the log line */
	holds = kvp_slot_reap_holds(s, i, &pins); /* step 2 */
	kvp_crashpoint(A_REAP_HOLDS);
	{
		/* step 2b, before step 3 empties the slot it may name;
		 * acquire: the owner is dead, its last release store */
		uint64_t f = kvp_load_acquire(&cs->cs_ix_resv);
		unsigned kind = KVP_IXR_KIND(f);
		bool give = false;

		if (kind == KVP_IXR_HAVE_SLOT) {
			/* acquire: written before HAVE_SLOT (release) */
			uint64_t sw = kvp_load_acquire(&cs->cs_ix_slot),
				 slot = KVP_HOLD_SLOT(sw);

			if (slot < s->g.g_index_slots) {
				/* acquire: pairs with the claim CAS */
				uint64_t m = kvp_load_acquire(&s->meta[slot]);
				unsigned st = KVP_IX_STATE(m);

				give = KVP_IX_GEN(m) == KVP_HOLD_GEN(sw) &&
				       KVP_IX_OWNER(m) == i + 1 &&
				       (st == KVP_IX_RESERVED ||
					st == KVP_IX_CLAIM ||
					st == KVP_IX_PENDING);
			}
		}
		if (kind != KVP_IXR_IDLE) {
			/* release: IDLE before the count changes (a recount
			 * that sees the change sees this) */
			kvp_ix_count_say(cs, f, KVP_IXR_IDLE);
			if (give)
				kvp_ix_count_give(s);
			else /* release: pairs with the tier thread's acquire */
				kvp_store_release(&a->ix_recount_due, 1);
		}
	}
	for (k = 0; k < s->g.g_index_slots; k++) {
		/* acquire: pairs with the owner's claim CAS */
		uint64_t e = kvp_load_acquire(&s->meta[k]);

		/* step 3: its claims and puts in progress
		 * (index/kvp_index.h) */
		if (kvp_ix_reap_owner(s, k, e, i + 1))
			pending++;
	}
	kvp_span_release_client_agent(s, i); /* its staging spans */
	/* leases it was still filling in (its LIVE leases outlive it) */
	for (k = 0; k < s->g.g_max_leases; k++) {
		/* acquire: pairs with the taker's reserving CAS */
		uint64_t lw = kvp_load_acquire(&s->leases[k].ls_state);

		if (KVP_LS_STATE(lw) == KVP_LS_RESERVED &&
		    KVP_LS_OWNER(lw) == i + 1)
			/* the taker is dead; a sweep may race */
			kvp_ls_free_agent(&s->leases[k], lw);
	}
	/* step 4 runs on the tier thread, which owns every DRAM free */
	pages = 0;
	kvp_store_release(&a->gc_request, 1); /* release: pairs with its CAS */
	kvp_wake_agent(s);
	kvp_ctr_unpin_agent(cs); /* a dead client pins nothing any more */
	kvp_ctr_retire(h, cs);   /* counters and histograms */
	kvp_actr_add(h, KVP_ACTR_REAP_CLIENTS, 1); /* stats */
	kvp_actr_add(h, KVP_ACTR_REAP_HOLDS, holds);
	kvp_actr_add(h, KVP_ACTR_REAP_PINS, pins);
	kvp_actr_add(h, KVP_ACTR_REAP_PENDING, pending);
	kvp_slot_identity_clear(cs);
	kvp_crashpoint(A_REAP_FREEING);
	kvp_slot_reap_end(cs, w); /* step 6, after every step above */
	kvp_log(KVP_LOG_INFO, "reaper",
		"reaped client %u (pid %llu): %llu holds, "
		"%llu unfinished puts",
		i, (unsigned long long)pid, (unsigned long long)holds,
		(unsigned long long)pending);
	(void)pages;
	return 1;
}

/* Free leases past their expiry, and half-taken ones whose taker died. */
static unsigned
kvp_lease_sweep_agent(struct kvp_seg *s)
{
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC), k;
	unsigned n = 0;

	for (k = 0; k < s->g.g_max_leases; k++) {
		struct kvp_lease_slot *ls = &s->leases[k];
		/* acquire: pairs with the taker's release */
		uint64_t w = kvp_load_acquire(&ls->ls_state);
		uint64_t owner = KVP_LS_OWNER(w);
		bool dead;

		if (KVP_LS_STATE(w) == KVP_LS_LIVE)
			/* relaxed */
			dead = kvp_load_relaxed(&ls->ls_expiry) <= now;
		else if (KVP_LS_STATE(w) == KVP_LS_RESERVED)
			dead = owner == 0 || owner > s->g.g_max_clients ||
			       !kvp_shm_client_alive(s, (uint32_t)(owner - 1));
		else
			continue;
		/* the taker may release it at the same moment (a CAS) */
		if (dead)
			kvp_crashpoint(A_LEASE_SWEEP);
		if (dead && kvp_ls_free_agent(ls, w)) {
			/* stat */
			kvp_actr_add(s->hdr, KVP_ACTR_LEASE_EXPIRED, 1);
			n++;
		}
	}
	return n;
}

/* Check every client slot; reap the dead.  Returns how many were reaped. */
unsigned
kvp_reaper_round_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	unsigned n = 0;
	uint32_t i;

	/* the agent's own geometry never changes after it bound (every
	 * bound comes from this copy) */
	KVP_ASSERT(kvp_geom_sum(&s->g) == s->g.g_sum, "I14, I28");
	kvp_shm_check_size_agent(a); /* first: a cut file faults the rest */
	kvp_shm_repair_header_agent(a);
	kvp_lease_sweep_agent(s);
	for (i = 0; i < s->g.g_max_clients; i++) {
		/* acquire: pairs with the claim CAS / FREE store */
		uint64_t w = kvp_load_acquire(&s->clients[i].cs_state);
		uint64_t pid;

		if (KVP_CS_STATE(w) == KVP_CS_FREE) {
			if (a->pidfd && a->pidfd[i] >= 0) {
				close(a->pidfd[i]);
				a->pidfd[i] = -1;
			}
			continue;
		}
		if (KVP_CS_STATE(w) == KVP_CS_REAPING ||
		    !kvp_shm_client_alive(s, i)) {
			n += (unsigned)kvp_reap_client_agent(a, i);
			continue;
		}
		/* relaxed: for the pidfd only; liveness was decided above */
		pid = kvp_load_relaxed(&s->clients[i].cs_pid);
		if (a->pidfd && pid && a->pidfd_pid[i] != pid) {
			if (a->pidfd[i] >= 0)
				close(a->pidfd[i]);
			a->pidfd[i] =
				(int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
			a->pidfd_pid[i] = pid;
		}
	}
	return n;
}

/* Open pidfds for clients that appeared since the last look: loads of
 * the slot table only, a syscall per new client.  Returns true when a
 * new client's process is already gone (no pidfd to wait on: reap now). */
bool
kvp_reaper_watch_new_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	bool gone = false;
	uint32_t i;

	for (i = 0; i < s->g.g_max_clients; i++) {
		/* acquire: pairs with the claim CAS */
		uint64_t w = kvp_load_acquire(&s->clients[i].cs_state);
		/* relaxed: a pid for the pidfd; liveness is checked
		 * elsewhere */
		uint64_t pid = kvp_load_relaxed(&s->clients[i].cs_pid);

		if (KVP_CS_STATE(w) != KVP_CS_LIVE || !pid ||
		    a->pidfd_pid[i] == pid)
			continue;
		if (a->pidfd[i] >= 0)
			close(a->pidfd[i]);
		a->pidfd[i] = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
		a->pidfd_pid[i] = pid;
		gone |= a->pidfd[i] < 0;
	}
	return gone;
}

void *
kvp_reaper_main_agent(void *arg)
{
	struct kvp_agent *a = arg;
	uint32_t n = a->seg.g.g_max_clients, i;
	struct pollfd *pfd = calloc(n, sizeof(*pfd));
	uint32_t *who = calloc(n, sizeof(*who));
	uint64_t next_round = 0;
	bool full_round;

	a->pidfd = malloc(n * sizeof(int));
	a->pidfd_pid = calloc(n, sizeof(uint64_t));
	if (!pfd || !who || !a->pidfd || !a->pidfd_pid) {
		kvp_log(KVP_LOG_ERROR, "reaper", "out of memory");
		exit(1);
	}
	for (i = 0; i < n; i++)
		a->pidfd[i] = -1;
	full_round = true;
	while (!kvp_load_acquire(&a->stop)) {
		uint64_t now = kvp_now_ns(CLOCK_MONOTONIC);
		nfds_t m = 0;
		int ev;

		if (full_round || now >= next_round) {
			kvp_reaper_round_agent(a);
			next_round =
				now + (uint64_t)a->cfg.reap_ms * 1000000ull;
			full_round = false;
		} else if (kvp_reaper_watch_new_agent(a)) {
			full_round = true;
			continue;
		}
		for (i = 0; i < n; i++) {
			if (a->pidfd[i] < 0)
				continue;
			pfd[m].fd = a->pidfd[i];
			pfd[m].events = POLLIN;
			who[m] = i;
			m++;
		}
		/* a pidfd turns readable the moment its process exits; the
		 * short timeout picks up new clients' pids (no syscall unless
		 * a slot changed) */
		ev = poll(pfd, m, KVP_REAPER_WATCH_MS);
		if (ev > 0) {
			nfds_t k;
			/* one event per process: reap now (or find it alive,
			 * e.g. a client inherited by a forked child);
			 * pidfd_pid keeps us from reopening it */
			for (k = 0; k < m; k++) {
				if (!pfd[k].revents)
					continue;
				close(a->pidfd[who[k]]);
				a->pidfd[who[k]] = -1;
			}
			full_round = true;
		}
	}
	for (i = 0; i < n; i++)
		if (a->pidfd[i] >= 0)
			close(a->pidfd[i]);
	free(pfd);
	free(who);
	return NULL;
}
