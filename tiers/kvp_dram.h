/* SPDX-License-Identifier: MIT */
/*
 * kvp_dram.h - the DRAM tier: a run allocator inside the segment.
 *
 * The arena is cut into units (--dram-unit, a power of two).  A value
 * occupies a chain of runs of contiguous units: one run when the arena
 * has a fitting hole, several when it is fragmented, so free space is
 * always usable and fragmentation cannot collapse capacity.
 *
 * The page map (struct kvp_page per unit) is the single source of truth.
 * A run starts with a header (state, length, owner entry and generation,
 * next run of the same value) and ends with a tag pointing back at its
 * header (for coalescing).  The free bins (log2 size classes, doubly
 * linked through the page map) are derived data.
 *
 * Concurrency: one process-shared robust mutex.  It is held for a few
 * hundred nanoseconds per allocation (never across a copy).  Crash
 * safety: every header write keeps the forward chain "page 0, then
 * page 0 + npages, ..." valid (a split writes the tail header before it
 * shrinks the head; a merge grows one header), so a locker that gets
 * EOWNERDEAD rebuilds the bins and counts from the chain and marks the
 * mutex consistent.  A run whose owner died before publishing is found
 * by its owner tag (entry slot + generation) and freed by the agent.
 */
#ifndef KVP_DRAM_H
#define KVP_DRAM_H

#include "index/kvp_index.h"

KVP_INLINE unsigned
kvp_dram_bin(uint64_t npages)
{
	unsigned b = 63u - (unsigned)__builtin_clzll(npages | 1);

	return b < KVP_DRAM_BINS ? b : KVP_DRAM_BINS - 1;
}

KVP_INLINE void
kvp__dram_bin_unlink(struct kvp_seg *s, uint32_t p)
{
	struct kvp_page *pg = &s->pages[p];

	if (pg->pg_prev)
		s->pages[pg->pg_prev - 1].pg_next = pg->pg_next;
	else
		s->dram->dh_bin[kvp_dram_bin(pg->pg_npages)] = pg->pg_next;
	if (pg->pg_next)
		s->pages[pg->pg_next - 1].pg_prev = pg->pg_prev;
	pg->pg_next = pg->pg_prev = 0;
}

KVP_INLINE void
kvp__dram_bin_link(struct kvp_seg *s, uint32_t p)
{
	struct kvp_page *pg = &s->pages[p];
	unsigned b = kvp_dram_bin(pg->pg_npages);

	pg->pg_prev = 0;
	pg->pg_next = s->dram->dh_bin[b];
	if (pg->pg_next)
		s->pages[pg->pg_next - 1].pg_prev = p + 1;
	s->dram->dh_bin[b] = p + 1;
}

/* Rebuild bins and counts from the run chain (lock held).  Adjacent free
 * runs are merged.  Returns -EUCLEAN if the chain itself is broken. */
KVP_INLINE int
kvp_dram_rebuild_locked(struct kvp_seg *s)
{
	uint64_t n = s->g.g_dram_pages, p = 0, used = 0, last_free = UINT64_MAX;
	unsigned b;

	for (b = 0; b < KVP_DRAM_BINS; b++)
		s->dram->dh_bin[b] = 0;
	while (p < n) {
		struct kvp_page *pg = &s->pages[p];
		uint64_t len = pg->pg_npages;

		if (len == 0 || len > n - p ||
		    (pg->pg_state != KVP_PG_FREE && pg->pg_state != KVP_PG_USED))
			return -EUCLEAN;
		if (pg->pg_state == KVP_PG_FREE && last_free != UINT64_MAX) {
			/* merge into the previous free run: one header write */
			s->pages[last_free].pg_npages += (uint32_t)len;
			s->pages[p + len - 1].pg_head = (uint32_t)last_free + 1;
			p += len;
			continue;
		}
		s->pages[p + len - 1].pg_head = (uint32_t)p + 1;
		if (pg->pg_state == KVP_PG_FREE) {
			last_free = p;
		} else {
			used += len;
			last_free = UINT64_MAX;
		}
		p += len;
	}
	for (p = 0; p < n; p += s->pages[p].pg_npages)
		if (s->pages[p].pg_state == KVP_PG_FREE)
			kvp__dram_bin_link(s, (uint32_t)p);
	s->dram->dh_used_pages = used;
	s->dram->dh_free_pages = n - used;
	/* relaxed: a statistic for lock-free readers */
	kvp_store_relaxed(&s->dram->dh_used_mirror, used);
	return 0;
}

