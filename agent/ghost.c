/* SPDX-License-Identifier: MIT */
/*
 * ghost.c - the ghost set: the keys the pool evicted lately, so that a
 * key put again soon after its eviction (it was evicted too early) is
 * spared the probation of a never-used value (evict.c).  ARC's ghost
 * lists (Megiddo, Modha, FAST'03) with one flag a slot instead of lists;
 * chosen by replay (docs/performance.md, "Beyond LRU").  The agent's
 * private memory, tier thread only; nothing in the segment.
 *
 *  1. The set holds the 64-bit hashes (key hash and namespace) of the last
 *     R evicted keys, R = --evict-ghost x the DRAM tier's capacity in
 *     units (a value takes at least one: a bound on the values it holds):
 *     a FIFO ring of R hashes, and an open-addressing table (linear
 *     probing, at most half full) from a hash to its newest place in the
 *     ring.  A key evicted again while in the ring moves to its new
 *     place; when the ring overwrites a place, its hash leaves the table
 *     only if the table still names that place.  So the table holds
 *     exactly the distinct hashes of the ring's last R places.
 *  2. victim.c calls kvp_ghost_evicted_agent for every value that leaves
 *     the pool (not a deleted one, not one relocated to its SSD copy: its
 *     key stays), after the removal, with the key hash it read while the
 *     slot was still under its CHECK (stable there; the removal is not
 *     delayed by the set's work: a reader's probe just before it is the
 *     race a get after a probe can lose).
 *  3. The scans of evict.c call kvp_ghost_seen_agent for every READY
 *     slot: a slot whose generation differs from the one seen last holds
 *     a new value (I6: a removal bumps the generation).  Its hash is
 *     looked up once: found, the slot is marked readmitted for this
 *     generation and the hash leaves the set (one readmission per
 *     eviction); not found, the mark is cleared.
 *  4. A value put and evicted between two scans is never looked up: it
 *     keeps its probation (a lost readmission, never a wrong eviction:
 *     the set only ever lowers a value's age).
 *  5. Each key remembers whether it left under a weight (evict.c tells
 *     kvp_ghost_weighed_agent before the removal: never used since its
 *     put), and a readmission says so with the evictions since it left:
 *     ARC's rule in evict.c moves the weights by it.
 * Memory: 8 bytes a ring place, 16 a table slot (two per place), and 5
 * bytes an index slot (generation seen, mark); allocated on first use.
 */
#include "agent/tier_int.h"

/* a table entry's pos: the key left judged by evict.c's order, and
 * under a weight */
#define KVP_GHOST_WEIGHTED (1ull << 63)
#define KVP_GHOST_JUDGED (1ull << 62)
#define KVP_GHOST_HOW (KVP_GHOST_WEIGHTED | KVP_GHOST_JUDGED)

struct kvp_ghost_ent {
	uint64_t hash; /* 0: empty */
	/* its newest place in the ring (a count, not mod), and
	 * KVP_GHOST_HOW */
	uint64_t pos;
};

struct kvp_ghost {
	uint64_t *ring; /* R hashes, place p at ring[p % R] */
	uint64_t nring, count;
	struct kvp_ghost_ent *tab; /* power of two >= 2R slots */
	uint64_t mask, size;
	uint32_t *gen_seen; /* per index slot; UINT32_MAX: never */
	uint8_t *readmit;   /* per index slot */
	bool failed;        /* out of memory once: off */
	uint64_t how; /* the next eviction's KVP_GHOST_HOW (weighed_agent) */
};

/* The ghost set of 'a', made on first use (NULL: off or out of memory). */
static struct kvp_ghost *
kvp_ghost_get(struct kvp_agent *a)
{
	struct kvp_ghost *g = a->ghost;
	uint64_t nslots = a->seg.g.g_index_slots, r, t = 2;

	if (g || a->ghost_failed || !a->cfg.evict_ghost_pct)
		return g;
	r = a->seg.g.g_dram_pages * a->cfg.evict_ghost_pct / 100;
	if (!r)
		r = 1;
	while (t < 2 * r)
		t <<= 1;
	g = calloc(1, sizeof(*g));
	if (!g)
		goto err;
	g->ring = calloc(r, sizeof(*g->ring));
	g->tab = calloc(t, sizeof(*g->tab));
	g->gen_seen = malloc(nslots * sizeof(*g->gen_seen));
	g->readmit = calloc(nslots, 1);
	if (!g->ring || !g->tab || !g->gen_seen || !g->readmit)
		goto err;
	memset(g->gen_seen, 0xff, nslots * sizeof(*g->gen_seen));
	g->nring = r;
	g->mask = t - 1;
	a->ghost = g;
	/* relaxed: a gauge (kvp_ghost_evicted_agent); an earlier agent's */
	kvp_actr_set(a->seg.hdr, KVP_ACTR_GHOST_KEYS, 0);
	return g;
err:
	if (g) {
		free(g->ring);
		free(g->tab);
		free(g->gen_seen);
		free(g->readmit);
		free(g);
	}
	a->ghost_failed = true;
	kvp_log(KVP_LOG_WARN, "evict",
		"out of memory for the ghost set (%llu keys): running "
		"without it",
		(unsigned long long)r);
	return NULL;
}

void
kvp_ghost_free_agent(struct kvp_agent *a)
{
	struct kvp_ghost *g = a->ghost;

	if (!g)
		return;
	free(g->ring);
	free(g->tab);
	free(g->gen_seen);
	free(g->readmit);
	free(g);
	a->ghost = NULL;
}

