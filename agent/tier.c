/* SPDX-License-Identifier: MIT */
/*
 * tier.c - the SSD tier from the agent's side: its lifecycle (open,
 * recover, and what a dead predecessor left in flight; close), the pool
 * of operations in flight and their completions, and the usage it
 * publishes for tools.
 *
 * One thread (the tier thread, loop.c) owns the SSD store, the staging
 * allocator, every DRAM free and every location change, so none of those
 * race each other.  An operation in flight on an index slot makes it
 * busy (t->busy, 16 bits: I30): the orphan sweep keeps its DRAM and the
 * evictor leaves it alone.  Location changes keep the generation (holds
 * fence the slot).
 */
#include "agent/tier_int.h"

bool
kvp_tier_busy_agent(struct kvp_agent *a, uint64_t slot)
{
	return a->tier && a->tier->busy[slot];
}

/* SSD writes failed a moment ago (full, vetoed, I/O error): eviction
 * drops cold values instead of demoting them, for a second. */
bool
kvp_tier_write_failing_agent(struct kvp_agent *a)
{
	return a->tier &&
	       kvp_now_ns(CLOCK_MONOTONIC) < a->tier->write_fail_until;
}

/* The store has no room for a moment (its oldest segment is in use):
 * demotion waits, nothing is dropped. */
bool
kvp_tier_write_deferred_agent(struct kvp_agent *a)
{
	return a->tier &&
	       kvp_now_ns(CLOCK_MONOTONIC) < a->tier->write_defer_until;
}

/* Demotion writes in flight are at their limit. */
bool
kvp_tier_demote_full_agent(struct kvp_agent *a)
{
	return a->tier && (a->tier->demoting >= KVP_TIER_MAX_DEMOTING ||
			   a->tier->demoting_bytes >= KVP_TIER_DEMOTE_BYTES);
}

bool
kvp_tier_demoting_agent(struct kvp_agent *a)
{
	return a->tier && a->tier->demoting;
}

struct kvp_top *
kvp_top_get(struct kvp_tier *t, int kind, uint64_t *tag)
{
	struct kvp_top *op;
	uint32_t k;

	if (!t->nfree)
		return NULL;
	k = t->freeops[--t->nfree];
	KVP_ASSERT(k < KVP_TIER_MAX_OPS && t->ops[k].kind == TOP_FREE, "I30");
	op = &t->ops[k];
	memset(op, 0, offsetof(struct kvp_top, iov));
	op->kind = kind;
	*tag = k + 1;
	return op;
}

void
kvp_top_put(struct kvp_tier *t, struct kvp_top *op)
{
	/* each op goes back once (a second put would hand it out twice) */
	KVP_ASSERT(op->kind != TOP_FREE && t->nfree < KVP_TIER_MAX_OPS, "I30");
	free(op->w);
	op->w = NULL;
	op->kind = TOP_FREE;
	t->freeops[t->nfree++] = (uint32_t)(op - t->ops);
}

int
kvp_top_add_waiter(struct kvp_top *op, const struct kvp_waiter *w)
{
	if (op->nw == op->capw) {
		unsigned cap = op->capw ? op->capw * 2 : 4;
		struct kvp_waiter *n = realloc(op->w, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		op->w = n;
		op->capw = cap;
	}
	op->w[op->nw++] = *w;
	return 0;
}

/* Fill iovecs with the DRAM run chain of [first..) covering bytes. */
unsigned
kvp_runs_iov(struct kvp_seg *s, uint32_t first, uint64_t bytes,
	     struct iovec *iov, unsigned max)
{
	uint32_t p = first, next;
	unsigned n = 0;

	while (bytes && n < max && p < s->g.g_dram_pages) {
		uint64_t rb = 0;
		unsigned char *a = kvp_dram_run(s, p, &rb, &next);

		if (!a) /* a damaged chain: no I/O (the caller gives up) */
			return 0;
		iov[n].iov_base = a;
		iov[n].iov_len = rb < bytes ? rb : ((bytes + 4095) & ~4095ull);
		if (iov[n].iov_len > rb)
			iov[n].iov_len = rb;
		bytes -= rb < bytes ? rb : bytes;
		n++;
		if (!next)
			break;
		p = next - 1;
	}
	return bytes ? 0 : n;
}

void
kvp_complete(struct kvp_agent *a, const struct kvp_ssd_cqe *cq)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t = a->tier;
	struct kvp_top *op;

	if (cq->tag == 0 || cq->tag > KVP_TIER_MAX_OPS)
		return;
	op = &t->ops[cq->tag - 1];
	if (cq->status && cq->status != -ENOSPC)
		/* stat */
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_SSD_ERRORS], 1);
	switch (op->kind) {
	case TOP_STAGE:
		kvp_complete_stage(a, op, cq->status);
		break;
	case TOP_PROMOTE:
		kvp_complete_promote(a, op, cq->status);
		break;
	case TOP_DEMOTE:
		kvp_complete_demote(a, op, cq);
		break;
	case TOP_TOMB:
		kvp_complete_tomb(a, op, cq->status);
		break;
	default:
		return;
	}
	/* the op's slot is free of it (each op counted once: I30) */
	if (op->kind != TOP_TOMB) {
		KVP_ASSERT(t->busy[op->slot] > 0, "I30");
		t->busy[op->slot]--;
	}
	kvp_top_put(t, op);
}

