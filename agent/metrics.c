/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - one snapshot of a pool, read from its segment, and its human
 * table (kvpool stat, kvpool top, kvpool clients).  Its other renderings,
 * the Prometheus text exposition 0.0.4 (the agent's /metrics) and JSON
 * (kvpool stat --json), and their docs are made from the table of
 * metrics in agent/metrics_table.c.
 *
 * Everything here only reads the segment (callers pass a read-only
 * mapping): relaxed loads of counters that their writers keep with single
 * writer stores (client shards) or atomic adds (agent counters), and a
 * scan of the index state words.  Nothing takes a lock, so a scrape never
 * waits for, nor stalls, a client, the tier thread or the reaper.  The
 * numbers of one snapshot are read at slightly different moments: each
 * is exact, their sums are not atomic.
 *
 * Counters are summed over every client shard plus the retired totals of
 * clients that closed or were reaped, so they never go down while the
 * segment lives (a Prometheus counter reset only when it is recreated).
 */
#include <ctype.h>
#include <math.h>

#include "agent/agent_int.h"

/* enum kvp_ns_event's names (kvpool.h declares the list) */
static const char *const kvp_nse_names[KVP_NSE__N] = {
#define KVP__NSE_NAME(e, name) name,
	KVP_NS_EVENTS(KVP__NSE_NAME)
#undef KVP__NSE_NAME
};

/* Client i's holds now, and (pins != NULL) how many are pins. */
static uint32_t
kvp_count_holds_pins(const struct kvp_seg *s, uint32_t i, uint32_t *pins)
{
	/* a snapshot for humans */
	uint32_t hwm = kvp_slot_hold_hwm_hint(s, i), k, n = 0, p = 0;
	const kvp_aword_t *hs = kvp_slot_holds(s, i);

	for (k = 0; k < hwm; k++) {
		/* relaxed: a snapshot */
		uint64_t h = kvp_load_relaxed(&hs[k]);

		n += h != 0;
		p += h != 0 && (h & KVP_HOLD_PIN);
	}
	if (pins)
		*pins = p;
	return n;
}

static uint32_t
kvp_count_holds(const struct kvp_seg *s, uint32_t i)
{
	return kvp_count_holds_pins(s, i, NULL);
}

/* The namespaces' counter rows (kvp_ns_count): every row with an id, in
 * row order.  Rows are written by clients: the name is cut at its array. */
static void
kvp_collect_ns(const struct kvp_seg *s, struct kvp_metrics *m)
{
	uint32_t r, k;

	for (r = 0; r < KVP_NS_STAT_ROWS; r++) {
		const struct kvp_ns_stat *row = &s->ns_stats[r];
		struct kvp_metrics_ns *x = &m->ns[m->nns];
		/* relaxed: a statistic; the name is read under ns_named */
		uint64_t id = kvp_load_relaxed(&row->ns_id);

		if (!id)
			continue;
		x->id = id;
		/* acquire: pairs with the namer's release (name first) */
		if (kvp_load_acquire(&row->ns_named))
			memcpy(x->name, row->ns_name, sizeof(x->name) - 1);
		x->name[sizeof(x->name) - 1] = '\0';
		for (k = 0; k < KVP_NSE__N; k++)
			/* relaxed: statistics (atomic adds) */
			x->ctr[k] = kvp_load_relaxed(&row->ns_ctr[k]);
		m->nns++;
	}
}

/* Row of namespace id in m (NULL: none). */
static struct kvp_metrics_ns *
kvp_metrics_ns_of(struct kvp_metrics *m, uint64_t id)
{
	uint32_t k;

	for (k = 0; k < m->nns; k++)
		if (m->ns[k].id == id)
			return &m->ns[k];
	return NULL;
}

/* Live leases taken by client slot 'owner' (UINT32_MAX: every lease). */
static uint32_t
kvp_count_leases(const struct kvp_seg *s, uint32_t owner)
{
	uint64_t k;
	uint32_t n = 0;

	for (k = 0; k < s->g.g_max_leases; k++) {
		/* acquire: pairs with the taker's LIVE release */
		uint64_t w = kvp_load_acquire(&s->leases[k].ls_state);

		if (KVP_LS_STATE(w) != KVP_LS_LIVE)
			continue;
		/* relaxed: written before LIVE */
		if (owner == UINT32_MAX ||
		    kvp_load_relaxed(&s->leases[k].ls_owner) == owner + 1ull)
			n++;
	}
	return n;
}

static unsigned
kvp_mtier_of_loc(uint64_t loc)
{
	switch (KVP_LOC_TIER(loc)) {
	case KVP_TIER_SSD:
		return KVP_MTIER_SSD;
	case KVP_TIER_HBM:
		return KVP_MTIER_HBM;
	default:
		return KVP_MTIER_DRAM;
	}
}

/*
 * The pool's name is the caller's own, validated when it mapped the
 * segment (kvp_shm_name: [A-Za-z0-9_.-]): the header's h_pool is written
 * by whoever maps the segment writable, so it is only a fallback (pool
 * NULL), and every rendering below escapes what it prints anyway.
 */
void
kvp_metrics_collect(const struct kvp_seg *s, const char *pool,
		    struct kvp_metrics *m)
{
	const struct kvp_shm_header *h = s->hdr;
	uint64_t t0 = kvp_now_ns(CLOCK_MONOTONIC), i;
	uint32_t c, k, j;

	memset(m, 0, sizeof(*m));
	if (pool)
		snprintf(m->pool, sizeof(m->pool), "%s", pool);
	else
		/* NUL-terminated by memset */
		memcpy(m->pool, h->h_pool, sizeof(m->pool) - 1);
	m->abi_major = h->h_abi_major;
	m->abi_minor = h->h_abi_minor;
	/* relaxed: for humans; liveness is the OFD lock */
	m->agent_pid = kvp_load_relaxed(&h->h_agent_pid);
	m->incarnation = kvp_load_relaxed(&h->h_incarnation);
	m->agent_start_ns = kvp_load_relaxed(&h->h_agent_start_ns);
	m->metrics_port = kvp_load_relaxed(&h->h_metrics_port);
	m->create_ns = h->h_create_ns;
	m->agent_alive = kvp_shm_agent_alive(s);

	/* the index: states, entries and bytes by tier, probe lengths */
	m->index_slots = s->g.g_index_slots;
	m->index_limit = s->g.g_index_limit;
	for (i = 0; i < s->g.g_index_slots; i++) {
		/* acquire: pairs with the publishing CAS */
		uint64_t w = kvp_load_acquire(&s->meta[i]);
		const struct kvp_entry *e;
		uint64_t hash, pos;
		unsigned t;

		if (KVP_IX_FLAGS(w))
			m->ix_checking++;
		switch (KVP_IX_STATE(w)) {
		case KVP_IX_READY:
			break;
		case KVP_IX_PENDING:
			m->ix_pending++;
			continue;
		case KVP_IX_DELETED:
			m->ix_deleted++;
			continue;
		case KVP_IX_RESERVED:
		case KVP_IX_CLAIM:
			m->ix_claiming++;
			continue;
		default:
			continue;
		}
		m->ix_ready++;
		e = &s->entries[i];
		/* relaxed: stable while READY; a torn read skews one sample */
		t = kvp_mtier_of_loc(kvp_load_relaxed(&e->e_loc));
		m->entries[t]++;
		m->value_bytes[t] += kvp_load_relaxed(&e->e_len);
		if (t == KVP_MTIER_DRAM) {
			/* relaxed: as above */
			uint64_t len = kvp_load_relaxed(&e->e_len),
				 unit = s->g.g_dram_unit;
			unsigned lg =
				len ? 63u - (unsigned)__builtin_clzll(len) : 0;

			m->dram_values++;
			m->dram_size_log2[lg < 39 ? lg : 39]++;
			/* the last unit's empty part */
			if (len && (unit - len % unit) % unit > unit / 2)
				m->dram_wasteful++;
		}
		hash = kvp_load_relaxed(&e->e_hash);
		/* probe length: the slot's place among its key's 16
		 * candidates, plus one (1..8 first bucket, 9..16 second) */
		pos = (i / KVP_IX_WAYS == (hash & s->bucket_mask) ?
			       0 :
			       KVP_IX_WAYS) +
		      i % KVP_IX_WAYS + 1;
		m->probe_sum += pos;
		if (pos > m->probe_max)
			m->probe_max = pos;
	}

	/* media */
	/* relaxed: a statistic mirrored under the allocator lock */
	m->dram_used =
		kvp_load_relaxed(&s->dram->dh_used_mirror) * s->g.g_dram_unit;
	m->dram_total = s->g.g_dram_pages * s->g.g_dram_unit;
	{
		unsigned gk;

		for (gk = 0; gk < KVP_GPU_MAX; gk++) {
			const struct kvp_gpu_slot *gs = &h->h_gpu[gk];

			/* acquire: the agent's release (the fields first) */
			m->gpu_state[gk] = kvp_load_acquire(&gs->gs_state);
			/* relaxed: statistics */
			m->gpu_device[gk] = kvp_load_relaxed(&gs->gs_device);
			m->gpu_bytes[gk] = kvp_load_relaxed(&gs->gs_bytes);
			m->gpu_used[gk] = kvp_load_relaxed(&gs->gs_used) *
					  kvp_load_relaxed(&gs->gs_unit);
			m->gpu_copies[gk] = kvp_load_relaxed(&gs->gs_copies);
		}
	}
	if (s->cluster) {
		const struct kvp_cluster *cl = s->cluster;

		m->remote_present = true;
		/* acquire: the agent's release of the state */
		m->remote_state = kvp_load_acquire(&cl->cl_state);
		/* relaxed: statistics */
		m->remote_pub_lag_ns = kvp_load_relaxed(&cl->cl_pub_lag_ns);
		m->remote_pub_max_ns = kvp_load_relaxed(&cl->cl_pub_max_ns);
		m->remote_dir_rtt_ns = kvp_load_relaxed(&cl->cl_dir_rtt_ns);
		for (k = 0; k < KVP_CL_CTRS; k++)
			m->remote_ctr[k] = kvp_load_relaxed(&cl->cl_ctr[k]);
		for (k = 0; k < KVP_HIST_WORDS; k++)
			m->remote_lat[k] = kvp_load_relaxed(&cl->cl_lat[k]);
		memcpy(m->remote_node, cl->cl_node, sizeof(m->remote_node));
		m->remote_node[sizeof(m->remote_node) - 1] = 0;
		for (k = 0; m->remote_node[k]; k++)
			if (!isalnum((unsigned char)m->remote_node[k]) &&
			    !strchr("_.-", m->remote_node[k]))
				m->remote_node[k] =
					'?'; /* agent-written; still escaped */
	}
	m->dram_populated = kvp_dram_capacity(s) * s->g.g_dram_unit;
	m->dram_unit = s->g.g_dram_unit;
	/* relaxed: written once by the agent */
	m->dram_page_bytes = kvp_load_relaxed(&s->dram->dh_page_bytes);
	m->ssd_enabled = h->h_ssd_enabled;
	/* relaxed: published by the tier thread for tools */
	m->ssd_used = kvp_load_relaxed(&h->h_ssd_used_bytes);
	m->ssd_live = kvp_load_relaxed(&h->h_ssd_live_bytes);
	m->ssd_total = kvp_load_relaxed(&h->h_ssd_total_bytes);
	for (k = 0; k < KVP_SSD_DRIVES; k++) {
		m->drive_state[k] = kvp_load_relaxed(&h->h_drive_state[k]);
		m->drive_used[k] = kvp_load_relaxed(&h->h_drive_used[k]);
		m->drive_total[k] = kvp_load_relaxed(&h->h_drive_total[k]);
	}
	m->staging_total = s->spans ? s->g.g_staging_slots : 0;
	m->staging_slot_bytes = s->spans ? s->g.g_staging_slot_bytes : 0;
	/* relaxed: exact counts kept by atomic adds; sampled now */
	m->staging_in_use = kvp_load_relaxed(&h->h_staging_used);
	m->staging_peak = kvp_load_relaxed(&h->h_staging_peak);

	/* clients: liveness, holds, and every shard summed */
	kvp_collect_ns(s, m);
	m->max_clients = s->g.g_max_clients;
	for (c = 0; c < s->g.g_max_clients; c++) {
		const struct kvp_client_slot *cs = &s->clients[c];
		/* acquire: claim CAS */
		uint64_t w = kvp_load_acquire(&cs->cs_state);

		if (KVP_CS_STATE(w) != KVP_CS_FREE) {
			/* relaxed: written at open, for humans */
			struct kvp_metrics_ns *x = kvp_metrics_ns_of(
				m, kvp_load_relaxed(&cs->cs_ns_id));
			uint32_t pins;
			bool live = KVP_CS_STATE(w) == KVP_CS_LIVE &&
				    kvp_shm_client_alive(s, c);

			if (live)
				m->clients_live++;
			else
				m->clients_dead++;
			m->holds += kvp_count_holds_pins(s, c, &pins);
			if (x && live) {
				x->clients++;
				x->pinned += pins;
			}
		}
		for (k = 0; k < KVP_CTR_SLOTS; k++)
			/* relaxed: statistics (single writer per shard) */
			m->ctr[k] += kvp_load_relaxed(&cs->cs_ctr[k]);
		for (k = 0; k < KVP_HIST__ALL; k++)
			for (j = 0; j < KVP_HIST_WORDS; j++)
				m->hist[k][j] +=
					kvp_load_relaxed(&cs->cs_hist[k][j]);
	}
	for (k = 0; k < KVP_CTR_SLOTS; k++)
		/* relaxed: statistics (atomic adds) */
		m->ctr[k] +=
			kvp_load_relaxed(&h->h_actr[KVP_ACTR_RETIRED0 + k]);
	for (k = 0; k < KVP_HIST__ALL; k++)
		for (j = 0; j < KVP_HIST_WORDS; j++)
			m->hist[k][j] +=
				kvp_load_relaxed(&h->h_hist_retired[k][j]);
	for (k = 0; k < KVP_IOS__N; k++)
		for (j = 0; j < KVP_HIST_WORDS; j++)
			/* relaxed: statistics (the tier thread's) */
			m->io_hist[k][j] =
				kvp_load_relaxed(&h->h_io_hist[k][j]);
	memcpy(m->io_hist[KVP_IOS__N], m->hist[KVP_HIST_SSD_COPY],
	       sizeof(m->io_hist[KVP_IOS__N]));
	/* relaxed: gauges the tier thread stores each round */
	m->io_reads = kvp_load_relaxed(&h->h_io_reads);
	m->io_writes = kvp_load_relaxed(&h->h_io_writes);
	m->io_write_bytes = kvp_load_relaxed(&h->h_io_write_bytes);
	for (k = 0; k < KVP_ACTR_RETIRED0; k++)
		/* relaxed: statistics */
		m->actr[k] = kvp_load_relaxed(&h->h_actr[k]);
	m->leases = kvp_count_leases(s, UINT32_MAX);
	m->collect_ns = kvp_now_ns(CLOCK_MONOTONIC) - t0;
}

/* ---- escaping what came from the segment ---- */

/* For a terminal (kvpool stat, top, clients): control bytes and bytes
 * above 0x7e as \xNN, so nothing read from the segment can move the
 * cursor or clear the screen. */
static const char *
kvp_tty_str(const char *in, size_t n, char *out, size_t cap)
{
	size_t o = 0, k;

	for (k = 0; k < n && in[k] && o + 5 < cap; k++) {
		unsigned char ch = (unsigned char)in[k];

		if (ch < 0x20 || ch > 0x7e || ch == '\\')
			o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
		else
			out[o++] = (char)ch;
	}
	out[o] = '\0';
	return out;
}

const char *
kvp_metrics_pool_tty(const struct kvp_metrics *m, char *out, size_t cap)
{
	return kvp_tty_str(m->pool, sizeof(m->pool), out, cap);
}

/* ---- the human table (kvpool stat) ---- */

static const char *
kvp_human(uint64_t v, char *buf, size_t cap)
{
	static const char *const unit[] = { "B",   "KiB", "MiB",
					    "GiB", "TiB", "PiB" };
	double d = (double)v;
	unsigned u = 0;

	while (d >= 1024.0 && u < 5) {
		d /= 1024.0;
		u++;
	}
	snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", d, unit[u]);
	return buf;
}

static double
kvp_pct(uint64_t a, uint64_t b)
{
	return b ? 100.0 * (double)a / (double)b : 0.0;
}

static void
kvp_latency_cell(const struct kvp_metrics *m, unsigned h, char *buf, size_t cap)
{
	uint64_t n = kvp_metrics_hist_count(m, h);

	if (!n) {
		snprintf(buf, cap, "-");
		return;
	}
	snprintf(buf, cap, "%.1f/%.1f us",
		 (double)kvp_metrics_hist_quantile(m, h, 0.5) / 1e3,
		 (double)kvp_metrics_hist_quantile(m, h, 0.99) / 1e3);
}

void
kvp_metrics_table(const struct kvp_metrics *m, FILE *f)
{
	const uint64_t *c = m->ctr, *a = m->actr;
	char b1[32], b2[32], b3[32], b4[32], b5[32], l1[40], l2[40],
		pool[5 * KVP_POOL_NAME_MAX];
	uint64_t hits = c[KVP_CTR_GET_HIT] + c[KVP_CTR_RESOLVE_OK];
	unsigned k;

	fprintf(f,
		"pool %s: agent %s (pid %llu, incarnation %llu), ABI %u.%u, metrics %s",
		kvp_metrics_pool_tty(m, pool, sizeof(pool)),
		m->agent_alive ? "up" : "DOWN",
		(unsigned long long)m->agent_pid,
		(unsigned long long)m->incarnation, m->abi_major, m->abi_minor,
		m->metrics_port ? "" : "off");
	if (m->metrics_port)
		fprintf(f, "port %llu", (unsigned long long)m->metrics_port);
	fprintf(f, "\n\n%-8s %12s %12s %7s %10s\n", "tier", "used", "total",
		"use%", "entries");
	fprintf(f, "%-8s %12s %12s %6.1f%% %10llu\n", "DRAM",
		kvp_human(m->dram_used, b1, 32),
		kvp_human(m->dram_total, b2, 32),
		kvp_pct(m->dram_used, m->dram_total),
		(unsigned long long)m->entries[KVP_MTIER_DRAM]);
	if (m->ssd_enabled || m->ssd_used || m->entries[KVP_MTIER_SSD])
		fprintf(f, "%-8s %12s %12s %6.1f%% %10llu   (live %s)\n", "SSD",
			kvp_human(m->ssd_used, b1, 32),
			kvp_human(m->ssd_total, b2, 32),
			kvp_pct(m->ssd_used, m->ssd_total),
			(unsigned long long)m->entries[KVP_MTIER_SSD],
			kvp_human(m->ssd_live, b3, 32));
	else
		fprintf(f, "%-8s %12s\n", "SSD", "off");
	for (k = 0; k < KVP_SSD_DRIVES; k++)
		if (KVP_DRIVE_STATE(m->drive_state[k]))
			fprintf(f,
				"drive %-2u %12s %12s %6.1f%%   %s, %llu I/O "
				"errors\n",
				k, kvp_human(m->drive_used[k], b1, 32),
				kvp_human(m->drive_total[k], b2, 32),
				kvp_pct(m->drive_used[k], m->drive_total[k]),
				kvp_drive_state_name(
					KVP_DRIVE_STATE(m->drive_state[k])),
				(unsigned long long)KVP_DRIVE_ERRORS(
					m->drive_state[k]));
	if (m->dram_populated < m->dram_total)
		fprintf(f,
			"%-8s %s of %s populated (%.1f%%): the agent is "
			"populating it; room grows as it goes\n",
			"", kvp_human(m->dram_populated, b1, 32),
			kvp_human(m->dram_total, b2, 32),
			kvp_pct(m->dram_populated, m->dram_total));
	fprintf(f, "%-8s %s pages, %s units\n", "",
		m->dram_page_bytes >= (2u << 20) ? "2 MiB (hugetlbfs)" :
						   "4 KiB",
		kvp_human(m->dram_unit, b1, 32));
	if (m->dram_values >= 100 && m->dram_wasteful * 2 > m->dram_values) {
		uint64_t seen = 0, med = 0;
		unsigned lg;

		/* the median value size, to the power of two below it */
		for (lg = 0; lg < 40; lg++) {
			seen += m->dram_size_log2[lg];
			if (seen * 2 >= m->dram_values) {
				med = 1ull << lg;
				break;
			}
		}
		fprintf(f,
			"WARN     %.0f%% of the values in DRAM leave more than half of "
			"their last %s unit empty (median size about %s): a "
			"--dram-unit of %s or less wastes less (docs/design.md, "
			"\"Choosing --dram-unit\")\n",
			kvp_pct(m->dram_wasteful, m->dram_values),
			kvp_human(m->dram_unit, b1, 32), kvp_human(med, b2, 32),
			kvp_human(med < 4096 ? 4096 : med, b3, 32));
	}
	if (m->staging_total)
		fprintf(f,
			"%-8s %5llu in use, peak %llu, of %llu pages of %s\n",
			"staging", (unsigned long long)m->staging_in_use,
			(unsigned long long)m->staging_peak,
			(unsigned long long)m->staging_total,
			kvp_human(m->staging_slot_bytes, b1, 32));
	fprintf(f,
		"\nindex    %llu entries (%llu pending, %llu deleted, %llu claiming) of "
		"%llu allowed (%.1f%%), %llu slots; probe length mean %.2f, max %llu\n",
		(unsigned long long)m->ix_ready,
		(unsigned long long)m->ix_pending,
		(unsigned long long)m->ix_deleted,
		(unsigned long long)m->ix_claiming,
		(unsigned long long)m->index_limit,
		kvp_pct(m->ix_ready, m->index_limit),
		(unsigned long long)m->index_slots,
		m->ix_ready ? (double)m->probe_sum / (double)m->ix_ready : 0.0,
		(unsigned long long)m->probe_max);
	if (a[KVP_ACTR_EVICT_INDEX_SSD])
		fprintf(f,
			"WARN     index pressure is dropping SSD-resident values: %llu values "
			"with a copy on SSD left the index (the SSD tier had room for them); "
			"raise --index-entries\n",
			(unsigned long long)a[KVP_ACTR_EVICT_INDEX_SSD]);
	fprintf(f,
		"clients  %llu alive, %llu dead (not yet reaped) of %llu slots; %llu holds, "
		"%llu leases\n",
		(unsigned long long)m->clients_live,
		(unsigned long long)m->clients_dead,
		(unsigned long long)m->max_clients,
		(unsigned long long)m->holds, (unsigned long long)m->leases);

	fprintf(f, "\n%-8s %12s %12s %12s %12s %20s %20s\n", "op", "keys",
		"DRAM hits", "SSD hits", "bytes", "DRAM p50/p99",
		"SSD p50/p99");
	kvp_latency_cell(m, KVP_HIST_PUT_DRAM, l1, sizeof(l1));
	fprintf(f, "%-8s %12llu %12s %12s %12s %20s %20s\n", "put",
		(unsigned long long)c[KVP_CTR_PUT], "-", "-",
		kvp_human(c[KVP_CTR_PUT_BYTES], b1, 32), l1, "-");
	kvp_latency_cell(m, KVP_HIST_GET_DRAM, l1, sizeof(l1));
	kvp_latency_cell(m, KVP_HIST_GET_SSD, l2, sizeof(l2));
	fprintf(f, "%-8s %12llu %12llu %12llu %12s %20s %20s\n", "get",
		(unsigned long long)c[KVP_CTR_GET],
		(unsigned long long)c[KVP_CTR_GET_HIT],
		(unsigned long long)c[KVP_CTR_RESOLVE_OK],
		kvp_human(c[KVP_CTR_GET_BYTES] + c[KVP_CTR_GET_SSD_BYTES], b1,
			  32),
		l1, l2);
	kvp_latency_cell(m, KVP_HIST_EXISTS_DRAM, l1, sizeof(l1));
	kvp_latency_cell(m, KVP_HIST_EXISTS_SSD, l2, sizeof(l2));
	fprintf(f, "%-8s %12llu %12llu %12llu %12s %20s %20s\n", "exists",
		(unsigned long long)c[KVP_CTR_EXISTS],
		(unsigned long long)c[KVP_CTR_EXISTS_HIT_DRAM],
		(unsigned long long)c[KVP_CTR_EXISTS_HIT_SSD], "-", l1, l2);
	fprintf(f, "%-8s %12llu\n", "delete",
		(unsigned long long)c[KVP_CTR_DELETE]);
	if (m->ssd_enabled) {
		/* where an SSD read's time goes, p50/p99 per stage */
		fprintf(f, "ssd read");
		for (k = 0; k <= KVP_IOS__N; k++) {
			const uint64_t *w = m->io_hist[k];

			if (kvp_hist_words_count(w))
				fprintf(f, " %s %.0f/%.0f us%s",
					kvp_io_stage_names[k],
					(double)kvp_hist_words_quantile(w,
									0.5) /
						1e3,
					(double)kvp_hist_words_quantile(w,
									0.99) /
						1e3,
					k < KVP_IOS__N ? ";" : "");
			else
				fprintf(f, " %s -%s", kvp_io_stage_names[k],
					k < KVP_IOS__N ? ";" : "");
		}
		fprintf(f,
			"\n         on the devices: %llu reads, %llu demotion "
			"writes (%s); %llu reads met writes, demotion yielded "
			"%llu rounds\n"
			"         write pacer: %llu writes sent, %llu pieces "
			"cut for reads, %llu held back for a read\n",
			(unsigned long long)m->io_reads,
			(unsigned long long)m->io_writes,
			kvp_human(m->io_write_bytes, b1, 32),
			(unsigned long long)a[KVP_ACTR_READ_BEHIND_WRITES],
			(unsigned long long)a[KVP_ACTR_DEMOTE_YIELDS],
			(unsigned long long)a[KVP_ACTR_SSD_WRITE_OPS],
			(unsigned long long)a[KVP_ACTR_SSD_WRITE_PIECES],
			(unsigned long long)a[KVP_ACTR_SSD_WRITE_HELD_READ]);
	}
	{
		static const char *const gst[] = { "off", "starting", "up",
						   "down" };
		unsigned gk;

		for (gk = 0; gk < KVP_GPU_MAX; gk++) {
			unsigned st = KVP_GS_STATE(m->gpu_state[gk]);

			if (st == KVP_GPU_OFF && !m->gpu_bytes[gk])
				continue;
			fprintf(f,
				"hbm      GPU %llu: %s (generation %llu), %s of "
				"%s in copies, %llu copies placed; hits %llu\n",
				(unsigned long long)m->gpu_device[gk],
				st < 4 ? gst[st] : "?",
				(unsigned long long)KVP_GS_GEN(
					m->gpu_state[gk]),
				kvp_human(m->gpu_used[gk], b1, 32),
				kvp_human(m->gpu_bytes[gk], b2, 32),
				(unsigned long long)m->gpu_copies[gk],
				(unsigned long long)c[KVP_CTR_DEV_HBM_HITS]);
		}
	}
	if (m->remote_present && KVP_CL_STATE(m->remote_state) != KVP_CL_OFF)
		fprintf(f,
			"remote   node %s: %s, %u peers (%u refused); %llu lookups (%llu keys, "
			"%llu found), %llu fetched (%s), %llu failed; served %llu "
			"(%s); %llu directory round trips; publish lag %.1f ms "
			"(max %.1f)\n",
			m->remote_node,
			KVP_CL_STATE(m->remote_state) == KVP_CL_UP ?
				"up" :
			KVP_CL_STATE(m->remote_state) == KVP_CL_CLASH ?
				"name taken by another agent" :
				"directory down",
			KVP_CL_PEERS(m->remote_state),
			KVP_CL_BAD(m->remote_state),
			(unsigned long long)m->remote_ctr[KVP_CLC_LOOKUPS],
			(unsigned long long)m->remote_ctr[KVP_CLC_LOOKUP_KEYS],
			(unsigned long long)m->remote_ctr[KVP_CLC_FOUND],
			(unsigned long long)m->remote_ctr[KVP_CLC_FETCHED],
			kvp_human(m->remote_ctr[KVP_CLC_FETCH_BYTES], b1, 32),
			(unsigned long long)m->remote_ctr[KVP_CLC_FAILED],
			(unsigned long long)m->remote_ctr[KVP_CLC_SERVED],
			kvp_human(m->remote_ctr[KVP_CLC_SERVED_BYTES], b2, 32),
			(unsigned long long)m->remote_ctr[KVP_CLC_DIR_RTT],
			m->remote_pub_lag_ns / 1e6, m->remote_pub_max_ns / 1e6);
	if (c[KVP_CTR_DEV_KEYS] || c[KVP_CTR_DEV_REG_BYTES])
		fprintf(f,
			"gpu      %llu keys copied: %s to GPUs, %s from GPUs "
			"(%s through bounce buffers); DRAM registered for DMA "
			"%s of %s per copying process\n",
			(unsigned long long)c[KVP_CTR_DEV_KEYS],
			kvp_human(c[KVP_CTR_DEV_H2D_BYTES], b1, 32),
			kvp_human(c[KVP_CTR_DEV_D2H_BYTES], b2, 32),
			kvp_human(c[KVP_CTR_DEV_BOUNCE_BYTES], b3, 32),
			kvp_human(c[KVP_CTR_DEV_REG_BYTES], b4, 32),
			kvp_human(m->dram_total, b5, 32));
	fprintf(f,
		"\nhit ratio %.1f%% (get); misses %llu; SSD reads ok %llu, miss %llu, failed "
		"%llu, BUSY parts %llu; puts refused: exists %llu, busy %llu, nospc %llu\n",
		kvp_pct(hits, c[KVP_CTR_GET]),
		(unsigned long long)c[KVP_CTR_GET_MISS],
		(unsigned long long)c[KVP_CTR_RESOLVE_OK],
		(unsigned long long)c[KVP_CTR_RESOLVE_MISS],
		(unsigned long long)c[KVP_CTR_RESOLVE_FAILED],
		(unsigned long long)c[KVP_CTR_RESOLVE_BUSY],
		(unsigned long long)c[KVP_CTR_PUT_EXISTS],
		(unsigned long long)c[KVP_CTR_PUT_BUSY],
		(unsigned long long)c[KVP_CTR_PUT_NOSPC]);
	/* the hit-rate ceiling of the last window (agent/distinct.c) */
	if (m->actr[KVP_ACTR_WINDOW_SECONDS]) {
		uint64_t wk = m->actr[KVP_ACTR_WINDOW_KEYS],
			 wl = m->actr[KVP_ACTR_WINDOW_LOOKUPS],
			 ws = m->actr[KVP_ACTR_WINDOW_STORES];

		fprintf(f,
			"ceiling  last %llu s: %llu distinct keys, %llu lookups "
			"(hit-rate ceiling %.1f%%), %llu stores (%llu of keys "
			"stored again)\n",
			(unsigned long long)m->actr[KVP_ACTR_WINDOW_SECONDS],
			(unsigned long long)wk, (unsigned long long)wl,
			wl > wk ? 100.0 - kvp_pct(wk, wl) : 0.0,
			(unsigned long long)ws,
			(unsigned long long)(ws > wk ? ws - wk : 0));
	}
	fprintf(f, "\nagent counters:\n");
	for (k = 0; k < KVP_ACTR_RETIRED0; k++)
		fprintf(f, "  %-26s %llu%s", kvp_metrics_ctr_name(true, k),
			(unsigned long long)a[k],
			k % 3 == 2 || k + 1 == KVP_ACTR_RETIRED0 ? "\n" : "");
	fprintf(f, "client counters:\n");
	for (k = 0; k < KVP_CTR__N; k++)
		fprintf(f, "  %-26s %llu%s", kvp_metrics_ctr_name(false, k),
			(unsigned long long)c[k],
			k % 3 == 2 || k + 1 == KVP_CTR__N ? "\n" : "");
	for (k = 0; k < m->nns; k++) {
		char ns[5 * sizeof(m->ns[k].name) + 1];
		unsigned e;

		fprintf(f,
			"namespace %s (%016llx): %llu clients, %llu pinned\n",
			kvp_tty_str(m->ns[k].name, sizeof(m->ns[k].name), ns,
				    sizeof(ns)),
			(unsigned long long)m->ns[k].id,
			(unsigned long long)m->ns[k].clients,
			(unsigned long long)m->ns[k].pinned);
		for (e = 0; e < KVP_NSE__N; e++)
			fprintf(f, "  %-26s %llu%s", kvp_nse_names[e],
				(unsigned long long)m->ns[k].ctr[e],
				e % 3 == 2 || e + 1 == KVP_NSE__N ? "\n" : "");
	}
}

/* ---- the client table (kvpool clients), like mdb_stat -r ---- */

void
kvp_metrics_clients(const struct kvp_seg *s, FILE *f)
{
	uint32_t i;

	fprintf(f, "%5s %8s %20s %6s %6s %6s %s\n", "slot", "pid", "start",
		"alive", "holds", "leases", "ns");
	for (i = 0; i < s->g.g_max_clients; i++) {
		const struct kvp_client_slot *cs = &s->clients[i];
		/* acquire: claim CAS */
		uint64_t w = kvp_load_acquire(&cs->cs_state);
		time_t t;
		char when[32], ns[5 * sizeof(cs->cs_ns) + 1];
		struct tm tm;

		if (KVP_CS_STATE(w) == KVP_CS_FREE)
			continue;
		/* relaxed: written at open, for humans */
		t = (time_t)(kvp_load_relaxed(&cs->cs_open_ns) / 1000000000ull);
		gmtime_r(&t, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		/* the namespace name is written by the client: escaped */
		kvp_tty_str(cs->cs_ns, sizeof(cs->cs_ns), ns, sizeof(ns));
		fprintf(f, "%5u %8llu %20s %6s %6u %6u %s\n", i,
			(unsigned long long)kvp_load_relaxed(&cs->cs_pid), when,
			KVP_CS_STATE(w) == KVP_CS_REAPING ? "reap" :
			kvp_shm_client_alive(s, i)        ? "yes" :
							    "no",
			kvp_count_holds(s, i), kvp_count_leases(s, i), ns);
	}
}
