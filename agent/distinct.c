/* SPDX-License-Identifier: MIT */
/*
 * distinct.c - the hit-rate ceiling, online: how many distinct keys the
 * pool's traffic touched in a window of --ceiling-window seconds, next to
 * the lookups and stores of that window (kvpool stat: an operator tells
 * capacity from policy: a pool whose stores far exceed the window's keys
 * stores keys again that a larger DRAM tier, or a better order, would
 * have kept; one whose window holds more keys than DRAM holds values
 * needs capacity first).  The agent's private memory, tier thread only;
 * nothing on a client's path (the hit path writes its use word, as
 * before).
 *
 *  1. A HyperLogLog (Flajolet, Fusy, Gandouet, Meunier, AofA 2007) of
 *     2^14 one-byte registers (16 KiB; a standard error of 1.04 / 2^7 =
 *     0.81%), fed the 64-bit hash (key hash and namespace, mixed) of every
 *     key the agent sees used or stored in the window; linear counting
 *     below 2.5 x the registers (Heule, Nunkesser, Hall, EDBT 2013: the
 *     small-range correction).
 *  2. What the agent sees: every scan of the index (evict.c's first scan,
 *     every pass) hands each READY slot's use word here; a value whose
 *     use tick is at or after the start of the last whole scan was used
 *     or stored since (a put writes the tick; a hit, probe, pin or lease
 *     stores a newer one): its key goes in.  So a key used many times
 *     between two scans counts once, as it should; a key stored and
 *     evicted or deleted between two scans is missed (passes scan often
 *     under pressure; without pressure nothing is evicted).
 *  3. At the window's end the tier thread scans the index once more (so
 *     an idle evictor still counts), publishes the estimate, the lookups
 *     (keys asked of gets and probes, a key probed and then read once:
 *     gets + probes - min(probe hits, get hits)) and the stores (puts
 *     that stored) of the window from the client counters, and starts
 *     the next window afresh.
 *  4. The ceiling is 1 - keys / lookups (metrics_table.c): the hit ratio
 *     of a cache that held every key of the window from its first use,
 *     on these lookups; keys looked up and never stored nor used are not
 *     counted (the agent never sees them), so it is an upper bound.
 */
#include <math.h>

#include "agent/tier_int.h"

#define KVP_HLL_REGS (1u << KVP_HLL_P)

/* murmur3's 64-bit finalizer: every input bit moves every output bit */
static uint64_t
kvp_hll_mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h;
}

void
kvp_hll_clear(struct kvp_hll *h)
{
	memset(h->reg, 0, sizeof(h->reg));
}

/* Point 1: one key (any 64-bit hash of it; mixed here). */
void
kvp_hll_add(struct kvp_hll *h, uint64_t key)
{
	uint64_t x = kvp_hll_mix(key);
	uint32_t r = x >> (64 - KVP_HLL_P);
	/* the rank of the rest: its leading zeros + 1 (a guard bit keeps
	 * it within 64 - KVP_HLL_P + 1) */
	uint64_t w = (x << KVP_HLL_P) | (1ull << (KVP_HLL_P - 1));
	uint8_t rank = (uint8_t)(__builtin_clzll(w) + 1);

	if (rank > h->reg[r])
		h->reg[r] = rank;
}

double
kvp_hll_estimate(const struct kvp_hll *h)
{
	const double m = KVP_HLL_REGS, alpha = 0.7213 / (1 + 1.079 / m);
	double sum = 0, e;
	uint32_t k, zeros = 0;

	for (k = 0; k < KVP_HLL_REGS; k++) {
		sum += ldexp(1.0, -(int)h->reg[k]);
		zeros += h->reg[k] == 0;
	}
	e = alpha * m * m / sum;
	if (e <= 2.5 * m && zeros)
		e = m * log(m / zeros); /* linear counting */
	return e;
}

/* The window's state, made on first use (NULL: out of memory). */
static struct kvp_distinct *
kvp_distinct_get(struct kvp_agent *a)
{
	if (!a->distinct && !a->distinct_failed) {
		a->distinct = calloc(1, sizeof(*a->distinct));
		if (!a->distinct) {
			a->distinct_failed = true;
			kvp_log(KVP_LOG_WARN, "stat",
				"out of memory for the hit-rate ceiling's "
				"counter (16 KiB): no estimate");
		}
	}
	return a->distinct;
}

void
kvp_distinct_free_agent(struct kvp_agent *a)
{
	free(a->distinct);
	a->distinct = NULL;
}