/* Take the allocator lock, recovering it if its last owner died.  0, or
 * -EUCLEAN when the allocator cannot be recovered. */
KVP_INLINE int
kvp_dram_lock(struct kvp_seg *s)
{
	int rc = pthread_mutex_lock(&s->dram->dh_lock);

	if (rc == EOWNERDEAD) {
		/* the dead owner may have left the bins half-updated; the
		 * run chain is always valid (see the top of this file) */
		if (kvp_dram_rebuild_locked(s) < 0) {
			pthread_mutex_consistent(&s->dram->dh_lock);
			pthread_mutex_unlock(&s->dram->dh_lock);
			return -EUCLEAN;
		}
		kvp_fetch_add(&s->hdr->h_actr[KVP_ACTR_ALLOC_RECOVER], 1); /* stat */
		pthread_mutex_consistent(&s->dram->dh_lock);
		rc = 0;
	}
	/* any other failure of the lock (ENOTRECOVERABLE: an owner died
	 * and nobody made it consistent) means the pool is damaged */
	return rc ? -EUCLEAN : 0;
}

KVP_INLINE void
kvp_dram_unlock(struct kvp_seg *s)
{
	/* relaxed: a statistic for lock-free readers */
	kvp_store_relaxed(&s->dram->dh_used_mirror, s->dram->dh_used_pages);
	pthread_mutex_unlock(&s->dram->dh_lock);
}

/* Carve 'want' units from the free run at p (lock held).  Returns the
 * number taken. */
KVP_INLINE uint32_t
kvp__dram_take(struct kvp_seg *s, uint32_t p, uint64_t want, uint32_t owner,
	       uint32_t gen)
{
	struct kvp_page *pg = &s->pages[p];
	uint32_t len = pg->pg_npages, take = want < len ? (uint32_t)want : len;

	kvp__dram_bin_unlink(s, p);
	if (take < len) {
		/* tail header first: the chain stays valid through FREE(len) */
		struct kvp_page *t = &s->pages[p + take];
		t->pg_state = KVP_PG_FREE;
		t->pg_npages = len - take;
		t->pg_owner = t->pg_owner_gen = 0;
		s->pages[p + len - 1].pg_head = p + take + 1;
		kvp__dram_bin_link(s, p + take);
	}
	pg->pg_owner = owner;
	pg->pg_owner_gen = gen;
	pg->pg_next = 0;
	pg->pg_state = KVP_PG_USED;
	pg->pg_npages = take;
	s->pages[p + take - 1].pg_head = p + 1;
	s->dram->dh_used_pages += take;
	s->dram->dh_free_pages -= take;
	if (s->dram->dh_used_pages > s->dram->dh_peak_used_pages)
		s->dram->dh_peak_used_pages = s->dram->dh_used_pages;
	return take;
}

/*
 * Allocate 'bytes' for entry slot 'owner_slot' at generation 'gen'.
 * All or nothing.  Returns the first unit of the run chain in *first.
 * -ENOSPC when the free units do not add up; -EUCLEAN if the allocator is
 * damaged.  Any process; takes the allocator lock briefly.
 */
