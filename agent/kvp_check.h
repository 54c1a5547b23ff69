/* SPDX-License-Identifier: MIT */
/*
 * kvp_check.h - the pool invariant checker behind `kvpool check`.
 *
 * Reads a mapped segment (read-only is enough) and verifies the numbered
 * invariants of docs/invariants.md: no hold, staging bit, half-done put or
 * half-taken lease of a dead client (once the agent had the chance to reap
 * it), every DRAM unit free or reachable from the index, runs tiling the
 * arena, free bins derived, every staging slot accounted for, index entries
 * well formed and where their hash says, at most one live value per key,
 * tier locations that agree with the index, counters that add up.
 *
 * Works with the agent up or down.  With the agent down, what an agent
 * repairs when it attaches (dead clients not yet reaped, CHECK flags,
 * spans being read, requests taken) is reported as a note, not a
 * violation.  A busy pool changes under the checker: kvp_check_wait()
 * re-runs it until it is clean or a deadline passes, so only what persists
 * is reported.
 */
#ifndef KVP_CHECK_H
#define KVP_CHECK_H

#include <stdio.h>

#include "kvpool.h"

#define KVP_CHECK_MAX_INV 40

struct kvp_check_report {
	unsigned violations;
	unsigned notes;
	/* violations per invariant number */
	unsigned by_inv[KVP_CHECK_MAX_INV];
	bool agent_up;
	uint64_t entries_ready, entries_dram, entries_ssd, entries_deleted;
	uint64_t entries_pending;
	uint64_t runs_used, units_used, units_free;
	uint64_t holds, pins, spans_in_use, leases_live, clients_live;
};

/* One pass.  Prints violations (and notes) to out unless out is NULL.
 * Returns the number of violations. */
unsigned kvp_check_seg(const struct kvp_seg *s, FILE *out,
		       struct kvp_check_report *r);

/* Re-run until clean or wait_ms passed; the last pass prints to out.
 * Returns the violations of the last pass. */
unsigned kvp_check_wait(const struct kvp_seg *s, unsigned wait_ms, FILE *out,
			struct kvp_check_report *r);

/* One line: "check: OK ..." or "check: N violations (I9 x2, ...)". */
void kvp_check_summary(const struct kvp_check_report *r, FILE *out);

#endif