/* The hash the set knows slot i's key by (never 0). */
uint64_t
kvp_ghost_key_agent(const struct kvp_agent *a, uint64_t i)
{
	const struct kvp_entry *e = &a->seg.entries[i];
	/* relaxed: stable while the slot is READY (or under our CHECK) at
	 * the generation the caller read; a hint anyway */
	uint64_t h = kvp_load_relaxed(&e->e_hash) ^
		     kvp_load_relaxed(&e->e_ns) * 0x9e3779b97f4a7c15ull;

	return h ? h : 1;
}

/* The table slot of hash h: where it is, or the empty slot it would go. */
static uint64_t
kvp_ghost_find(const struct kvp_ghost *g, uint64_t h)
{
	uint64_t k = (h ^ (h >> 29)) & g->mask;

	while (g->tab[k].hash && g->tab[k].hash != h)
		k = (k + 1) & g->mask;
	return k;
}

/* Empty table slot k, shifting the run after it back (no tombstones). */
static void
kvp_ghost_erase(struct kvp_ghost *g, uint64_t k)
{
	uint64_t j = k;

	g->size--;
	for (;;) {
		uint64_t home;

		g->tab[k].hash = 0;
		for (;;) {
			j = (j + 1) & g->mask;
			if (!g->tab[j].hash)
				return;
			home = (g->tab[j].hash ^ (g->tab[j].hash >> 29)) &
			       g->mask;
			/* j may move to k unless its home lies in (k, j] */
			if (k <= j ? (home <= k || home > j) :
				     (home <= k && home > j))
				break;
		}
		g->tab[k] = g->tab[j];
		k = j;
	}
}

/* Whether the value kvp_ghost_evicted_agent is told of next left under a
 * weight (evict.c judged it never used since its put); cleared by it. */
void
kvp_ghost_weighed_agent(struct kvp_agent *a, bool weighted)
{
	struct kvp_ghost *g = kvp_ghost_get(a);

	if (g)
		g->how = KVP_GHOST_JUDGED | (weighted ? KVP_GHOST_WEIGHTED : 0);
}

/* ... or nothing said (a relocation took the value, not a removal). */
void
kvp_ghost_unweighed_agent(struct kvp_agent *a)
{
	if (a->ghost)
		a->ghost->how = 0;
}

/* Point 2: slot i's value, whose key hash h the caller read under its
 * CHECK (kvp_ghost_key_agent), left the pool. */
void
kvp_ghost_evicted_agent(struct kvp_agent *a, uint64_t i, uint64_t h)
{
	struct kvp_ghost *g = kvp_ghost_get(a);
	uint64_t k, pos;

	if (!g)
		return;
	pos = g->count++;
	if (pos >= g->nring) {
		/* the place's old hash leaves, unless it moved on since */
		uint64_t old = g->ring[pos % g->nring];

		k = kvp_ghost_find(g, old);
		if (g->tab[k].hash == old &&
		    (g->tab[k].pos & ~KVP_GHOST_HOW) == pos - g->nring)
			kvp_ghost_erase(g, k);
	}
	g->ring[pos % g->nring] = h;
	k = kvp_ghost_find(g, h);
	if (!g->tab[k].hash) {
		g->tab[k].hash = h;
		g->size++;
	}
	g->tab[k].pos = pos | g->how;
	g->how = 0;
	g->readmit[i] = 0; /* the slot's next value is judged afresh */
	/* relaxed: a gauge for kvpool stat; only this thread writes it */
	kvp_actr_set(a->seg.hdr, KVP_ACTR_GHOST_KEYS, g->size);
}

/* Point 3: slot i is READY at generation gen.  A readmission says how
 * its key had left (under a weight or not) and *ago, the evictions since
 * (evict.c's adaptation, ARC's rule). */
enum kvp_ghost_back
kvp_ghost_seen_agent(struct kvp_agent *a, uint64_t i, uint32_t gen,
		     uint64_t *ago)
{
	struct kvp_ghost *g = kvp_ghost_get(a);
	uint64_t k, h, pos;

	if (!g || g->gen_seen[i] == gen)
		return KVP_GHOST_NONE;
	g->gen_seen[i] = gen;
	h = kvp_ghost_key_agent(a, i);
	k = kvp_ghost_find(g, h);
	g->readmit[i] = g->tab[k].hash == h;
	if (!g->readmit[i])
		return KVP_GHOST_NONE;
	pos = g->tab[k].pos;
	*ago = g->count - (pos & ~KVP_GHOST_HOW);
	kvp_ghost_erase(g, k);
	/* stats: agent threads add atomically */
	kvp_actr_add(a->seg.hdr, KVP_ACTR_GHOST_HITS, 1);
	/* relaxed: a gauge (above) */
	kvp_actr_set(a->seg.hdr, KVP_ACTR_GHOST_KEYS, g->size);
	return !(pos & KVP_GHOST_JUDGED) ? KVP_GHOST_BACK_UNJUDGED :
	       pos & KVP_GHOST_WEIGHTED  ? KVP_GHOST_BACK_WEIGHTED :
					   KVP_GHOST_BACK_PLAIN;
}

uint64_t
kvp_ghost_length_agent(const struct kvp_agent *a)
{
	return a->ghost ? a->ghost->nring : 0;
}

/* Was slot i's value at generation gen readmitted (seen by a scan)? */
bool
kvp_ghost_readmitted_agent(const struct kvp_agent *a, uint64_t i, uint32_t gen)
{
	const struct kvp_ghost *g = a->ghost;

	return g && g->readmit[i] && g->gen_seen[i] == gen;
}