KVP_INLINE int
kvp_dram_alloc(struct kvp_seg *s, uint64_t bytes, uint64_t owner_slot,
	       uint32_t gen, uint32_t *first)
{
	uint64_t unit = s->g.g_dram_unit;
	uint64_t want = (bytes + unit - 1) / unit, got = 0;
	uint32_t owner = (uint32_t)owner_slot + 1, prev = 0, head = 0;
	unsigned b;
	int rc;

	if (want == 0)
		want = 1;
	rc = kvp_dram_lock(s);
	if (rc)
		return rc;
	if (s->dram->dh_free_pages < want) {
		s->dram->dh_alloc_fail++;
		kvp_dram_unlock(s);
		return -ENOSPC;
	}
	/* one run if any hole fits: first fit in the exact class (a few
	 * probes), then any run of a larger class */
	for (b = kvp_dram_bin(want); b < KVP_DRAM_BINS && !head; b++) {
		uint32_t q = s->dram->dh_bin[b];
		int probes = 0;

		for (; q && probes < 32; q = s->pages[q - 1].pg_next, probes++) {
			if (s->pages[q - 1].pg_npages >= want) {
				head = q;
				break;
			}
		}
	}
	if (head) {
		kvp__dram_take(s, head - 1, want, owner, gen);
		*first = head - 1;
		kvp_crashpoint(C_ALLOC_LOCKED);
		kvp_dram_unlock(s);
		return 0;
	}
	/* fragmented: chain the largest runs until the value fits */
	for (b = KVP_DRAM_BINS; b-- > 0 && got < want;) {
		while (s->dram->dh_bin[b] && got < want) {
			uint32_t q = s->dram->dh_bin[b] - 1;
			got += kvp__dram_take(s, q, want - got, owner, gen);
			if (prev)
				s->pages[prev - 1].pg_next = q + 1;
			else
				*first = q;
			prev = q + 1;
		}
	}
	kvp_dram_unlock(s);
	return got == want ? 0 : -EUCLEAN;
}

/* Address and length of the run starting at unit p (a held chain). */
KVP_INLINE unsigned char *
kvp_dram_run(const struct kvp_seg *s, uint32_t p, uint64_t *run_bytes, uint32_t *next)
{
	const struct kvp_page *pg = &s->pages[p];

	*run_bytes = (uint64_t)pg->pg_npages * s->g.g_dram_unit;
	*next = pg->pg_next;
	return s->arena + (uint64_t)p * s->g.g_dram_unit;
}

/* Free one run (lock held), merging with free neighbours. */
KVP_INLINE void
kvp__dram_free_run_locked(struct kvp_seg *s, uint32_t p)
{
	uint64_t n = s->g.g_dram_pages;
	struct kvp_page *pg = &s->pages[p];
	uint32_t len = pg->pg_npages;

	s->dram->dh_used_pages -= len;
	s->dram->dh_free_pages += len;
	if (p + len < n && s->pages[p + len].pg_state == KVP_PG_FREE) {
		uint32_t q = p + len;
		kvp__dram_bin_unlink(s, q);
		len += s->pages[q].pg_npages;
	}
	pg->pg_owner = pg->pg_owner_gen = 0;
	pg->pg_next = 0;
	pg->pg_state = KVP_PG_FREE;
	pg->pg_npages = len; /* one write grows the run over the neighbour */
	if (p > 0) {
		uint32_t h = s->pages[p - 1].pg_head;
		if (h && h - 1 < p && s->pages[h - 1].pg_state == KVP_PG_FREE &&
		    h - 1 + s->pages[h - 1].pg_npages == p) {
			kvp__dram_bin_unlink(s, h - 1);
			s->pages[h - 1].pg_npages += len;
			p = h - 1;
			len = s->pages[p].pg_npages;
		}
	}
	s->pages[p + len - 1].pg_head = p + 1;
	kvp__dram_bin_link(s, p);
}

/*
 * Free the run chain of entry (owner_slot, gen) starting at unit first.
 * Only runs tagged with that owner are freed: a damaged or stale location
 * frees nothing that belongs to someone else.  Returns units freed.
 */
KVP_INLINE int64_t
kvp_dram_free_chain(struct kvp_seg *s, uint32_t first, uint64_t owner_slot, uint32_t gen)
{
	uint64_t n = s->g.g_dram_pages, freed = 0, guard = 0;
	uint32_t p = first, owner = (uint32_t)owner_slot + 1;
	int rc = kvp_dram_lock(s);

	if (rc)
		return rc;
	while (p < n && guard++ < n) {
		struct kvp_page *pg = &s->pages[p];
		uint32_t next = pg->pg_next;

		if (pg->pg_state != KVP_PG_USED || pg->pg_owner != owner ||
		    pg->pg_owner_gen != gen)
			break;
		freed += pg->pg_npages;
		kvp__dram_free_run_locked(s, p);
		if (!next)
			break;
		p = next - 1;
	}
	kvp_dram_unlock(s);
	return (int64_t)freed;
}

#endif /* KVP_DRAM_H */
