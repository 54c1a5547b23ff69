/* SPDX-License-Identifier: MIT */
/*
 * tier.c - the SSD tier's lifecycle from the agent's side: open (the
 * drives, recovery into the index, what a dead predecessor left in
 * flight), close, and the usage it publishes for tools.  It hands the
 * drives their owner's callbacks (recovery, give-back, reinsertion), so
 * the drives never call up into the index layer.
 *
 * One thread (the tier thread, loop.c) owns the SSD store, the staging
 * allocator, every DRAM free and every location change, so none of those
 * race each other (operations in flight: ops.c).  Location changes keep
 * the generation (holds fence the slot).
 */
#include "agent/tier_int.h"

/* The drives' owner: recovery (recover.c) and give-back (giveback.c), so
 * the drives reach the index layer through this table, never by name. */
static const struct kvp_drv_owner kvp_tier_owner = {
	.recover = kvp_recover_cb,
	.prefetch = kvp_recover_prefetch,
	.giveback = kvp_giveback_segment_cb,
	.reinserted = kvp_reinsert_cb,
	.drop_drives = kvp_recover_drop_drives_agent,
};

/* The header says whether an SSD tier serves (h_ssd_enabled: a plain word
 * only the agent writes, here; clients read it before they post a
 * request, a hint: the ring's answers decide). */
static void
kvp_tier_set_enabled(struct kvp_seg *s, bool on)
{
	s->hdr->h_ssd_enabled = on;
}

void
kvp_tier_publish_enabled_agent(struct kvp_agent *a)
{
	kvp_tier_set_enabled(&a->seg, a->tier != NULL);
}

/*
 * The staging arena registered with every drive's ring, in pieces of at
 * most 1 GiB (the kernel's limit per buffer): reads into it are
 * READ_FIXED, no page pinning per read.  Not the DRAM arena: registering
 * pins every page at once (the start waited for it: 0.42 s for 1 GiB on
 * the dev VM, a minute at 300 GiB, the populate behind the serving agent
 * undone), and a buffer over 1 GiB failed the whole call, staging
 * included (every pool of more than 1 GiB ran without fixed buffers).
 * Demotion's and promotion's I/O on the arena pins per operation, large
 * operations in the background.
 */
static void
kvp_tier_register_staging(struct kvp_tier *t, struct kvp_seg *s)
{
	struct iovec reg[KVP_SSD_REG_MAX];
	uint64_t left = s->g.g_staging_slots * s->g.g_staging_slot_bytes;
	char *p = (char *)s->staging;
	unsigned n = 0;

	while (left && n < KVP_SSD_REG_MAX) {
		uint64_t len = left < KVP_SSD_REG_BYTES_MAX ?
				       left :
				       KVP_SSD_REG_BYTES_MAX;

		reg[n].iov_base = p;
		reg[n].iov_len = len;
		n++;
		p += len;
		left -= len;
	}
	if (left)
		kvp_log(KVP_LOG_INFO, "ssd",
			"staging: the first %llu MiB registered, reads into "
			"the rest pin their pages",
			(unsigned long long)((KVP_SSD_REG_MAX *
					      KVP_SSD_REG_BYTES_MAX) >>
					     20));
	if (n)
		kvp_drv_register_buffers_agent(t->ssd, reg, n);
}

int
kvp_tier_open_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_tier *t;
	int64_t n;
	uint32_t k;
	int rc;

	if (!a->cfg.ssd_dir[0]) {
		kvp_tier_set_enabled(s, false);
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
	rc = kvp_drv_open_agent(a, &kvp_tier_owner, &t->ssd);
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
	kvp_tier_register_staging(t, s);
	kvp_tier_set_enabled(s, true);
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
	kvp_tier_set_enabled(&a->seg, false);
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
	static const enum kvp_actr kvp_pacer_actr[3] = {
		KVP_ACTR_SSD_WRITE_OPS, KVP_ACTR_SSD_WRITE_PIECES,
		KVP_ACTR_SSD_WRITE_HELD_READ
	};
	struct kvp_ssd_usage u;
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC), lost, pacer[3];
	unsigned k;

	if (now - t->published_ns < 50ull * 1000 * 1000)
		return;
	t->published_ns = now;
	kvp_drv_usage_agent(t->ssd, &u, &t->total_bytes);
	/* relaxed: statistics for readers of the header */
	kvp_store_relaxed(&h->h_ssd_used_bytes, u.used_bytes);
	kvp_store_relaxed(&h->h_ssd_live_bytes, u.live_bytes);
	kvp_store_relaxed(&h->h_ssd_total_bytes, t->total_bytes);
	kvp_drv_pacer_agent(t->ssd, pacer);
	for (k = 0; k < 3; k++) {
		/* a drive closed since takes its counts with it: start
		 * again from what is left */
		if (pacer[k] > t->pacer_seen[k])
			/* stats: agent threads add atomically */
			kvp_actr_add(h, kvp_pacer_actr[k],
				     pacer[k] - t->pacer_seen[k]);
		t->pacer_seen[k] = pacer[k];
	}
	lost = kvp_staging_reconcile(&a->seg);
	if (lost)
		kvp_log(KVP_LOG_INFO, "ssd",
			"staging count corrected by %llu slots (a "
			"client died while freeing a span)",
			(unsigned long long)lost);
}