/* Point 2: slot i is READY with use word 'use' (a scan's look). */
void
kvp_distinct_seen_agent(struct kvp_agent *a, uint64_t i, uint64_t use)
{
	struct kvp_distinct *d = a->distinct;
	const struct kvp_entry *e = &a->seg.entries[i];

	if (!d || KVP_USE_TICK(use) < d->fed_tick)
		return;
	/* relaxed: stable while READY; a hint (a client may write garbage:
	 * one wrong key more) */
	kvp_hll_add(&d->hll,
		    kvp_load_relaxed(&e->e_hash) ^
			    kvp_load_relaxed(&e->e_ns) * 0x9e3779b97f4a7c15ull);
}

/* Point 2: a scan that looked at every slot began at tick 'start'. */
void
kvp_distinct_scanned_agent(struct kvp_agent *a, uint64_t start)
{
	if (a->distinct && start > a->distinct->fed_tick)
		a->distinct->fed_tick = start;
}

/* Counter c summed over the client shards and the retired shard. */
static uint64_t
kvp_distinct_ctr(const struct kvp_seg *s, enum kvp_ctr c)
{
	uint64_t v = 0;
	uint32_t i;

	for (i = 0; i < s->g.g_max_clients; i++)
		/* relaxed: statistics (one writer per shard) */
		v += kvp_load_relaxed(&s->clients[i].cs_ctr[c]);
	/* relaxed: statistics (atomic adds of closing clients) */
	return v + kvp_load_relaxed(&s->hdr->h_actr[KVP_ACTR_RETIRED0 + c]);
}

/* The lookups and stores the counters say so far (point 3). */
static void
kvp_distinct_counts(const struct kvp_seg *s, uint64_t *lookups,
		    uint64_t *stores)
{
	uint64_t gets = kvp_distinct_ctr(s, KVP_CTR_GET);
	uint64_t probes = kvp_distinct_ctr(s, KVP_CTR_EXISTS);
	uint64_t gh = kvp_distinct_ctr(s, KVP_CTR_GET_HIT);
	uint64_t ph = kvp_distinct_ctr(s, KVP_CTR_EXISTS_HIT);
	uint64_t puts = kvp_distinct_ctr(s, KVP_CTR_PUT);
	uint64_t not = kvp_distinct_ctr(s, KVP_CTR_PUT_EXISTS) +
		       kvp_distinct_ctr(s, KVP_CTR_PUT_BUSY) +
		       kvp_distinct_ctr(s, KVP_CTR_PUT_NOSPC);

	*lookups = gets + probes - (gh < ph ? gh : ph);
	*stores = puts > not ? puts - not : 0;
}

/*
 * Point 3, each round of the tier thread: at the window's end, one scan
 * of the index, the window's figures published, a new window.  The
 * first call starts the first window.
 */
void
kvp_distinct_round_agent(struct kvp_agent *a)
{
	struct kvp_seg *s = &a->seg;
	struct kvp_distinct *d = kvp_distinct_get(a);
	uint64_t now = kvp_now_ns(CLOCK_MONOTONIC), lookups, stores, i, start;
	uint64_t len = (uint64_t)a->cfg.ceiling_window_s * 1000000000ull;

	if (!d || !len)
		return;
	if (!d->end_ns) { /* the first window */
		d->end_ns = now + len;
		d->fed_tick = kvp_tick_now();
		kvp_distinct_counts(s, &d->lookups0, &d->stores0);
		return;
	}
	if (now < d->end_ns)
		return;
	start = kvp_tick_now();
	for (i = 0; i < s->g.g_index_slots; i++) {
		/* acquire: pairs with the publish CAS */
		uint64_t w = kvp_load_acquire(&s->meta[i]);

		if (KVP_IX_STATE(w) == KVP_IX_READY)
			/* relaxed: a hint (the use word) */
			kvp_distinct_seen_agent(
				a, i, kvp_load_relaxed(&s->entries[i].e_use));
	}
	kvp_distinct_counts(s, &lookups, &stores);
	/* relaxed: gauges for kvpool stat; only this thread writes them */
	kvp_actr_set(s->hdr, KVP_ACTR_WINDOW_KEYS,
		     (uint64_t)(kvp_hll_estimate(&d->hll) + 0.5));
	kvp_actr_set(s->hdr, KVP_ACTR_WINDOW_LOOKUPS,
		     lookups >= d->lookups0 ? lookups - d->lookups0 : 0);
	kvp_actr_set(s->hdr, KVP_ACTR_WINDOW_STORES,
		     stores >= d->stores0 ? stores - d->stores0 : 0);
	kvp_actr_set(s->hdr, KVP_ACTR_WINDOW_SECONDS, a->cfg.ceiling_window_s);
	kvp_hll_clear(&d->hll);
	d->fed_tick = start;
	d->lookups0 = lookups;
	d->stores0 = stores;
	/* the next window from now (a late round does not shorten it) */
	d->end_ns = now + len;
}