int
kvp_tier_open_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t;
	struct iovec reg[2];
	int64_t n;
	uint32_t k;
	int rc;

	if (!a->cfg.ssd_dir[0]) {
		s->hdr->h_ssd_enabled = 0;
		return 0;
	}
	if (!s->rings) {
		kvp_log(KVP_LOG_ERROR, "ssd",
			"this segment was created without an SSD tier "
			"(no staging arena): stop the workers, remove /dev/shm/kvpool.%s and "
			"restart with --ssd-dir",
			a->cfg.pool);
		return -EPROTO;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->busy = calloc(s->g.g_index_slots, sizeof(*t->busy));
	t->tombed = calloc(s->g.g_index_slots, 1);
	t->wake = calloc(s->g.g_max_clients, sizeof(bool));
	t->wtick = calloc(s->g.g_index_slots, sizeof(*t->wtick));
	if (!t->busy || !t->tombed || !t->wake || !t->wtick) {
		rc = -ENOMEM;
		goto err_free;
	}
	for (k = 0; k < KVP_TIER_MAX_OPS; k++)
		t->freeops[k] = KVP_TIER_MAX_OPS - 1 - k;
	t->nfree = KVP_TIER_MAX_OPS;
	/* every drive opened and recovered (its records into the index:
	 * the callbacks need a->tier) */
	a->tier = t;
	rc = kvp_drv_open_agent(a, &t->ssd);
	if (rc) {
		a->tier = NULL;
		kvp_log(KVP_LOG_ERROR, "ssd",
			"cannot open the SSD store in %s%s: %s", a->cfg.ssd_dir,
			a->cfg.nssd_dirs > 1 ? " nor any other --ssd-dir" : "",
			strerror(-rc));
		goto err_free;
	}
	n = kvp_drv_recovered_agent(t->ssd);
	/* a segment created by this start holds only what recovery put in
	 * it, every entry with its segment: nothing to look for (the scan
	 * touches the whole index: seconds at 300 GB) */
	if (!a->seg_created)
		kvp_recover_lost_agent(a);
	kvp_recover_in_flight_agent(a);
	reg[0].iov_base = s->arena;
	reg[0].iov_len = s->g.g_dram_pages * s->g.g_dram_unit;
	reg[1].iov_base = s->staging;
	reg[1].iov_len = s->g.g_staging_slots * s->g.g_staging_slot_bytes;
	kvp_drv_register_buffers_agent(t->ssd, reg, 2);
	s->hdr->h_ssd_enabled = 1;
	kvp_tier_publish(a);
	kvp_log(KVP_LOG_INFO, "ssd",
		"SSD tier in %s%s: %lld records recovered; staging %llu "
		"x %llu KiB",
		a->cfg.ssd_dir, a->cfg.nssd_dirs > 1 ? " and more" : "",
		(long long)n, (unsigned long long)s->g.g_staging_slots,
		(unsigned long long)(s->g.g_staging_slot_bytes >> 10));
	return 0;

err_free:
	free(t->busy);
	free(t->tombed);
	free(t->later);
	free(t->wake);
	free(t->wtick);
	free(t->keep);
	free(t);
	return rc;
}

void
kvp_tier_close_agent(struct kvp_agent *a)
{
	struct kvp_tier *t = a->tier;

	if (!t)
		return;
	a->seg.hdr->h_ssd_enabled = 0;
	kvp_drv_close_agent(t->ssd);
	a->tier = NULL;
	free(t->busy);
	free(t->tombed);
	free(t->later);
	free(t->wake);
	free(t->wtick);
	free(t->keep);
	free(t);
}

/* SSD usage into the header for tools and /metrics (at most every 50 ms),
 * and the staging count put right when the arena is idle. */
void
kvp_tier_publish(struct kvp_agent *a)
{
	struct kvp_tier *t = a->tier;
	struct kvp_shm_header *h = a->seg.hdr;
	struct kvp_ssd_usage u;
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC), lost;

	if (now - t->published_ns < 50ull * 1000 * 1000)
		return;
	t->published_ns = now;
	kvp_drv_usage_agent(t->ssd, &u, &t->total_bytes);
	/* relaxed: statistics for readers of the header */
	kvp_store_relaxed(&h->h_ssd_used_bytes, u.used_bytes);
	kvp_store_relaxed(&h->h_ssd_live_bytes, u.live_bytes);
	kvp_store_relaxed(&h->h_ssd_total_bytes, t->total_bytes);
	lost = kvp_staging_reconcile(&a->seg);
	if (lost)
		kvp_log(KVP_LOG_INFO, "ssd",
			"staging count corrected by %llu slots (a "
			"client died while freeing a span)",
			(unsigned long long)lost);
}
